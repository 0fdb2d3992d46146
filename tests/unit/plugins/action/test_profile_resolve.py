"""The profile_resolve action plugin resolves in the controller's worker process and returns what the
module returns: the same launch for both ranks, the same failures, plain values from tagged input, and
the module's argument spec (a bad rank or an unknown option is refused)."""
from __future__ import annotations

from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.gb10.dspark.plugins.action import profile_resolve as action
from ansible_collections.gb10.dspark.plugins.modules import profile_resolve as module
from tests.unit.plugins.action._plugin import make_plugin
from tests.unit.plugins.modules.conftest import run_module
from tests.unit.plugins.modules.test_profile_resolve import args


def run_action(task_args: dict, check_mode: bool = False) -> dict:
    plugin = make_plugin(action.ActionModule, "gb10.dspark.profile_resolve", task_args, check_mode)
    plugin._execute_module = mock.MagicMock(side_effect=AssertionError("no module may be shipped"))
    return plugin.run(task_vars={"inventory_hostname": "head-a"})


def same_keys(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("invocation", "_ansible_no_log")}


@pytest.mark.parametrize("case", [
    args(0), args(1, extra_env={"DSPARK_SIM_STARTUP_DELAY_S": "1"}),
    args(0, master_port=29501, api_port=8000),
    args(0, overrides={"max_num_seqs": 8}, allow_experimental=True),
    args(0, extra_env={"VLLM_FOO": "1", "DSPARK_SIM_FAULT": "slow_tokens"}, allow_experimental=True),
])
def test_the_action_returns_what_the_module_returns(case):
    got = same_keys(run_action(case))
    want = same_keys(run_module(module, case))
    assert got.get("failed", False) is False and want["failed"] is False
    for key in ("argv", "env", "env_file", "compilation_config_json", "profile_sha256", "departures",
                "experimental", "manifest_expectations", "profile"):
        assert got[key] == want[key], key
    assert got["changed"] is False


@pytest.mark.parametrize("case", [
    args(overrides={"max_num_seqs": 8}),
    args(1, name="long-1m", overrides={"max_num_batched_tokens": 16384, "compilation_config": {"mode": 3}},
         allow_experimental=True, head_fabric_ip="head01"),
    args(name="prod"),
    args(1, extra_env={"LD_PRELOAD": "/tmp/x.so", "VLLM_FOO": "1"}),
])
def test_a_refusal_is_the_modules_refusal(case):
    got, want = run_action(case), run_module(module, case)
    assert got["failed"] is True and want["failed"] is True
    assert got["msg"] == want["msg"]
    assert got["mismatches"] == want["mismatches"]
    assert got["changed"] is False


class TaggedStr(str):
    """Stands in for a templated string that carries Ansible's tags (a str subclass)."""


class TaggedInt(int):
    """Stands in for a templated integer that carries Ansible's tags (an int subclass)."""


def test_tagged_values_are_compared_as_plain_values():
    # An override equal to the qualified value is no departure, whatever class carries it; the
    # departure check compares types, so a tagged 16 against the catalog's 16 must not count.
    base = args(0)
    got = run_action({**base, "name": TaggedStr("production"), "overrides": {"max_num_seqs": TaggedInt(16), "performance_mode": TaggedStr("balanced")}})
    assert got.get("failed", False) is False, got.get("msg")
    assert got["departures"] == [] and got["experimental"] is False
    assert got["profile_sha256"] == run_action(base)["profile_sha256"]


def test_the_argument_spec_is_the_modules():
    with pytest.raises(AnsibleActionFail, match="rank"):
        run_action({**args(1), "rank": 2})
    with pytest.raises(AnsibleActionFail, match="Invalid options for gb10.dspark.profile_resolve: colour"):
        run_action({**args(0), "colour": "blue"})


def test_check_mode_changes_nothing_and_resolves_the_same():
    assert same_keys(run_action(args(1), check_mode=True)) == same_keys(run_action(args(1)))
