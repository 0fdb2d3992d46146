# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Add the files a role just wrote on the control node to this run's evidence list."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence_run import RUN_FILES_FACT, record_result


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("files",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        files = self._task.args.get("files") or []
        if not isinstance(files, list):
            result.update(failed=True, msg=f"files must be a list, got {type(files).__name__}")
            return result
        # Check mode changes nothing, on the control node either: an entry this action would write (its content
        # given) is neither written nor recorded; files already there are recorded as always (in memory only).
        unwritten = [str(f.get("name")) for f in files if self._task.check_mode and isinstance(f, dict) and "content" in f]
        if unwritten:
            files = [f for f in files if not (isinstance(f, dict) and "content" in f)]
        recorded = record_result(self._templar.template(task_vars.get(RUN_FILES_FACT, [])), files)
        result.update(recorded)
        if recorded.get("failed"):
            return result
        result["changed"] = False
        result["msg"] = (f"recorded {', '.join(r['name'] for r in recorded['recorded']) or 'nothing'}"
                         + (f"; not written by this run: {', '.join(recorded['missing'])}" if recorded["missing"] else "")
                         + (f"; check mode: not written: {', '.join(unwritten)}" if unwritten else ""))
        return result
