# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Add the files a role just wrote on the control node to this run's evidence list."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError, failure
from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence_run import record_run_files, write_run_contents

FACT = "dspark_evidence_run_files"


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
        existing = self._templar.template(task_vars.get(FACT, []))
        try:
            run_files, recorded, missing = record_run_files(existing, write_run_contents(files))
        except IdentityError as exc:
            result.update(failed=True, **failure(exc.mismatches))
            return result
        except CheckError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(changed=False, recorded=recorded, missing=missing, mismatches=[],
                      ansible_facts={FACT: run_files})
        result["msg"] = (f"recorded {', '.join(r['name'] for r in recorded) or 'nothing'}"
                         + (f"; not written by this run: {', '.join(missing)}" if missing else ""))
        return result
