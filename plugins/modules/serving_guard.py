#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_guard
short_description: The serving accuracy guard - 64 prompts of 128 tokens against a pair's head
version_added: 0.1.0
description:
  - Runs where the head's API is reachable (the control node). Sends I(prompts) completions of
    I(max_tokens) tokens with bounded concurrency, each within I(request_timeout), the whole run
    within I(overall_timeout).
  - Checks every answer against vLLM's completion contract - HTTP 200, id, object, created, the
    served model, one choice, the finish reason (C(length) and exactly I(max_tokens) tokens with
    C(ignore_eos)), usage with C(total_tokens) the sum and C(prompt_tokens) equal to the server's
    own C(/tokenize) count. Streamed requests must carry one finish chunk, then exactly one usage
    chunk, then C([DONE]).
  - A quarter of the prompts form an accuracy set with one right answer each; the share answered
    right must reach I(accuracy_threshold).
  - A prompt the server gives no C(/tokenize) count for fails (the C(prompt_tokens) check cannot be made),
    naming the request and what C(/tokenize) answered.
  - Fails on any violation, naming the request and the field; returns the completions for review
    and writes the JSON report to I(report_path).
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  base_url:
    description: The head's API.
    type: str
    required: true
  head:
    description:
      - The head's inventory name, named in every message about its API (for example C(head lab01-head -
        POST http://10.0.0.11:8888/v1/completions refused the connection ...)). Roles pass C(inventory_hostname).
    type: str
  model:
    description: The served model name.
    type: str
    required: true
  api_key:
    description: The API key, when the head requires one. Never returned or logged.
    type: str
  prompts:
    description: How many requests.
    type: int
    default: 64
  max_tokens:
    description: Tokens per completion.
    type: int
    default: 128
  concurrency:
    description: Requests in flight at once.
    type: int
    default: 8
  request_timeout:
    description: Seconds one request (a C(/tokenize) call or a completion) may take; never more than what is
      left of I(overall_timeout).
    type: float
    default: 300
  overall_timeout:
    description:
      - Seconds the whole run may take, its C(/tokenize) calls included; a run that hits it fails.
      - >-
        A hard bound whatever the requests are doing: at the bound every request still in flight is ended
        (its connection shut; a frozen head cannot hold the module), listed in RV(report.unanswered) with the
        head, its address and the state (a stalled engine - C(took the request but sent no answer within N s)),
        and the report is written. The module returns a few seconds after the bound at most.
    type: float
    default: 1800
  accuracy_threshold:
    description: Share of the accuracy set that must be answered right.
    type: float
    default: 0.9
  context:
    description:
      - What was served, recorded verbatim as the report's C(context) (pair, profile, profile hash,
        CUDA-graph implementation, image ID), so the evidence pack can tell breakable rows from
        regular ones. Never put secrets here.
    type: dict
    default: {}
  report_path:
    description: Where to write the JSON report (atomically); unset writes none.
    type: path
attributes:
  check_mode:
    support: partial
    details: Sends real requests to a serving engine, so in check mode it sends none and returns C(skipped=true) with an
      empty RV(report).
  diff_mode:
    support: none
    details: Changes nothing on the pair.
  idempotent:
    support: full
    details: Read-only towards the pair; the report is rewritten each run.
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Guard the pair's serving accuracy
  gb10.dspark.serving_guard:
    base_url: "http://{{ ansible_host }}:8888"
    model: deepseek-v4-flash-dspark
    report_path: "{{ dspark_evidence_dir }}/{{ dspark_pair }}/serving-guard.json"
  delegate_to: localhost
  register: __dspark_guard

- name: Show the verdict
  ansible.builtin.debug:
    msg: "{{ __dspark_guard.report.status }}: {{ __dspark_guard.report.failed_requests }} failed requests"
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
report:
  description: status (PASS/FAIL), requests, failed_requests, infra_failures, contract_failures, accuracy, errors,
    unanswered, completions, elapsed_s, settings, context.
  returned: always
  type: dict
  contains:
    unanswered:
      description: >-
        Every request that got no HTTP answer: C(request) (its id), C(sent) (false when the bound
        ended before it was sent), C(stalled) (the head took it and sent no answer in time) and C(reason)
        (the head, the address and the state, for example a stalled engine - C(took the request but sent
        no answer within 117.2 s)).
      type: list
      elements: dict
      returned: always
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import api_key_problem
from ansible_collections.gb10.dspark.plugins.module_utils.serving._serving_guard import requests_plan, run


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "head": {"type": "str"},
            "model": {"type": "str", "required": True},
            "api_key": {"type": "str", "no_log": True},
            "prompts": {"type": "int", "default": 64},
            "max_tokens": {"type": "int", "default": 128, "no_log": False},
            "concurrency": {"type": "int", "default": 8},
            "request_timeout": {"type": "float", "default": 300},
            "overall_timeout": {"type": "float", "default": 1800},
            "accuracy_threshold": {"type": "float", "default": 0.9},
            "report_path": {"type": "path"},
            "context": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    if problem := api_key_problem(p["api_key"]):  # refused before any request, naming the variable, never the value
        module.fail_json(msg=f"rank {p['head'] or 'head'}: {problem}")
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no requests sent", report={})
    # every request (its /tokenize call too) is judged inside the run, a refused or stalled head included; the
    # run returns at overall_timeout with no request left running, so the report is always written
    report = run(p["base_url"], p["model"], p["api_key"], requests_plan(p["prompts"], p["max_tokens"]),
                 p["concurrency"], p["request_timeout"], p["overall_timeout"], p["accuracy_threshold"], head=p["head"])
    report["context"] = p["context"]
    if p["report_path"]:
        write_json_atomic(p["report_path"], report, make_dirs=True)
    if report["status"] != "PASS":
        shown = report["errors"][:20]
        more = len(report["errors"]) - len(shown)
        module.fail_json(msg="serving guard FAIL:\n" + "\n".join(shown) + (f"\n(+{more} more)" if more > 0 else ""),
                         report=report)
    module.exit_json(changed=False, report=report)


if __name__ == "__main__":
    main()
