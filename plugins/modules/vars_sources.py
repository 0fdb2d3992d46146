#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vars_sources
short_description: Refuse a key given twice in any file the play's variables come from
version_added: 0.1.0
description:
  - An action plugin; it runs on the control node and contacts no host.
  - Ansible hands a play its variables already parsed, and its YAML loader keeps the last value of a key
    given twice in a mapping with at most a warning, which the control node's C(ansible.cfg) or environment
    (C(DUPLICATE_YAML_DICT_KEY)) may switch off. The identity pin (C(dspark_pin)) and the site file are such
    vars files - a second C(image_id:) in the pin would silently replace the first.
  - This action reads the sources again itself, with the collection's strict YAML reader, whatever
    C(ansible.cfg) says. The sources are the C(group_vars/) and C(host_vars/) files Ansible reads for the play's
    hosts (next to each inventory source and next to the playbook; for C(all), every group of a play host and
    every play host), the inventory sources that are YAML or JSON files, and the C(-e @FILE) files and inline
    C(-e '{...}') mappings of the command line, and the O(files) given. A vault-encrypted file is decrypted
    with the run's vault secrets.
  - The pin (C(dspark_pin)) set by two files Ansible reads at the same precedence (two files of one
    C(group_vars/<name>/) or C(host_vars/<name>/) folder, for example the pins of two releases side by side) fails
    the task too, naming both files and lines - Ansible would keep the one whose name sorts last. A pin set at
    another precedence (a pair group's own) overrides as usual; other variables may be set by several files.
  - A mapping key given twice at any depth (including the same value twice; merge keys C(<<) override on
    purpose and are not duplicates) fails the task, naming every such file, the key and the lines of both
    occurrences, never a value. A source that cannot be read or parsed fails it too.
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._attributes.action
options:
  files:
    description:
      - More files to read strictly, on the control node, as well as the play's variable sources (for
        example a vars file a playbook loads with C(vars_files)). Each must exist and be readable.
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    support: full
    details: Reads files on the control node only; the same in check mode.
  diff_mode:
    support: none
    details: Changes nothing.
  idempotent:
    support: full
    details: Read-only.
  action:
    support: full
    details: The whole task runs on the control node; no module is sent to a rank.
notes:
  - The runtime manifest is JSON and is read by M(gb10.dspark.runtime_manifest), whose strict reader refuses a
    key given twice the same way.
seealso:
  - module: gb10.dspark.pair_topology
  - module: gb10.dspark.runtime_manifest
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: No key is given twice in the pin, the site file or any other variable source of the play
  gb10.dspark.vars_sources:
  run_once: true

- name: The same, and a vars file the playbook loads
  gb10.dspark.vars_sources:
    files:
      - "{{ playbook_dir }}/vars/release.yml"
  run_once: true
"""

RETURN = r"""
sources:
  description: Every source read, files by real path, inline items as C(-e item N).
  returned: always
  type: list
  elements: str
  sample: [/srv/gb10-dspark/inventory/group_vars/all/pin.yml, /srv/gb10-dspark/inventory/group_vars/all/site.yml]
mismatches:
  description:
    - Every source refused, each with rank, source, key, first_line, second_line and message (key and lines
      are null for a source that cannot be read or parsed).
  returned: always
  type: list
  elements: dict
  sample:
    - rank: control node
      source: /srv/gb10-dspark/inventory/group_vars/all/pin.yml
      key: image_id
      first_line: 13
      second_line: 47
      message: >-
        control node: /srv/gb10-dspark/inventory/group_vars/all/pin.yml: key "image_id" is given twice,
        at lines 13 and 47; refused, whatever ansible.cfg says, because one of the two values would be silently ignored
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(argument_spec={"files": {"type": "list", "elements": "path", "default": []}},
                           supports_check_mode=True)
    module.fail_json(msg="gb10.dspark.vars_sources runs through its action plugin; it cannot run as a plain module")


if __name__ == "__main__":
    main()
