# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pair's topology, worked out once per play from the play's hosts (its one caller is the topology role,
which the roles that need it get as a dependency): runs on the control node only. It also
refuses an API key that could not be sent as a header (a trailing newline), naming the variable, never the value."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import failure
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import half_pairs, host_records, play_pairs, topology
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import api_key_problem


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("partial_ok",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        partial_ok = bool(self._task.args.get("partial_ok", False))
        me = task_vars.get("inventory_hostname")
        hostvars = task_vars.get("hostvars") or {}
        play = task_vars.get("ansible_play_hosts_all") or [me]
        records = host_records(play, hostvars)
        groups = task_vars.get("groups") or {}
        # A pair with one rank in the play: is the other in the inventory (a --limit) or not at all (a slice
        # of a sliced AWX job)? Only then are the other hosts' variables read (a whole fleet's play reads none).
        outside = None
        if half_pairs(records):
            in_play = set(play)
            outside = host_records([h for h in groups.get("all") or [] if h not in in_play], hostvars)
        facts, problems = topology(records, {g: list(groups.get(g) or []) for g in ("dspark_heads", "dspark_workers")},
                                   partial_ok=partial_ok, outside=outside)
        result["changed"] = False
        result["mismatches"] = [m.as_dict() for m in problems]
        if problems:
            result.update(failed=True, **failure(problems))
            return result
        # The first step of every chain, on the control node: a key that could not be sent as a header is
        # refused here, before any rank is touched (http.client would print it in its error text).
        key_problem = api_key_problem(hostvars[me].get("dspark_api_key") if me in hostvars else None)
        if key_problem:
            result.update(failed=True, msg=f"rank {me}: {key_problem}")
            return result
        mine = facts[me]
        result["ansible_facts"] = {
            "dspark_pair_head": mine["head"],
            "dspark_pair_worker": mine["worker"],
            "dspark_pair_members": mine["members"],
            "dspark_pair_head_fabric_ip": mine["head_fabric_ip"],
            "dspark_play_pairs": play_pairs(facts),
        }
        result["msg"] = (f"pair {mine['pair']}: head {mine['head'] or 'not in the play'}, "
                         f"worker {mine['worker'] or 'not in the play'}")
        return result
