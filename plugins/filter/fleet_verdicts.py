# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet audit's verdict documents of the play's pairs, FAILED where a rank could not be judged, as a
Jinja filter (the logic is in module_utils/fleet/_audit_verdict.py)."""
from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._audit_verdict import fleet_verdicts as _fleet_verdicts


def fleet_verdicts(hosts):
    """``ansible_play_hosts_all | map('extract', hostvars) | gb10.dspark.fleet_verdicts``."""
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, Mapping) for h in hosts):
        raise AnsibleFilterError("fleet_verdicts: the input must be a list of hosts' variables")
    return _fleet_verdicts([{"pair": h.get("dspark_pair"), "rank": h.get("dspark_rank"),
                             "verdict": h.get("dspark_audit_verdict"), "failure": h.get("dspark_audit_failure")}
                            for h in hosts])


class FilterModule:
    def filters(self):
        return {"fleet_verdicts": fleet_verdicts}
