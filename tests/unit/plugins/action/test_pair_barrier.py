"""gb10.dspark.pair_barrier and the run's pair summary, through a real ansible-playbook run on local hosts (three
pairs of connection-local hosts, the collection's topology role, no simulator): a rank that fails stops its own
pair at the next barrier and no other pair; the failure budget keeps later batches from starting; a task marked
run-wide (any_errors_fatal) still stops every pair; the callback gb10.dspark.pair_summary prints one line per pair
and writes the same into the evidence folder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _pair
from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _run_summary as S

ROOT = Path(__file__).resolve().parents[4]
PAIRS = ("p1", "p2", "p3")


def _inventory(tmp_path: Path) -> Path:
    hosts = {}
    for n, pair in enumerate(PAIRS, start=1):
        hosts[f"pair_{pair}"] = {"hosts": {
            f"{pair}-head": {"dspark_pair": pair, "dspark_rank": 0, "dspark_fabric_ip": f"10.9.{n}.1"},
            f"{pair}-worker": {"dspark_pair": pair, "dspark_rank": 1, "dspark_fabric_ip": f"10.9.{n}.2"}}}
    inv = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "dspark_evidence_dir": str(tmp_path / "evidence")},
        "children": {
            "dspark_pairs": {"children": hosts},
            "dspark_heads": {"hosts": {f"{p}-head": {} for p in PAIRS}},
            "dspark_workers": {"hosts": {f"{p}-worker": {} for p in PAIRS}}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def _play(tmp_path: Path, tasks: list, serial=None, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "ansible.cfg").write_text("[defaults]\nstdout_callback = ansible.builtin.default\n"
                                          "callbacks_enabled = gb10.dspark.pair_summary\n")
    play = {"name": "pairs", "hosts": "dspark_pairs", "gather_facts": False,
            "roles": [{"role": "gb10.dspark.topology"}], "tasks": tasks}
    if serial:
        play["serial"] = serial
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([play]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", **(env or {}))
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(_inventory(tmp_path)),
                           str(book), *extra], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)


def _mark(step: str) -> dict:
    """A change on the control node, one file per host and step: what a pair did is read back from them."""
    return {"name": f"Step | {step}", "ansible.builtin.copy": {"content": "x", "dest": f"{{{{ playbook_dir }}}}/did/{{{{ inventory_hostname }}}}-{step}"}}


def _did(tmp_path: Path) -> set[str]:
    folder = tmp_path / "did"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def _summary(tmp_path: Path) -> dict:
    files = sorted((tmp_path / "evidence" / "runs").glob("*.json"), key=lambda f: f.stat().st_mtime_ns)
    assert files, "no summary written"
    return {row["pair"]: row for row in json.loads(files[-1].read_text())["pairs"]}


def test_a_failed_rank_stops_its_pair_at_the_barrier_and_no_other_pair(tmp_path):
    (tmp_path / "did").mkdir()
    tasks = [
        {"name": "Check | The rank passes its check", "ansible.builtin.fail": {"msg": "rank p2-worker: fabric link down, expected Up"},
         "when": "inventory_hostname == 'p2-worker'"},
        {"name": "Pair | barrier", "gb10.dspark.pair_barrier": {"before": "the load"}},
        _mark("load"),
    ]
    res = _play(tmp_path, tasks)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out[-3000:]
    assert _did(tmp_path) == {f"{p}-{r}-load" for p in ("p1", "p3") for r in ("head", "worker")}, out[-3000:]
    assert ("rank p2-head: pair p2 stops before the load: rank p2-worker of the pair failed or was unreachable, "
            "expected both ranks in the run (no other pair is affected)") in " ".join(out.split())
    rows = _summary(tmp_path)
    assert {p: r["verdict"] for p, r in rows.items()} == {"p1": S.PASS, "p2": S.FAILED, "p3": S.PASS}
    assert rows["p2"]["rank"] == "p2-worker" and rows["p2"]["phase"] == "Check"  # the first failure, not the barrier's
    assert rows["p2"]["reason"] == "rank p2-worker: fabric link down, expected Up"
    assert "PAIR SUMMARY play.yml: 2 of 3 pairs PASS" in out
    assert "p2    FAILED       phase Check; rank p2-worker: fabric link down, expected Up" in out


def test_without_the_barrier_the_other_rank_would_have_gone_on(tmp_path):
    """The barrier is what stops the other rank: the same play without it changes p2's head."""
    (tmp_path / "did").mkdir()
    tasks = [{"name": "Check | fails", "ansible.builtin.fail": {"msg": "no"}, "when": "inventory_hostname == 'p2-worker'"},
             _mark("load")]
    res = _play(tmp_path, tasks)
    assert res.returncode == 2
    assert "p2-head-load" in _did(tmp_path)


def test_a_run_wide_failure_stops_every_pair_before_anything_changes(tmp_path):
    (tmp_path / "did").mkdir()
    tasks = [{"name": "Preflight | The control node's manifest is the pinned one",
              "ansible.builtin.fail": {"msg": "control node: manifest sha256 is 00, pinned ff"}, "run_once": True},
             {"name": "Pair | barrier", "gb10.dspark.pair_barrier": {"before": "the load"}},
             _mark("load")]
    res = _play(tmp_path, tasks)
    assert res.returncode == 2
    assert _did(tmp_path) == set()
    rows = _summary(tmp_path)
    assert {r["verdict"] for r in rows.values()} == {S.FAILED} and set(rows) == set(PAIRS)


def test_the_failure_budget_keeps_later_batches_from_starting(tmp_path):
    (tmp_path / "did").mkdir()
    tasks = [{"name": "Pair | budget", "gb10.dspark.pair_barrier": {"before": "the lock", "max_failed_pairs": 0}},
             {"name": "Engine | start", "ansible.builtin.fail": {"msg": "rank p1-worker: engine exited"},
              "when": "inventory_hostname == 'p1-worker'"},
             {"name": "Pair | barrier", "gb10.dspark.pair_barrier": {"before": "the load"}},
             _mark("load")]
    # Two pairs per batch (Ansible itself ends a play whose batch failed on every host, whatever the budget)
    res = _play(tmp_path, tasks, 4)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 2, out[-3000:]
    assert _did(tmp_path) == {"p2-head-load", "p2-worker-load"}, out[-3000:]  # p2 shared p1's batch
    assert "pair p3 not started: 1 of 3 pairs failed (p1), expected at most 0 (dspark_fleet_max_failed_pairs)" in out
    rows = _summary(tmp_path)
    assert {p: r["verdict"] for p, r in rows.items()} == {"p1": S.FAILED, "p2": S.PASS, "p3": S.NOT_STARTED}
    # a budget of a third of the pairs lets the next batch run
    for f in (tmp_path / "did").iterdir():
        f.unlink()
    again = _play(tmp_path, [{**tasks[0], "gb10.dspark.pair_barrier": {"before": "the lock", "max_failed_pairs": "34%"}},
                             *tasks[1:]], 4)
    assert again.returncode == 2
    assert _did(tmp_path) == {f"{p}-{r}-load" for p in ("p2", "p3") for r in ("head", "worker")}


@pytest.mark.parametrize("value, count, percent", [(None, None, None), ("", None, None), (0, 0, None), ("2", 2, None),
                                                   ("25%", None, 25.0), (" 100% ", None, 100.0)])
def test_failure_budget_forms(value, count, percent):
    assert _pair.failure_budget(value) == (count, percent)


@pytest.mark.parametrize("value", [-1, "many", "101%", "-5%", True, 1.5, [1]])
def test_failure_budget_refuses_anything_else(value):
    with pytest.raises(ValueError, match="dspark_fleet_max_failed_pairs is .*expected a count of pairs"):
        _pair.failure_budget(value)


def test_summary_rows_name_the_first_failure_and_ignore_a_rescued_one():
    rec = S.Recorder()
    rec.ran("a-head", "gb10.dspark.topology : Topology | x", {"dspark_play_pairs": {
        "a": {"head": "a-head", "worker": "a-worker"}, "b": {"head": "b-head", "worker": "b-worker"}}})
    rec.failed("a-head", "Audit | rescued", "a rescued failure")  # the run did not end with a-head failed
    rec.ran("a-head", "Gate | Run the gate", None)
    rec.failed("b-worker", "Engine | Wait until the pair serves", "rank b-worker: the engine exited (1)")
    rec.failed("b-head", "Engine | barrier", "rank b-head: pair b stops before the head's start")
    got = {r["pair"]: r for r in S.rows(rec, failed_hosts=["b-worker", "b-head"], unreachable_hosts=[])}
    assert got["a"]["verdict"] == S.PASS and got["a"]["phase"] == "Gate"
    assert (got["b"]["verdict"], got["b"]["phase"], got["b"]["rank"]) == (S.FAILED, "Engine", "b-worker")
    assert got["b"]["reason"] == "rank b-worker: the engine exited (1)"


def test_summary_hides_a_no_log_message():
    assert S.result_message({"censored": "the output has been hidden", "msg": "sk-secret"}) == S.NO_LOG
    assert S.result_message({"_ansible_no_log": True, "msg": "sk-secret"}) == S.NO_LOG
    assert S.phase_of("gb10.dspark.image : Image | Load the archive") == "Image"


def test_a_play_that_switches_the_summary_off_gets_none(tmp_path):
    (tmp_path / "did").mkdir()
    res = _play(tmp_path, [{"name": "Pair | barrier", "gb10.dspark.pair_barrier": {"before": "the load"}}], None,
                "-e", "dspark_pair_summary=false")
    assert res.returncode == 0
    assert "PAIR SUMMARY" not in res.stdout and not (tmp_path / "evidence").exists()


def test_the_summary_file_option_gets_the_rows_in_check_mode_too(tmp_path):
    target = tmp_path / "run" / "pairs.json"
    env_res = _play(tmp_path, [{"name": "Pair | barrier", "gb10.dspark.pair_barrier": {"before": "the load"}}], None,
                    "--check", env={"DSPARK_PAIR_SUMMARY_FILE": str(target)})
    assert env_res.returncode == 0, (env_res.stdout + env_res.stderr)[-2000:]
    assert "PAIR SUMMARY play.yml: 3 of 3 pairs PASS" in env_res.stdout
    doc = json.loads(target.read_text())
    assert doc["check"] is True and {r["pair"]: r["verdict"] for r in doc["pairs"]} == {p: S.PASS for p in PAIRS}
    assert not (tmp_path / "evidence").exists()  # check mode writes nothing into the evidence folder


def test_a_batch_that_cuts_a_pair_is_stopped_before_anything_changes(tmp_path):
    (tmp_path / "did").mkdir()
    tasks = [{"name": "Pair | barrier", "gb10.dspark.pair_barrier": {"before": "the load"}}, _mark("load")]
    res = _play(tmp_path, tasks, 3)  # batches of 3 hosts: p2's head runs with p1, its worker with p3
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 2, out[-3000:]
    assert ("rank p2-head: pair p2 stops before the load: rank p2-worker of the pair is in another batch of the play "
            "(serial), expected both ranks in one batch") in out
    assert "p2-head-load" not in _did(tmp_path) and "p1-head-load" in _did(tmp_path)


def test_a_run_without_pairs_that_ended_well_has_no_summary():
    rec = S.Recorder()
    rec.ran("sim01-head", "Smoke | Ask the rank's own Docker engine who it is", None)
    assert S.rows(rec, failed_hosts=[], unreachable_hosts=[]) == []
    rec.failed("sim01-head", "Smoke | x", "rank sim01-head: no engine")  # a failure is always summed up
    assert [r["verdict"] for r in S.rows(rec, failed_hosts=["sim01-head"], unreachable_hosts=[])] == [S.FAILED]
