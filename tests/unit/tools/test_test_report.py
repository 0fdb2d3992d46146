"""tools/test_report: make test's phase times and the slowest simulator tests (artifacts/reports/TESTS.md)."""
from __future__ import annotations

import ctypes
import importlib
import sys

import pytest

ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
report = importlib.import_module("tools.test_report.__main__")
IOPRIO_GET = {"x86_64": 252, "aarch64": 31}  # ioprio_get(2), the getter of report.IOPRIO_SET's

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_30_provision" name="test_a" time="12.5"/>
<testcase classname="tests.integration.test_37_hung" name="test_b" time="61.0"><failure message="x"/></testcase>
<testcase classname="tests.integration.test_40_guard" name="test_c" time="3.2"><skipped/></testcase>
</testsuite></testsuites>
"""


@pytest.fixture
def reports(tmp_path, monkeypatch):
    """The report's paths under tmp_path: reports/ for the record, TESTS.md and the members' logs."""
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "REPORTS", tmp_path / "reports")
    monkeypatch.setattr(report, "RECORD", tmp_path / "reports" / "r.json")
    monkeypatch.setattr(report, "OUT", tmp_path / "reports" / "TESTS.md")
    monkeypatch.setattr(report, "JUNIT", tmp_path / "none.xml")


def test_the_slowest_tests_come_from_the_junit_xml_slowest_first(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text(JUNIT)
    assert report.slowest_tests(xml, 2) == [("tests.integration.test_37_hung::test_b", 61.0, "failed"),
                                            ("tests.integration.test_30_provision::test_a", 12.5, "passed")]
    assert report.slowest_tests(tmp_path / "missing.xml") == []


def test_the_report_sums_the_phases_and_names_a_failed_one():
    record = {"started": 0, "phases": [{"name": "lint", "seconds": 61.0, "code": 0},
                                       {"name": "integration", "seconds": 1500.4, "code": 1}]}
    text = report.render(record, "abc1234", [("t::x", 61.0, "failed")])
    assert "- total **26 min 01 s** (FAILED in integration)" in text
    assert "| lint | 1 min 01 s | 0 |" in text and "| integration | 25 min 00 s | 1 |" in text
    assert "| `t::x` | 61 | failed |" in text and "commit `abc1234`" in text


def test_run_records_the_phase_and_passes_its_exit_code_on(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "REPORTS", tmp_path)
    monkeypatch.setattr(report, "RECORD", tmp_path / "r.json")
    monkeypatch.setattr(report, "OUT", tmp_path / "TESTS.md")
    monkeypatch.setattr(report, "JUNIT", tmp_path / "none.xml")
    assert report.main(["begin"]) == 0
    assert report.main(["run", "ok", "--", sys.executable, "-c", "pass"]) == 0
    assert report.main(["end"]) == 0
    assert report.main(["run", "bad", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    text = (tmp_path / "TESTS.md").read_text()
    assert "| ok |" in text and "| bad | " in text and "FAILED in bad" in text
    assert report.main(["end"]) == 1  # a failed phase that did not stop make still fails the run at its end


def test_together_runs_the_members_side_by_side_and_counts_the_group_once(tmp_path, monkeypatch, capsys, reports):
    # A stand-in for make: each target says it started, then waits until all three have started (so they can
    # only end if they run side by side; one at a time, the first gives up and fails), and says its name; "bad"
    # fails at once.
    started = tmp_path / "started"
    (tmp_path / "mk").write_text(
        "import sys, time, pathlib\n"
        f"log = pathlib.Path({str(started)!r})\n"
        "if sys.argv[-1] == 'bad': raise SystemExit(5)\n"
        "if sys.argv[-1] != 'fine':\n"
        "    with open(log, 'a') as f: f.write(sys.argv[-1] + '\\n')\n"
        "    deadline = time.monotonic() + 60\n"
        "    while len(log.read_text().split()) < 3:\n"
        "        if time.monotonic() > deadline: raise SystemExit(9)\n"
        "        time.sleep(0.05)\n"
        "print('target', sys.argv[-1])\n")
    monkeypatch.setenv("MAKE", f"{sys.executable} {tmp_path / 'mk'}")
    assert report.main(["begin"]) == 0
    assert report.main(["run", "deps", "--", sys.executable, "-c", "pass"]) == 0
    assert report.main(["together", "checks", "a=one", "b=two", "c=x Y='three'"]) == 0
    assert sorted(started.read_text().split()) == ["Y=three", "one", "two"]
    record = __import__("json").loads((tmp_path / "reports" / "r.json").read_text())
    group = next(p for p in record["phases"] if p["name"] == "checks")
    members = [p for p in record["phases"] if p.get("within") == "checks"]
    assert group["members"] == ["a", "b", "c"] and group["code"] == 0
    assert [(m["name"], m["code"]) for m in members] == [("a", 0), ("b", 0), ("c", 0)]
    out = capsys.readouterr().out
    assert "target one" in out and "target Y=three" in out and (tmp_path / "reports" / "b.log").read_text() == "target two\n"
    assert report.main(["together", "more", "x=bad", "y=fine"]) == 5
    text = (tmp_path / "reports" / "TESTS.md").read_text()
    assert "FAILED in more" in text and "| checks: a ‖ b ‖ c, side by side |" in text
    assert "| &nbsp;&nbsp;x (in more) | " in text and "| &nbsp;&nbsp;y (in more) | " in text
    assert report.main(["together", "checks", "oops"]) == 64


def test_a_group_counts_once_in_the_total_and_its_members_are_listed_under_it():
    record = {"started": 0, "phases": [
        {"name": "deps", "seconds": 20.0, "code": 0},
        {"name": "checks", "seconds": 120.0, "code": 3, "members": ["lint", "unit"]},
        {"name": "lint", "seconds": 80.0, "code": 0, "within": "checks"},
        {"name": "unit", "seconds": 119.0, "code": 3, "within": "checks"}]}
    text = report.render(record, "abc1234", [])
    # 20 + 120: the members' 199 s are not counted again, and the failure is named once, by its group
    assert "- total **2 min 20 s** (FAILED in checks)" in text
    assert "| checks: lint ‖ unit, side by side | 2 min 00 s | 3 |" in text
    assert "| &nbsp;&nbsp;unit (in checks) | 1 min 59 s | 3 |" in text


def test_idle_members_run_on_idle_cpu_and_the_others_are_shown_as_they_come(tmp_path, monkeypatch, capfd, reports):
    # A stand-in for make that says which scheduling policy (SCHED_IDLE is 5 on Linux) and which I/O class (the top
    # bits of ioprio_get(2): 3 is idle) it runs under.
    (tmp_path / "mk").write_text("import ctypes, os, sys\n"
                                 f"get = {IOPRIO_GET}.get(os.uname().machine)\n"
                                 "io = ctypes.CDLL(None).syscall(get, 1, 0) >> 13 if get else 'unknown'\n"
                                 "print('target', sys.argv[-1], 'policy', os.sched_getscheduler(0), 'io', io, flush=True)\n"
                                 "raise SystemExit(4 if sys.argv[-1] == 'late' else 0)\n")
    monkeypatch.setenv("MAKE", f"{sys.executable} {tmp_path / 'mk'}")
    assert report.main(["begin"]) == 0
    assert report.main(["together", "all", "main=sims", "--idle", "lint=checks", "unit=late"]) == 4
    out = capfd.readouterr().out
    import os
    own = os.sched_getscheduler(0)  # a member before --idle keeps this process's policy (make test's checks: idle)
    own_io = ctypes.CDLL(None).syscall(IOPRIO_GET[os.uname().machine], 1, 0) >> 13  # idle too under make test
    assert f"target sims policy {own} io {own_io}\n" in out and f"target checks policy {os.SCHED_IDLE} io 3\n" in out
    assert f"target late policy {os.SCHED_IDLE} io 3\n" in out
    # the live member's output is kept in its log as well, and its end is announced without showing it again
    assert (tmp_path / "reports" / "main.log").read_text() == f"target sims policy {own} io {own_io}\n"
    assert out.count("target sims") == 1 and "---- main: exit 0 after" in out
    text = (tmp_path / "reports" / "TESTS.md").read_text()
    assert "| all: main ‖ lint ‖ unit, side by side |" in text and "FAILED in all" in text
    assert "| &nbsp;&nbsp;lint (in all, on idle CPU) | " in text and "| &nbsp;&nbsp;main (in all) | " in text
    assert report.main(["together", "x", "--idle"]) == 64
