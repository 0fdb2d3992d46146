# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the schema-3 runtime gate suite for one pair on the control node and hand its verdict to the play
as this task's result (module_utils/gate/_gate_run.py); the files it wrote join the run's evidence list.

A FAIL verdict is a result (``passed: false``), not a failed task: Ansible drops the facts of a failed task, and
the evidence pack must keep a failing gate's document. The role fails the pair on ``passed`` right after."""
from __future__ import annotations

import os

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gb10.dspark.plugins.module_utils.gate import _gate_run
from ansible_collections.gb10.dspark.plugins.module_utils.common import _site
from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence_run import RUN_FILES_FACT, record_result

display = Display()
SPEC = _gate_run.ARGUMENT_SPEC


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _unused, args = self.validate_argument_spec(argument_spec=SPEC)
        if self._task.check_mode:
            result.update(changed=False, skipped=True,
                          msg=f"pair {args['pair']}: the runtime gate is skipped in check mode (it inspects a serving "
                              "engine, which check mode did not start)")
            return result
        # The key comes from the task's variables, never from an option, so that this task's verdict can be
        # shown (an option holding it would need no_log); it reaches the suite in memory only.
        api_key = None
        if _site.has_api_key(task_vars, self._templar.template):
            api_key = str(self._templar.template(task_vars["dspark_api_key"]))
        # The suite runs in this worker process (forked for this task alone); its Ansible calls to the ranks
        # inherit these two from here.
        os.environ["ANSIBLE_CONFIG"] = args["ansible_config"]
        os.environ["ANSIBLE_COLLECTIONS_PATH"] = args["collections_path"]
        ran = _gate_run.run(args["pair"], args["folder"], args["config"], hosts=args["hosts"],
                            inventory=args["inventory"], suite=args["suite"], api_key=api_key)
        files = [{"name": _gate_run.OUTPUT_FILE, "src": ran["output"], "kind": "gate"},
                 {"name": _gate_run.CONFIG_FILE, "src": ran["config_file"], "kind": "other"}]
        recorded = record_result(self._templar.template(task_vars.get(RUN_FILES_FACT, [])), files)
        if recorded.get("failed"):
            result.update(recorded)
            return result
        document = ran["document"] or {}
        result.update(changed=False, failed=ran["failed"], passed=ran["passed"], msg=ran["msg"],
                      status=document.get("status"), errors=list(document.get("errors") or []), output=ran["output"],
                      rc=ran["rc"], ansible_facts=recorded["ansible_facts"])
        if ran["line"]:
            display.display(f"[{task_vars.get('inventory_hostname', '?')}] {ran['line']}")
        return result
