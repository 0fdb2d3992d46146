# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet audit's verdict documents of the play's pairs, FAILED where a rank could not be judged, and the pairs
the report expects, as Jinja filters over the topology's one mapping of the play's pairs (dspark_play_pairs); the
logic is in module_utils/fleet/_audit_verdict.py."""
from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._audit_verdict import (
    expected_pairs as _expected_pairs,
    fleet_verdicts as _fleet_verdicts,
)


def _pairs(pairs, name: str) -> Mapping:
    if not isinstance(pairs, Mapping) or not all(isinstance(m, Mapping) for m in pairs.values()):
        raise AnsibleFilterError(f"{name}: the input must be the play's pairs (dspark_play_pairs)")
    return pairs


def fleet_verdicts(pairs, hostvars):
    """``dspark_play_pairs | gb10.dspark.fleet_verdicts(hostvars)``."""
    pairs = _pairs(pairs, "fleet_verdicts")
    if not isinstance(hostvars, Mapping):
        raise AnsibleFilterError("fleet_verdicts: the argument must be hostvars")
    ranks = {}
    for members in pairs.values():
        for host in (members.get("head"), members.get("worker")):
            hv = hostvars.get(host) if host else None
            if isinstance(hv, Mapping):
                ranks[host] = {"verdict": hv.get("dspark_audit_verdict"), "failure": hv.get("dspark_audit_failure")}
    return _fleet_verdicts(pairs, ranks)


def fleet_expected_pairs(pairs):
    """``dspark_play_pairs | gb10.dspark.fleet_expected_pairs``."""
    return _expected_pairs(_pairs(pairs, "fleet_expected_pairs"))


class FilterModule:
    def filters(self):
        return {"fleet_verdicts": fleet_verdicts, "fleet_expected_pairs": fleet_expected_pairs}
