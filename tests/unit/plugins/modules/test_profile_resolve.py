# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gb10.dspark.profile_resolve end to end: the role's catalog and the sample pin in, one rank's launch out."""
from __future__ import annotations

import json

import pytest
import yaml

from ansible_collections.gb10.dspark.plugins.modules import profile_resolve
from tests.unit.plugins.conftest import REPO

CATALOG = yaml.safe_load((REPO / "roles" / "profile" / "vars" / "main.yml").read_text())["__dspark_profile_catalog"]
PIN = yaml.safe_load((REPO / "inventories" / "sample" / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]


def args(rank: int = 0, **changes) -> dict:
    base = {
        "catalog": CATALOG, "name": "production", "pin": PIN, "rank": rank,
        "eth_if": ["enp1s0f0np0", "enp1s0f1np1"][rank], "ib_hca": ["rocep1s0f0", "rocep1s0f1"][rank],
        "head_fabric_ip": "10.232.1.1", "served_model_name": "deepseek-v4-flash-dspark",
    }
    base.update(changes)
    return base


def _env_file(text: str) -> dict:
    return dict(line.split("=", 1) for line in text.splitlines())


@pytest.mark.parametrize("rank", [0, 1])
def test_resolves_one_rank(run_module, rank):
    result = run_module(profile_resolve, args(rank, extra_env={"DSPARK_SIM_STARTUP_DELAY_S": "1"}))
    assert result["failed"] is False and result["changed"] is False
    assert result["profile"]["name"] == "production" and result["experimental"] is False
    assert result["departures"] == []
    argv = result["argv"]
    assert argv[:3] == ["vllm", "serve", "/model"]
    assert argv.count("--compilation-config") == 1
    assert argv[argv.index("--compilation-config") + 1] == result["compilation_config_json"]
    assert json.loads(result["compilation_config_json"]) == CATALOG["production"]["compilation_config"]
    assert ("--headless" in argv) is (rank == 1) and ("--port" in argv) is (rank == 0)
    assert argv[argv.index("--master-port") + 1] == "25000"
    assert _env_file(result["env_file"]) == result["env"]
    assert result["env"]["NODE_RANK"] == str(rank) and result["env"]["DSPARK_SIM_STARTUP_DELAY_S"] == "1"
    assert result["manifest_expectations"]["max_model_len"] == 327680
    assert len(result["profile_sha256"]) == 64


def test_both_ranks_share_the_profile_sha256_and_check_mode_is_the_same(run_module):
    head = run_module(profile_resolve, args(0))
    worker = run_module(profile_resolve, args(1))
    checked = run_module(profile_resolve, args(1), check_mode=True, diff=True)
    assert head["profile_sha256"] == worker["profile_sha256"]
    assert checked == worker


def test_ports_are_passed_through(run_module):
    result = run_module(profile_resolve, args(0, master_port=29501, api_port=8000))
    argv = result["argv"]
    assert argv[argv.index("--port") + 1] == "8000" and argv[argv.index("--master-port") + 1] == "29501"
    assert result["env"]["MASTER_PORT"] == "29501"


def test_an_experimental_override_is_refused_then_recorded(run_module):
    refused = run_module(profile_resolve, args(overrides={"max_num_seqs": 8}))
    assert refused["failed"] is True
    assert refused["msg"] == ("rank profile production: max_num_seqs is 8, expected 16 "
                              "(departs from the qualified profile; set allow_experimental to run it)")
    assert refused["mismatches"][0]["item"] == "max_num_seqs"
    accepted = run_module(profile_resolve, args(overrides={"max_num_seqs": 8}, allow_experimental=True))
    assert accepted["failed"] is False and accepted["experimental"] is True
    assert accepted["departures"] == [{"key": "max_num_seqs", "qualified": 16, "actual": 8}]
    assert accepted["argv"][accepted["argv"].index("--max-num-seqs") + 1] == "8"


def test_extra_env_cannot_smuggle_the_forbidden_variables(run_module):
    result = run_module(profile_resolve, args(1, allow_experimental=True, extra_env={
        "VLLM_USE_BREAKABLE_CUDAGRAPH": "1", "VLLM_DSV4_ENABLE_MULTI_STREAM": "1", "NODE_RANK": "0"}))
    assert result["failed"] is True
    lines = result["msg"].splitlines()
    assert lines[0] == "3 identity mismatches:"
    assert {m["item"] for m in result["mismatches"]} == {
        "env.VLLM_USE_BREAKABLE_CUDAGRAPH", "env.VLLM_DSV4_ENABLE_MULTI_STREAM", "env.NODE_RANK"}
    assert all(line.startswith("rank profile production: ") for line in lines[1:])


def test_every_violation_is_listed_in_one_failure(run_module):
    result = run_module(profile_resolve, args(
        1, name="long-1m", overrides={"max_num_batched_tokens": 16384, "compilation_config": {"mode": 3}},
        allow_experimental=True, pin={**PIN, "speculative_tokens": 5}, head_fabric_ip="head01"))
    assert result["failed"] is True
    assert {m["item"] for m in result["mismatches"]} == {
        "max_num_batched_tokens", "compilation_config.mode", "mtp_tokens", "head fabric address"}
    assert "rank profile long-1m, rank 1: head fabric address is head01, expected an IP address" in result["msg"]


def test_an_unknown_profile_fails_naming_the_catalog(run_module):
    result = run_module(profile_resolve, args(name="prod"))
    assert result["failed"] is True
    assert result["msg"].startswith("rank profile prod: profile name is prod, expected [breakable-ab, long-1m, production]")


def test_a_rank_outside_the_pair_is_refused_by_the_argument_spec(run_module):
    result = run_module(profile_resolve, {**args(1), "rank": 2})
    assert result["failed"] is True and "rank" in result["msg"] and "0, 1" in result["msg"]
