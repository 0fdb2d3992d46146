# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _runtime_gate_api: the API canaries' requests and the judgement of their answers."""
from __future__ import annotations

import pytest
from tests.unit.plugins.module_utils.gate.test_runtime_gate import api_fixture

from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_api as rg_api
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_base as rg_base


# ================================================================================================
# API canaries (real stand-in answers)
# ================================================================================================
def test_canary_requests():
    semantic = rg_api.semantic_request("m")
    assert semantic["messages"][0]["content"] == "Compute 7 multiplied by 19. Reply with only the number."
    assert (semantic["temperature"], semantic["max_tokens"], semantic["chat_template_kwargs"]) == (0, 64,
                                                                                                   {"thinking": False})
    tool = rg_api.tool_request("m")
    assert tool["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert tool["tools"][0]["function"]["parameters"]["required"] == ["city"]
    prompt = rg_api.retrieval_request("m")["messages"][0]["content"]
    assert prompt.count(rg_api.RETRIEVAL_FILLER) == 1800 and prompt.count("Secret code: R0B0TLAB-DSVF-NVFP4-7319") == 1
    assert prompt.endswith("Reply with the secret code only.") and rg_api.retrieval_request("m")["max_tokens"] == 48


def test_standin_answers_pass_every_canary():
    assert rg_api.evaluate_models(api_fixture("regular-models"), "deepseek-v4-flash-dspark")[1] == []
    assert rg_api.evaluate_semantic(api_fixture("regular-semantic")) == (
        {"content": "133", "finish_reason": "stop", "pass": True}, [])
    assert rg_api.evaluate_tool(api_fixture("regular-tool")) == ({"names": ["get_weather"], "pass": True}, [])
    section, errors = rg_api.evaluate_retrieval(api_fixture("regular-retrieval"))
    assert errors == [] and section["pass"] and section["usage"] == api_fixture("regular-retrieval")["usage"]
    for name in ("semantic", "tool", "retrieval"):
        assert rg_api.usage_errors(name, api_fixture(f"regular-{name}")) == []


def test_models_must_list_the_model():
    section, errors = rg_api.evaluate_models(api_fixture("regular-models"), "other-model")
    assert section["ids"] == ["deepseek-v4-flash-dspark"]
    assert errors == ["head API does not serve model other-model: served ids ['deepseek-v4-flash-dspark']"]
    with pytest.raises(rg_base.GateError):
        rg_api.evaluate_models({"object": "list"}, "m")


def with_message(name: str, finish=None, **message) -> dict:
    body = api_fixture(name)
    body["choices"][0]["message"].update(message)
    if finish is not None:
        body["choices"][0]["finish_reason"] = finish
    return body


@pytest.mark.parametrize("content, finish, ok", [
    ("133", "stop", True), (" 133\n", "stop", True), ("133.", "stop", False), ("1330", "stop", False),
    ("133", "length", False), (None, "stop", False), ("The answer is 133", "stop", False),
])
def test_semantic_canary(content, finish, ok):
    section, errors = rg_api.evaluate_semantic(with_message("regular-semantic", finish, content=content))
    assert section["pass"] is ok and (errors == []) is ok
    if not ok:
        assert errors[0].startswith("head semantic canary failed: expected content 133 with finish_reason stop")


def test_tool_canary_needs_get_weather():
    section, errors = rg_api.evaluate_tool(with_message("regular-tool", tool_calls=[]))
    assert section == {"names": [], "pass": False} and errors == ["head tool canary did not call get_weather: got tool calls []"]
    other = [{"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]
    assert rg_api.evaluate_tool(with_message("regular-tool", tool_calls=other))[0] == {"names": ["get_time"], "pass": False}
    assert rg_api.evaluate_tool(with_message("regular-tool", tool_calls=None))[0]["pass"] is False
    with pytest.raises(rg_base.GateError, match="no choices"):
        rg_api.evaluate_tool({"choices": []})


def test_tool_canary_judges_the_call_not_the_finish_reason():
    # the gate names the function (tool_choice {"type": "function", ...}); a real vLLM server ends such an
    # answer with finish_reason stop (only auto/required give tool_calls), older stand-ins said tool_calls
    assert rg_api.tool_request("m")["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert api_fixture("regular-tool")["choices"][0]["finish_reason"] == "stop"
    for finish in ("stop", "tool_calls"):
        assert rg_api.evaluate_tool(with_message("regular-tool", finish)) == ({"names": ["get_weather"], "pass": True}, [])
    # a message without any call has no tool_calls key at all on a real server: a failed canary, not a crash
    body = api_fixture("regular-semantic")
    assert "tool_calls" not in body["choices"][0]["message"]
    assert rg_api.evaluate_tool(body) == ({"names": [], "pass": False},
                                      ["head tool canary did not call get_weather: got tool calls []"])


@pytest.mark.parametrize("content, finish, ok", [
    ("R0B0TLAB-DSVF-NVFP4-7319", "stop", True), ("The code is R0B0TLAB-DSVF-NVFP4-7319.", "stop", True),
    ("R0B0TLAB-DSVF-NVFP4-7318", "stop", False), ("R0B0TLAB-DSVF-NVFP4-7319", "length", False), (None, "stop", False),
])
def test_retrieval_canary(content, finish, ok):
    section, errors = rg_api.evaluate_retrieval(with_message("regular-retrieval", finish, content=content))
    assert section["pass"] is ok and (errors == []) is ok
    if not ok:
        assert errors[0].startswith("head retrieval canary did not return the exact code naturally")


def test_wrong_usage_standin_answers_are_caught():
    body = api_fixture("wrong_usage-semantic")
    usage = body["usage"]
    assert rg_api.evaluate_semantic(body)[0]["pass"]  # the answer itself is right
    assert rg_api.usage_errors("semantic", body) == [
        f"head API usage is inconsistent: semantic canary prompt_tokens {usage['prompt_tokens']} + completion_tokens "
        f"{usage['completion_tokens']} != total_tokens {usage['total_tokens']}"]


@pytest.mark.parametrize("usage, fragment", [
    (None, "answered no usage object"),
    ({"prompt_tokens": -1, "completion_tokens": 1, "total_tokens": 0}, "usage.prompt_tokens is -1"),
    ({"prompt_tokens": 1.0, "completion_tokens": 1, "total_tokens": 2}, "usage.prompt_tokens is 1.0"),
    ({"prompt_tokens": True, "completion_tokens": 1, "total_tokens": 2}, "usage.prompt_tokens is true"),
    ({"prompt_tokens": 1, "completion_tokens": 1}, "usage.total_tokens is absent"),
])
def test_usage_must_be_non_negative_integers(usage, fragment):
    errors = rg_api.usage_errors("tool", {"usage": usage})
    assert len(errors) == 1 and errors[0].startswith("head API usage is inconsistent: tool canary")
    assert fragment in errors[0]


def test_api_call_needs_200_and_strict_json():
    assert rg_api.api_call(lambda *a: (200, b'{"a": 1}'), "GET", "/x", None, 1) == {"a": 1}
    with pytest.raises(rg_base.GateError, match=r"head semantic canary: POST /v1/chat/completions answered HTTP 401: denied"):
        rg_api.api_call(lambda *a: (401, b"denied"), "POST", "/v1/chat/completions", {}, 1, "semantic canary")
    with pytest.raises(rg_base.GateError, match="invalid JSON.*not a finite number"):
        rg_api.api_call(lambda *a: (200, b'{"a": NaN}'), "GET", "/x", None, 1)
    seen = []
    rg_api.api_call(lambda *a: seen.append(a) or (200, b"{}"), "POST", "/p", {"k": 1}, 7.5)
    assert seen == [("POST", "/p", b'{"k": 1}', 7.5)]
