"""A hung pair on the simulator: a worker stopped (kill -STOP on every process of its engine, so its
container still runs) while idle, during the serving guard and during readiness, and a worker whose
Docker engine goes away during readiness. The stand-in hangs as vLLM does: the head's API keeps
answering /health, /v1/models and /metrics, generation stalls, and only a step that outlives
VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS ends the engine.

The second fleet's first pair (pair_c, lane c, after that fleet's whole-fleet files) is used and provisioned again
with the site's settings at the end."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simhelpers import (ROOT, container_state, evidence_of, freeze, inventory_of, newest_pack, on_rank, pair_playbook,
                        runs, site_of, start_dockerd, stop_dockerd, thaw, wait_for)

LIVENESS_S = 8
EXECUTE_TIMEOUT_S = 25
STALL_S = 15
GUARD_BOUND_S = 12  # the guard's own bound: well inside the engine's execute timeout, so that it is what ends the guard


def provision(pair, tree, *extra: str, check: bool = True):
    return pair_playbook("provision.yml", pair, tree, *extra, check=check)


def flat(res) -> str:
    return " ".join((res.stdout + res.stderr).split())


def audit(pair, tree, report: Path, *extra: str):
    res = pair_playbook("audit.yml", pair, tree, "-e", f"dspark_audit_report_dir={report}",
                        "-e", f"dspark_audit_liveness_timeout={LIVENESS_S}", *extra, check=False)
    return res, json.loads((report / "audit.json").read_text())


def engine_log(rank) -> str:
    res = on_rank(rank, ["docker", "logs", "dspark_vllm"], check=False)
    return res.stdout + res.stderr


def container_id(rank) -> str | None:
    res = on_rank(rank, ["docker", "container", "inspect", "--format", "{{.Id}}", "dspark_vllm"], check=False)
    return res.stdout.strip() if res.returncode == 0 else None


def wait_for_a_new_join(pair, old_head: str | None) -> None:
    """The provision running in the background has replaced the head's engine and its worker joined it."""
    wait_for(lambda: container_id(pair.head) not in (None, old_head) and "Node rank 1 joined" in engine_log(pair.head),
             300, what="a new head and its worker's join")


def engine_env(pair, **extra: str) -> dict:
    return {"dspark_engine_extra_env": {**(site_of(pair).get("dspark_engine_extra_env") or {}), **extra}}


def background(pair, tree, name: str, *extra: str) -> subprocess.Popen:
    """A playbook in its own process group, so that a test can act on the pair while it runs."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.Popen([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory_of(pair.head)),
                             f"playbooks/{name}", "-e", f"dspark_preflight_wrapper_path={tree}", "--limit", pair.group,
                             *extra], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def end(proc: subprocess.Popen) -> None:
    """A background playbook that is still running is killed with every process it started (its
    forks and SSH connections too), so that no fork of it keeps holding the pair's lock."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def pair(pair_c, clean_tree):
    p = pair_c
    provision(p, clean_tree)
    yield p
    provision(p, clean_tree, "-e", "dspark_engine_force_replace=true")  # the site's engine again, serving


@pytest.mark.fault("hung-idle")
def test_a_worker_hung_while_idle_is_hung_in_the_audit_with_the_reason_everywhere(pair, clean_tree, tmp_path):
    pids = freeze(pair.worker)
    try:
        started = time.monotonic()
        res, doc = audit(pair, clean_tree, tmp_path)
        took = time.monotonic() - started
        assert res.returncode == 2, res.stdout[-3000:]
        assert took < LIVENESS_S + 60, took
        entry = doc["pairs"][0]
        assert entry["verdict"] == "HUNG", entry
        reason = (f"rank {pair.head.name}: generation is stalled, expected one token "
                  f"(the API answers, but no token came within {LIVENESS_S} s)")
        assert entry["reasons"] == [reason]
        for name in ("audit.md", "audit.txt"):
            assert reason in (tmp_path / name).read_text(), name
        assert reason in (tmp_path / "audit.html").read_text()
        assert reason in flat(res)
        assert "HUNG" in flat(res) and f"{pair.group.removeprefix('pair_')} not OK" in flat(res)
        # both ranks' last log lines, in every format: the frozen worker's last line is its log's last line
        last = on_rank(pair.worker, ["docker", "logs", "--tail", "1", "dspark_vllm"])
        assert entry["logs"]["worker"][-1] == (last.stdout + last.stderr).strip(), entry["logs"]
        assert entry["logs"]["head"], entry["logs"]
        assert f"    {entry['logs']['worker'][-1]}" in (tmp_path / "audit.md").read_text()
        assert '<pre class="logs" data-rank="worker">' in (tmp_path / "audit.html").read_text()
        assert f"worker {pair.worker.name} logged: {entry['logs']['worker'][-1]}" in (tmp_path / "audit.txt").read_text()
        assert container_state(pair.head)["Running"] and container_state(pair.worker)["Running"]
    finally:
        thaw(pids)
    # the stalled request finishes once the worker runs again; the pair is OK again
    res, doc = audit(pair, clean_tree, tmp_path)
    assert res.returncode == 0 and doc["pairs"][0]["verdict"] == "OK", res.stdout[-3000:]


@pytest.mark.fault("hung-guard", "guard-hung-bound")
def test_a_worker_hung_during_the_guard_names_the_head_and_the_engine_dies_at_its_execute_timeout(
        pair, clean_tree, host_vars, tmp_path):
    # vLLM's own variable is an engine setting: a departure from the qualified profile, allowed for this test
    env = dict(engine_env(pair, DSPARK_SIM_TOKEN_DELAY_S="0.05", VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=str(EXECUTE_TIMEOUT_S)),
               dspark_profile_allow_experimental=True)
    host_vars(pair.head, env)
    host_vars(pair.worker, env)
    provision(pair, clean_tree)
    before = runs(pair)
    guard_report = evidence_of(pair) / "serving-guard.json"
    guard_report.unlink(missing_ok=True)
    # each request may wait 300 s (the default): only the guard's own bound can end it in time
    guard = background(pair, clean_tree, "guard.yml", "-e", f"dspark_guard_overall_timeout={GUARD_BOUND_S}")
    pids: list[int] = []
    try:
        time.sleep(4)  # the guard is in its first waves
        pids = freeze(pair.worker)
        out, _unused = guard.communicate(timeout=600)
    finally:
        end(guard)
    text = " ".join(out.split())
    assert guard.returncode != 0, out[-3000:]
    stalled = (rf"head {re.escape(pair.head.name)}: POST http://{re.escape(pair.head.mgmt_ip)}:8888/v1/completions "
               r"took the request but sent no answer within [\d.]+ s: the engine is stalled \(hung\)")
    assert re.search(stalled, text), out[-4000:]
    # the guard ended at its own bound (not Ansible's backstop a minute later), its report written: every
    # request answered or listed unanswered, those in flight named with the head, its address and the state
    assert "Timed out after" not in text, out[-4000:]
    assert f"the run hit its time bound of {GUARD_BOUND_S} s before every request finished" in text, out[-4000:]
    doc = json.loads(guard_report.read_text())
    assert doc["status"] == "FAIL" and doc["elapsed_s"] < GUARD_BOUND_S + 6, doc["elapsed_s"]
    unanswered = {u["request"]: u for u in doc["unanswered"]}
    answered = {c["request"] for c in doc["completions"] if c["usage"] is not None}
    assert answered | set(unanswered) == {f"{i:02d}" for i in range(1, 65)} and not answered & set(unanswered)
    waited = [u for u in unanswered.values() if u["sent"]]
    assert 0 < len(waited) <= 8, doc["unanswered"]  # 8 in flight at most (dspark_guard_concurrency)
    assert all(re.match(stalled, u["reason"]) for u in waited), waited
    # the guard's evidence pack holds both ranks' logs: the frozen worker's ends where it stopped
    pack = newest_pack(pair, before)
    last = on_rank(pair.worker, ["docker", "logs", "--tail", "1", "dspark_vllm"])
    assert (pack / "logs" / "worker.log").read_text().splitlines()[-1] == (last.stdout + last.stderr).strip()
    assert (pack / "logs" / "head.log").read_text().strip()
    # vLLM's own bound: the head's engine dies once a step has waited the execute timeout
    wait_for(lambda: not container_state(pair.head)["Running"], EXECUTE_TIMEOUT_S + 60, what="the head to exit")
    logs = engine_log(pair.head)
    assert f"TimeoutError: RPC call to sample_tokens timed out after {EXECUTE_TIMEOUT_S} s" in logs
    thaw(pids)
    wait_for(lambda: not container_state(pair.worker)["Running"], 30, what="the worker to follow its head")
    res, doc = audit(pair, clean_tree, tmp_path)
    entry = doc["pairs"][0]
    assert res.returncode == 2 and entry["verdict"] == "DOWN", entry
    assert any("exit code 1" in r and "its errors:" in r and "TimeoutError: RPC call to sample_tokens" in r
               for r in entry["reasons"]), entry["reasons"]


@pytest.mark.fault("hung-readiness")
def test_a_worker_hung_during_readiness_stalls_the_wait_with_both_logs_and_both_engines_stop(
        pair, clean_tree, host_vars):
    env = engine_env(pair, DSPARK_SIM_STARTUP_DELAY_S="20")
    host_vars(pair.head, env)
    host_vars(pair.worker, env)
    old = container_id(pair.head)
    run = background(pair, clean_tree, "provision.yml", "-e", f"dspark_engine_ready_stall_timeout={STALL_S}",
                     "-e", "dspark_engine_force_replace=true")
    pids: list[int] = []
    try:
        wait_for_a_new_join(pair, old)
        pids = freeze(pair.worker)
        out, _unused = run.communicate(timeout=900)
    finally:
        end(run)
        thaw(pids)
    text = " ".join(out.split())
    assert run.returncode != 0, out[-3000:]
    assert (f"STALLED rank {pair.worker.name}: the pair made no progress (no new log line, no phase change on "
            f"either rank) for {STALL_S} s") in text, out[-5000:]
    assert f"--- head {pair.head.name}" in out and f"--- worker {pair.worker.name}" in out
    # no half-pair left serving: both engines are stopped (kept, for their logs)
    for rank in pair.ranks:
        wait_for(lambda r=rank: not container_state(r)["Running"], 60, what=f"{rank.name} stopped")


@pytest.mark.fault("readiness-docker-unreachable")
def test_a_worker_whose_docker_engine_goes_away_during_readiness_is_named(pair, clean_tree, host_vars):
    env = engine_env(pair, DSPARK_SIM_STARTUP_DELAY_S="30")
    host_vars(pair.head, env)
    host_vars(pair.worker, env)
    old = container_id(pair.head)
    run = background(pair, clean_tree, "provision.yml", "-e", "dspark_engine_force_replace=true")
    try:
        wait_for_a_new_join(pair, old)
        stop_dockerd(pair.worker)
        out, _unused = run.communicate(timeout=900)
    finally:
        end(run)
        start_dockerd(pair.worker)
    text = " ".join(out.split())
    assert run.returncode != 0, out[-3000:]
    assert f"rank {pair.worker.name}: its Docker engine cannot be read" in text, out[-5000:]
    assert "no engine container on the worker" not in text
    wait_for(lambda: not container_state(pair.head)["Running"], 60, what="the head stopped")
