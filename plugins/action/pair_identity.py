# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare the ranks of each pair on the control node in the controller's worker process, elsewhere through the
module (plugin_utils/_control_node_check.py); the options and the result are the module's."""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import PAIR_IDENTITY_SPEC, check_pair_identity
from ansible_collections.gb10.dspark.plugins.plugin_utils._control_node_check import ControlNodeCheck


class ActionModule(ControlNodeCheck):
    ARGUMENT_SPEC = PAIR_IDENTITY_SPEC
    _VALID_ARGS = frozenset(PAIR_IDENTITY_SPEC)

    def check(self, params: dict) -> dict:
        return check_pair_identity(params)
