# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A release rollout's canary and waves from the play's hosts (playbooks/rollout.yml); the logic is in
module_utils/fleet/_rollout.py."""
from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import host_records
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._rollout import plan


def rollout_plan(hosts, hostvars, canary_pairs=1, wave_pairs=1):
    """``ansible_play_hosts_all | gb10.dspark.rollout_plan(hostvars, canary_pairs, wave_pairs)``."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("rollout_plan: the input must be the play's hosts (ansible_play_hosts_all)")
    if not isinstance(hostvars, Mapping):
        raise AnsibleFilterError("rollout_plan: the first argument must be hostvars")
    try:
        return plan(host_records([str(h) for h in hosts], hostvars), canary_pairs, wave_pairs)
    except ValueError as exc:
        raise AnsibleFilterError(f"rollout_plan: {exc}") from None


class FilterModule:
    def filters(self):
        return {"rollout_plan": rollout_plan}
