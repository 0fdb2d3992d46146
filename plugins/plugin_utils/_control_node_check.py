# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action side of a read-only check that reads the control node (``runtime_manifest``, ``wrapper_tree``).

The roles run these checks on the control node (``delegate_to: localhost``, ``become: false``). There, the action
calls the check's function in the controller's worker process, the one the module calls, with the module's
argument spec: no module is built, shipped or started in a second Python (about 0.2 s of CPU per task, in every run
of every pair). Anywhere else (a rank, a task that becomes another user, an async task) the module runs as
usual, so the check reads the files of the host it names. Either way the result is the same mapping
(``module_utils/identity/_identity.outcome``).
"""
from __future__ import annotations

import json

from ansible.plugins.action import ActionBase


class ControlNodeCheck(ActionBase):
    """Subclasses set :attr:`ARGUMENT_SPEC` (the module's) and :meth:`check` (validated options -> task result)."""

    TRANSFERS_FILES = False
    _supports_async = True  # as the module does: an async task ships it
    ARGUMENT_SPEC: dict = {}

    def check(self, params: dict) -> dict:
        raise NotImplementedError

    def on_control_node(self) -> bool:
        """The task runs here, as this user, synchronously: the module would read what this process reads."""
        return (getattr(self._connection, "transport", None) == "local" and not self._connection.become
                and not self._task.async_val)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        if not self.on_control_node():
            wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
            result.update(self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        _unused, params = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        # A JSON round trip hands the check plain values, as a module receives them (templated values carry tags).
        result.update(self.check(json.loads(json.dumps(params))))
        return result
