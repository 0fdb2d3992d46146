#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: pair_ready
short_description: Wait until a pair serves its model, showing each rank's start-up phase, failing fast when a rank exits
version_added: 0.1.0
description:
  - An action plugin, run on B(both) ranks of a pair in one task. Each rank calls
    M(gb10.dspark.engine_probe) on itself every I(interval) seconds, through its own Ansible
    connection; no rank reaches the other and no SSH trust between ranks is needed.
  - The two waits share small reports (container state, start-up phase, last log lines, verdict)
    in a folder of the run's own temporary folder on the control node.
  - The head waits until its C(/v1/models) lists I(model). Whenever a rank's start-up phase
    or its count changes, and at least every I(progress_every) seconds, it prints one line with the time waited
    and both ranks' phases (launched, process group formed, loading weights n/N, KV cache sized,
    capturing CUDA graphs n/N, API up), read from each engine's log in vLLM's formats; a progress
    bar is added on a terminal. It prints the C(READY) line when the pair serves.
  - Either rank fails within one interval when its own or its peer's container exits, with both
    ranks' last log lines; the head fails with C(TIMEOUT) and the same logs when I(budget) runs
    out, and with C(STALLED) when neither rank made progress (no new log line, no phase change) for
    I(stall_timeout) seconds - a wedged rank whose container still runs; the worker's wait ends with
    the head's verdict, so a failed start fails on both ranks.
  - With too few forks to run both waits at once, each goes on alone after I(peer_grace) seconds
    (the head judges readiness by its API, the worker leaves while its engine runs) rather than
    waiting for the other forever.
  - Returns the KV cache size the engine reports, for the evidence.
extends_documentation_fragment:
  - gb10.dspark._attributes.wait
  - gb10.dspark._probe
options:
  pair:
    description: The pair's name (the C(dspark_pair) fact of M(gb10.dspark.pair_topology)); both ranks pass the same.
    type: str
    required: true
  role:
    description: This rank's part in the pair.
    type: str
    required: true
    choices: [head, worker]
  budget:
    description: Seconds to wait in all. A cold start of the real engine takes 12 to 60 minutes.
    type: float
    default: 3600
  interval:
    description: Seconds between probes.
    type: float
    default: 5
  progress_every:
    description: Seconds between progress lines while no phase changes.
    type: float
    default: 30
  fail_log_lines:
    description: Log lines per rank printed on failure.
    type: int
    default: 30
  peer_grace:
    description: Seconds a rank's wait waits for the other rank's wait to report before it goes on alone.
    type: float
    default: 120
  stall_timeout:
    description:
      - Seconds without progress on either rank (no new log line, no change of start-up phase or of its
        n/N) after which the head's wait fails as C(STALLED), naming the rank that went quiet first.
      - The real engine's longest quiet stretch is a kernel compile or a CUDA graph capture, minutes
        long; 0 turns the check off (only I(budget) bounds the wait).
    type: float
    default: 900
  progress_results:
    description:
      - "Hand each progress report and the C(READY) line to the C(gb10.dspark.progress) callback in the task's
        results instead of printing them. The head's wait returns at each report with C(waiting=true) and the
        report in C(dspark_progress), and the task's C(until) runs it again, going on where it stopped (the
        retries of a task run in one worker process). Each report then is a C(v2_runner_retry) event, which
        every callback sees and AWX records as a job event."
      - "Needs C(until) on the task (for example C(until: not (result.waiting | default(false)))), C(delay: 0)
        and at least I(budget) / I(interval) + 3 C(retries)."
      - Without it the wait prints its reports itself.
    type: bool
    default: false
seealso:
  - module: gb10.dspark.engine_probe
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Wait for the pair (both ranks, in one task)
  gb10.dspark.pair_ready:
    pair: "{{ dspark_pair }}"
    role: "{{ 'head' if dspark_rank == 0 else 'worker' }}"
    model: deepseek-v4-flash-dspark
    budget: 3600
  register: __dspark_ready

- name: Wait for the pair, each progress report a result the gb10.dspark.progress callback shows
  gb10.dspark.pair_ready:
    pair: "{{ dspark_pair }}"
    role: "{{ 'head' if dspark_rank == 0 else 'worker' }}"
    model: deepseek-v4-flash-dspark
    budget: 3600
    interval: 5
    progress_results: true
  register: __dspark_ready
  until: not (__dspark_ready.waiting | default(false))
  retries: 723
  delay: 0

- name: Record the KV cache size
  ansible.builtin.debug:
    msg: "{{ __dspark_ready.kv_cache_size_tokens }} KV tokens"
  when: dspark_rank == 0
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
msg:
  description: The verdict - on the head C(READY served=... kv_cache_size_tokens=... after N s), else why the wait ended.
  returned: always
  type: str
role:
  description: This rank's part, as given.
  returned: always
  type: str
elapsed_s:
  description: Seconds waited.
  returned: always
  type: float
phases:
  description: The last start-up phase seen on each rank (C(head), C(worker)); null for a rank not seen.
  returned: always
  type: dict
kv_cache_size_tokens:
  description: The KV cache size in tokens, from C(/metrics).
  returned: success on the head
  type: int
max_model_len:
  description: The served context length, from C(/v1/models).
  returned: success on the head
  type: int
probe:
  description: This rank's last probe (see M(gb10.dspark.engine_probe)).
  returned: when the wait ended
  type: dict
waiting:
  description: True on a progress report with I(progress_results); the wait goes on at the task's next retry.
  returned: with progress_results, on a progress report
  type: bool
dspark_progress:
  description:
    - The progress report (both ranks' phases) or, at the end on the head, the C(READY) line, for the
      C(gb10.dspark.progress) callback.
  returned: with progress_results, on a progress report and on the head's success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.engine._engine_probe import ARGUMENT_SPEC, WAIT_ARGUMENT_SPEC


def main() -> None:
    module = AnsibleModule(
        argument_spec={**ARGUMENT_SPEC, **WAIT_ARGUMENT_SPEC},
        supports_check_mode=True,
    )
    module.fail_json(msg="gb10.dspark.pair_ready runs through its action plugin; it cannot run as a plain module")


if __name__ == "__main__":
    main()
