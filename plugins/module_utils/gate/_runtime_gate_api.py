# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtime gate's API canaries on the head (docs/wrapper-reference.md §5.3): the model list, a semantic answer,
a tool call and a retrieval from a long context, each request built and its answer judged, and the usage every
answer must report.

Split from :mod:`._runtime_gate`, which sends them through the fetch it is given."""
from __future__ import annotations

import json

from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import (
    StrictJSONError,
    loads as strict_loads,
)
from ansible_collections.gb10.dspark.plugins.module_utils.gate._runtime_gate_base import (
    Fetch,
    GateError,
    _excerpt,
    _show,
)


# --- API canaries (docs/wrapper-reference.md §5.3) -----------------------------------------------------------------
SEMANTIC_PROMPT = "Compute 7 multiplied by 19. Reply with only the number."
SEMANTIC_ANSWER = "133"
TOOL_PROMPT = "Use get_weather for Paris."
TOOL_NAME = "get_weather"
RETRIEVAL_FILLER = "A deterministic context sentence for retrieval validation. "
RETRIEVAL_REPEAT = 900
RETRIEVAL_NEEDLE = "R0B0TLAB-DSVF-NVFP4-7319"
RETRIEVAL_QUESTION = "Reply with the secret code only."
NO_THINKING = {"thinking": False}


# ============================================================================================
# API canaries
# ============================================================================================
def semantic_request(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": SEMANTIC_PROMPT}], "temperature": 0,
            "max_tokens": 64, "chat_template_kwargs": dict(NO_THINKING)}


def tool_request(model: str) -> dict:
    tool = {"type": "function", "function": {
        "name": TOOL_NAME, "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    return {"model": model, "messages": [{"role": "user", "content": TOOL_PROMPT}], "tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}}, "temperature": 0,
            "max_tokens": 128, "chat_template_kwargs": dict(NO_THINKING)}


def retrieval_prompt() -> str:
    filler = RETRIEVAL_FILLER * RETRIEVAL_REPEAT
    return f"{filler}\nSecret code: {RETRIEVAL_NEEDLE}\n{filler}\n{RETRIEVAL_QUESTION}"


def retrieval_request(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": retrieval_prompt()}], "temperature": 0,
            "max_tokens": 48, "chat_template_kwargs": dict(NO_THINKING)}


def api_call(fetch: Fetch, method: str, path: str, body: dict | None, timeout: float, what: str = "API") -> object:
    """One head API call (``what`` names it in errors): HTTP 200 and a strict-JSON body, else GateError."""
    data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
    status, payload = fetch(method, path, data, timeout)
    if status != 200:
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(payload)
        raise GateError(f"head {what}: {method} {path} answered HTTP {status}: "
                        f"{_excerpt(text.strip()) or 'empty body'}")
    try:
        return strict_loads(payload)
    except StrictJSONError as exc:
        raise GateError(f"head {what}: {method} {path} answered invalid JSON: {exc}") from None


def evaluate_models(body: object, model: str) -> tuple[dict, list[str]]:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise GateError("head API /v1/models answer has no data list")
    ids = [entry.get("id") for entry in data if isinstance(entry, dict)]
    errors = [] if model in ids else [f"head API does not serve model {model}: served ids {ids}"]
    return {"ids": ids, "entries": data}, errors


def _first_choice(body: object, canary: str) -> dict:
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise GateError(f"head {canary} canary answer has no choices")
    return choices[0]


def _message(choice: dict, canary: str) -> dict:
    message = choice.get("message")
    if not isinstance(message, dict):
        raise GateError(f"head {canary} canary answer has no message")
    return message


def evaluate_semantic(body: object) -> tuple[dict, list[str]]:
    choice = _first_choice(body, "semantic")
    content = _message(choice, "semantic").get("content")
    finish = choice.get("finish_reason")
    ok = isinstance(content, str) and content.strip() == SEMANTIC_ANSWER and finish == "stop"
    errors = [] if ok else [f"head semantic canary failed: expected content {SEMANTIC_ANSWER} with finish_reason "
                            f"stop, got content {_excerpt(content)!r} with finish_reason {_show(finish)}"]
    return {"content": content, "finish_reason": finish, "pass": ok}, errors


def evaluate_tool(body: object) -> tuple[dict, list[str]]:
    message = _message(_first_choice(body, "tool"), "tool")
    calls = message.get("tool_calls") or []
    names = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            names.append(function.get("name"))
    ok = TOOL_NAME in names
    errors = [] if ok else [f"head tool canary did not call {TOOL_NAME}: got tool calls {names}"]
    return {"names": names, "pass": ok}, errors


def evaluate_retrieval(body: object) -> tuple[dict, list[str]]:
    choice = _first_choice(body, "retrieval")
    content = _message(choice, "retrieval").get("content")
    finish = choice.get("finish_reason")
    usage = body.get("usage") if isinstance(body, dict) else None
    ok = isinstance(content, str) and RETRIEVAL_NEEDLE in content and finish == "stop"
    errors = [] if ok else [f"head retrieval canary did not return the exact code naturally: expected "
                            f"{RETRIEVAL_NEEDLE} with finish_reason stop, got content {_excerpt(content)!r} "
                            f"with finish_reason {_show(finish)}"]
    return {"content": content, "finish_reason": finish, "usage": usage, "pass": ok}, errors


def usage_errors(canary: str, body: object) -> list[str]:
    """prompt_tokens + completion_tokens == total_tokens, all non-negative integers."""
    usage = body.get("usage") if isinstance(body, dict) else None
    prefix = f"head API usage is inconsistent: {canary} canary"
    if not isinstance(usage, dict):
        return [f"{prefix} answered no usage object"]
    values = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return [f"{prefix} usage.{key} is {_show(value)}, not a non-negative integer"]
        values[key] = value
    if values["prompt_tokens"] + values["completion_tokens"] != values["total_tokens"]:
        return [f"{prefix} prompt_tokens {values['prompt_tokens']} + completion_tokens "
                f"{values['completion_tokens']} != total_tokens {values['total_tokens']}"]
    return []
