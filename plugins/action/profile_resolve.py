# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resolve a serving profile in the controller's worker process: the same options and result as the
profile_resolve module, without shipping and starting a module for what is pure computation on the
control node (a fleet audit resolves once per rank)."""
from __future__ import annotations

import json

from ansible.plugins.action import ActionBase

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError, refused
from ansible_collections.gb10.dspark.plugins.module_utils.engine._profile import RESOLVE_ARGUMENT_SPEC, build


def resolve(args: dict) -> dict:
    """The module's result for ``args`` (validated options): the resolution, or its failure."""
    # A JSON round trip hands build() plain values, as a module receives them: templated values
    # carry tags, and the departure check compares types.
    plain = json.loads(json.dumps(args))
    try:
        return {"changed": False, **build(**plain)}
    except (IdentityError, CheckError) as exc:
        return refused(exc)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(RESOLVE_ARGUMENT_SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _unused, args = self.validate_argument_spec(argument_spec=RESOLVE_ARGUMENT_SPEC)
        result.update(resolve(args))
        return result
