"""bench/ratios.py without the simulator: its host variables, the guard's row from a report, what it
puts back, and the command it records."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

import _common as common
import ratios


@pytest.fixture
def inventory(tmp_path, monkeypatch):
    monkeypatch.setattr(ratios, "INVENTORY", tmp_path)
    return tmp_path


def test_host_vars_are_written_for_the_measurement_and_removed_after(inventory):
    with ratios.host_vars({"sim01-head": {"dspark_engine_extra_env": {"DSPARK_SIM_TOKEN_DELAY_S": "0.02"}}}):
        data = yaml.safe_load((inventory / "host_vars" / "sim01-head.yml").read_text())
        assert data == {"dspark_engine_extra_env": {"DSPARK_SIM_TOKEN_DELAY_S": "0.02"}}
    assert not (inventory / "host_vars").exists()


def test_host_vars_are_removed_when_the_measurement_fails(inventory):
    with pytest.raises(RuntimeError):
        with ratios.host_vars({"sim01-head": {"a": 1}, "sim01-worker": {"a": 2}}):
            raise RuntimeError("provision failed")
    assert not (inventory / "host_vars").exists()


def test_an_existing_host_vars_file_is_refused_and_kept(inventory):
    (inventory / "host_vars").mkdir()
    theirs = inventory / "host_vars" / "sim01-worker.yml"
    theirs.write_text("dspark_engine_extra_env: {DSPARK_SIM_FAULT: slow_tokens}\n")
    with pytest.raises(common.BenchError, match="sim01-worker.yml exists"):
        with ratios.host_vars({"sim01-head": {"a": 1}, "sim01-worker": {"a": 2}}):
            pass
    assert theirs.read_text() == "dspark_engine_extra_env: {DSPARK_SIM_FAULT: slow_tokens}\n"
    assert sorted(p.name for p in (inventory / "host_vars").iterdir()) == ["sim01-worker.yml"]


def _args(**kw):
    base = ratios.parse_args([])
    for k, v in kw.items():
        setattr(base, k, v)
    return base


class FakeBench(ratios.Bench):
    """A Bench whose playbooks are recorded (and, for guard.yml, write a guard report)."""

    def __init__(self, tmp_path, guard_report=None, rc=0):
        super().__init__(_args(), tmp_path, tmp_path / "tree",
                         {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "1"}}, {"image_id": "sha256:p"})
        self.calls, self.guard_report, self.rc = [], guard_report, rc

    def playbook(self, name, *extra, extra_vars=None, junit=False, check=True):
        host_vars = {p.stem: yaml.safe_load(p.read_text()) for p in (ratios.INVENTORY / "host_vars").glob("*.yml")}
        self.calls.append((name, extra, extra_vars, host_vars))
        if name == "guard.yml" and self.guard_report is not None:
            path = self.evidence / "sim01" / "serving-guard.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.guard_report))
        return common.PlaybookRun([name], self.rc, 12.5, "", "")


def _guard_report(elapsed: float) -> dict:
    tokens = [4] * 16 + [128] * 48
    return {"status": "PASS", "elapsed_s": elapsed,
            "completions": [{"request": f"{i:02d}", "usage": {"completion_tokens": t}} for i, t in enumerate(tokens)]}


def test_the_guard_row_uses_the_modules_time_against_the_scheduled_server_time(tmp_path, inventory):
    b = FakeBench(tmp_path, _guard_report(elapsed=8.5))
    row = ratios.measure_guard(b)
    provision, guard = b.calls
    assert provision[0] == "provision.yml" and provision[1] == ("--limit", "pair_sim01")
    # the head runs with the site's engine environment plus the per-token delay; the worker is left alone
    assert provision[3] == {"sim01-head": {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "1",
                                                                       "DSPARK_SIM_TOKEN_DELAY_S": "0.02"}}}
    assert guard[0] == "guard.yml" and guard[2] == {"dspark_guard_concurrency": 16}
    assert not (inventory / "host_vars").exists()
    theory = 4 * 0.02 + 3 * 128 * 0.02
    assert row["denominator_s"] == round(theory, 2)
    assert row["numerator_s"] == 8.5
    assert row["ratio"] == round(8.5 / round(theory, 4), 3)
    assert row["met"] is (row["ratio"] <= 1.2)
    assert row["extra"]["guard.yml wall time (s)"] == 12.5
    assert row["extra"]["nominal theoretical time (s)"] == pytest.approx(4 * 128 * 0.02)
    assert any("ceil(64/16) = 4 waves" in n for n in row["notes"])


def test_a_slow_guard_misses_its_target(tmp_path, inventory):
    row = ratios.measure_guard(FakeBench(tmp_path, _guard_report(elapsed=20.0)))
    assert not row["met"] and row["why"][0].startswith("ratio 2.577 is above the target 1.2")


def test_a_failing_guard_is_an_error_not_a_figure(tmp_path, inventory):
    doc = _guard_report(elapsed=8.5) | {"status": "FAIL", "errors": ["request 17: usage.completion_tokens is 127"]}
    with pytest.raises(common.BenchError, match="did not pass"):
        ratios.measure_guard(FakeBench(tmp_path, doc, rc=2))
    assert not (inventory / "host_vars").exists()


def test_restore_reprovisions_sim01_and_tears_down_what_did_not_serve(tmp_path, inventory):
    b = FakeBench(tmp_path)
    before = {1: {"serving": True, "image": True}, 2: {"serving": False, "image": False},
              3: {"serving": False, "image": True}, 4: {"serving": True, "image": True},
              5: {"serving": False, "image": False}}
    ratios.restore(b, before)
    assert [(c[0], c[1], c[2]) for c in b.calls] == [
        ("provision.yml", ("--limit", "pair_sim01"), None),
        ("teardown.yml", ("--limit", "pair_sim02,pair_sim05"), {"dspark_teardown_remove_images": True}),
        ("teardown.yml", ("--limit", "pair_sim03"), {"dspark_teardown_remove_images": False}),
    ]


def test_restore_of_a_fleet_that_served_nothing_tears_it_all_down(tmp_path, inventory):
    b = FakeBench(tmp_path)
    ratios.restore(b, {1: {"serving": False, "image": False}, 2: {"serving": False, "image": False}})
    assert [(c[0], c[1]) for c in b.calls] == [("teardown.yml", ("--limit", "pair_sim01,pair_sim02"))]


def test_the_engine_env_keeps_the_sites_entries(tmp_path):
    b = FakeBench(tmp_path)
    assert b.engine_env(DSPARK_SIM_STARTUP_DELAY_S="60") == {"DSPARK_SIM_STARTUP_DELAY_S": "60"}
    assert b.engine_env(DSPARK_SIM_TOKEN_DELAY_S="0.02") == {"DSPARK_SIM_STARTUP_DELAY_S": "1",
                                                             "DSPARK_SIM_TOKEN_DELAY_S": "0.02"}


def test_the_recorded_command_names_make_bench_when_make_runs_it(monkeypatch):
    monkeypatch.setenv("MAKELEVEL", "1")
    assert ratios.command([]).startswith("make bench (which runs ")
    assert ratios.command(["--only", "guard"]).endswith("bench/ratios.py --only guard)")
    monkeypatch.delenv("MAKELEVEL")
    assert ratios.command(["--forks", "8"]).endswith("bench/ratios.py --forks 8")


@pytest.mark.parametrize("argv", [["--forks", "0"], ["--token-delay", "0"], ["--only", "nothing"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        ratios.parse_args(argv)


def test_only_selects_groups_of_rows():
    assert ratios.GROUPS["audit"] == ["audit-scaling", "audit-naive"]
    assert sorted(m for g in ratios.GROUPS.values() for m in g) == sorted(ratios.ORDER + ratios.TABLES)
    assert sorted(ratios.TARGETS) == sorted(ratios.ORDER)
    assert [m for m, _unused in ratios.MEASUREMENTS] and sorted(m for m, _unused in ratios.MEASUREMENTS) == sorted(
        ratios.ORDER + ratios.TABLES)
    assert ratios.GROUPS["isolation"] == ["isolation"] and ratios.GROUPS["control-cpu"] == ["control-cpu"]


def test_a_rank_without_an_engine_container_reads_as_none(monkeypatch):
    monkeypatch.setattr(common, "on_rank", lambda rank, argv, check=True, timeout=120: SimpleNamespace(
        returncode=1, stdout="", stderr="Error response from daemon: No such container: dspark_vllm"))
    assert ratios.container(ratios.HEAD, "dspark_vllm") is None
    monkeypatch.setattr(common, "on_rank", lambda rank, argv, check=True, timeout=120: SimpleNamespace(
        returncode=0, stdout="abc 2026-08-03T10:00:00.1Z 2 true\n", stderr=""))
    assert ratios.container(ratios.HEAD, "dspark_vllm") == {"id": "abc", "started_at": "2026-08-03T10:00:00.1Z",
                                                            "restart_count": 2, "running": True}
    monkeypatch.setattr(common, "on_rank", lambda rank, argv, check=True, timeout=120: SimpleNamespace(
        returncode=1, stdout="", stderr="Cannot connect to the Docker daemon"))
    with pytest.raises(common.BenchError, match="docker container inspect"):
        ratios.container(ratios.HEAD, "dspark_vllm")


class TimedBench(FakeBench):
    """Playbooks take the seconds listed for them, in turn; audit.yml writes the fleet report."""

    def __init__(self, tmp_path, seconds: dict):
        super().__init__(tmp_path)
        self.seconds = {k: list(v) for k, v in seconds.items()}

    def playbook(self, name, *extra, extra_vars=None, junit=False, check=True):
        self.calls.append((name, extra, extra_vars))
        key = name if name not in ("audit.yml", "bench/module_floor.yml") else (
            name.split("/")[-1].split(".")[0] + ("-1" if "--limit" in extra else "-all"))
        if name == "audit.yml":
            (self.tmp / "audit").mkdir(exist_ok=True)
            (self.tmp / "audit" / "audit.json").write_text(json.dumps({"counts": {"OK": 8, "DRIFT": 0}}))
        return common.PlaybookRun([name], 0, self.seconds[key].pop(0), "", "")


def test_the_audits_are_timed_with_the_same_forks_and_compared_by_median(tmp_path):
    b = TimedBench(tmp_path, {"audit-all": [30.0, 10.0, 12.0, 11.0],  # the warm-up first
                              "bench/naive_audit.yml": [50.0, 25.0, 20.0, 30.0],
                              "audit-1": [5.0, 4.0, 6.0],
                              "module_floor-1": [2.0, 3.0], "module_floor-all": [16.0, 18.0]})
    scaling = ratios.measure_audit_scaling(b)
    naive = ratios.measure_audit_naive(b)
    assert all(c[1][:2] == ("-f", "16") for c in b.calls)
    assert len(b.calls) == 2 + 3 * 3 + 2 * 2  # measured once for both rows
    assert (scaling["numerator_s"], scaling["denominator_s"], scaling["ratio"]) == (11.0, 5.0, 2.2)
    assert scaling["met"]
    assert (naive["numerator_s"], naive["denominator_s"], naive["ratio"]) == (11.0, 25.0, 0.44)
    assert naive["met"]
    assert scaling["extra"]["last verdicts"] == {"OK": 8, "DRIFT": 0}
    assert scaling["extra"]["module_floor.yml, 8 pairs / 1 pair"] == 6.8  # medians 17.0 / 2.5


def test_the_copy_task_is_found_among_a_runs_task_times():
    junit = """<testsuites><testsuite name="x">
  <testcase name="[sim01-head] Identity: gb10.dspark.image : Image | Copy the archive from the control node" time="12.5"/>
  <testcase name="[sim02-head] Identity: gb10.dspark.image : Image | Copy the archive from the control node" time="13.0"/>
  <testcase name="[sim01-head] Identity: gb10.dspark.image : Image | Load the archive" time="4.0"/>
</testsuite></testsuites>"""
    tasks = ratios.task_times(common.PlaybookRun(["identity.yml"], 0, 20.0, "", "", junit=[junit]))
    assert tasks[0] == ("Identity: gb10.dspark.image : Image | Copy the archive from the control node", 13.0)
    assert ratios.copy_seconds(tasks) == 13.0
    assert ratios.copy_seconds([t for t in tasks if ratios.COPY_TASK not in t[0]]) is None
