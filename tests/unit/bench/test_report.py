"""bench/_report.py: ratios, the ≤ targets, the guard's theoretical time, restarts, task times and
artifacts/reports/PERFORMANCE.md rendered from a run."""
from __future__ import annotations

import math

import pytest

import _report as report


# ---- ratio and targets ------------------------------------------------------------------------
def test_ratio_divides_and_rounds_to_three_digits():
    assert report.ratio(12.0, 60.0) == 0.2
    assert report.ratio(1.0, 3.0) == 0.333
    assert report.ratio(0.0, 5.0) == 0.0


@pytest.mark.parametrize("num,den", [(1.0, 0.0), (1.0, -2.0), (1.0, math.nan), (-1.0, 2.0), (math.inf, 2.0)])
def test_ratio_refuses_what_is_not_a_duration(num, den):
    with pytest.raises(ValueError):
        report.ratio(num, den)


def test_a_value_equal_to_the_target_meets_it():
    assert report.target_met(0.2, 0.2)
    assert report.target_met(0.199, 0.2)
    assert not report.target_met(0.201, 0.2)
    assert report.target_met(0, 0, "==")
    assert not report.target_met(1, 0, "==")


def test_an_unknown_comparison_is_refused():
    with pytest.raises(ValueError):
        report.target_met(1, 2, "<")


@pytest.mark.parametrize("num,met", [(20.0, True), (20.04, True), (20.06, False), (25.0, False)])
def test_a_row_judges_the_ratio_as_shown(num, met):
    # 20.04/100 is shown as 0.200 and meets ≤ 0.2; 20.06/100 is shown as 0.201 and misses it
    r = report.row("x", "X", ("a", num), ("b", 100.0), 0.2)
    assert r["met"] is met
    assert r["ratio"] == round(num / 100, 3)
    assert bool(r["why"]) is not met


def test_a_missed_ratio_says_why_with_both_figures():
    r = report.row("x", "Re-provision", ("re-provision", 30.0), ("fresh", 100.0), 0.2, notes=["how it was measured"])
    assert not r["met"]
    assert r["why"] == ["ratio 0.300 is above the target 0.2 (re-provision 30.00 s against fresh 100.00 s)"]
    assert r["notes"] == ["how it was measured"]
    assert r["numerator_s"] == 30.0 and r["denominator_s"] == 100.0


def test_a_failed_check_misses_the_row_even_when_the_ratio_is_met():
    c = report.check("container restarts", 2, 0, "==")
    r = report.row("x", "X", ("a", 1.0), ("b", 10.0), 0.2, checks=[c, report.check("second staging", 2.5, 3, "<=", "s")])
    assert r["ratio"] == 0.1
    assert not r["met"]
    assert r["why"] == ["container restarts 2, target = 0: missed"]


def test_a_row_with_the_ratio_and_every_check_met_is_met():
    r = report.row("x", "X", ("a", 1.0), ("b", 10.0), 0.2, checks=[report.check("second staging", 3.0, 3, "<=", "s")])
    assert r["met"] and r["why"] == []


def test_causes_follow_a_miss_and_are_left_out_of_a_met_row():
    cause = "two bare loads at once take 1.6x one load on this machine"
    missed = report.row("x", "X", ("a", 30.0), ("b", 20.0), 1.25, causes=[cause])
    assert missed["why"][0].startswith("ratio 1.500 is above the target 1.25")
    assert missed["why"][1:] == [cause]
    met = report.row("x", "X", ("a", 20.0), ("b", 20.0), 1.25, causes=[cause])
    assert met["met"] and met["why"] == []


def test_check_text_shows_value_target_and_unit():
    assert report.check_text(report.check("second staging", 3.4, 3.0, "<=", "s")) == "second staging 3.4 s, target ≤ 3 s"


# ---- the guard's theoretical server time ---------------------------------------------------------
def test_equal_requests_take_whole_waves():
    t = report.guard_theory([128] * 64, 16, 0.02)
    assert t["waves"] == 4
    assert t["scheduled_s"] == pytest.approx(4 * 128 * 0.02)
    assert t["nominal_s"] == pytest.approx(4 * 128 * 0.02)
    assert t["tokens"] == 64 * 128


def test_short_answers_first_leave_three_waves_of_long_ones():
    tokens = [3] * 16 + [128] * 48  # the guard's order: the accuracy set first
    t = report.guard_theory(tokens, 16, 0.02)
    assert t["scheduled_s"] == pytest.approx(3 * 0.02 + 3 * 128 * 0.02)
    assert t["nominal_s"] == pytest.approx(4 * 128 * 0.02)
    assert t["scheduled_s"] < t["nominal_s"]


def test_a_partial_last_wave_still_counts_and_prefill_is_per_request():
    t = report.guard_theory([10] * 17, 16, 0.1, prefill_s=0.5)
    assert t["waves"] == 2
    assert t["scheduled_s"] == pytest.approx(2 * (0.5 + 1.0))


def test_pool_makespan_takes_jobs_in_order_by_the_first_free_worker():
    assert report.pool_makespan([5, 1, 1, 1], 2) == 5
    assert report.pool_makespan([1, 1, 1, 5], 2) == 6
    assert report.pool_makespan([], 4) == 0.0
    with pytest.raises(ValueError):
        report.pool_makespan([1], 0)


# ---- restarts -------------------------------------------------------------------------------------
def _c(cid="a", started="t1", count=0):
    return {"id": cid, "started_at": started, "restart_count": count}


def test_restarts_counts_recreated_and_restarted_containers():
    before = {"head": _c(), "worker": _c("w"), "gone": _c("g"), "none": None}
    after = {"head": _c(), "worker": _c("w2", "t2"), "gone": None, "none": None}
    assert report.restarts(before, after) == {"gone": 1, "head": 0, "none": 0, "worker": 1}


def test_restarts_of_the_same_container_count_once_each():
    assert report.restarts({"r": _c()}, {"r": _c(started="t2")}) == {"r": 1}
    assert report.restarts({"r": _c(count=1)}, {"r": _c(started="t3", count=3)}) == {"r": 2}
    assert report.restarts({"r": None}, {"r": _c()}) == {"r": 1}


# ---- task times and machine facts -----------------------------------------------------------------
JUNIT = """<?xml version="1.0" ?>
<testsuites><testsuite name="provision">
  <testcase classname="a.yml:1" name="[sim01-head] Provision GB10 pairs: image | Probe" time="1.5"/>
  <testcase classname="a.yml:1" name="[sim01-worker] Provision GB10 pairs: image | Probe" time="2.25"/>
  <testcase classname="a.yml:9" name="[sim01-head] Provision GB10 pairs: engine | Wait [ready]" time="7.0"/>
  <testcase classname="a.yml:12" name="[sim01-head] Provision GB10 pairs: gate | Run" time="0.5"/>
</testsuite></testsuites>"""


def test_slowest_tasks_take_the_slowest_host_of_each_task():
    assert report.slowest_tasks(JUNIT) == [("Provision GB10 pairs: engine | Wait [ready]", 7.0),
                                           ("Provision GB10 pairs: image | Probe", 2.25),
                                           ("Provision GB10 pairs: gate | Run", 0.5)]
    assert report.slowest_tasks(JUNIT, limit=1) == [("Provision GB10 pairs: engine | Wait [ready]", 7.0)]


def test_tasks_run_counts_each_task_once_and_leaves_out_tasks_skipped_everywhere():
    doc = JUNIT.replace("</testsuite>", """  <testcase classname="a.yml:20" name="[sim01-head] Provision GB10 pairs: gate | Skip me" time="0.01">
    <skipped message="skipped"/></testcase>
  <testcase classname="a.yml:21" name="[sim01-worker] Provision GB10 pairs: gate | Half" time="0.01">
    <skipped message="skipped"/></testcase>
  <testcase classname="a.yml:21" name="[sim01-head] Provision GB10 pairs: gate | Half" time="0.3"/>
</testsuite>""")
    assert report.tasks_run(JUNIT) == 3
    assert report.tasks_run(doc) == 4  # "Half" ran on the head; "Skip me" ran nowhere


def test_meminfo_total():
    assert report.meminfo_total_bytes("MemFree: 1 kB\nMemTotal:       24576000 kB\n") == 24576000 * 1024
    assert report.meminfo_total_bytes("MemFree: 1 kB\n") is None


# ---- artifacts/reports/PERFORMANCE.md ------------------------------------------------------------------------------
def _run(rows):
    return {"command": "make bench (which runs .venv/bin/python bench/ratios.py)", "date": "2026-08-03T10:00:00Z",
            "duration_s": 812.4, "commit": {"sha": "0123abc", "dirty": True},
            "machine": {"cores": 2, "memory_bytes": 24 << 30, "kernel": "6.1.0", "python": "3.11.7"},
            "settings": {"pairs": 8, "forks": 16}, "results": rows, "errors": []}


def _rows():
    met = report.row("reprovision", "Re-provision vs fresh", ("re-provision", 10.0), ("fresh", 80.0), 0.2,
                     notes=["fresh after teardown"], checks=[report.check("container restarts", 0, 0, "==")],
                     extra={"restarts per rank": {"sim01-head": 0}, "slowest tasks": [("engine | Wait", 3.2)]})
    missed = report.row("audit-naive", "One call per rank vs naive", ("audit.yml", 9.0), ("naive | audit", 12.0), 0.5,
                        notes=["the naive playbook judges nothing"])
    return [met, missed]


def test_render_has_every_row_with_its_figures_and_verdict():
    doc = report.render(_run(_rows()))
    ratios = doc.split("## Ratios", 1)[1].split("## Other targets", 1)[0]
    row_lines = [ln for ln in ratios.splitlines() if ln.startswith("| Re-provision vs fresh |")
                 or ln.startswith("| One call per")]
    assert len(row_lines) == 2
    reprov, naive = row_lines
    assert "re-provision: 10.00 s" in reprov and "fresh: 80.00 s" in reprov and "| 0.125 |" in reprov
    assert "| ≤ 0.2 | met |" in reprov and "fresh after teardown" in reprov
    assert "| 0.750 |" in naive and "| ≤ 0.5 | **missed** |" in naive
    assert "naive \\| audit" in naive  # a pipe in a label does not break the table
    assert "## Ratios (1 of 2 met)" in doc


def test_render_says_why_a_target_was_missed():
    doc = report.render(_run(_rows()))
    why = "Missed: ratio 0.750 is above the target 0.5 (audit.yml 9.00 s against naive | audit 12.00 s)."
    naive_line = next(ln for ln in doc.splitlines() if ln.startswith("| One call per"))
    assert why.replace("|", "\\|") in naive_line
    assert "the naive playbook judges nothing" in naive_line
    missed = doc.split("## Missed targets", 1)[1].split("## Details", 1)[0]
    assert "**One call per rank vs naive**" in missed and "ratio 0.750 is above the target 0.5" in missed
    assert "Re-provision" not in missed


def test_render_records_command_date_commit_and_machine():
    doc = report.render(_run(_rows()))
    assert "`make bench (which runs .venv/bin/python bench/ratios.py)`" in doc
    assert "2026-08-03T10:00:00Z" in doc
    assert "`0123abc` with uncommitted changes" in doc
    assert "2 cores" in doc and "24.0 GiB memory" in doc
    assert "pairs 8, forks 16" in doc


def test_render_lists_checks_and_extra_figures():
    doc = report.render(_run(_rows()))
    assert "| Re-provision vs fresh | container restarts = 0 | 0 | met |" in doc
    assert "| restarts per rank | sim01-head 0 |" in doc
    assert "| slowest tasks | engine \\| Wait (3.2 s) |" in doc


def test_render_with_every_target_met_says_so():
    doc = report.render(_run(_rows()[:1]))
    assert "None: every target was met." in doc
    assert "**missed**" not in doc


# ---- CPU accounting of the machine ----------------------------------------------------------------
STAT = """cpu  100 5 50 800 20 3 2 0 0 0
cpu0 50 2 25 400 10 1 1 0 0 0
intr 12345
"""


def test_proc_stat_cpu_counts_idle_and_iowait_as_not_busy():
    busy, total = report.proc_stat_cpu(STAT)
    assert total == 100 + 5 + 50 + 800 + 20 + 3 + 2
    assert busy == total - 800 - 20


def test_proc_stat_cpu_without_the_cpu_line_is_an_error():
    with pytest.raises(ValueError):
        report.proc_stat_cpu("cpu0 1 2 3 4\n")


def test_busy_fraction_between_two_readings():
    assert report.busy_fraction((100, 1000), (250, 1200)) == 0.75
    assert report.busy_fraction((100, 1000), (100, 1000)) is None


# ---- rows in bytes (the relay's control-node traffic) ---------------------------------------------
def test_a_bytes_row_is_judged_and_explained_in_bytes():
    r = report.row("relay-bytes", "Bytes", ("sent", 1_031_000), ("archive", 1_000_000), 1.02, unit="bytes",
                   causes=["a converged run sends 6,000 bytes"])
    assert r["ratio"] == 1.031 and not r["met"]
    assert r["why"] == ["ratio 1.031 is above the target 1.02 (sent 1,031,000 bytes against archive 1,000,000 bytes)",
                        "a converged run sends 6,000 bytes"]
    assert r["numerator"] == {"label": "sent", "value": 1_031_000, "unit": "bytes"}
    assert "numerator_s" not in r and "seconds" not in r["denominator"]
    assert report.row("relay-bytes", "Bytes", ("sent", 1_001_000), ("archive", 1_000_000), 1.02, unit="bytes")["met"]


def test_render_shows_a_bytes_row_as_exact_byte_counts():
    rows = _rows() + [report.row("relay-bytes", "Bytes per pair", ("sent", 4_300_000_000), ("archive", 4_295_000_000),
                                 1.02, unit="bytes")]
    line = next(ln for ln in report.render(_run(rows)).splitlines() if ln.startswith("| Bytes per pair |"))
    assert "sent: 4,300,000,000 bytes" in line and "archive: 4,295,000,000 bytes" in line and "| 1.001 |" in line


def test_a_row_written_before_units_reads_as_seconds():
    assert report.part_text({"label": "fresh", "seconds": 88.7}) == "fresh: 88.70 s"
