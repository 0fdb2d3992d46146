"""tools/test_report: make test's phase times and the slowest simulator tests (artifacts/reports/TESTS.md)."""
from __future__ import annotations

import ctypes
import importlib
import json
import os
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
    monkeypatch.setattr(report, "PROBE_N", 10**5)  # the speed probe's loop, short in a unit test
    monkeypatch.setattr(report, "FORK_PROBE", (4, 10_000))  # and the fork probe


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


def test_run_records_the_phase_and_passes_its_exit_code_on(tmp_path, reports):
    assert report.main(["begin"]) == 0
    assert report.main(["run", "ok", "--", sys.executable, "-c", "pass"]) == 0
    assert report.main(["end"]) == 0
    record = json.loads((tmp_path / "reports" / "r.json").read_text())
    assert record["probe_begin_s"] > 0 and record["probe_end_s"] > 0, record
    assert (f"- machine speed: a fixed pure-Python loop (the sum of i*i for i below 100,000) took "
            f"{record['probe_begin_s']:.2f} s of CPU at the start of the run and {record['probe_end_s']:.2f} s at its "
            "end") in (tmp_path / "reports" / "TESTS.md").read_text()
    assert record["fork_begin_ms"] > 0 and record["fork_end_ms"] > 0, record
    assert (f"- fork cost: a child forked from a parent of 10,000 small objects, reading each and exiting (what each "
            f"of Ansible's task workers does), took {record['fork_begin_ms']:.0f} ms of CPU at the start of the run and "
            f"{record['fork_end_ms']:.0f} ms at its end") in (tmp_path / "reports" / "TESTS.md").read_text()
    assert report.main(["run", "bad", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    text = (tmp_path / "reports" / "TESTS.md").read_text()
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


def test_a_member_named_after_another_starts_when_that_one_has_ended_and_the_rest_run_beside(tmp_path, monkeypatch,
                                                                                              capsys, reports):
    # A stand-in for make that writes when each target starts and ends: "first" runs 0.6 s, "beside" 1.5 s,
    # "later" 0.1 s; "first" fails, and "later" (after it) still runs.
    events = tmp_path / "events"
    (tmp_path / "mk").write_text(
        "import sys, time\n"
        f"log = {str(events)!r}\n"
        "name = sys.argv[-1]\n"
        "open(log, 'a').write(f'{time.monotonic()} start {name}\\n')\n"
        "time.sleep({'first': 0.6, 'beside': 1.5}.get(name, 0.1))\n"
        "open(log, 'a').write(f'{time.monotonic()} end {name}\\n')\n"
        "raise SystemExit(7 if name == 'first' else 0)\n")
    monkeypatch.setenv("MAKE", f"{sys.executable} {tmp_path / 'mk'}")
    assert report.main(["begin"]) == 0
    assert report.main(["together", "tail", "one=first", "two=beside", "three@one=later"]) == 7
    seen = {f"{what} {name}": float(at) for at, what, name in (line.split() for line in events.read_text().splitlines())}
    assert seen["start later"] >= seen["end first"]  # after "first" ended (failed)
    assert seen["start later"] < seen["end beside"]  # while "beside" still ran: not after the whole group
    assert seen["start beside"] < seen["end first"]  # "beside" did not wait
    record = __import__("json").loads((tmp_path / "reports" / "r.json").read_text())
    three = next(p for p in record["phases"] if p["name"] == "three")
    assert three["after"] == "one" and three["code"] == 0 and three["within"] == "tail"
    assert "| &nbsp;&nbsp;three (in tail, after one) | " in (tmp_path / "reports" / "TESTS.md").read_text()
    assert "three: started (make later) beside the others of tail after one" in capsys.readouterr().out
    # the member it waits for must be named before it, and exist
    assert report.main(["together", "tail", "three@one=later", "one=first"]) == 64
    assert report.main(["together", "tail", "one=first", "three@nobody=later"]) == 64


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


def test_idle_members_run_on_idle_cpu_and_the_first_is_shown_as_it_comes(tmp_path, monkeypatch, capfd, reports):
    # A stand-in for make that says which scheduling policy (SCHED_IDLE is 5 on Linux) and which I/O class (the top
    # bits of ioprio_get(2): 3 is idle) it runs under.
    (tmp_path / "mk").write_text("import ctypes, os, sys\n"
                                 f"get = {IOPRIO_GET}.get(os.uname().machine)\n"
                                 "io = ctypes.CDLL(None).syscall(get, 1, 0) >> 13 if get else 'unknown'\n"
                                 "print('target', sys.argv[-1], 'policy', os.sched_getscheduler(0), 'io', io, flush=True)\n"
                                 "raise SystemExit(4 if sys.argv[-1] == 'late' else 0)\n")
    monkeypatch.setenv("MAKE", f"{sys.executable} {tmp_path / 'mk'}")
    assert report.main(["begin"]) == 0
    assert report.main(["together", "all", "main=sims", "unit=tests", "--idle", "lint=checks", "late=late"]) == 4
    out = capfd.readouterr().out
    import os
    own = os.sched_getscheduler(0)  # a member before --idle keeps this process's policy (make test's checks: idle)
    own_io = ctypes.CDLL(None).syscall(IOPRIO_GET[os.uname().machine], 1, 0) >> 13  # idle too under make test
    assert f"target sims policy {own} io {own_io}\n" in out and f"target checks policy {os.SCHED_IDLE} io 3\n" in out
    assert f"target late policy {os.SCHED_IDLE} io 3\n" in out and f"target tests policy {own} io {own_io}\n" in out
    # the live member's output is kept in its log as well, and its end is announced without showing it again
    assert (tmp_path / "reports" / "main.log").read_text() == f"target sims policy {own} io {own_io}\n"
    assert out.count("target sims") == 1 and "---- main: exit 0 after" in out
    # another member before --idle is not idle, but its output comes whole, when it ends, as the idle members' do
    assert out.count("target tests") == 1 and "---- unit: exit 0 after" in out and "---- end of unit ----" in out
    assert out.index("---- unit: exit 0 after") < out.index("target tests") < out.index("---- end of unit ----")
    text = (tmp_path / "reports" / "TESTS.md").read_text()
    assert "| all: main ‖ unit ‖ lint ‖ late, side by side |" in text and "FAILED in all" in text
    assert "| &nbsp;&nbsp;lint (in all, on idle CPU) | " in text and "| &nbsp;&nbsp;main (in all) | " in text
    assert "| &nbsp;&nbsp;unit (in all) | " in text
    assert report.main(["together", "x", "--idle"]) == 64


def test_a_cpu_sample_reads_busy_and_all_ticks_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice: iowait is idle time, steal is busy
    stat.write_text("cpu  100 5 40 800 50 3 2 1 0 0\ncpu0 50 2 20 400 25 1 1 0 0 0\n")
    assert report.cpu_sample(stat) == (151, 1001)
    stat.write_text("intr 1 2 3\n")
    assert report.cpu_sample(stat) is None
    assert report.cpu_sample(tmp_path / "missing") is None


def test_cpu_between_gives_the_busy_share_and_the_busy_core_seconds():
    tick = __import__("os").sysconf("SC_CLK_TCK")
    assert report.cpu_between((1000, 4000), (1000 + 3 * tick, 4000 + 4 * tick)) == {
        "cpu_busy_pct": 75.0, "cpu_busy_s": 3.0}
    assert report.cpu_between(None, (1, 2)) == {} and report.cpu_between((5, 10), (5, 10)) == {}


def test_a_phase_records_at_least_the_cpu_its_own_work_used(reports, tmp_path):
    """The machine's busy time during a phase counts every process, so it is at least the phase's own."""
    assert report.main(["begin"]) == 0
    spin = "import time\nwhile time.process_time() < 0.5:\n    pass\n"
    assert report.main(["run", "spin", "--", sys.executable, "-c", spin]) == 0
    phase = __import__("json").loads((tmp_path / "reports" / "r.json").read_text())["phases"][0]
    assert phase["cpu_busy_s"] >= 0.45, phase  # 0.5 s of its own, less a tick of rounding at each end
    assert 0 < phase["cpu_busy_pct"] <= 100, phase


def test_the_report_shows_each_phase_s_busy_cores_and_the_run_s_cpu_time():
    record = {"started": 0, "cores": 2, "phases": [
        {"name": "deps", "seconds": 20.0, "code": 0, "cpu_busy_pct": 50.0, "cpu_busy_s": 20.0},
        {"name": "checks", "seconds": 100.0, "code": 0, "members": ["lint", "unit"], "cpu_busy_pct": 90.0,
         "cpu_busy_s": 180.0},
        {"name": "lint", "seconds": 80.0, "code": 0, "within": "checks"},
        {"name": "unit", "seconds": 99.0, "code": 0, "within": "checks"}]}
    text = report.render(record, "abc1234", [])
    # 200 core-seconds busy in 120 s of 2 cores: 83 %; never idle, 2 cores do that work in 100 s
    assert ("- CPU: the machine's cores were busy 83 % of the run, 3 min 20 s of CPU time in all; on 2 cores "
            "that are never idle, the same work takes 1 min 40 s") in text
    assert "| deps | 20 s | 0 | 50 % |" in text and "| checks: lint ‖ unit, side by side | 1 min 40 s | 0 | 90 % |" in text
    assert "| &nbsp;&nbsp;lint (in checks) | 1 min 20 s | 0 | - |" in text
    # a record from before the CPU was sampled: no CPU line, a dash in the column
    del record["phases"][0]["cpu_busy_s"], record["phases"][0]["cpu_busy_pct"]
    text = report.render(record, "abc1234", [])
    assert "- CPU:" not in text and "| deps | 20 s | 0 | - |" in text


def test_the_speed_probe_measures_the_cpu_of_its_loop():
    # CPU time, not wall time: the figure is the loop's own work, and four times the loop takes about four times it
    small, large = report.speed_probe(10**6), report.speed_probe(4 * 10**6)
    assert 0 < small < large and large > 2 * small, (small, large)
    record = {"started": 0, "phases": [], "probe_begin_s": 0.5}
    text = report.render(record, "abc1234", [])
    assert "took 0.50 s of CPU at the start of the run (lower is faster" in text and "at its end" not in text
    assert "machine speed" not in report.render({"started": 0, "phases": []}, "abc1234", [])


def test_the_fork_probe_counts_the_children_s_cpu_and_grows_with_what_they_touch():
    # the children's own CPU is counted (a parent that only forks and waits spends almost none of it), and a child
    # that touches twenty times the objects costs more
    small, large = report.fork_probe(8, 20_000), report.fork_probe(8, 400_000)
    assert 0 < small < large, (small, large)
    record = {"started": 0, "phases": [], "fork_begin_ms": 61.4}
    text = report.render(record, "abc1234", [])
    assert "took 61 ms of CPU at the start of the run (lower is faster" in text and "ms at its end" not in text
    assert "fork cost" not in report.render({"started": 0, "phases": []}, "abc1234", [])


def test_a_failed_run_ends_with_the_failed_tests_and_their_assertion_lines(tmp_path, reports, monkeypatch, capsys):
    junit = tmp_path / "j.xml"
    junit.write_text("""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_30_provision" name="test_a" time="1"/>
<testcase classname="tests.integration.test_70_systems" name="test_lanes[x]" time="2"><failure message="m">def f():
&gt;       assert gap &gt; 0.2
E       AssertionError: lane 2 gap 0.11
E       assert 0.11 &gt; 0.2</failure></testcase>
<testcase classname="tests.integration.test_35_faults" name="test_lock" time="2"><error message="fixture broke"/></testcase>
</testsuite></testsuites>
""")
    monkeypatch.setattr(report, "JUNIT", junit)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "unit-plugins.log").write_text(
        "tests/unit/x.py ..F\nFAILED tests/unit/x.py::test_y - assert 1 == 2\nnot a summary FAILED line\n")
    (tmp_path / "reports" / "integration.log").write_text(  # the lane's own summary of a test the XML names
        "[b] FAILED tests/integration/test_70_systems.py::test_lanes[x] - AssertionError: lane 2\n"
        # and of one it does not, whose name only starts with a named one's
        "[a] ERROR tests/integration/test_35_faults.py::test_lock_released - fixture broke\n")
    assert report.failed_tests() == [
        "FAILED tests/integration/test_70_systems.py::test_lanes[x]",
        "    E       AssertionError: lane 2 gap 0.11", "    E       assert 0.11 > 0.2",
        "FAILED tests/integration/test_35_faults.py::test_lock", "    fixture broke",
        "integration: [a] ERROR tests/integration/test_35_faults.py::test_lock_released - fixture broke",
        "unit-plugins: FAILED tests/unit/x.py::test_y - assert 1 == 2"]
    report._save({"started": 0, "phases": [{"name": "unit", "seconds": 1, "code": 1}]})
    assert report.main(["end"]) == 1
    out = capsys.readouterr()
    assert out.out.splitlines()[-1] == "[test] unit-plugins: FAILED tests/unit/x.py::test_y - assert 1 == 2"
    assert "[test] FAILED: unit" in out.err


def test_a_green_run_prints_no_failed_tests(tmp_path, reports, capsys):
    report._save({"started": 0, "phases": [{"name": "unit", "seconds": 1, "code": 0}]})
    (tmp_path / "reports" / "unit.log").write_text("FAILED tests/unit/x.py::test_y - left over from an old run\n")
    assert report.main(["end"]) == 0
    assert "FAILED" not in capsys.readouterr().out


def test_an_earlier_run_s_logs_and_xml_are_not_this_run_s_failures(tmp_path, reports, monkeypatch, capsys):
    old = tmp_path / "reports" / "unit-plugins.log"
    old.parent.mkdir()
    old.write_text("FAILED tests/unit/x.py::test_y - left over from an old run\n")
    junit = tmp_path / "j.xml"
    junit.write_text(JUNIT)  # test_b failed in it
    for path in (old, junit):
        os.utime(path, (1000.0, 1000.0))
    monkeypatch.setattr(report, "JUNIT", junit)
    report._save({"started": 2000.0, "phases": []})
    assert report.main(["run", "deps", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert "FAILED" not in capsys.readouterr().out
    assert report.failed_tests(since=999.0) == [
        "FAILED tests/integration/test_37_hung.py::test_b", "    x",
        "unit-plugins: FAILED tests/unit/x.py::test_y - left over from an old run"]


def test_the_tests_that_used_the_most_controller_cpu_come_from_the_junit_properties(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text("""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="t" name="cheap_but_slow" time="90"><properties>
<property name="controller_cpu_s" value="4.0"/></properties></testcase>
<testcase classname="t" name="hungry" time="30"><properties><property name="other" value="x"/>
<property name="controller_cpu_s" value="41.5"/></properties></testcase>
<testcase classname="t" name="unmeasured" time="100"/>
<testcase classname="t" name="garbled" time="1"><properties><property name="controller_cpu_s" value="n/a"/>
</properties></testcase>
</testsuite></testsuites>
""")
    hungry = report.cpu_heaviest_tests(xml)
    assert hungry == [("t::hungry", 41.5, 30.0), ("t::cheap_but_slow", 4.0, 90.0)]
    assert report.slowest_tests(xml, 1) == [("t::unmeasured", 100.0, "passed")]
    text = report.render({"started": 0, "phases": []}, "abc1234", [], hungry)
    assert "## The 2 simulator tests that used the most controller CPU" in text
    assert "| `t::hungry` | 42 | 30 |" in text
    assert "most controller CPU" not in report.render({"started": 0, "phases": []}, "abc1234", [])
