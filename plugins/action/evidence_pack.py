# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Assemble a pair's evidence pack on the control node in the controller's worker process, elsewhere through the
module (plugin_utils/_control_node_check.py); the options, check and diff mode and the result are the module's,
and no value of a secret option appears in the result."""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence_pack import ARGUMENT_SPEC, pack
from ansible_collections.gb10.dspark.plugins.plugin_utils._control_node_check import ControlNodeCheck


class ActionModule(ControlNodeCheck):
    ARGUMENT_SPEC = ARGUMENT_SPEC
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def check(self, params: dict) -> dict:
        return pack(params, check_mode=bool(self._task.check_mode), diff=bool(self._task.diff))
