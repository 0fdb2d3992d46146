#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: evidence_record
short_description: Add the result files a role just wrote to this run's evidence list
version_added: 0.1.0
description:
  - An action plugin; it runs on the control node and contacts no host.
  - Each producing role (engine readiness, runtime gate, serving guard, systems lanes, NIAH, the
    wrapper-tree record) calls it right after writing its result on the control node. It reads each
    file's sha256 and adds the file to this host's C(dspark_evidence_run_files) fact, the run's own
    list that M(gb10.dspark.evidence_pack) takes (option C(run_files)). The pack reads nothing else,
    so a file left by an earlier run never enters a pack, and a file rewritten after it was recorded
    is left out as C(stale).
  - A file recorded again under the same pack name replaces the earlier entry (the second gate of a
    NIAH run replaces the first). A file that does not exist is not recorded (check mode writes no
    result), and is returned in RV(missing).
  - The list lives for one C(ansible-playbook) run (a host fact); the publication suite keeps each
    finished stage's entries in its stage record, so a resumed suite packs them too.
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._attributes.action
options:
  files:
    description: The files to record.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Its path inside the pack, relative (C(serving-guard.json), C(niah/<run key>)).
        type: str
        required: true
      src:
        description: Its absolute path on the control node (a folder for C(kind=niah_run)).
        type: path
        required: true
      content:
        description:
          - A JSON document to write to O(files[].src) first (atomically, its folder made, mode 0644,
            sorted keys), so that one task writes a result and records it. Without it, O(files[].src)
            names a file written before.
          - An entry with a bad name, kind or source is refused before anything is written.
        type: raw
      kind:
        description:
          - The pack kind (C(readiness), C(gate), C(guard), C(systems), C(tree), C(other), ...).
          - C(niah_run) records a NIAH run folder - its C(niah.json) summary (C(niah)), C(depth-N.json)
            rows (C(niah_row)) and other JSON files (C(other)), each recorded as C(<name>/<file>).
        type: str
        required: true
attributes:
  check_mode:
    support: full
    details: Reads files on the control node and sets a fact; the same in check mode, where an entry's
      O(files[].content) is written too (evidence of the run, on the control node; the roles skip the
      task in check mode where nothing should be written).
  diff_mode:
    support: none
    details: Changes nothing.
  idempotent:
    support: full
    details: Changes nothing; recording the same file twice gives the same list.
  action:
    support: full
    details: The whole task runs on the control node; no module is sent to a rank.
seealso:
  - module: gb10.dspark.evidence_pack
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Write the readiness record and add it to this run's evidence
  gb10.dspark.evidence_record:
    files:
      - name: readiness.json
        src: "{{ dspark_evidence_dir }}/{{ dspark_pair }}/readiness.json"
        kind: readiness
        content: {pair: "{{ dspark_pair }}", ready: true}
  when: not ansible_check_mode

- name: Record the guard's report as a result of this run
  gb10.dspark.evidence_record:
    files:
      - name: serving-guard.json
        src: "{{ dspark_evidence_dir }}/{{ dspark_pair }}/serving-guard.json"
        kind: guard

- name: Pack exactly what this run produced
  gb10.dspark.evidence_pack:
    dest: "{{ dspark_evidence_dir }}/{{ dspark_pair }}/runs/{{ dspark_evidence_run_id }}"
    pair: "{{ dspark_pair }}"
    run_id: "{{ dspark_evidence_run_id }}"
    playbook: guard
    artifacts: []
    run_files: "{{ dspark_evidence_run_files | default([]) }}"
  delegate_to: localhost
"""

RETURN = r"""
ansible_facts:
  description: This host's evidence list for the run.
  returned: success
  type: complex
  contains:
    dspark_evidence_run_files:
      description: Every file recorded so far in this run, sorted by name, each with C(name), C(src), C(kind) and C(sha256).
      type: list
      elements: dict
recorded:
  description: The entries this task added or replaced.
  returned: success
  type: list
  elements: dict
  sample: [{name: serving-guard.json, src: /var/lib/dspark/evidence/sim01/serving-guard.json, kind: guard,
            sha256: 8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4}]
missing:
  description: Names of the given files that do not exist (not recorded).
  returned: success
  type: list
  elements: str
  sample: []
mismatches:
  description:
    - Every problem found in the given files or the run's list (name, kind, path), each with rank,
      item, expected, actual and message; empty on success.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={"files": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    module.fail_json(msg="gb10.dspark.evidence_record runs through its action plugin; it cannot run as a plain module")


if __name__ == "__main__":
    main()
