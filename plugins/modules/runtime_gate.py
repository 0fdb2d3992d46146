#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: runtime_gate
short_description: Run the schema-3 runtime gate suite for one pair and return its verdict
version_added: 0.1.0
description:
  - An action plugin; it runs on the control node. It runs the pytest-testinfra suite
    (C(roles/gate/files/runtime_gate)) in its own process, handing it the gate config, each rank's
    connection settings and the API key in memory; the suite reads each rank of the pair once
    (one M(gb10.dspark.rank_audit) call per rank over those settings) and the head's API, and every
    decision about the pair is the suite's.
  - Writes the gate config (C(runtime-gate-config.json), the evidence of what was asked; no
    connection settings, no key) into O(folder), removes the previous C(runtime-gate.json), runs the
    suite, and returns the document the suite handed back as this task's result (the suite also
    writes it to C(runtime-gate.json) for the evidence pack).
  - A FAIL verdict is a result (RV(passed) false), not a failed task, so that the document is
    recorded for M(gb10.dspark.evidence_pack) (Ansible drops a failed task's facts); fail the pair
    on RV(passed) in the next task. The task fails when the suite gave no verdict, with
    the suite's last output lines.
  - The API key is read from C(dspark_api_key) in the task's variables when
    C(lookup('gb10.dspark.has_api_key')) is true, never taken as an option; it reaches the suite
    in memory only (no file, no argv, no environment variable). Results and messages are redacted
    of it.
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._attributes.action
options:
  pair:
    description: The pair's name.
    type: str
    required: true
  folder:
    description: The pair's evidence folder on the control node; made if missing.
    type: path
    required: true
  config:
    description:
      - The gate config (see C(roles/gate/tasks/main.yml)); the action adds C(inventory) and C(output).
    type: dict
    required: true
  hosts:
    description:
      - Each rank's connection settings (host name to C(ansible_host), C(ansible_user), ... ; never a
        password), which the suite gives its one call per rank as extra variables, the rank being that
        call's one-host inventory. Ignored when O(inventory) is given.
    type: dict
    default: {}
  inventory:
    description: An inventory of the operator's that the suite's rank calls use instead of O(hosts).
    type: str
    default: ""
  suite:
    description: The suite's folder.
    type: path
    required: true
  ansible_config:
    description: C(ANSIBLE_CONFIG) for the suite's own Ansible calls.
    type: str
    default: ""
  collections_path:
    description: C(ANSIBLE_COLLECTIONS_PATH) for the suite, where it finds this collection.
    type: str
    default: ""
attributes:
  check_mode:
    support: partial
    details: Returns skipped in check mode, running nothing (the gate inspects a serving engine, which check mode did
      not start).
  diff_mode:
    support: none
    details: Changes nothing on a rank; the files it writes are evidence of the run on the control node.
  idempotent:
    support: full
    details: Changes nothing on a rank.
  action:
    support: full
    details: Runs on the control node; the suite reaches the ranks itself.
seealso:
  - module: gb10.dspark.rank_audit
  - module: gb10.dspark.evidence_pack
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Run the runtime gate suite
  gb10.dspark.runtime_gate:
    pair: "{{ dspark_pair }}"
    folder: "{{ dspark_evidence_dir }}/{{ dspark_pair }}"
    config: "{{ gate_config }}"
    hosts:
      sim01-head: {ansible_host: 10.231.0.11, ansible_user: dspark-ops}
      sim01-worker: {ansible_host: 10.231.0.12, ansible_user: dspark-ops}
    suite: "{{ role_path }}/files/runtime_gate"
  delegate_to: localhost
  register: gate

- name: The pair passes the runtime gate
  ansible.builtin.assert:
    that: gate.passed
    fail_msg: "{{ gate.msg }}"
"""

RETURN = r"""
changed:
  description: Always false; the files it writes are evidence of the run on the control node.
  returned: always
  type: bool
passed:
  description: The suite's document says schema 3, PASS, and no errors.
  returned: when the suite gave a verdict
  type: bool
status:
  description: The document's status (C(PASS) or C(FAIL)).
  returned: when the suite gave a verdict
  type: str
  sample: PASS
errors:
  description: The document's errors, one line each.
  returned: when the suite gave a verdict
  type: list
  elements: str
output:
  description: The document's path.
  returned: always
  type: str
  sample: /var/lib/dspark/evidence/sim01/runtime-gate.json
rc:
  description: The suite's exit status.
  returned: always
  type: int
msg:
  description:
    - "C(pair <pair>: RUNTIME_GATE status=<status> errors=<n> output=<path>), followed on FAIL by
      C(pair <pair>: runtime gate FAIL) and each error on a line of its own."
  returned: always
  type: str
ansible_facts:
  description: This host's evidence list with C(runtime-gate.json) and C(runtime-gate-config.json) added.
  returned: when the suite gave a verdict
  type: complex
  contains:
    dspark_evidence_run_files:
      description: Every file recorded so far in this run (see M(gb10.dspark.evidence_record)).
      type: list
      elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.gate._gate_run import ARGUMENT_SPEC


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    module.fail_json(msg="gb10.dspark.runtime_gate runs through its action plugin; it cannot run as a plain module")


if __name__ == "__main__":
    main()
