"""gb10.dspark.serving_guard end to end: main() in-process against a real local HTTP server that takes the
completions and never answers (a frozen pair): the module ends at its bound with its report written."""
from __future__ import annotations

import json
import threading
import time

import pytest

from ansible_collections.gb10.dspark.plugins.modules import serving_guard
from tests.unit.plugins.module_utils.serving.test_serving_guard import MODEL, StubServer, guard_threads


@pytest.mark.timeout(60)
def test_a_frozen_head_ends_the_module_at_its_bound_with_the_report_written(run_module, tmp_path):
    server = StubServer(hang=("/v1/completions",))
    try:
        before = threading.enumerate()
        started = time.monotonic()
        result = run_module(serving_guard, {
            "base_url": server.url, "head": "lab-head", "model": MODEL, "prompts": 16, "concurrency": 4,
            "request_timeout": 300, "overall_timeout": 2, "report_path": str(tmp_path / "serving-guard.json")})
        took = time.monotonic() - started
        assert took < 2 + 15, took  # its 2 s bound, not the 300 s request timeout (loose: CI load)
        assert guard_threads(before) == []  # no request left running: nothing holds the process past its bound
    finally:
        server.stop()
    stalled = (f"head lab-head: POST {server.url}/v1/completions took the request but sent no answer within")
    assert result["failed"] is True
    first = result["msg"].splitlines()[1]
    assert first.startswith("the run hit its time bound of 2 s before every request finished: 4 requests sent and "
                            "unanswered") and stalled in first and "the engine is stalled (hung)" in first, first
    on_disk = json.loads((tmp_path / "serving-guard.json").read_text())
    assert on_disk == json.loads(json.dumps(result["report"]))
    assert [u["request"] for u in on_disk["unanswered"]] == [f"{i:02d}" for i in range(1, 17)]
    assert sum(u["sent"] for u in on_disk["unanswered"]) == 4


def test_a_key_with_a_newline_is_refused_before_any_request_and_never_shown(run_module, tmp_path):
    server = StubServer(hang=())
    try:
        result = run_module(serving_guard, {
            "base_url": server.url, "head": "lab-head", "model": MODEL, "prompts": 4, "concurrency": 1,
            "api_key": "sk-guard-0123456789\n", "report_path": str(tmp_path / "serving-guard.json")})
    finally:
        server.stop()
    assert result["failed"] is True
    assert result["msg"].startswith("rank lab-head: dspark_api_key holds a line feed (\\n) at its end"), result["msg"]
    assert "0123456789" not in json.dumps(result)
    assert not (tmp_path / "serving-guard.json").exists() and server.seen == []
