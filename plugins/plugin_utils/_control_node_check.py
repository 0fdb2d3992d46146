# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action side of the modules that work on the control node (``runtime_manifest``, ``wrapper_tree``,
``pair_identity``, ``evidence_pack``).

The roles run them on the control node (``delegate_to: localhost``, ``become: false``). There, the action
calls the module's own function in the controller's worker process, with the module's argument spec: no module
is built, shipped or started in a second Python (about 0.5 s of CPU per task, in every run of every pair; 2 s of
a converged pair's re-provision). Anywhere else (a rank, a task that becomes another user, an async task) the
module runs as usual, so it reads and writes the host the task names. Either way the result is the same mapping
(``module_utils/identity/_identity.outcome`` for the checks), with no value of a ``no_log`` option in it.
"""
from __future__ import annotations

import json

from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase


class ControlNodeCheck(ActionBase):
    """Subclasses set :attr:`ARGUMENT_SPEC` (the module's) and :meth:`check` (validated options -> task result)."""

    TRANSFERS_FILES = False
    _supports_async = True  # as the module does: an async task ships it
    ARGUMENT_SPEC: dict = {}

    def check(self, params: dict) -> dict:
        """The task result for validated ``params`` (``self._task.check_mode`` and ``self._task.diff`` as the
        module's check and diff mode)."""
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
        validated, params = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        # A JSON round trip hands the check plain values, as a module receives them (templated values carry tags).
        checked = self.check(json.loads(json.dumps(params)))
        # As AnsibleModule does: no value of a no_log option appears anywhere in the result.
        result.update(remove_values(checked, validated._no_log_values))  # pylint: disable=protected-access
        return result
