"""playbooks/guard.yml on the simulator: a healthy pair passes; the stand-in's wrong-usage,
die-after-N and slow-token faults fail it, naming the request and the field; an over-time run
stops at its bound."""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import yaml

from simhelpers import INVENTORY, ansible, container_inspect, container_state, on_rank, playbook, site


def guard(pair, *extra: str, check: bool = False):
    return ansible("playbooks/guard.yml", "--limit", pair.group, *extra, tool="ansible-playbook", check=check,
                   timeout=900)


def report(pair) -> dict:
    return json.loads((Path(site()["dspark_evidence_dir"]) / f"sim{pair.index:02d}" / "serving-guard.json").read_text())


def flat(res) -> str:
    return " ".join((res.stdout + res.stderr).split())


def serve_with(pair, clean_tree, host_vars, env: dict):
    """(Re)start the pair with the stand-in's knobs on the head; the gate may fail on a fault."""
    host_vars(pair.head, {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "1", **env}})
    return playbook("provision.yml", clean_tree, "--limit", pair.group, check=False)


def test_guard_passes_on_a_healthy_pair(pair_a, clean_tree):
    pair = pair_a
    playbook("provision.yml", clean_tree, "--limit", pair.group)
    res = guard(pair, check=True)
    doc = report(pair)
    assert doc["status"] == "PASS" and doc["requests"] == 64 and doc["failed_requests"] == 0
    assert doc["accuracy"]["correct"] == doc["accuracy"]["total"] == 16
    assert {c["usage"]["completion_tokens"] for c in doc["completions"] if c["finish_reason"] == "length"} == {128}
    assert "133" in res.stdout  # the completions (7 x 19 among them) are printed for review


@pytest.mark.fault("wrong-usage")
def test_wrong_usage_fails_naming_request_and_field(pair_b, clean_tree, host_vars):
    pair = pair_b
    serve_with(pair, clean_tree, host_vars, {"DSPARK_SIM_FAULT": "wrong_usage"})
    res = guard(pair)
    assert res.returncode != 0
    assert "serving guard FAIL" in flat(res)
    assert "request 01: usage.total_tokens is" in flat(res) or "request 01: usage.prompt_tokens is" in flat(res)
    assert report(pair)["failed_requests"] == 64


@pytest.mark.fault("guard-engine-dies")
def test_an_engine_that_dies_after_n_requests_fails_the_guard(pair_b, clean_tree, host_vars):
    pair = pair_b
    serve_with(pair, clean_tree, host_vars, {"DSPARK_SIM_FAULT": "die_after_requests", "DSPARK_SIM_DIE_AFTER_REQUESTS": "20"})
    res = guard(pair, "-e", "dspark_guard_request_timeout=20", "-e", "dspark_guard_overall_timeout=120")
    assert res.returncode != 0
    doc = report(pair)
    assert 0 < doc["failed_requests"] < 64
    assert any("HTTP status is 500" in e or "transport" in e for e in doc["errors"])


def test_slow_tokens_stop_at_the_bound(pair_a, clean_tree, host_vars):
    pair = pair_a  # pair 1's lane: the lanes' times kept about even (docs/TESTS.md)
    # the guard's contract prompts are slow, the runtime gate's canaries at the provision are not
    serve_with(pair, clean_tree, host_vars, {"DSPARK_SIM_FAULT": "slow_tokens", "DSPARK_SIM_TOKEN_DELAY_S": "0.2",
                                             "DSPARK_SIM_TOKEN_DELAY_MATCH": "write a plain description"})
    res = guard(pair, "-e", "dspark_guard_request_timeout=10", "-e", "dspark_guard_overall_timeout=30")
    assert res.returncode != 0
    doc = report(pair)
    assert doc["elapsed_s"] < 60
    assert any("time bound" in e or "transport" in e for e in doc["errors"])
    # the requests cut at the bound are aborted on the head (drained's note): the pair's next test starts on an
    # idle head, not on one the busy check must refuse to replace
    assert drained(pair) == 0


def in_flight(pair) -> int:
    """vllm:num_requests_running + vllm:num_requests_waiting on the head, as the busy check reads them; 0 when
    nothing listens on the head's port (an engine that died serves nothing)."""
    try:
        with urllib.request.urlopen(f"http://{pair.head.mgmt_ip}:8888/metrics", timeout=10) as r:
            text = r.read().decode()
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return 0
        raise
    return int(sum(float(v) for v in re.findall(r"^vllm:num_requests_(?:running|waiting)\{[^}]*\} (\S+)$", text, re.M)))


def drained(pair, bound_s: float = 120) -> int:
    """Wait (on the head's own counts) until it serves nothing: a guard that ended at its bound has closed its
    last requests' connections, and the stand-in, as vLLM, aborts a request whose client has gone (within one
    token's delay)."""
    deadline = time.monotonic() + bound_s
    while (left := in_flight(pair)) and time.monotonic() < deadline:
        time.sleep(1)
    return left


def labelled(rank) -> list[str]:
    out = on_rank(rank, ["docker", "container", "ls", "--all", "--filter", "label=io.gb10.dspark.pair",
                         "--format", "{{.Names}}"]).stdout
    return sorted(out.split())


def test_ci_guard_takes_the_model_dir_from_the_runner_and_removes_leftovers(pair_b, clean_tree):
    pair = pair_b
    model_dir = site()["dspark_model_dir"]
    image = yaml.safe_load((INVENTORY / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]["image_id"]
    on_rank(pair.head, ["docker", "container", "rm", "--force", "dspark_guard_leftover"], check=False)
    on_rank(pair.head, ["docker", "container", "create", "--name", "dspark_guard_leftover",
                        "--label", "io.gb10.dspark.pair=sim02", image])
    assert "dspark_guard_leftover" in labelled(pair.head)

    # a wrong directory on the runner stops the job before anything changes
    bad = playbook("guard_ci.yml", clean_tree, "--limit", pair.group, check=False,
                   env={"DSPARK_MODEL_DIR": "/srv/no-such-model"})
    assert bad.returncode != 0
    assert "/srv/no-such-model" in flat(bad)
    assert "dspark_guard_leftover" in labelled(pair.head)

    # The module's previous test on this pair left its head with a stand-in fault (a rank-local extra env,
    # the engine dead or still finishing the requests its guard cut off); the CI job's provision removes that
    # variable, and a removed variable replaces the engine - once no request is left in flight (the busy
    # check refuses to cut them off).
    assert drained(pair) == 0
    faulty = [e for e in container_inspect(pair.head)["Config"]["Env"] if e.startswith("DSPARK_SIM_FAULT=")]
    started = container_state(pair.head)["StartedAt"]
    ok = playbook("guard_ci.yml", clean_tree, "--limit", pair.group, env={"DSPARK_MODEL_DIR": model_dir})
    assert "serving guard PASS" in flat(ok)
    assert not [e for e in container_inspect(pair.head)["Config"]["Env"] if e.startswith(("DSPARK_SIM_FAULT=", "DSPARK_SIM_TOKEN_DELAY"))]
    assert not faulty or container_state(pair.head)["StartedAt"] != started, "the engine kept a removed variable"

    assert labelled(pair.head) == ["dspark_vllm"]
    assert report(pair)["status"] == "PASS" and report(pair)["context"]["profile"] == "production"
