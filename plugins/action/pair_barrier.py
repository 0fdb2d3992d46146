# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A pair's ranks go on together, and a fleet's pairs apart: before a step that changes a rank, the rank stops if
the other rank of its pair has left the play (failed or unreachable); at the start of a batch, every rank of the
batch stops when more pairs failed than the failure budget allows. Runs on the control node only."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import barrier, budget_problem
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._rollout import canary_problem


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("before", "max_failed_pairs", "canary"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        me = str(task_vars.get("inventory_hostname"))
        before = str(self._task.args.get("before") or "the next step")
        result["changed"] = False
        try:
            problem = budget_problem(task_vars.get("ansible_play_hosts_all"), task_vars.get("ansible_play_hosts"),
                                     task_vars.get("ansible_play_batch"), task_vars.get("hostvars") or {},
                                     self._task.args.get("max_failed_pairs"))
        except ValueError as exc:  # a budget that is neither a count nor a percentage: refused on every rank
            result.update(failed=True, msg=f"rank {me}: {exc}")
            return result
        if not problem and self._task.args.get("canary") is not None:  # a rollout: its canary must have passed
            problem = canary_problem(task_vars.get("ansible_play_batch"), self._task.args.get("canary"),
                                     task_vars.get("hostvars") or {})
        if problem:  # the budget: this batch does not start (the run's pair summary says NOT STARTED)
            result.update(failed=True, msg=problem, not_started=True)
            return result
        pair, split = barrier(me, task_vars, before)
        if split:
            result.update(failed=True, msg=split)
        else:
            result["msg"] = f"pair {pair}: both ranks go on to {before}"
        return result
