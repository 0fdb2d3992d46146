"""tools/test_report: make test's phase times and the slowest simulator tests (artifacts/reports/TESTS.md)."""
from __future__ import annotations

import importlib
import sys

ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
report = importlib.import_module("tools.test_report.__main__")

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_30_provision" name="test_a" time="12.5"/>
<testcase classname="tests.integration.test_37_hung" name="test_b" time="61.0"><failure message="x"/></testcase>
<testcase classname="tests.integration.test_40_guard" name="test_c" time="3.2"><skipped/></testcase>
</testsuite></testsuites>
"""


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
    monkeypatch.setattr(report, "REPORTS", tmp_path)
    monkeypatch.setattr(report, "RECORD", tmp_path / "r.json")
    monkeypatch.setattr(report, "OUT", tmp_path / "TESTS.md")
    monkeypatch.setattr(report, "JUNIT", tmp_path / "none.xml")
    assert report.main(["begin"]) == 0
    assert report.main(["run", "ok", "--", sys.executable, "-c", "pass"]) == 0
    assert report.main(["run", "bad", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    text = (tmp_path / "TESTS.md").read_text()
    assert "| ok |" in text and "| bad | " in text and "FAILED in bad" in text


def test_together_runs_the_members_side_by_side_and_counts_the_group_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "REPORTS", tmp_path / "reports")
    monkeypatch.setattr(report, "RECORD", tmp_path / "reports" / "r.json")
    monkeypatch.setattr(report, "OUT", tmp_path / "reports" / "TESTS.md")
    monkeypatch.setattr(report, "JUNIT", tmp_path / "none.xml")
    # a stand-in for make: each target sleeps 1 s and says its name; "bad" fails
    (tmp_path / "mk").write_text("import sys, time\ntime.sleep(1)\nprint('target', sys.argv[-1])\n"
                                 "raise SystemExit(5 if sys.argv[-1] == 'bad' else 0)\n")
    monkeypatch.setenv("MAKE", f"{sys.executable} {tmp_path / 'mk'}")
    assert report.main(["begin"]) == 0
    assert report.main(["run", "deps", "--", sys.executable, "-c", "pass"]) == 0
    assert report.main(["together", "checks", "a=one", "b=two", "c=x Y='three'"]) == 0
    record = __import__("json").loads((tmp_path / "reports" / "r.json").read_text())
    group = next(p for p in record["phases"] if p["name"] == "checks")
    members = [p for p in record["phases"] if p.get("within") == "checks"]
    assert [m["name"] for m in members] == ["a", "b", "c"] and all(m["seconds"] >= 1 for m in members)
    assert group["seconds"] < 2.5  # side by side: not the 3 s of the three in a row
    out = capsys.readouterr().out
    assert "target one" in out and "target Y=three" in out and (tmp_path / "reports" / "b.log").read_text() == "target two\n"
    assert report.main(["together", "more", "x=bad", "y=fine"]) == 5
    text = (tmp_path / "reports" / "TESTS.md").read_text()
    assert "FAILED in more" in text and "| checks: a ‖ b ‖ c, side by side |" in text
    assert "(in checks)" in text
    record = __import__("json").loads((tmp_path / "reports" / "r.json").read_text())
    counted = sum(p["seconds"] for p in record["phases"] if not p.get("within"))
    assert counted < 4.5 < sum(p["seconds"] for p in record["phases"])  # the members are not counted again
    assert f"total **{report._clock(counted)}**" in text
    assert report.main(["together", "checks", "oops"]) == 64
