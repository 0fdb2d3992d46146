"""The runtime gate's API steps (models, semantic, tool, retrieval, usage) against the real server, through
the gate's own Gate steps and the gate role's own fetch. The identity and log steps need docker and the
DSpark image's log markers; they are not part of this lane."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate as R
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_api as R_api
from tools.vllm_lane.contract import WINDOW_RE


@pytest.fixture
def gate(real, gate_fetch):
    config = {"model": real.model, "api_timeout": 300, "retrieval_timeout": 600}
    return R.Gate(config, {}, gate_fetch(real.url, None))


def test_models_step_passes(gate, real):
    """GET /v1/models through api_call: strict JSON, the served model listed."""
    assert gate.step("models") == []
    assert gate.section("models")["ids"] == [real.model]


def test_semantic_canary_fails_on_its_answer_only(gate, note):
    """The chat request is answered (transport and shape work); the random model's text is not "133", and that
    is the step's only error."""
    errors = gate.step("semantic")
    section = gate.section("semantic")
    assert section is not None and isinstance(section["content"], str) and section["pass"] is False
    assert len(errors) == 1 and errors[0].startswith("head semantic canary failed: expected content 133")
    note(f"finish_reason {section['finish_reason']}")


def test_tool_canary_fails_on_the_missing_call_only(gate, note):
    """The named tool_choice request is answered; the random model writes no complete tool call, so no
    get_weather call is parsed, and that is the step's only error."""
    errors = gate.step("tool_call")
    assert gate.section("tool_call") == {"names": [], "pass": False}
    assert errors == ["head tool canary did not call get_weather: got tool calls []"]
    note("no tool_calls parsed from the random model's text")


def test_retrieval_canary_does_not_fit_a_4096_window(gate, note):
    """The canary's prompt (1800 filler sentences) is longer than the lane's window: the server refuses it with
    400 and the gate reports that answer, naming the step, the status and the server's context-length text."""
    errors = gate.step("retrieval")
    assert gate.section("retrieval") is None
    assert len(errors) == 1
    assert errors[0].startswith("head retrieval canary: POST /v1/chat/completions answered HTTP 400: ")
    assert WINDOW_RE.search(errors[0])
    note(errors[0][:160])


def test_retrieval_canary_that_fits_fails_on_its_answer_only(gate, monkeypatch):
    """With the filler cut to fit the window, the same step is answered and fails only because the random model
    does not return the code."""
    monkeypatch.setattr(R_api, "RETRIEVAL_REPEAT", 20)
    errors = gate.step("retrieval")
    section = gate.section("retrieval")
    assert section is not None and section["pass"] is False
    assert section["usage"]["prompt_tokens"] < 4096
    assert len(errors) == 1 and errors[0].startswith("head retrieval canary did not return the exact code")


def test_usage_step_passes_on_every_answered_canary(gate):
    """prompt_tokens + completion_tokens == total_tokens on the semantic and tool answers (the retrieval
    canary, refused for its length, has no answer to check)."""
    assert gate.step("usage") == []
    assert gate.section("semantic") is not None and gate.section("tool_call") is not None
    assert gate.section("retrieval") is None
