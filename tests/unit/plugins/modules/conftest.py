"""Run a gb10.dspark module's ``main()`` in-process and capture what it returns.

    result = run_module(image_identity, {"path": ...}, check_mode=True, diff=True)
    assert result["failed"] is False

``result`` is the dict the module passed to ``exit_json`` or ``fail_json``, with ``failed``
always present.
"""
from __future__ import annotations

import json
from types import ModuleType
from unittest import mock

import pytest
from ansible.module_utils import _internal as module_utils_internal
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class _Exit(Exception):
    def __init__(self, result: dict):
        super().__init__(result.get("msg", ""))
        self.result = result


def run_module(module: ModuleType, args: dict, check_mode: bool = False, diff: bool = False) -> dict:
    full = dict(args)
    full["_ansible_check_mode"] = check_mode
    full["_ansible_diff"] = diff

    def _exit(self, **kwargs):
        kwargs.setdefault("failed", False)
        kwargs.setdefault("changed", False)
        raise _Exit(kwargs)

    def _fail(self, msg, **kwargs):
        kwargs["failed"] = True
        kwargs["msg"] = msg
        raise _Exit(kwargs)

    # A module runs on the target, where module_utils warnings are collected into the result. Any test
    # that imports controller code (a filter plugin, ansible.errors) flips this flag for the whole process.
    with patch_module_args(full), \
            mock.patch.object(module_utils_internal, "is_controller", False), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail):
        try:
            module.main()
        except _Exit as done:
            json.dumps(done.result, default=str)  # what a module returns must serialise
            return done.result
    raise AssertionError(f"{module.__name__}.main() returned without exit_json or fail_json")


@pytest.fixture(name="run_module")
def _run_module_fixture():
    return run_module
