#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: pair_ready
short_description: Wait until a pair serves its model, with progress, failing fast when a rank exits
version_added: 0.1.0
description:
  - An action plugin, run on the head. Calls M(gb10.dspark.engine_probe) every I(interval) seconds
    until the head's C(/v1/models) lists I(model) and no rank's container has exited.
  - Prints progress every I(progress_every) seconds - elapsed time against the budget, both
    containers' status and the head's latest log line.
  - Fails within one interval when a rank's container exits, printing the last log lines of both
    ranks; fails with C(TIMEOUT) and the same logs when I(budget) runs out.
  - Returns the KV cache size the engine reports, for the evidence.
extends_documentation_fragment:
  - gb10.dspark._attributes.wait
  - gb10.dspark._probe
options:
  budget:
    description: Seconds to wait in all. A cold start of the real engine takes 12 to 60 minutes.
    type: float
    default: 3600
  interval:
    description: Seconds between probes.
    type: float
    default: 5
  progress_every:
    description: Seconds between progress lines.
    type: float
    default: 30
  fail_log_lines:
    description: Log lines per rank printed on failure.
    type: int
    default: 30
seealso:
  - module: gb10.dspark.engine_probe
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Wait for the pair (the head serves only after the worker joined)
  gb10.dspark.pair_ready:
    model: deepseek-v4-flash-dspark
    worker: "root@10.0.0.2"
    budget: 3600
  register: __dspark_ready
  when: dspark_rank == 0

- name: Record the KV cache size
  ansible.builtin.debug:
    msg: "{{ __dspark_ready.kv_cache_size_tokens }} KV tokens"
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
elapsed_s:
  description: Seconds waited.
  returned: success
  type: float
kv_cache_size_tokens:
  description: The KV cache size in tokens, from C(/metrics).
  returned: success
  type: int
max_model_len:
  description: The served context length, from C(/v1/models).
  returned: success
  type: int
probe:
  description: The last probe (see M(gb10.dspark.engine_probe)).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils._engine_probe import ARGUMENT_SPEC, WAIT_ARGUMENT_SPEC


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(ARGUMENT_SPEC, **WAIT_ARGUMENT_SPEC),
        supports_check_mode=True,
    )
    module.fail_json(msg="gb10.dspark.pair_ready runs through its action plugin; it cannot run as a plain module")


if __name__ == "__main__":
    main()
