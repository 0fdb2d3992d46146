#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: pair_identity
short_description: Assert that an inventory forms GB10 pairs and that both ranks of each pair hold the identical image
version_added: 0.1.0
description:
  - Runs on the control node, once (C(run_once), C(delegate_to localhost)), over the records the
    play collected from every rank.
  - Checks the pairing, for every pair - exactly one head (rank 0) and one worker (rank 1), no
    host in two pairs, no rank outside 0 and 1.
  - Checks the image - every rank reports an image ID, it equals the pin when one is given, both
    ranks of a pair hold the identical ID, and both use the same image store (IDs from a classic
    and a containerd store are not comparable).
  - Lists every problem, not just the first; each message names the rank, the expected and the
    actual value. Changes nothing.
extends_documentation_fragment:
  - gb10.dspark._attributes.read_only
options:
  hosts:
    description:
      - One record per host, with keys C(name), C(pair), C(rank), and, when I(check_images),
        C(image_id) and C(image_store) as returned by M(gb10.dspark.image_identity).
    type: list
    elements: dict
    required: true
  expected_image_id:
    description: The pinned ID every rank must hold (for the store the ranks use).
    type: str
  check_images:
    description: Whether to check images; C(false) checks the pairing only (a preflight before any image work).
    type: bool
    default: true
seealso:
  - module: gb10.dspark.image_identity
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Both ranks of every pair hold the pinned image (after gb10.dspark.image_identity set dspark_image)
  gb10.dspark.pair_identity:
    hosts: "{{ __dspark_pair_hosts }}"
    expected_image_id: "{{ dspark_pin.image_id }}"
  run_once: true
  delegate_to: localhost
  vars:
    __dspark_pair_hosts: >-
      {%- set out = [] -%}
      {%- for h in ansible_play_hosts_all -%}
      {%-   set _ = out.append({'name': h, 'pair': hostvars[h].dspark_pair, 'rank': hostvars[h].dspark_rank,
                                'image_id': hostvars[h].dspark_image.image_id | default(none),
                                'image_store': hostvars[h].dspark_image.image_store | default(none)}) -%}
      {%- endfor -%}
      {{ out }}

- name: The inventory forms pairs (no image check yet)
  gb10.dspark.pair_identity:
    hosts:
      - {name: sim01-head, pair: sim01, rank: 0}
      - {name: sim01-worker, pair: sim01, rank: 1}
    check_images: false
  register: __dspark_pairs

- name: Show the pairs
  ansible.builtin.debug:
    var: __dspark_pairs.pairs
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
pairs:
  description: Each pair with the name of its head and its worker.
  returned: always
  type: dict
  sample: {sim01: {head: sim01-head, worker: sim01-worker}}
mismatches:
  description: Every problem found, each with rank, item, expected, actual and message.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import end
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import PAIR_IDENTITY_SPEC, check_pair_identity


def main() -> None:
    module = AnsibleModule(argument_spec=PAIR_IDENTITY_SPEC, supports_check_mode=True)
    end(module, check_pair_identity(module.params))


if __name__ == "__main__":
    main()
