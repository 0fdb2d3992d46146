#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: systems_lanes
short_description: Systems benchmark lanes (canary, latency, concurrency, throughput, spec decode) against a pair's head
version_added: 0.1.0
description:
  - Runs on the head rank of a pair or on the control node, synchronously, against the engine's
    OpenAI-compatible API at I(base_url). The lanes selected in I(lanes) always run in this order.
  - C(canary) - one non-streamed completion of C(Compute 7 multiplied by 19. Reply with only the number.)
    at temperature 0; C(PASS) when the first line of the answer is C(133), C(FAIL) otherwise.
  - C(latency) - I(latency_reps) sequential streamed completions of I(latency_max_tokens) tokens with
    C(ignore_eos). The first is a warm-up, recorded as dropped. Per request TTFT (request sent to the
    first chunk carrying text), ITL (the time from the first to the last text chunk divided by the
    tokens after the first text chunk, which may carry several with speculative decoding; every chunk
    reports its usage), e2e and client decode tokens/s (those tokens divided by that time); the row
    holds the medians of the kept requests.
  - C(concurrency) - per level N of I(concurrency_levels), I(concurrency_reps) rounds of N concurrent
    streamed completions of I(concurrency_max_tokens) tokens; one row per level with the aggregate
    tokens/s (the sum of C(completion_tokens) over the wall time of the level), median TTFT and ITL.
  - C(throughput) - row C(decode), I(decode_reps) single streamed completions of I(decode_max_tokens)
    tokens, median decode tokens/s; row C(prefill), I(prefill_reps) completions with a prompt of
    exactly I(prefill_prompt_tokens) token ids and at most 16 output tokens, so that prompt and
    C(max_tokens) fit the model's window (servers differ on an over-long request, some answer 400,
    others cap C(max_tokens)); median C(prompt_tokens / TTFT).
  - C(spec_decode) - the counters C(vllm:spec_decode_num_drafts_total),
    C(vllm:spec_decode_num_draft_tokens_total) and C(vllm:spec_decode_num_accepted_tokens_total),
    sampled before the first lane and after the throughput lane; acceptance rate
    C(accepted / draft_tokens), mean acceptance length C(1 + accepted / drafts) and the raw deltas.
    C(ERROR) when the counters are absent or no draft was made.
  - C(external) - the external benchmark client of I(external_client) (r0b0bench 1.0.0rc2 or newer), one
    row per lane of I(external_client.lanes), with the status of that lane in the client's C(report.json).
    Without I(external_client) each of those lanes is a C(NOT_IMPLEMENTED) row with the reason C(no
    external benchmark client configured); no score is ever made up.
  - "The quality pillars C(qa), C(ifeval), C(humaneval) and C(gsm8k) are rows of the C(external) lane too.
    One that is not among I(external_client.lanes) is C(NOT_IMPLEMENTED) with the reason that it was not
    measured; one that is among them is run and reported like any other r0b0bench lane. C(NOT_IMPLEMENTED)
    rows carry no figure and no score, and do not make I(status) fail."
  - "Before anything else, the client is asked its version (C(<python> -m r0b0bench.cli --version) in
    I(external_client.path), answered C(r0b0bench <version>)). A version older than C(1.0.0rc2) (compared
    with PEP 440 order, so C(1.0.0rc1) < C(1.0.0rc2) < C(1.0.0) < C(1.0.1)), or one not of the form
    C(X.Y.Z[{a|b|rc}N][.postN][.devN]), fails the module naming the version found and the minimum; no
    lane runs. Check mode asks too."
  - "Every row records C(client_kind), the kind of client that measured it. The module's own lanes talk to
    the engine's OpenAI-compatible API, so theirs is C(openai_portable). An external row takes the
    C(backend) its lane's entry (or the entry's C(summary), or the report) states - C(openai_portable) or
    C(vllm-bench) - else C(openai_portable), as r0b0bench's lanes are OpenAI-API clients; any other backend
    makes the row C(ERROR). C(NOT_IMPLEMENTED) rows measured nothing and have none. Rows of both kinds in
    one report are refused: I(status) is C(ERROR) and the report's C(reasons) names both kinds and their
    rows."
  - "Every prompt is sent as token ids built with the server's C(POST /tokenize), headed by a nonce so
    the prefix cache cannot help, so C(usage.prompt_tokens) is known exactly. Every answer must keep
    vLLM's contract: HTTP 200, one finish chunk, exactly one usage chunk, C(prompt_tokens +
    completion_tokens == total_tokens), C(prompt_tokens) the ids sent and, with C(ignore_eos),
    C(completion_tokens == max_tokens). A non-200 status, a transport error, or missing or inconsistent
    usage makes the row (or the concurrency level's row) C(ERROR) with the reasons listed and every
    figure null."
  - "Client figures (timestamps taken as each SSE line arrives) go to the row's C(client) section;
    server figures (C(vllm:prompt_tokens_total) and C(vllm:generation_tokens_total) sampled before and
    after the row, over its wall time) to its C(server) section."
  - Writes C(systems.json) and C(systems.md) (a Markdown table) atomically into I(output_dir). The
    module does not fail on C(ERROR) or C(FAIL) rows (the playbook decides from I(status)); it fails on
    setup problems (invalid options, I(output_dir) not writable, the engine unreachable, I(model) not
    served, I(external_client) paths missing) before any completion is sent.
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  base_url:
    description: The engine's OpenAI-compatible API, seen from where the module runs.
    type: str
    default: http://127.0.0.1:8888
  head:
    description:
      - The head's inventory name, named in every message about its API (for example C(head lab01-head -
        POST http://10.0.0.11:8888/v1/completions refused the connection ...)). Roles pass C(inventory_hostname).
    type: str
  model:
    description: The served model name; must be listed by C(GET /v1/models).
    type: str
    required: true
  api_key:
    description:
      - The API key, when the engine requires one. Sent only in the C(Authorization) header, and to the
        external client only as the environment variable C(OPENAI_API_KEY) (never on its command line, never
        in the version probe's environment). Never written or returned.
    type: str
  output_dir:
    description: Directory for C(systems.json), C(systems.md) and the external client's output; created with mode C(0750) when missing.
    type: path
    required: true
  lanes:
    description: The lanes to run; they run in the fixed order C(canary), C(latency), C(concurrency), C(throughput), C(spec_decode), C(external).
    type: list
    elements: str
    choices: [canary, latency, concurrency, throughput, spec_decode, external]
    default: [canary, latency, concurrency, throughput, spec_decode, external]
  latency_reps:
    description: Sequential requests of the latency lane, the first of them a dropped warm-up; at least 2.
    type: int
    default: 5
  latency_max_tokens:
    description: Output tokens per latency request.
    type: int
    default: 128
  concurrency_levels:
    description: The concurrency levels, one row each.
    type: list
    elements: int
    default: [1, 2, 4, 6, 16]
  concurrency_reps:
    description: Rounds per level; each round sends as many concurrent requests as the level.
    type: int
    default: 3
  concurrency_max_tokens:
    description: Output tokens per concurrency request.
    type: int
    default: 512
  decode_reps:
    description: Requests of the decode throughput row.
    type: int
    default: 5
  decode_max_tokens:
    description: Output tokens per decode request.
    type: int
    default: 2048
  prefill_reps:
    description: Requests of the prefill throughput row.
    type: int
    default: 3
  prefill_prompt_tokens:
    description: Exact prompt length in tokens of each prefill request; at least 128.
    type: int
    default: 14000
  request_timeout:
    description: Seconds one request may take, answer included.
    type: float
    default: 600
  context:
    description:
      - What served the run (pair, profile, its sha256, CUDA-graph implementation, image ID), recorded
        verbatim as the report's C(context) so the evidence pack can keep breakable and regular rows
        apart. Never put secrets here.
    type: dict
    default: {}
  external_client:
    description:
      - The external benchmark client (an r0b0bench 1.0.0rc2 or newer checkout), run as the original
        wrapper runs it - C(<python> -m r0b0bench.cli run --profile systems --base-url <base_url>/v1
        --model <model> [--tokenizer <tokenizer>] --output <output_dir>/r0b0bench --only <lanes> --run-id
        systems-<run id>) in I(path) (r0b0bench has no C(__main__); its console script calls
        C(r0b0bench.cli)).
      - "The child's environment is only C(PATH), C(HOME), C(LANG), C(LC_ALL), C(TZ), C(TMPDIR) (from the
        module's own), C(PYTHONUNBUFFERED=1), the BFCL settings below - C(R0B0BENCH_AQUILA_SCRIPTS),
        C(R0B0BENCH_BFCL_PYTHON) when set, C(BFCL_NUM_THREADS), C(BFCL_HTTP_TIMEOUT), C(BFCL_MAX_TOKENS) - and
        C(OPENAI_API_KEY) when I(api_key) is set. None of them is taken from the module's environment."
      - Its C(report.json) gives the status of each lane; a lane missing from it is C(NOT_IMPLEMENTED),
        an unreadable report makes every external row C(ERROR).
    type: dict
    suboptions:
      path:
        description: The checkout directory (the child's working directory).
        type: path
        required: true
      python:
        description: The interpreter that can import C(r0b0bench), e.g. the checkout's virtualenv.
        type: path
        required: true
      lanes:
        description:
          - The external lanes to run (C(--only)); by default the original wrapper's list, in its order. NIAH
            is left out on purpose - it runs on the long-1m profile (M(gb10.dspark.niah)).
          - A quality pillar (C(qa), C(ifeval), C(humaneval), C(gsm8k)) listed here is run and reported like
            any other lane.
        type: list
        elements: str
        default: [canary, bfcl_mt, bfcl_ast, latency, concurrency, throughput]
      timeout:
        description: Seconds the external client may run.
        type: float
        default: 86400
      tokenizer:
        description:
          - The tokenizer the client loads (C(--tokenizer)); on a pair, the model's Hugging Face folder as the
            head sees it. An absolute path that exists. Without it, C(--tokenizer) is not passed.
        type: path
      aquila_scripts:
        description:
          - The DSV4 BFCL served-id registry scripts folder, passed as C(R0B0BENCH_AQUILA_SCRIPTS). An
            absolute path to an existing folder; required when C(bfcl_mt) or C(bfcl_ast) is among I(lanes).
        type: path
      bfcl_python:
        description:
          - The BFCL virtualenv's interpreter, passed as C(R0B0BENCH_BFCL_PYTHON). An absolute path to an
            executable; required when C(bfcl_mt) or C(bfcl_ast) is among I(lanes).
        type: path
      bfcl_num_threads:
        description: BFCL worker threads, passed as C(BFCL_NUM_THREADS); a positive integer.
        type: int
        default: 4
      bfcl_http_timeout:
        description: Seconds one BFCL request may take, passed as C(BFCL_HTTP_TIMEOUT); a positive integer.
        type: int
        default: 3600
      bfcl_max_tokens:
        description: Output token budget of one BFCL request, passed as C(BFCL_MAX_TOKENS); a positive integer.
        type: int
        default: 8192
attributes:
  check_mode:
    support: full
    details:
      - Validates the options and returns the plan (lanes, levels, request counts, files, the external
        command); sends no request and writes nothing. The external client is asked its version (a
        read-only child process), so a client older than 1.0.0rc2 fails here too.
  diff_mode:
    support: full
    details: The status, finish time and row counts of the C(systems.json) in I(output_dir) before and after.
  idempotent:
    support: none
    details: Every run measures again and rewrites both files, so it always reports C(changed).
notes:
  - Uses the Python standard library only.
  - Row statuses are C(PASS) (figures recorded), C(FAIL) (the canary's answer, or the external client's
    verdict), C(ERROR) and C(NOT_IMPLEMENTED). I(status) is C(PASS) only without C(ERROR) and C(FAIL) rows
    and without a mix of client kinds; C(NOT_IMPLEMENTED) rows do not fail it.
  - Spec-decode figures cover the suite's own lanes (the canary to the throughput lane), not the external client.
author:
  - gb10.dspark contributors (!UNKNOWN)
seealso:
  - module: gb10.dspark.serving_guard
  - module: gb10.dspark.engine_probe
  - module: gb10.dspark.niah
"""

EXAMPLES = r"""
---
- name: Run the systems lanes on the head
  gb10.dspark.systems_lanes:
    model: deepseek-v4-flash-dspark
    output_dir: /var/lib/dspark/systems/20260803
  register: __dspark_systems

- name: Show the c1 decode rate
  ansible.builtin.debug:
    msg: >-
      {{ (__dspark_systems.report.rows | selectattr('lane', 'eq', 'throughput')
          | selectattr('level', 'eq', 'decode') | first).client.tok_s }} tok/s

- name: Every lane must have measured
  ansible.builtin.assert:
    that:
      - __dspark_systems.status == 'PASS'
    fail_msg: "{{ __dspark_systems.report.rows | selectattr('status', 'in', ['ERROR', 'FAIL'])
      | map(attribute='reasons') | flatten }}"

- name: Latency and concurrency only, with the BFCL lanes of a local r0b0bench checkout
  gb10.dspark.systems_lanes:
    model: deepseek-v4-flash-dspark
    output_dir: /var/lib/dspark/systems/quick
    lanes: [latency, concurrency, external]
    concurrency_levels: [1, 2, 4]
    external_client:
      path: /opt/r0b0bench
      python: /opt/r0b0bench/.venv/bin/python
      lanes: [bfcl_mt]
      tokenizer: /srv/dspark/models/DeepSeek-V4-Flash-0731
      aquila_scripts: /opt/dsv4-bfcl/scripts
      bfcl_python: /opt/bfcl/.venv/bin/python
  register: __dspark_systems_quick

- name: The r0b0bench systems package as the original wrapper runs it, GSM8K measured too
  gb10.dspark.systems_lanes:
    model: deepseek-v4-flash-dspark
    output_dir: /var/lib/dspark/systems/r0b0bench
    lanes: [external]
    external_client:
      path: /opt/r0b0bench
      python: /opt/r0b0bench/.venv/bin/python
      lanes: [canary, bfcl_mt, bfcl_ast, latency, concurrency, throughput, gsm8k]
      tokenizer: /srv/dspark/models/DeepSeek-V4-Flash-0731
      aquila_scripts: /opt/dsv4-bfcl/scripts
      bfcl_python: /opt/bfcl/.venv/bin/python
      bfcl_num_threads: 4
      bfcl_http_timeout: 3600
      bfcl_max_tokens: 8192
  register: __dspark_systems_r0b0bench
"""

RETURN = r"""
changed:
  description: True when the files were written; false in check mode.
  returned: always
  type: bool
  sample: true
output_dir:
  description: Where C(systems.json) and C(systems.md) were written.
  returned: success, not in check mode
  type: str
  sample: /var/lib/dspark/systems/20261202T160000Z
status:
  description: C(PASS) (no ERROR or FAIL row), C(ERROR) (some row is ERROR) or C(FAIL); null in check mode.
  returned: always
  type: str
  sample: PASS
report:
  description:
    - The C(systems.json) document; null in check mode.
    - "Keys: schema_version (1), tool, run_id, model, base_url, settings, started, finished (UTC),
      status, reasons (the refusal of a mix of client kinds; empty otherwise), client_kinds (the kinds
      among the rows), r0b0bench_version (what the external client reported; null when it did not run),
      counts (PASS, FAIL, ERROR, NOT_IMPLEMENTED, total), rows, spec_decode (acceptance_rate,
      mean_acceptance_length, deltas, reasons; null when the lane is not selected), files."
    - "Row keys: lane, level (the concurrency level, C(decode) or C(prefill) for throughput, the
      external lane's or quality pillar's name, else null), status, reasons, client_kind
      (C(openai_portable), C(vllm-bench), or null for a row that measured nothing), client (ttft_ms,
      itl_ms, e2e_s, tok_s, tok_s_kind and lane-specific keys; for external rows report, backend,
      summary, quality_pillar, argv, rc, r0b0bench_version), server (wall_s, prompt_tokens,
      generation_tokens, prompt_tok_s, generation_tok_s, error; the counter figures for spec_decode),
      samples (one per request)."
  returned: always
  type: dict
  sample:
    schema_version: 1
    status: PASS
    reasons: []
    client_kinds: [openai_portable]
    r0b0bench_version: null
    counts: {PASS: 10, FAIL: 0, ERROR: 0, NOT_IMPLEMENTED: 10, total: 20}
    rows:
      - lane: latency
        level: null
        status: PASS
        reasons: []
        client_kind: openai_portable
        client: {ttft_ms: 221.9, itl_ms: 15.2, e2e_s: 2.08, tok_s: 65.8, tok_s_kind: decode, dropped_reps: [1]}
        server: {wall_s: 8.4, prompt_tokens: 120, generation_tokens: 512, prompt_tok_s: 14.3, generation_tok_s: 61.0, error: null}
    spec_decode: {acceptance_rate: 0.61, mean_acceptance_length: 4.66, reasons: [],
                  deltas: {num_drafts: 1200, num_draft_tokens: 7200, num_accepted_tokens: 4392}}
plan:
  description: What a run would do - steps (lane, level, requests, max_tokens), files, output_dir_exists, settings,
    r0b0bench_version (what the external client reported, null when it is not to run).
  returned: in check mode
  type: dict
  sample: {"steps": [{"lane": "canary", "level": null, "requests": 1, "max_tokens": 16}],
           "files": ["/var/lib/dspark/systems/20260803/systems.json"], "output_dir_exists": false}
diff:
  description: Status, finish time and counts of C(systems.json) before and after, with C(--diff).
  returned: when diff mode is on
  type: dict
  sample: {"before": {}, "after": {"status": "PASS", "finished": "2026-08-03T10:00:00Z"}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems_settings
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems_external
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems_rows
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems_measure
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import json_client
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import guarded
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import api_key_problem
from ansible_collections.gb10.dspark.plugins.module_utils.common._site import local_api_url


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "default": local_api_url()},
            "head": {"type": "str"},
            "model": {"type": "str", "required": True},
            "api_key": {"type": "str", "no_log": True},
            "output_dir": {"type": "path", "required": True},
            "lanes": {"type": "list", "elements": "str", "choices": list(_systems_rows.LANES),
                      "default": list(_systems_rows.LANES)},
            "latency_reps": {"type": "int", "default": 5},
            "latency_max_tokens": {"type": "int", "default": 128, "no_log": False},
            "concurrency_levels": {"type": "list", "elements": "int", "default": [1, 2, 4, 6, 16]},
            "concurrency_reps": {"type": "int", "default": 3},
            "concurrency_max_tokens": {"type": "int", "default": 512, "no_log": False},
            "decode_reps": {"type": "int", "default": 5},
            "decode_max_tokens": {"type": "int", "default": 2048, "no_log": False},
            "prefill_reps": {"type": "int", "default": 3},
            "prefill_prompt_tokens": {"type": "int", "default": 14000, "no_log": False},
            "request_timeout": {"type": "float", "default": 600},
            "context": {"type": "dict", "default": {}},
            "external_client": {
                "type": "dict",
                "options": {
                    "path": {"type": "path", "required": True},
                    "python": {"type": "path", "required": True},
                    "lanes": {"type": "list", "elements": "str", "default": list(_systems_external.DEFAULT_EXTERNAL_LANES)},
                    "timeout": {"type": "float", "default": _systems_external.DEFAULT_EXTERNAL_TIMEOUT},
                    "tokenizer": {"type": "path"},
                    "aquila_scripts": {"type": "path"},
                    "bfcl_python": {"type": "path"},
                    **{key: {"type": "int", "default": default, "no_log": False}
                       for key, _unused, default in _systems_external.EXTERNAL_INT_ENV},
                },
            },
        },
        supports_check_mode=True,
    )
    p = module.params
    settings = _systems_settings.Settings(
        model=p["model"], output_dir=p["output_dir"], base_url=p["base_url"], lanes=tuple(p["lanes"]),
        latency_reps=p["latency_reps"], latency_max_tokens=p["latency_max_tokens"],
        concurrency_levels=tuple(p["concurrency_levels"]), concurrency_reps=p["concurrency_reps"],
        concurrency_max_tokens=p["concurrency_max_tokens"], decode_reps=p["decode_reps"],
        decode_max_tokens=p["decode_max_tokens"], prefill_reps=p["prefill_reps"],
        prefill_prompt_tokens=p["prefill_prompt_tokens"], request_timeout=p["request_timeout"],
        external_client=p["external_client"], context=p["context"])
    if problem := api_key_problem(p["api_key"]):  # refused before any request, naming the variable, never the value
        module.fail_json(msg=f"rank {p['head'] or 'head'}: {problem}")
    if module.check_mode:
        result = guarded(module, lambda: _systems.plan(settings, _systems_external.run_process))
    else:
        result = guarded(module, lambda: _systems.run(settings, json_client(p["base_url"], p["api_key"], p["head"]),
                                                      _systems_measure.stream_client(p["base_url"], p["api_key"]),
                                                      p["api_key"], _systems_external.run_process))
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
