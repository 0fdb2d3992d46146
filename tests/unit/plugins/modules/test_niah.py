"""gb10.dspark.niah end to end: main() in-process against the HTTP fake engine of the module_utils tests."""
from __future__ import annotations

import json

import pytest

from ansible_collections.gb10.dspark.plugins.modules import niah
from tests.unit.plugins.module_utils.serving.test_niah import SERVED, SMALL_DEPTHS, FakeEngine


@pytest.fixture(name="engine")
def _engine():
    engine = FakeEngine()
    yield engine
    engine.stop()


def args(engine, tmp_path, **kw) -> dict:
    base = {"rank": "spark-01", "base_url": engine.url, "model": SERVED, "output_dir": str(tmp_path / "niah"),
            "run_key": "run-1"}
    base.update(kw)
    return base


def test_run_passes_and_writes_the_summary(run_module, engine, tmp_path):
    result = run_module(niah, args(engine, tmp_path))
    assert result["failed"] is False and result["changed"] is True
    assert result["ran"] == SMALL_DEPTHS and result["resumed"] == []
    assert result["summary"]["status"] == "PASS" and result["summary"]["pass_count"] == 3
    assert "diff" not in result
    assert engine.completion_lengths() == SMALL_DEPTHS
    on_disk = json.loads((tmp_path / "niah" / "niah.json").read_text())
    assert on_disk == result["summary"]
    again = run_module(niah, args(engine, tmp_path), diff=True)
    assert again["changed"] is False and again["resumed"] == SMALL_DEPTHS
    assert again["diff"]["before"] == again["diff"]["after"] == {f"depth-{d}": "PASS" for d in SMALL_DEPTHS}
    assert engine.completion_lengths() == SMALL_DEPTHS  # nothing new sent


def test_model_fail_is_a_result_not_a_module_failure(run_module, engine, tmp_path):
    engine.answer = "no idea"
    result = run_module(niah, args(engine, tmp_path), diff=True)
    assert result["failed"] is False and result["changed"] is True
    assert result["summary"]["status"] == "FAIL" and result["summary"]["fail_count"] == 3
    assert result["diff"]["before"] == {} and set(result["diff"]["after"].values()) == {"FAIL"}


def test_setup_problem_fails_with_rank_expected_and_actual(run_module, engine, tmp_path):
    result = run_module(niah, args(engine, tmp_path, model="deepseek-v4-pro"))
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == f"rank spark-01: served model is [{SERVED}], expected deepseek-v4-pro"
    assert not (tmp_path / "niah").exists()


def test_run_key_clash_fails_and_writes_nothing(run_module, engine, tmp_path):
    run_module(niah, args(engine, tmp_path, fractions=[0.25]))
    before = sorted(p.name for p in (tmp_path / "niah").iterdir())
    result = run_module(niah, args(engine, tmp_path, run_key="run-2"))
    assert result["failed"] is True
    assert result["msg"] == f"rank spark-01: {tmp_path / 'niah'} holds the rows of run run-1, this run is run-2"
    assert sorted(p.name for p in (tmp_path / "niah").iterdir()) == before


@pytest.mark.parametrize("change, text", [
    ({"fractions": [0.5, 1.5]}, "fractions must lie in (0, 1], got 1.5"),
    ({"reserve": 0}, "reserve must be at least 1, got 0"),
    ({"request_timeout": -1}, "request_timeout must be greater than 0, got -1.0"),
])
def test_invalid_options_fail_clearly(run_module, engine, tmp_path, change, text):
    result = run_module(niah, args(engine, tmp_path, **change))
    assert result["failed"] is True and text in result["msg"] and result["msg"].startswith("rank spark-01: ")
    assert engine.seen == []


def test_run_needs_model_and_run_key(run_module, engine, tmp_path):
    result = run_module(niah, {"output_dir": str(tmp_path / "niah"), "base_url": engine.url})
    assert result["failed"] is True and "model" in result["msg"] and "run_key" in result["msg"]


def test_check_mode_plans_without_sending_or_writing(run_module, engine, tmp_path):
    engine.kv = 6000
    result = run_module(niah, args(engine, tmp_path), check_mode=True, diff=True)
    assert result["failed"] is False and result["changed"] is True and result["summary"] is None
    assert [(s["depth"], s["action"]) for s in result["plan"]] == [
        (2032, "run"), (4064, "run"), (7315, "capacity_error")]
    assert result["diff"] == {"before": {}, "after": {"depth-2032": "would run", "depth-4064": "would run",
                                                      "depth-7315": "ERROR"}}
    assert engine.completion_lengths() == [] and not (tmp_path / "niah").exists()


def test_status_reports_without_http(run_module, engine, tmp_path):
    run_module(niah, args(engine, tmp_path, fractions=[0.25, 0.5]))
    seen = len(engine.seen)
    result = run_module(niah, {"state": "status", "output_dir": str(tmp_path / "niah")})
    assert len(engine.seen) == seen
    assert result["failed"] is False and result["changed"] is False and result["running"] is False
    assert result["rows_done"] == [2032, 4064] and result["summary"]["status"] == "PASS"
    assert result["progress"]["state"] == "finished" and result["progress"]["total"] == 2


def test_api_key_is_never_returned_or_written(run_module, tmp_path):
    engine = FakeEngine(api_key="sk-never-shown")
    try:
        result = run_module(niah, dict(args(engine, tmp_path), api_key="sk-never-shown"), diff=True)
    finally:
        engine.stop()
    assert result["failed"] is False and result["summary"]["status"] == "PASS"
    assert "sk-never-shown" not in json.dumps(result)
    assert all("sk-never-shown" not in p.read_text() for p in (tmp_path / "niah").iterdir())


def test_busy_reads_the_work_folder_in_check_mode_too_and_needs_it(run_module, engine, tmp_path):
    run_module(niah, args(engine, tmp_path))  # a finished run under the work folder: not busy
    for check in (False, True):
        result = run_module(niah, {"state": "busy", "work_dir": str(tmp_path)}, check_mode=check)
        assert result["failed"] is False and result["changed"] is False and result["running_dirs"] == []
    missing = run_module(niah, {"state": "busy"})
    assert missing["failed"] is True and "work_dir" in missing["msg"]
    no_dir = run_module(niah, {"state": "status"})
    assert no_dir["failed"] is True and "output_dir" in no_dir["msg"]
