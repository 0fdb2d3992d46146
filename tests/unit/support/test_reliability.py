"""The fault-matrix report: a row is "held" only when every test claiming it ran and passed."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import reliability

MATRIX = Path(__file__).resolve().parents[2] / "integration" / "fault_matrix.yml"


def rows():
    return [reliability.Row("a", "before launch", "fault a", "refused"),
            reliability.Row("b", "run time", "fault b", "reported"),
            reliability.Row("c", "secrets and local attackers", "fault c", "hidden")]


def test_the_shipped_matrix_loads_and_covers_every_stage():
    loaded = reliability.load_matrix(MATRIX)
    assert {r.stage for r in loaded} == set(reliability.STAGES)
    assert len({r.id for r in loaded}) == len(loaded) > 30


def test_status_follows_what_was_observed():
    a, b, c = rs = rows()
    reliability.claim(rs, "t.py::one", ("a", "b"))
    reliability.claim(rs, "t.py::two", ("a",))
    reliability.record(rs, "t.py::one", "passed", 3.0)
    assert a.status == "partly run" and b.status == "held" and c.status == "NO TEST"
    reliability.record(rs, "t.py::two", "passed", 1.0)
    assert a.status == "held"
    reliability.record(rs, "t.py::two", "error", 0.5)  # its teardown failed after the call passed
    assert a.status == "FAILED" and b.status == "held"


def test_a_failure_is_not_overwritten_by_a_later_pass_and_skips_are_not_passes():
    a, b, _unused = rs = rows()
    reliability.claim(rs, "t.py::one", ("a",))
    reliability.claim(rs, "t.py::two", ("b",))
    reliability.record(rs, "t.py::one", "failed", 2.0)
    reliability.record(rs, "t.py::one", "passed", 0.1)
    reliability.record(rs, "t.py::two", "skipped", 0.0)
    assert a.status == "FAILED" and b.status == "SKIPPED"


def test_claiming_an_unknown_row_is_an_error():
    with pytest.raises(ValueError, match="t.py::x: fault id.s. zz are not in the fault matrix"):
        reliability.claim(rows(), "t.py::x", ("a", "zz"))


def test_a_malformed_matrix_is_refused(tmp_path):
    bad = tmp_path / "m.yml"
    bad.write_text("- {id: a, stage: someday, fault: f, expect: e}\n")
    with pytest.raises(ValueError, match="stage 'someday'"):
        reliability.load_matrix(bad)
    bad.write_text("- {id: a, stage: run time, fault: f}\n")
    with pytest.raises(ValueError, match="exactly the keys"):
        reliability.load_matrix(bad)


def test_render_lists_every_row_with_its_outcome_and_the_run():
    rs = rows()
    reliability.claim(rs, "tests/integration/t.py::one", ("a",))
    reliability.record(rs, "tests/integration/t.py::one", "passed", 12.4)
    text = reliability.render(rs, when="2026-12-02 23:00 UTC", command="make test-integration", commit="abc1234")
    assert "`make test-integration` at commit `abc1234`" in text
    assert "rows: 3 (2 NO TEST, 1 held)" in text
    assert "| fault a | refused | **held** | `one` passed (12) |" in text
    assert "| fault c | hidden | **NO TEST** | none |" in text
    assert text.index("## Before launch") < text.index("## Run time") < text.index("## Secrets")


@pytest.mark.parametrize("when, outcome, expected", [
    ("call", "passed", "passed"), ("call", "failed", "failed"), ("call", "skipped", "skipped"),
    ("setup", "failed", "error"), ("teardown", "failed", "error"), ("setup", "skipped", "skipped"),
    ("setup", "passed", None), ("teardown", "passed", None),
])
def test_a_reports_outcome_is_what_the_run_records(when, outcome, expected):
    class Report:
        def __init__(self):
            self.when, self.outcome = when, outcome
            self.failed, self.skipped = outcome == "failed", outcome == "skipped"
    assert reliability.outcome_of(Report()) == expected


def test_lanes_parts_merge_into_the_whole_matrix():
    """Each lane dumps what it claimed and saw; merged, a row held in one lane and failed in the other is FAILED,
    and a row claimed by two lanes is held only when both lanes' tests passed."""
    lane_a, lane_b = rows(), rows()
    reliability.claim(lane_a, "t.py::one", ("a", "b"))
    reliability.record(lane_a, "t.py::one", "passed", 3.0)
    reliability.claim(lane_b, "u.py::two", ("a", "c"))
    reliability.record(lane_b, "u.py::two", "failed", 5.0)
    merged = rows()
    for part in (reliability.dump(lane_a), reliability.dump(lane_b)):
        reliability.merge(merged, part)
    a, b, c = merged
    assert a.claimed_by == ["t.py::one", "u.py::two"] and a.status == "FAILED"
    assert b.status == "held" and c.status == "FAILED"
    with pytest.raises(ValueError, match="zz"):
        reliability.merge(rows(), {"zz": {"claimed_by": [], "observed": []}})


def test_lanes_merge_every_lanes_junit(tmp_path):
    from tests.support import lanes

    for lane, name in (("a", "t1"), ("b", "t2")):
        (tmp_path / f"{lane}.xml").write_text(
            f'<testsuites><testsuite name="pytest"><testcase classname="c" name="{name}" time="2"/></testsuite></testsuites>')
    lanes.merge_junit([tmp_path / "a.xml", tmp_path / "b.xml", tmp_path / "missing.xml"], tmp_path / "all.xml")
    import xml.etree.ElementTree as ET

    assert [c.get("name") for c in ET.parse(tmp_path / "all.xml").getroot().iter("testcase")] == ["t1", "t2"]


def test_lanes_steps_are_picked_in_suite_order_and_a_bad_step_is_refused():
    from tests.support import lanes

    assert lanes.steps_of(["-x"]) == (["first", "pairs", "last"], ["-x"])
    assert lanes.steps_of(["-x", "--steps", "last,first", "-q"]) == (["first", "last"], ["-x", "-q"])
    for bad in (["--steps", "middle"], ["--steps", ","], ["--steps"]):
        with pytest.raises(SystemExit):
            lanes.steps_of(bad)


def test_a_later_part_forgets_only_its_own_lanes_and_reports_every_lane_on_disk(tmp_path, monkeypatch):
    from tests.support import lanes

    monkeypatch.setattr(lanes, "REPORTS", tmp_path)
    monkeypatch.setattr(lanes, "JUNIT", tmp_path / "all.xml")
    monkeypatch.delenv("DSPARK_RELIABILITY_REPORT", raising=False)
    ran = []

    def fake_step(step_lanes, extra, out=None):
        for lane in step_lanes:
            ran.append(lane)
            (tmp_path / f"integration-junit-{lane}.xml").write_text(
                f'<testsuite name="pytest"><testcase classname="c" name="{lane}" time="1"/></testsuite>')
        return {lane: 0 for lane in step_lanes}

    monkeypatch.setattr(lanes, "run_step", fake_step)
    (tmp_path / "integration-junit-last.xml").write_text("stale")  # an earlier run's
    assert lanes.main(["--steps", "first,pairs"]) == 0
    assert ran == ["first", "a", "b", "c"] and not (tmp_path / "integration-junit-last.xml").exists()
    assert lanes.main(["--steps", "last"]) == 0
    import xml.etree.ElementTree as ET

    assert [c.get("name") for c in ET.parse(tmp_path / "all.xml").getroot().iter("testcase")] == ["first", "a", "b", "c", "last"]
