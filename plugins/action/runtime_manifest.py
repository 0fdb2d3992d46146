# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a runtime manifest on the control node in the controller's worker process, elsewhere through the module
(plugin_utils/_control_node_check.py); the options and the result are the module's."""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.identity._runtime_manifest import ARGUMENT_SPEC, check
from ansible_collections.gb10.dspark.plugins.plugin_utils._control_node_check import ControlNodeCheck


class ActionModule(ControlNodeCheck):
    ARGUMENT_SPEC = ARGUMENT_SPEC
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def check(self, params: dict) -> dict:
        return check(params)
