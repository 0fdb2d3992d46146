"""playbooks/rollout.yml's own plays (the plan, the canary check, the serial of whole pairs, the steps the per-wave
report records), run by ansible-playbook on connection-local hosts: each play is the playbook's, with the converge
role (which needs ranks) replaced by the topology and a marker file per host and step. No simulator."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _run_summary as S

ROOT = Path(__file__).resolve().parents[4]
PAIRS = ("p1", "p2", "p3", "p4")


def _inventory(tmp_path: Path) -> Path:
    hosts = {}
    for n, pair in enumerate(reversed(PAIRS), start=1):  # listed out of order, workers first
        hosts[f"pair_{pair}"] = {"hosts": {
            f"{pair}-worker": {"dspark_pair": pair, "dspark_rank": 1, "dspark_fabric_ip": f"10.9.{n}.2"},
            f"{pair}-head": {"dspark_pair": pair, "dspark_rank": 0, "dspark_fabric_ip": f"10.9.{n}.1"}}}
    inv = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "dspark_evidence_dir": str(tmp_path / "evidence")},
        "children": {"dspark_pairs": {"children": hosts},
                     "dspark_heads": {"hosts": {f"{p}-head": {} for p in PAIRS}},
                     "dspark_workers": {"hosts": {f"{p}-worker": {} for p in PAIRS}}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def _step(name: str, fail_on: str = "") -> list:
    """What converge would do on a rank, as a marker file with the batch it ran in; fails on ``fail_on``."""
    return [{"name": f"Step | {name} fails here", "ansible.builtin.fail": {"msg": f"rank {fail_on}: {name} FAIL"},
             "when": f"inventory_hostname == '{fail_on}'"},
            {"name": f"Step | {name}", "ansible.builtin.copy": {
                "content": "{{ ansible_play_batch | to_json }}",
                "dest": f"{{{{ playbook_dir }}}}/did/{{{{ inventory_hostname }}}}-{name}"}}]


def _rollout(tmp_path: Path, *extra: str, fail_canary: str = "", fail_wave: str = "") -> subprocess.CompletedProcess:
    plays = yaml.safe_load((ROOT / "playbooks" / "rollout.yml").read_text())
    plan, canary, stage, waves = plays[:4]
    assert [p["vars"]["dspark_rollout_step"] for p in (canary, stage, waves)] == ["canary", "stage", "wave"]
    topology = [{"name": "Topology", "ansible.builtin.include_role": {"name": "gb10.dspark.topology"}}]
    canary = {**canary, "roles": [], "tasks": topology + _step("canary", fail_canary) + canary["tasks"][2:]}
    stage = {**stage, "roles": [], "tasks": topology + _step("stage")}
    waves = {**waves, "roles": [], "tasks": topology + [
        {"name": "Converge | budget", "gb10.dspark.pair_barrier": {
            "before": "the lock", "max_failed_pairs": "{{ dspark_fleet_max_failed_pairs | default(omit) }}"}}]
        + _step("wave", fail_wave)}
    book = tmp_path / "rollout.yml"
    book.write_text(yaml.safe_dump([plan, canary, stage, waves]))
    (tmp_path / "did").mkdir(exist_ok=True)
    (tmp_path / "ansible.cfg").write_text("[defaults]\nstdout_callback = ansible.builtin.default\n"
                                          "callbacks_enabled = gb10.dspark.pair_summary\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(_inventory(tmp_path)),
                           str(book), *extra], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)


def _did(tmp_path: Path) -> dict[str, list[str]]:
    return {p.name: json.loads(p.read_text()) for p in (tmp_path / "did").iterdir()}


def _waves(tmp_path: Path) -> dict:
    files = sorted((tmp_path / "evidence" / "runs").glob("*-rollout-waves-*.json"))
    assert len(files) == 1
    return json.loads(files[0].read_text())


def test_the_canary_then_the_staging_then_waves_of_whole_pairs_each_in_its_own_batch(tmp_path):
    res = _rollout(tmp_path, "-e", "dspark_rollout_wave_pairs=2")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    did = _did(tmp_path)
    assert did["p1-head-canary"] == ["p1-head", "p1-worker"] and not any(k.startswith("p1-") and "wave" in k for k in did)
    assert did["p2-head-stage"] == [f"{p}-{r}" for p in ("p2", "p3", "p4") for r in ("head", "worker")]  # one play
    assert did["p2-worker-wave"] == did["p3-head-wave"] == ["p2-head", "p2-worker", "p3-head", "p3-worker"]
    assert did["p4-head-wave"] == ["p4-head", "p4-worker"]
    doc = _waves(tmp_path)
    assert [(s["step"], s["wave"], [e["pair"] for e in s["pairs"]], s["verdict"]) for s in doc["steps"]] == [
        ("canary", None, ["p1"], "PASS"), ("stage", None, ["p2", "p3", "p4"], "PASS"),
        ("wave", 1, ["p2", "p3"], "PASS"), ("wave", 2, ["p4"], "PASS")]
    assert all(s["started"] <= s["ended"] for s in doc["steps"])
    assert [a["ended"] <= b["started"] for a, b in zip(doc["steps"], doc["steps"][1:])] == [True] * 3
    assert doc["planned"] == {"canary": ["p1"], "waves": [["p2", "p3"], ["p4"]]} and doc["halted"] is None
    assert "ROLLOUT WAVES" in out and "wave 2" in out


def test_a_failing_canary_touches_no_other_pair_and_the_run_says_why(tmp_path):
    res = _rollout(tmp_path, "-e", "dspark_rollout_wave_pairs=2", fail_canary="p1-head")
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 2, out[-3000:]
    assert {k for k in _did(tmp_path) if not k.startswith("p1-")} == set()  # nothing ran on any other pair
    doc = _waves(tmp_path)
    assert [s["step"] for s in doc["steps"]] == ["canary"]
    assert doc["not_started"] == ["p2", "p3", "p4"]
    assert "HALTED: the canary pair p1 did not pass: no other pair was touched" in out


def test_one_failing_canary_of_two_keeps_every_other_pair_from_being_staged(tmp_path):
    res = _rollout(tmp_path, "-e", "dspark_rollout_canary_pairs=2", fail_canary="p2-worker")
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 2, out[-3000:]
    assert {k for k in _did(tmp_path) if k.startswith(("p3-", "p4-"))} == set()
    assert "pair p3, p4 not started: the canary pair p2 did not pass" in out
    doc = _waves(tmp_path)
    stage = doc["steps"][1]
    assert stage["step"] == "stage" and {e["verdict"] for e in stage["pairs"]} == {S.NOT_STARTED}
    assert doc["not_started"] == ["p3", "p4"] and doc["halted"].startswith("the canary pair p2 did not pass")


def test_a_failing_wave_halts_the_waves_after_it_by_default(tmp_path):
    res = _rollout(tmp_path, fail_wave="p2-worker")
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 2, out[-3000:]
    assert [k for k in _did(tmp_path) if k.endswith("-wave")] == ["p2-head-wave"]  # p2 failed; p3, p4 not started
    assert "pair p3 not started: 1 of 3 pairs failed (p2), expected at most 0" in out
    doc = _waves(tmp_path)
    # wave 2 (p3) did not start, and Ansible ends a play whose whole batch failed: no wave 3
    assert [(s["wave"], s["verdict"]) for s in doc["steps"] if s["step"] == "wave"] == [(1, "FAILED"), (2, "FAILED")]
    assert doc["not_started"] == ["p3", "p4"]
    # with a budget of one pair, the later waves run
    for f in (tmp_path / "did").iterdir():
        f.unlink()
    for f in (tmp_path / "evidence" / "runs").iterdir():
        f.unlink()
    again = _rollout(tmp_path, "-e", "dspark_fleet_max_failed_pairs=1", fail_wave="p2-worker")
    assert again.returncode == 2
    assert {k for k in _did(tmp_path) if k.endswith("-wave")} == {"p2-head-wave"} | {
        f"{p}-{r}-wave" for p in ("p3", "p4") for r in ("head", "worker")}
