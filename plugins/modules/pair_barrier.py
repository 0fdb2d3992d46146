#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: pair_barrier
short_description: A pair's ranks go on together, a fleet's pairs apart
version_added: 0.1.0
description:
  - An action plugin; it runs on the control node and contacts no host.
  - The collection's plays run without C(any_errors_fatal), so that one pair's failure is never another's. A rank
    that fails or is unreachable leaves the play at once (Ansible drops it from C(ansible_play_hosts)); this task,
    placed before each step that changes a rank, fails the other rank of its pair (the topology's
    C(dspark_pair_members)) with a message naming the pair, the step and the rank that left. The pair's lock is then
    released and nothing more is changed on it; every other pair goes on.
  - With I(max_failed_pairs), it also refuses to start a batch (the play's C(serial)) once more pairs of the play
    have failed than the budget allows; each rank of the batch fails with the pairs that failed and the budget.
  - A failure that concerns the whole run (the control node's pin, manifest, tree or archive, an inventory that
    does not form pairs) is a C(run_once) or C(any_errors_fatal) task of its own and stops every pair.
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._attributes.action
options:
  before:
    description: The step the barrier guards, for the message (C(the image load)).
    type: str
    default: the next step
  max_failed_pairs:
    description:
      - The failure budget (C(dspark_fleet_max_failed_pairs)), a count of pairs (C(1)) or a percentage of the
        play's pairs (C('25%')); once more pairs have failed, the batches not yet started are not started. Unset or
        empty, there is no budget.
    type: raw
  canary:
    description:
      - A rollout's canary ranks (C(playbooks/rollout.yml)); the batch starts only when every one of them reached the
        end of the canary play (provision, gate and serving guard; the fact C(__dspark_rollout_canary_passed)).
        Otherwise every rank of the batch fails as not started, naming the canary pair that did not pass, so that no
        other pair is touched. An empty list refuses too.
    type: list
    elements: str
attributes:
  check_mode:
    support: full
    details: Reads the play's hosts only; the same in check mode.
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
  - module: gb10.dspark.pair_topology
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Pair | Both ranks of the pair go on to the image load
  gb10.dspark.pair_barrier:
    before: the image load

- name: Pair | Both ranks, and a batch only while at most one pair failed before it
  gb10.dspark.pair_barrier:
    before: the pair's lock
    max_failed_pairs: 1

- name: Rollout | The canary passed (otherwise no other pair is touched)
  gb10.dspark.pair_barrier:
    before: the release's image
    canary: "{{ groups['__dspark_rollout_canary'] | default([]) }}"
"""

RETURN = r"""
changed:
  description: Always false; nothing is changed.
  returned: always
  type: bool
  sample: false
not_started:
  description: True when the failure budget, or a rollout's canary that did not pass, keeps this rank's batch from starting.
  returned: when the budget is exceeded or the canary did not pass
  type: bool
  sample: true
msg:
  description: Why the rank stops, or that both ranks go on.
  returned: always
  type: str
  sample: >-
    rank sim02-head: pair sim02 stops before the image load: rank sim02-worker of the pair failed or was
    unreachable, expected both ranks in the run (no other pair is affected)
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={"before": {"type": "str", "default": "the next step"}, "max_failed_pairs": {"type": "raw"},
                       "canary": {"type": "list", "elements": "str"}},
        supports_check_mode=True,
    )
    module.fail_json(msg="gb10.dspark.pair_barrier runs through its action plugin; it cannot run as a plain module")


if __name__ == "__main__":
    main()
