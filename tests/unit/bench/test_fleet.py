"""bench/_fleet.py and bench/fleet.py without the simulator: the pair summary read back, the CPU per pair
and its fit, the projection of a fleet audit, the docs/fleet-scale.md section, and the two measurements
driven through a stand-in for bench/ratios.py's Bench."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

import _common as common
import _fleet
import _report as report
import fleet
import ratios


# ---- the pair summary ----------------------------------------------------------------------------------
def _summary(verdicts: dict[str, str]) -> dict:
    return {"playbook": "provision.yml", "pairs": [
        {"pair": p, "verdict": v, "phase": "Engine" if v == "FAILED" else "Gate",
         "reason": "the pair's engine exited on worker" if v == "FAILED" else ""} for p, v in verdicts.items()]}


def test_isolation_outcome_counts_the_healthy_pairs_at_pass_and_names_the_others():
    rows = _fleet.summary_verdicts(_summary({"sim01": "PASS", "sim02": "FAILED", "sim03": "NOT STARTED",
                                             "sim04": "FAILED"}))
    out = _fleet.isolation_outcome(rows, ["sim01", "sim02", "sim03"], "sim04")
    assert out["passed"] == ["sim01"]
    assert out["healthy_not_passed"] == {
        "sim02": {"verdict": "FAILED", "phase": "Engine", "reason": "the pair's engine exited on worker"},
        "sim03": {"verdict": "NOT STARTED", "phase": "Gate", "reason": ""}}
    assert (out["broken_verdict"], out["broken_phase"]) == ("FAILED", "Engine")


def test_a_healthy_pair_missing_from_the_summary_did_not_pass():
    rows = _fleet.summary_verdicts(_summary({"sim01": "PASS", "sim03": "FAILED"}))
    out = _fleet.isolation_outcome(rows, ["sim01", "sim02"], "sim03")
    assert out["passed"] == ["sim01"] and out["healthy_not_passed"]["sim02"]["verdict"] is None


@pytest.mark.parametrize("doc", [{}, {"pairs": []}, {"pairs": [{"pair": "sim01"}]}, []])
def test_a_summary_without_pairs_and_verdicts_is_an_error(doc):
    with pytest.raises(ValueError):
        _fleet.summary_verdicts(doc)


# ---- CPU per pair ---------------------------------------------------------------------------------------
def test_cpu_table_takes_medians_and_divides_by_the_pairs():
    table = _fleet.cpu_table({4: {"wall": [5.0, 7.0, 6.0], "cpu": [4.0, 9.0, 5.0]}, 1: {"wall": [2.0], "cpu": [1.5]}})
    assert table == [{"pairs": 1, "wall_s": 2.0, "cpu_s": 1.5, "cpu_per_pair_s": 1.5, "runs": 1},
                     {"pairs": 4, "wall_s": 6.0, "cpu_s": 5.0, "cpu_per_pair_s": 1.25, "runs": 3}]


@pytest.mark.parametrize("samples", [{2: {"wall": [], "cpu": []}}, {2: {"wall": [1.0], "cpu": []}},
                                     {0: {"wall": [1.0], "cpu": [1.0]}}])
def test_cpu_table_refuses_incomplete_samples(samples):
    with pytest.raises(ValueError):
        _fleet.cpu_table(samples)


def test_cpu_model_fits_the_fixed_part_and_the_part_per_pair():
    table = [{"pairs": n, "cpu_s": 2.0 + 0.75 * n} for n in (1, 2, 4, 8)]
    assert _fleet.cpu_model(table) == {"fixed_s": 2.0, "per_pair_s": 0.75, "max_residual_s": 0.0}
    noisy = [{"pairs": 1, "cpu_s": 3.0}, {"pairs": 2, "cpu_s": 3.0}, {"pairs": 4, "cpu_s": 5.0}, {"pairs": 8, "cpu_s": 9.0}]
    m = _fleet.cpu_model(noisy)
    # x mean 3.75, y mean 5: slope = 26 / 28.75, intercept = 5 - slope × 3.75; the largest residual is at 1 pair
    assert m["per_pair_s"] == pytest.approx(0.904, abs=0.001) and m["fixed_s"] == pytest.approx(1.609, abs=0.001)
    assert m["max_residual_s"] == pytest.approx(0.487, abs=0.001)


def test_a_line_needs_two_pair_counts():
    with pytest.raises(ValueError):
        _fleet.fit_line([(4, 1.0), (4, 2.0)])


# ---- projection ---------------------------------------------------------------------------------------
def test_projection_with_few_forks_is_bound_by_the_rounds_of_ranks():
    # 100 pairs = 200 hosts, 20 forks: 10 rounds of a 3 s pair audit = 30 s; CPU 2 + 0.5 × 100 = 52 s over 8 cores
    p = _fleet.project(100, cores=8, forks=20, fixed_s=2.0, per_pair_s=0.5, one_pair_wall_s=3.0)
    assert (p["rounds"], p["ranks_bound_s"], p["control_cpu_s"], p["control_bound_s"]) == (10, 30.0, 52.0, 6.5)
    assert p["projected_s"] == 30.0 and p["bound"] == "ranks (rounds of forks)"


def test_projection_with_many_forks_on_few_cores_is_bound_by_the_control_nodes_cpu():
    # 1,000 pairs, 100 forks: 20 rounds × 3 s = 60 s; CPU 2 + 0.5 × 1000 = 502 s over min(2, 100) = 2 cores = 251 s
    p = _fleet.project(1000, cores=2, forks=100, fixed_s=2.0, per_pair_s=0.5, one_pair_wall_s=3.0)
    assert (p["rounds"], p["ranks_bound_s"], p["control_bound_s"]) == (20, 60.0, 251.0)
    assert p["projected_s"] == 251.0 and p["bound"] == "control node's CPU"


def test_projection_spreads_cpu_over_no_more_processes_than_forks():
    p = _fleet.project(1, cores=32, forks=4, fixed_s=0.0, per_pair_s=8.0, one_pair_wall_s=1.0)
    assert p["rounds"] == 1 and p["control_bound_s"] == 2.0 and p["projected_s"] == 2.0


def test_projection_refuses_an_empty_node():
    with pytest.raises(ValueError):
        _fleet.project(10, cores=0, forks=4, fixed_s=0.0, per_pair_s=1.0, one_pair_wall_s=1.0)


@pytest.mark.parametrize("seconds,text", [(45.2, "45 s"), (750, "12.5 min"), (7560, "2.1 h")])
def test_duration_reads_in_the_fitting_unit(seconds, text):
    assert _fleet.duration(seconds) == text


# ---- the docs/fleet-scale.md section --------------------------------------------------------------------
def _control():
    audit = _fleet.cpu_table({1: {"wall": [3.0], "cpu": [2.5]}, 8: {"wall": [9.0], "cpu": [9.5]}})
    prov = _fleet.cpu_table({1: {"wall": [14.0], "cpu": [6.0]}, 8: {"wall": [40.0], "cpu": [34.0]}})
    control = {"audit": {"table": audit, "model": _fleet.cpu_model(audit), "one_pair_wall_s": 3.0},
               "reprovision": {"table": prov, "model": _fleet.cpu_model(prov)},
               "forks": 16, "repeats": 2, "sizes": [1, 8], "most_changed": {"audit": 0, "reprovision": 0}}
    m = control["audit"]["model"]
    control["projection"] = [_fleet.project(p, c, f, m["fixed_s"], m["per_pair_s"], 3.0)
                             for c, f in ((2, 16), (8, 20)) for p in (100, 1000)]
    return control


def test_the_section_has_the_measured_table_and_the_projection():
    body = _fleet.section({**_control(), "date": "2026-12-06T01:00:00Z", "commit": "0123456789abcdef",
                           "machine": "2 cores", "command": "bench/ratios.py --only control-cpu"})
    assert body.startswith("## Control-node cost\n")
    assert "| 1 | 3.0 | 2.5 | 2.5 | 14.0 | 6.0 | 6.0 |" in body
    assert "| 8 | 9.0 | 9.5 | 1.19 | 40.0 | 34.0 | 4.25 |" in body
    assert "audit 1.50 s + 1.00 s per pair" in body
    # 1,000 pairs on 2 cores: 1.5 + 1000 s of CPU over 2 cores = 500.8 s, above 125 rounds × 3 s = 375 s
    assert "| 2 cores, 16 forks | 1,000 | 125 | 6.2 min | 1002 s | 8.3 min | **8.3 min** | control node's CPU |" in body
    assert "`0123456789ab`)" in body and "RUSAGE_CHILDREN" in body and "`bench/ratios.py --only control-cpu`" in body
    # re-provision: 6 s at 1 pair, 34 s at 8: 2 + 4 s per pair; 1,000 pairs = 4,002 s, over 8 cores 8.3 min
    assert "re-provision of 100 pairs needs 402 s" in body and "1,000 pairs 4,002 s: 8.3 min on 8 busy cores" in body


def test_replace_section_keeps_what_is_before_and_after():
    text = "# T\n\n## A\n\na\n\n## Control-node cost\n\nNot measured yet.\n\n### Sub\n\nold\n\n## Z\n\nz\n"
    out = _fleet.replace_section(text, "## Control-node cost\n\nnew\n")
    assert out == "# T\n\n## A\n\na\n\n## Control-node cost\n\nnew\n\n## Z\n\nz\n"
    last = _fleet.replace_section("# T\n\n## Control-node cost\n\nold\n", "## Control-node cost\n\nnew\n")
    assert last == "# T\n\n## Control-node cost\n\nnew\n"


def test_replace_section_without_the_heading_is_an_error():
    with pytest.raises(ValueError):
        _fleet.replace_section("# T\n\n## Other\n", "## Control-node cost\n")


def test_write_doc_rewrites_the_section_from_a_run(tmp_path):
    doc = tmp_path / "fleet-scale.md"
    doc.write_text("# Fleet\n\n## Control-node cost\n\nNot measured yet.\n")
    run = {"date": "2026-12-06T01:00:00Z", "commit": {"sha": "abc", "dirty": True}, "machine": {"cores": 2},
           "command": "make bench",
           "tables": {"control-cpu": _control()}}
    fleet.write_doc(doc, run)
    assert "Not measured yet" not in doc.read_text() and "| 8 | 9.0 | 9.5 |" in doc.read_text()
    assert "`make bench` (2026-12-06T01:00:00Z, commit `abc` with uncommitted changes to tracked files)" in doc.read_text()
    with pytest.raises(common.BenchError):
        fleet.write_doc(doc, {**run, "tables": {}})
    # a table carried over from an earlier run (ratios.py --carry) names that run, not the one that carried it
    carried = {**run, "tables": {"control-cpu": {**_control(), "carried": True}},
               "carried": {"date": "2026-12-05T07:00:00Z", "commit": {"sha": "def", "dirty": False},
                           "command": "bench/ratios.py --only control-cpu", "ids": ["control-cpu"]}}
    fleet.write_doc(doc, carried)
    assert "`bench/ratios.py --only control-cpu` (2026-12-05T07:00:00Z, commit `def`)" in doc.read_text()


def test_the_performance_page_shows_the_cpu_table_and_marks_what_was_carried_over():
    row = report.row("isolation", "Isolation", ("with", 11.0), ("without", 10.0), 1.1)
    earlier = {"date": "2026-12-05T19:20:56Z", "commit": {"sha": "efb4d12", "dirty": False}, "command": "make bench",
               "results": [report.row("guard", "Guard", ("g", 1.0), ("t", 1.0), 1.2), row], "tables": {}}
    run = {"command": "x", "date": "2026-12-06T01:00:00Z", "duration_s": 1.0, "commit": {"sha": "0123"},
           "machine": {"cores": 2}, "settings": {}, "results": [{**row, "ratio": 1.05}],
           "tables": {"control-cpu": _control()}, "errors": []}
    ratios.carry(run, earlier, "old.json")
    assert [r["id"] for r in run["results"]] == ["guard", "isolation"]
    assert run["results"][0]["carried"] and not run["results"][1].get("carried")  # measured now wins
    assert run["carried"]["ids"] == ["guard"]
    doc = report.render(run)
    assert "| Guard (*carried over*) |" in doc and "| Isolation |" in doc
    assert "Carried over from the run of 2026-12-05T19:20:56Z (`make bench`, commit `efb4d12`): guard" in doc
    assert "## Control node's CPU per pair" in doc and "| 8 | 9.0 | 9.5 | 1.19 |" in doc


# ---- the measurements through a stand-in Bench -----------------------------------------------------------------
class FakeBench:
    """bench/ratios.py's Bench as the measurements use it: playbooks answered from a script."""

    def __init__(self, tmp: Path, pairs: int, healthy_verdict: str = "PASS"):
        self.args = SimpleNamespace(pairs=pairs, forks=16, isolation_repeats=2, cpu_repeats=2)
        self.tmp = tmp
        self.evidence = tmp / "evidence"
        self.site = {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "1"}}
        self.calls: list[tuple] = []
        self.healthy_verdict = healthy_verdict
        self.host_vars_seen: list[dict] = []
        self.slow_failing = False  # the failing run takes twice as long (a missed ratio)

    def engine_env(self, **overrides):
        return {**self.site["dspark_engine_extra_env"], **overrides}

    def playbook(self, name, *extra, extra_vars=None, junit=False, check=True):
        limit = extra[extra.index("--limit") + 1] if "--limit" in extra else ""
        n = len(limit.split(","))
        self.calls.append((name, limit, check))
        rc = 0
        if name == "provision.yml" and self.host_vars_seen and self.host_vars_seen[-1].get("open"):
            rc = 2
            pairs = [g.removeprefix("pair_") for g in limit.split(",")]
            runs = self.evidence / "runs"
            runs.mkdir(parents=True, exist_ok=True)
            verdicts = {p: self.healthy_verdict for p in pairs[:-1]} | {pairs[-1]: "FAILED"}
            (runs / f"{len(self.calls)}-provision.json").write_text(json.dumps(_summary(verdicts)))
        return common.PlaybookRun([name], rc, seconds=(10.0 + n) * (2 if rc and self.slow_failing else 1),
                                  stdout="", stderr="",
                                  controller_cpu_s=1.0 + 0.5 * n, ssh_masters_cpu_s=0.1 * n)

    @contextmanager
    def host_vars(self, entries):
        record = {"entries": entries, "open": True}
        self.host_vars_seen.append(record)
        try:
            yield
        finally:
            record["open"] = False


def test_isolation_compares_the_failing_run_with_the_others_alone_from_stopped_engines(tmp_path):
    b = FakeBench(tmp_path, pairs=8)
    row = fleet.measure_isolation(b, b.host_vars, lambda rank: True)
    seven = ",".join(f"pair_sim{i:02d}" for i in range(1, 8))
    eight = seven + ",pair_sim08"
    one_round = [("teardown.yml", eight, True), ("provision.yml", seven, True),
                 ("teardown.yml", eight, True), ("provision.yml", eight, False)]
    assert b.calls == one_round * 2 + [("provision.yml", "pair_sim08", True)]  # sim08 serves again at the end
    assert b.host_vars_seen[0]["entries"] == {"sim08-worker": {"dspark_engine_extra_env": {
        "DSPARK_SIM_STARTUP_DELAY_S": "1", "DSPARK_SIM_FAULT": "crash_on_start"}}}
    assert (row["numerator_s"], row["denominator_s"], row["ratio"], row["target"]) == (18.0, 17.0, 1.059, 1.1)
    assert row["met"] and {c["name"]: c["value"] for c in row["checks"]} == {
        "healthy pairs at PASS": 7, "sim08 FAILED": 1, "exit code": 2}
    # a miss says what the control node's CPU did: the fake's 1 + 0.6 n for 8 and 7 pairs
    b.slow_failing = True
    assert fleet.measure_isolation(b, b.host_vars, lambda rank: True)["why"][-1].startswith(
        "The control node's own CPU (ansible-playbook, its children and the SSH masters): 5.80 s with 8 pairs "
        "against 5.20 s with 7 (1.115×; 8 / 7 = 1.143)")


def test_isolation_is_an_error_when_a_healthy_pair_does_not_pass(tmp_path):
    b = FakeBench(tmp_path, pairs=3, healthy_verdict="FAILED")
    with pytest.raises(common.BenchError, match="sim01"):
        fleet.measure_isolation(b, b.host_vars, lambda rank: True)


def test_isolation_first_provisions_the_pairs_that_lack_the_image_so_no_timed_run_copies_it(tmp_path):
    b = FakeBench(tmp_path, pairs=3)
    fleet.measure_isolation(b, b.host_vars, lambda rank: rank.name != "sim02-worker")
    assert b.calls[0] == ("provision.yml", "pair_sim02", True)
    assert b.calls[1][0] == "teardown.yml"


def test_control_cpu_counts_ansible_and_its_ssh_masters_at_each_pair_count(tmp_path):
    b = FakeBench(tmp_path, pairs=8)
    out = fleet.measure_control_cpu(b)
    assert out["sizes"] == [1, 2, 4, 8]
    # the fake: CPU = 1 + 0.5 n (ansible-playbook and children) + 0.1 n (SSH masters)
    assert [(r["pairs"], r["cpu_s"]) for r in out["audit"]["table"]] == [(1, 1.6), (2, 2.2), (4, 3.4), (8, 5.8)]
    assert out["audit"]["model"] == {"fixed_s": 1.0, "per_pair_s": 0.6, "max_residual_s": 0.0}
    assert out["audit"]["one_pair_wall_s"] == 11.0
    assert [r["masters_s"] for r in out["reprovision"]["table"]] == [0.1, 0.2, 0.4, 0.8]
    assert "the persistent SSH masters spent 0.80 s (audit) and 0.80 s (re-provision)" in "\n".join(
        _fleet.table_lines(out))
    assert len(out["projection"]) == len(fleet.NODES) * len(fleet.FLEET_SIZES)
    audits = [c for c in b.calls if c[0] == "audit.yml"]
    assert len(audits) == 1 + 2 * 4 and len([c for c in b.calls if c[0] == "provision.yml"]) == 2 * 4


def test_ssh_master_ticks_reads_only_the_persistent_masters(tmp_path):
    def proc(pid, cmdline, utime, stime):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "cmdline").write_bytes(cmdline)
        (d / "stat").write_text(f"{pid} (ssh) S 1 1 1 0 -1 4194560 100 0 0 0 {utime} {stime} 0 0 20 0 1 0 5 0 0\n")

    proc(10, b"ssh: /root/.ansible/cp/abc [mux]\0", 7, 3)
    proc(11, b"ssh\0-o\0ControlMaster=auto\0host\0", 50, 50)
    proc(12, b"sshd: root@notty\0", 90, 9)
    (tmp_path / "self").mkdir()
    assert common.ssh_master_ticks(tmp_path) == {10: 10}
    assert common.ticks_spent({10: 4, 99: 8}, {10: 10, 13: 5}) == 6 + 5


# ---- serving capacity during a rollout ------------------------------------------------------------------------
def test_capacity_finds_the_lowest_count_of_serving_pairs_and_each_pair_s_outage():
    pairs = ["p1", "p2", "p3", "p4"]
    samples = [(0.0, pairs), (1.0, ["p2", "p3", "p4"]), (2.0, ["p3", "p4"]), (3.0, ["p1", "p3", "p4"]),
               (4.0, ["p1", "p2", "p4", "stray"]), (5.0, pairs)]
    cap = _fleet.capacity(samples, pairs)
    assert cap["lowest"] == 2 and cap["lowest_at_s"] == 2.0 and cap["samples"] == 6
    assert cap["longest_outage_samples"] == {"p1": 2, "p2": 2, "p3": 1, "p4": 0}
    with pytest.raises(ValueError):
        _fleet.capacity([], pairs)


def test_wave_times_count_the_canary_as_a_wave_and_take_the_median_of_the_full_waves():
    def step(kind, wave, pairs, start, end):
        return {"step": kind, "wave": wave, "pairs": [{"pair": p} for p in pairs], "verdict": "PASS",
                "started": f"2026-12-06T05:00:{start:02d}.000Z", "ended": f"2026-12-06T05:00:{end:02d}.500Z"}

    doc = {"steps": [step("canary", None, ["p1"], 0, 10), step("stage", None, ["p2", "p3", "p4", "p5"], 10, 14),
                     step("wave", 1, ["p2", "p3"], 15, 20), step("wave", 2, ["p4", "p5"], 20, 27),
                     step("wave", 3, ["p6"], 27, 29)]}
    out = _fleet.wave_times(doc)
    assert out["waves"] == 4 and out["wave_pairs"] == 2 and out["one_wave_s"] == 6.5  # median of 5.5 and 7.5
    assert [s["seconds"] for s in out["steps"]] == [10.5, 4.5, 5.5, 7.5, 2.5]
    with pytest.raises(ValueError):
        _fleet.wave_times({"steps": [step("canary", None, ["p1"], 0, 10)]})
    with pytest.raises(ValueError):
        _fleet.wave_times({"steps": [{"step": "wave", "wave": 1, "pairs": [], "started": "x", "ended": None}]})


def test_the_report_judges_a_lower_bound_check():
    assert report.check("serving pairs", 6, 6, ">=")["met"] and not report.check("serving pairs", 5, 6, ">=")["met"]
    assert report.check_text(report.check("serving pairs", 5, 6, ">=")) == "serving pairs 5, target ≥ 6"


def test_the_rollout_ratio_projected_to_a_real_cold_start_keeps_the_fixed_costs_and_grows_every_step():
    waves = {"waves": 5, "one_wave_s": 80.0}
    # measured: 5 steps of 80 s and 60 s of staging and planning: 460 s against 400 s
    assert _fleet.rollout_ratio_at(460.0, waves, 60.0, 60.0) == 1.15
    # each step waits 720 s instead of 60: (460 + 5 × 660) / (5 × 740) = 3760 / 3700
    assert _fleet.rollout_ratio_at(460.0, waves, 60.0, 720.0) == round(3760 / 3700, 3)
    assert _fleet.rollout_ratio_at(460.0, waves, 900.0, 720.0) == 1.15  # never shrinks a step
