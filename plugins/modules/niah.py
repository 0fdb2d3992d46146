#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: niah
short_description: Max-context needle-in-a-haystack ladder against a pair's engine, resumable
version_added: 0.1.0
description:
  - Runs on the head rank of a pair, usually as an async job that can last 12 hours or more, and talks to
    the engine's OpenAI-compatible API at I(base_url).
  - Reads C(max_model_len) of I(model) from C(GET /v1/models) and the KV cache size from C(GET /metrics).
    With the usable window C(U = max_model_len - reserve), each of I(fractions) gives one depth, C(U * f)
    rounded down and clamped to C([min_depth, U]).
  - "Every prompt is built from token ids. The server renders one user message (an archive-record intro,
    the marker line C(DSPARK_NIAH_SLOT), then the question) with C(POST /tokenize); the module splits
    the ids at the marker and fills the gap with a neutral filler sentence and the needle line
    C(SECRET VERIFICATION CODE: <code>), placed after I(needle_fraction) of the filler, so that the
    prompt has exactly C(depth) ids. Marker, needle and filler are tokenized by the server, or by the
    model's C(tokenizer.json) when I(tokenizer_file) exists and the C(tokenizers) library is installed."
  - Each depth is sent, in order, to C(POST /v1/completions) as a token-id prompt at temperature 0 with
    C(max_tokens=reserve). A depth is C(PASS) when the answer contains I(code), C(FAIL) (the model)
    when an HTTP 200 answer does not, C(ERROR) (infra) on another HTTP status, a transport error or
    a timeout, and C(ERROR) (capacity) without a request when the KV cache cannot hold
    C(depth + reserve) tokens. With I(stop_on_infra_error) an infra error stops the ladder.
  - "Writes, atomically, into I(output_dir): C(depth-<n>.json) per finished depth before the next
    one starts, C(progress.json) when each depth starts and ends, and C(niah.json), the summary, at
    the end. C(.lock) is held with C(flock) for the whole run."
  - A run with the same I(run_key) reuses every C(PASS) or C(FAIL) row whose C(prompt_sha256) is
    unchanged and runs the other depths again, C(ERROR) rows included.
  - C(FAIL) and C(ERROR) depths are results, returned in C(summary); the module only fails on setup
    problems (engine unreachable, model not served, marker not found, I(output_dir) holding another
    run or in use, invalid options).
  - I(state=status) only reads I(output_dir) and sends nothing. I(state=busy) only reads I(work_dir) and returns
    the run folders under it whose ladder runs now (what a caller checks before it changes the pair).
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._rank
options:
  state:
    description:
      - C(run) runs (or resumes) the ladder; C(status) reports on I(output_dir) without any request; C(busy)
        lists the run folders under I(work_dir) that a running ladder holds.
    type: str
    choices: [run, status, busy]
    default: run
  base_url:
    description: The engine's OpenAI-compatible API, seen from the head.
    type: str
    default: http://127.0.0.1:8888
  model:
    description: The served model name. Required with I(state=run).
    type: str
  api_key:
    description: The API key, when the engine requires one. Never written or returned.
    type: str
  output_dir:
    description:
      - Directory for the rows, the progress file, the summary and the lock; created with mode C(0750)
        when missing. Required with I(state=run) and I(state=status).
    type: path
  work_dir:
    description:
      - The head's NIAH work folder, holding one run folder per ladder (C(dspark_niah_work_dir)). Required
        with I(state=busy); a missing folder holds no running ladder.
    type: path
  run_key:
    description:
      - Names the run. Rows are reused only within the same key; a directory holding rows or a summary
        of another key is refused. Required with I(state=run).
    type: str
  fractions:
    description: Fractions of the usable window, each greater than 0 and at most 1, one depth each, run in this order.
    type: list
    elements: float
    default: [0.25, 0.5, 0.9]
  reserve:
    description: Tokens kept for the answer (C(max_tokens)); the usable window is C(max_model_len - reserve).
    type: int
    default: 64
  min_depth:
    description: The smallest depth in tokens.
    type: int
    default: 1024
  request_timeout:
    description: Seconds one completion may take (socket timeout of the request); must be greater than 0.
    type: float
    default: 43200
  code:
    description: The secret code of the needle line; one word without whitespace.
    type: str
    default: GB10-NIAH-7Q4K
  needle_fraction:
    description: Share of the filler that stands before the needle, in C([0, 1]).
    type: float
    default: 0.5
  tokenizer_file:
    description:
      - The model's C(tokenizer.json). Used for the marker, the needle and the filler when it exists and
        the C(tokenizers) Python library is installed; otherwise the server's C(/tokenize) is used, with
        a warning when the file was given.
    type: path
  stop_on_infra_error:
    description: Whether an infra error stops the ladder; the depths after it become C(ERROR) rows, not run.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details:
      - Reads C(/v1/models), C(/metrics) and C(/tokenize) and returns the plan (which depths would run, be
        resumed or be C(ERROR) for the KV cache); no completion is sent and no file is written.
  diff_mode:
    support: full
    details: The status of each depth's row before and after (C(would run) in check mode).
  idempotent:
    support: partial
    details:
      - A second run with the same I(run_key) sends nothing when every depth already passed or failed;
        C(ERROR) depths are run again.
notes:
  - C(prompt_sha256) is the sha256 of the prompt's token ids written in decimal and joined by C(,).
  - "The template is rendered with C(chat_template_kwargs={\"thinking\": false}) so that the reserve goes
    to the answer."
  - I(state=status) reports C(running) from the lock, so it is true only while a run holds it; so does
    I(state=busy) for each run folder.
  - Runs with the stdlib only on the head; the C(tokenizers) library is optional.
author:
  - gb10.dspark contributors (!UNKNOWN)
seealso:
  - module: gb10.dspark.engine_probe
  - module: gb10.dspark.serving_guard
"""

EXAMPLES = r"""
---
- name: Run the max-context NIAH ladder on the head (async, up to 36 hours)
  gb10.dspark.niah:
    rank: "{{ inventory_hostname }}"
    model: deepseek-v4-flash-dspark
    output_dir: /var/lib/dspark/niah/long-1m-20260803
    run_key: long-1m-20260803
    tokenizer_file: /models/DeepSeek-V4-Flash/tokenizer.json
  async: 129600
  poll: 0
  register: __dspark_niah_job

- name: Look at the progress of the run
  gb10.dspark.niah:
    state: status
    output_dir: /var/lib/dspark/niah/long-1m-20260803
  register: __dspark_niah_status

- name: Is any ladder running on this head? (before a change to the pair)
  gb10.dspark.niah:
    state: busy
    work_dir: /var/lib/dspark/niah
  register: __dspark_niah_busy

- name: Show where the run is
  ansible.builtin.debug:
    msg: >-
      running={{ __dspark_niah_status.running }},
      depth {{ (__dspark_niah_status.progress or {}).index | default('-') }}
      of {{ (__dspark_niah_status.progress or {}).total | default('-') }}

- name: Wait for the run to end
  ansible.builtin.async_status:
    jid: "{{ __dspark_niah_job.ansible_job_id }}"
  register: __dspark_niah
  until: __dspark_niah.finished
  retries: 2160
  delay: 60

- name: Every depth must have found the needle
  ansible.builtin.assert:
    that:
      - __dspark_niah.summary.status == 'PASS'
    fail_msg: "NIAH {{ __dspark_niah.summary.status }}: {{ __dspark_niah.summary.rows | map(attribute='reason') | list }}"
"""

RETURN = r"""
changed:
  description: Whether at least one completion was sent (would be sent, in check mode).
  returned: always
  type: bool
  sample: true
summary:
  description:
    - The run's summary, as written to C(niah.json); with I(state=status) the C(niah.json) found, or null.
      Null in check mode.
    - "Keys: model, max_model_len, kv_cache_size_tokens, kv_below_window, depths, fractions,
      generation_reserve, code, marker, template_source, tokenizer, depth_policy, pass_count, fail_count,
      error_count, infra_error_count (rows whose request hit an infra error), total, all_passed, status
      (PASS only when every depth passed, ERROR when any depth is ERROR, else FAIL), rows, resumed, ran,
      run_key, settings."
    - "Row keys: depth, max_model_len, fraction_of_usable, prompt_tokens_constructed, prompt_sha256,
      needle_fraction_effective, elapsed_s, http_status, finish_reason, response_text, passed, status
      (PASS, FAIL, ERROR), usage, infra_errors, reason, kind (infra, capacity, accounting, model or null), run_key."
  returned: always
  type: dict
  sample:
    status: PASS
    max_model_len: 1048576
    kv_cache_size_tokens: 1253213
    kv_below_window: false
    depths: [262128, 524256, 943660]
    pass_count: 3
    fail_count: 0
    error_count: 0
    total: 3
    all_passed: true
    tokenizer: "server:/tokenize"
    run_key: long-1m-20260803
ran:
  description: The depths sent in this run (in check mode, that would be sent).
  returned: when I(state=run)
  type: list
  elements: int
  sample: [943660]
resumed:
  description: The depths whose earlier PASS or FAIL row was reused.
  returned: when I(state=run)
  type: list
  elements: int
  sample: [262128, 524256]
plan:
  description: Per depth, C(action) (C(run), C(resume) or C(capacity_error)), C(depth), C(fraction_of_usable),
    C(prompt_sha256) and C(reason).
  returned: in check mode with I(state=run)
  type: list
  elements: dict
  sample: [{"depth": 262128, "action": "resume", "fraction_of_usable": 0.25, "prompt_sha256": "9f2c...", "reason": null}]
running:
  description: Whether a run holds the lock of I(output_dir).
  returned: when I(state=status)
  type: bool
  sample: true
progress:
  description:
    - The content of C(progress.json), or null. Keys pid, state (C(running) or C(finished)), run_key,
      depth, index (1-based), total, started, updated, rows_done, current_started (epoch seconds).
  returned: when I(state=status)
  type: dict
  sample: {"pid": 4242, "state": "running", "run_key": "long-1m-20260803", "depth": 943660, "index": 3,
           "total": 3, "started": 1785715200.0, "updated": 1785738000.0, "rows_done": 2,
           "current_started": 1785736000.0}
running_dirs:
  description: The run folders under I(work_dir) whose ladder holds its lock now, sorted.
  returned: when I(state=busy)
  type: list
  elements: str
  sample: [/var/lib/dspark/niah/long-1m-20260803]
rows_done:
  description: The depths that have a row file in I(output_dir).
  returned: when I(state=status)
  type: list
  elements: int
  sample: [262128, 524256]
diff:
  description: Row status per depth (C(depth-<n>)) before and after, with C(--diff).
  returned: when I(state=run) and diff mode is on
  type: dict
  sample: {"before": {"depth-262128": "PASS"}, "after": {"depth-262128": "PASS", "depth-524256": "PASS"}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.serving import _niah
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import json_client
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import guarded, rank_name
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import api_key_problem
from ansible_collections.gb10.dspark.plugins.module_utils.common._site import local_api_url


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rank": {"type": "str"},
            "state": {"type": "str", "choices": ["run", "status", "busy"], "default": "run"},
            "base_url": {"type": "str", "default": local_api_url()},
            "model": {"type": "str"},
            "api_key": {"type": "str", "no_log": True},
            "output_dir": {"type": "path"},
            "work_dir": {"type": "path"},
            "run_key": {"type": "str", "no_log": False},
            "fractions": {"type": "list", "elements": "float", "default": list(_niah.DEFAULT_FRACTIONS)},
            "reserve": {"type": "int", "default": _niah.DEFAULT_RESERVE},
            "min_depth": {"type": "int", "default": _niah.DEFAULT_MIN_DEPTH},
            "request_timeout": {"type": "float", "default": _niah.DEFAULT_REQUEST_TIMEOUT},
            "code": {"type": "str", "default": _niah.DEFAULT_CODE},
            "needle_fraction": {"type": "float", "default": _niah.DEFAULT_NEEDLE_FRACTION},
            "tokenizer_file": {"type": "path"},
            "stop_on_infra_error": {"type": "bool", "default": True},
        },
        required_if=[("state", "run", ["model", "run_key", "output_dir"]), ("state", "status", ["output_dir"]),
                     ("state", "busy", ["work_dir"])],
        supports_check_mode=True,
    )
    p = module.params
    rank = rank_name(p["rank"])
    if p["state"] == "busy":
        module.exit_json(**guarded(module, lambda: _niah.busy(p["work_dir"])))
    if p["state"] == "status":
        module.exit_json(**guarded(module, lambda: _niah.status(p["output_dir"], rank)))
    settings = _niah.Settings(
        model=p["model"], output_dir=p["output_dir"], run_key=p["run_key"], fractions=tuple(p["fractions"]),
        reserve=p["reserve"], min_depth=p["min_depth"], request_timeout=p["request_timeout"], code=p["code"],
        needle_fraction=p["needle_fraction"], tokenizer_file=p["tokenizer_file"],
        stop_on_infra_error=p["stop_on_infra_error"], rank=rank)
    if problem := api_key_problem(p["api_key"]):  # refused before any request, naming the variable, never the value
        module.fail_json(msg=f"rank {rank}: {problem}")
    call = json_client(p["base_url"], p["api_key"], rank)
    if module.check_mode:
        result = guarded(module, lambda: _niah.check_run(call, settings))
    else:
        result = guarded(module, lambda: _niah.run(call, settings))
    for warning in result.pop("warnings"):
        module.warn(warning)
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
