#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_probe
short_description: Read the state of a pair's engines from its head, changing nothing
version_added: 0.1.0
extends_documentation_fragment:
  - gb10.dspark._attributes.read_only
  - gb10.dspark._probe
description:
  - Runs on the head. Reports each rank's container (exists, status, exit code, start time, labels,
    the last log lines), whether the head's OpenAI API serves the model (C(/v1/models)), the KV
    cache size and the requests in flight (C(/metrics)).
  - The worker is read with C(ssh <worker> docker ...), the head's one-way trust to its worker.
  - M(gb10.dspark.pair_ready) calls it in a loop; the engine role calls it before replacing a
    running engine, to refuse while requests are in flight.
seealso:
  - module: gb10.dspark.pair_ready
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: How is the pair doing?
  gb10.dspark.engine_probe:
    model: deepseek-v4-flash-dspark
    worker: "root@{{ hostvars[__dspark_worker].ansible_host }}"
  register: __dspark_probe
  when: dspark_rank == 0

- name: Show requests in flight
  ansible.builtin.debug:
    msg: "{{ __dspark_probe.probe.api.num_requests_running }} requests running"
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
probe:
  description: The pair's state.
  returned: always
  type: dict
  contains:
    head:
      description: The head container (exists, status, running, exit_code, started_at, labels, logs).
      type: dict
      returned: always
    worker:
      description: The worker container, or null without I(worker).
      type: dict
      returned: always
    api:
      description: ready, status, models, max_model_len, kv_cache_size_tokens, num_requests_running, error.
      type: dict
      returned: always
    ready:
      description: The API serves the model and no rank's container has exited.
      type: bool
      returned: always
    exited:
      description: The ranks (head, worker) whose container exists but does not run.
      type: list
      elements: str
      returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils._engine_probe import ARGUMENT_SPEC, probe


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    p = module.params
    ssh = ["ssh", *p["ssh_options"], p["worker"], "--"] if p["worker"] else None
    result = probe(module.run_command, p["container"], p["base_url"], p["model"], ssh,
                   p["log_lines"], p["timeout"], p["api_key"])
    module.exit_json(changed=False, probe=result)


if __name__ == "__main__":
    main()
