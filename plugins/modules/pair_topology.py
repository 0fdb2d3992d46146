#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: pair_topology
short_description: Work out the pairs of the play once and publish each rank's pair, head, worker and rendezvous address
version_added: 0.1.0
description:
  - An action plugin; it runs on the control node and contacts no host.
  - Reads C(dspark_pair), C(dspark_rank) and C(dspark_fabric_ip) of every host of the play, forms
    the pairs (exactly one head, rank 0, and one worker, rank 1, per pair) and checks that every
    head is in the inventory group C(dspark_heads) and every worker in C(dspark_workers), and in
    no other of the two. The plays of the guard, NIAH, the systems lanes and the fleet report run
    on those groups, so a rank placed wrongly would be skipped without a word.
  - A pair of which only one rank is in the play is told apart by the rest of the inventory. When the
    inventory holds the other rank outside the play (a C(--limit)), the problem names that host, and
    I(partial_ok) accepts it. When the inventory does not hold it at all, the run's inventory is a
    slice of a sliced AWX/AAP job (AWX gives each slice every Nth host sorted by name, so heads and
    workers land in different slices) or lacks the rank, and every host fails, whatever I(partial_ok) says,
    with one line per half pair (the rank missing, the rank present) and one naming all of them and the
    fix (docs/fleet-scale.md, "Job slicing"). Only then are the variables of the hosts outside the play read.
  - Every problem is listed at once, each naming the host, the expected and the actual value, and
    the task fails before anything changes.
  - On success it sets this host's facts C(dspark_pair_head), C(dspark_pair_worker),
    C(dspark_pair_members), C(dspark_pair_head_fabric_ip) and the play's one mapping of pairs,
    C(dspark_play_pairs) - the only place in the collection where the topology of a pair is worked out.
  - Its one caller is the role C(gb10.dspark.topology), which the roles that need the topology get as a
    dependency (run once per play); a role does not call this action itself.
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._attributes.action
options:
  partial_ok:
    description:
      - Accept a pair of which only one rank is in the play while the inventory holds the other (the
        read-only fleet audit of a limited play); the absent rank is then C(null). A rank the inventory
        lacks (a sliced job's half pair) is refused all the same. Roles that change a pair never set it.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reads inventory variables only; the same in check mode.
  diff_mode:
    support: none
    details: Changes nothing.
  idempotent:
    support: full
    details: Read-only.
  action:
    support: full
    details: The whole task runs on the control node; no module is sent to a rank.
seealso:
  - module: gb10.dspark.pair_identity
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: The pair's topology
  gb10.dspark.pair_topology:

- name: Use it
  ansible.builtin.debug:
    msg: "{{ inventory_hostname }} is in a pair whose head is {{ dspark_pair_head }}, rendezvous {{ dspark_pair_head_fabric_ip }}"
"""

RETURN = r"""
ansible_facts:
  description: This host's view of its pair.
  returned: success
  type: complex
  contains:
    dspark_pair_head:
      description: Inventory name of the pair's head (rank 0), null when not in the play (I(partial_ok)).
      type: str
      sample: sim01-head
    dspark_pair_worker:
      description: Inventory name of the pair's worker (rank 1), null when not in the play (I(partial_ok)).
      type: str
      sample: sim01-worker
    dspark_pair_members:
      description: The pair's hosts in the play, head first.
      type: list
      elements: str
      sample: [sim01-head, sim01-worker]
    dspark_pair_head_fabric_ip:
      description: The head's C(dspark_fabric_ip), the rendezvous address of both ranks.
      type: str
      sample: 10.77.1.1
    dspark_play_pairs:
      description:
        - The pairs of the play, sorted by name, each with its head and worker (null when not in the play,
          I(partial_ok)); the same on every host. The fleet audit's report reads it.
      type: dict
      sample: {sim01: {head: sim01-head, worker: sim01-worker}}
mismatches:
  description: Every problem found, each with rank, item, expected, actual and message.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={"partial_ok": {"type": "bool", "default": False}},
        supports_check_mode=True,
    )
    module.fail_json(msg="gb10.dspark.pair_topology runs through its action plugin; it cannot run as a plain module")


if __name__ == "__main__":
    main()
