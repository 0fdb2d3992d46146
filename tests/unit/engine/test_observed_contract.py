"""What a real vLLM server was seen to do (vllm-contract.md, "Observed on a real vLLM server"), on the stand-in.

Over-long requests (the version-sensitive part) are checked in both modes of ``DSPARK_SIM_OVERLONG``:
``cap`` (the default, what vLLM 0.32 did) and ``reject`` (the 400 of older releases).
"""
import json
import random
import re

import pytest

from dspark_engine import faults, model
from dspark_engine import tokenizer as tok

from .conftest import SERVED, EngineProc, free_port, production_args

WINDOW = 4096
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
PARIS = [{"role": "user", "content": "Use get_weather for Paris."}]


def _start(tmp_path_factory, name, env):
    workdir = tmp_path_factory.mktemp(name)
    (workdir / "model").mkdir()
    port = free_port()
    proc = EngineProc(production_args(str(workdir / "model"), port=port, master_port=free_port(), nnodes=1,
                                      max_model_len=WINDOW), env, str(workdir), name, port)
    proc.wait_ready()
    return proc


@pytest.fixture(scope="module")
def cap_head(tmp_path_factory):
    proc = _start(tmp_path_factory, "cap", {})
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def reject_head(tmp_path_factory):
    proc = _start(tmp_path_factory, "reject", {"DSPARK_SIM_OVERLONG": "reject"})
    yield proc
    proc.stop()


@pytest.fixture(params=["cap", "reject"])
def any_head(request):
    return request.getfixturevalue(f"{request.param}_head")


# ---- the setting ---------------------------------------------------------------------------------
def test_overlong_setting_defaults_to_cap_and_refuses_unknown_values():
    assert faults.load({}).overlong == "cap"
    assert faults.load({"DSPARK_SIM_OVERLONG": " reject "}).overlong == "reject"
    assert faults.load({"DSPARK_SIM_OVERLONG": "cap"}).overlong == "cap"
    with pytest.raises(faults.SettingsError, match="DSPARK_SIM_OVERLONG='truncate' must be one of cap, reject"):
        faults.load({"DSPARK_SIM_OVERLONG": "truncate"})


def test_an_unknown_overlong_mode_refuses_to_start(engines, model_dir):
    port = free_port()
    proc = engines([model_dir, "--port", str(port), "--host", "127.0.0.1"], {"DSPARK_SIM_OVERLONG": "truncate"},
                   port=port)
    assert proc.wait_exit() == 1
    assert "DSPARK_SIM_OVERLONG='truncate' must be one of cap, reject" in proc.stderr()


# ---- over-long requests --------------------------------------------------------------------------
def test_prompt_plus_max_tokens_over_the_window_is_capped_by_default(cap_head):
    n = len(tok.encode("Hello", add_bos=True))
    room = WINDOW - n
    status, body = cap_head.post("/v1/completions", {"prompt": "Hello", "max_tokens": room + 2, "ignore_eos": True})
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": n, "completion_tokens": room, "total_tokens": WINDOW,
                             "prompt_tokens_details": None}
    # max_tokens equal to the window is not "greater than" it: capped as well
    status, body = cap_head.post("/v1/completions", {"prompt": "Hello", "max_tokens": WINDOW, "ignore_eos": True})
    assert status == 200 and body["usage"]["completion_tokens"] == room
    # chat counts max_completion_tokens the same way
    prompt = cap_head.post("/tokenize", {"messages": PARIS})[1]["count"]
    status, body = cap_head.post("/v1/chat/completions", {"messages": PARIS, "max_completion_tokens": WINDOW - 1,
                                                          "ignore_eos": True})
    assert status == 200 and body["usage"]["completion_tokens"] == WINDOW - prompt
    assert body["choices"][0]["finish_reason"] == "length"


def test_prompt_plus_max_tokens_over_the_window_is_400_when_rejecting(reject_head):
    n = len(tok.encode("Hello", add_bos=True))
    status, body = reject_head.post("/v1/completions", {"prompt": "Hello", "max_tokens": WINDOW})
    assert status == 400
    assert body["error"]["message"] == (
        f"This model's maximum context length is {WINDOW} tokens. However, you requested {WINDOW} output tokens "
        f"and your prompt contains {n} input tokens, for a total of {WINDOW + n} tokens. Please reduce the length "
        "of the input prompt or the number of requested output tokens.")
    assert body["error"]["code"] == 400 and body["error"]["type"] == "BadRequestError"
    # what fits is answered as asked
    status, body = reject_head.post("/v1/completions", {"prompt": "Hello", "max_tokens": WINDOW - n,
                                                        "ignore_eos": True})
    assert status == 200 and body["usage"]["completion_tokens"] == WINDOW - n


def test_max_tokens_above_the_window_is_400_in_both_modes(any_head):
    status, body = any_head.post("/v1/completions", {"prompt": "Hello", "max_tokens": WINDOW + 904})
    assert status == 400
    err = body["error"]
    assert err["message"].startswith(f"max_tokens={WINDOW + 904} cannot be greater than max_model_len={WINDOW}.")
    assert err["message"].endswith(f"(parameter=max_tokens, value={WINDOW + 904})")
    assert err["param"] == "max_tokens" and err["code"] == 400


def test_a_prompt_that_fills_the_window_is_400_input_tokens_in_both_modes(any_head):
    ids = [tok.BOS_ID] + tok.encode(" the harbor ledger" * WINDOW)[:WINDOW - 1]
    assert len(ids) == WINDOW
    for body in ({"prompt": ids, "max_tokens": 1}, {"prompt": ids}):
        status, answer = any_head.post("/v1/completions", body)
        assert status == 400
        assert answer["error"]["param"] == "input_tokens"
        assert f"maximum context length is {WINDOW} tokens" in answer["error"]["message"]
        assert "exceeds this limit even without any output tokens" in answer["error"]["message"]
    # one token of room: the cap leaves one, the other mode refuses the five asked for
    status, answer = any_head.post("/v1/completions", {"prompt": ids[:-1], "max_tokens": 5, "ignore_eos": True})
    if any_head.name == "cap":
        assert status == 200 and answer["usage"]["completion_tokens"] == 1
    else:
        assert status == 400 and "for a total of" in answer["error"]["message"]


# ---- tool calls ----------------------------------------------------------------------------------
def test_a_named_tool_choice_finishes_with_stop_auto_and_required_with_tool_calls(cap_head):
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice, finish in ((named, "stop"), ("auto", "tool_calls"), ("required", "tool_calls")):
        status, body = cap_head.post("/v1/chat/completions", {"messages": PARIS, "tools": [WEATHER],
                                                              "tool_choice": choice, "max_tokens": 128})
        assert status == 200
        answer = body["choices"][0]
        assert answer["finish_reason"] == finish, choice
        call = answer["message"]["tool_calls"][0]
        assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    events = cap_head.stream("/v1/chat/completions", {"messages": PARIS, "tools": [WEATHER], "tool_choice": named,
                                                      "stream": True})
    finals = [e for e in events[:-1] if e["choices"][0]["finish_reason"]]
    assert [f["choices"][0]["finish_reason"] for f in finals] == ["stop"]
    assert finals[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_a_message_without_tool_calls_has_no_tool_calls_key(cap_head):
    for extra in ({}, {"tools": [WEATHER], "tool_choice": "none"}, {"tools": [WEATHER]}):
        body = cap_head.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a story."}],
                                                      "max_tokens": 16, **extra})[1]
        message = body["choices"][0]["message"]
        assert "tool_calls" not in message and message["content"], extra


def test_model_finish_reason_depends_on_the_kind_of_tool_choice():
    named = model.ChatContext(PARIS[0]["content"], [WEATHER], "get_weather")
    out = model.generate([1, 2, 3], "x", model.Sampling(128), named, 6)
    assert out.finish_reason == "stop" and out.tool_call["name"] == "get_weather" and out.content is None
    required = model.ChatContext(PARIS[0]["content"], [WEATHER], "required")
    out = model.generate([1, 2, 3], "x", model.Sampling(128), required, 6)
    assert out.finish_reason == "tool_calls" and out.engine_finish_reason == "stop"


# ---- streaming -----------------------------------------------------------------------------------
def test_the_chat_stream_opens_with_a_role_only_chunk(cap_head):
    events = cap_head.stream("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Compute 7 multiplied by 19."}], "max_tokens": 32, "stream": True,
        "chat_template_kwargs": {"thinking": False}, "stream_options": {"include_usage": True,
                                                                        "continuous_usage_stats": True}})
    first = events[0]["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": ""} and first["finish_reason"] is None
    assert events[0]["usage"]["completion_tokens"] == 0
    later = [e["choices"][0]["delta"] for e in events[1:-1] if e["choices"]]
    assert later and all("role" not in d for d in later)
    assert "".join(d.get("content", "") for d in later) == "133"


def _increments(events):
    counts = [e["usage"]["completion_tokens"] for e in events[:-1] if e["choices"]]
    return [b - a for a, b in zip([0] + counts, counts)]


def test_stream_chunks_carry_the_tokens_of_one_speculative_step(cap_head):
    req = {"prompt": "Tell me about the harbor.", "max_tokens": 80, "ignore_eos": True, "temperature": 0}
    plain = cap_head.post("/v1/completions", req)[1]
    events = cap_head.stream("/v1/completions", dict(req, stream=True, stream_options={
        "include_usage": True, "continuous_usage_stats": True}))
    steps = _increments(events)
    # the first token comes from prefill alone; each later chunk is one decode step: 1 + accepted drafts (K = 6)
    assert steps[0] == 1 and sum(steps) == 80 and all(1 <= s <= 7 for s in steps)
    assert max(steps) > 1 and len(steps) < 80
    assert "".join(e["choices"][0]["text"] for e in events[:-2]) == plain["choices"][0]["text"]
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 80


def test_without_speculative_decoding_every_chunk_is_one_token(engines, model_dir):
    port = free_port()
    proc = engines([model_dir, "--port", str(port), "--host", "127.0.0.1", "--served-model-name", SERVED],
                   port=port).wait_ready()
    events = proc.stream("/v1/completions", {"prompt": "Hi", "max_tokens": 12, "ignore_eos": True, "stream": True,
                                             "stream_options": {"include_usage": True,
                                                                "continuous_usage_stats": True}})
    assert _increments(events) == [1] * 12


def test_speculative_steps_partition_the_output():
    for n in (1, 2, 17, 400):
        stats = model.speculate(n, 6, random.Random(n))
        assert sum(stats.steps) == n and stats.steps[0] == 1
        assert len(stats.steps) == 1 + stats.drafts and all(1 <= s <= 7 for s in stats.steps)
    assert model.speculate(5, 0, random.Random(1)).steps == [1] * 5
    assert model.speculate(0, 6, random.Random(1)).steps == []


# ---- /metrics ------------------------------------------------------------------------------------
def test_metrics_have_no_kv_size_gauge_and_declare_counters_like_prometheus_client(cap_head):
    status, headers, payload = cap_head.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=1.0.0")
    text = payload.decode()
    assert "vllm:kv_cache_size_tokens" not in text.replace('kv_cache_size_tokens="', "")
    info = re.search(r"^vllm:cache_config_info\{([^}]*)\} 1\.0$", text, re.M)
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info.group(1)))
    kv = 15998753178 // 12766
    assert labels["kv_cache_size_tokens"] == str(kv) and labels["num_gpu_blocks"] == str(kv // 256)
    assert labels["block_size"] == "256" and "model_name" not in labels
    for counter in ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
                    "vllm:spec_decode_num_drafts"):
        assert f"# TYPE {counter}_total counter\n" in text, counter
        assert re.search(rf"^{counter}_created\{{[^}}]*\}} \d\.\d+e\+09$", text, re.M), counter
    for histogram in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"):
        assert f"# TYPE {histogram} histogram\n" in text
        assert re.search(rf"^{histogram}_created\{{", text, re.M), histogram


# ---- errors and logs -----------------------------------------------------------------------------
def test_error_envelopes_match_the_real_server(cap_head, engines, model_dir):
    status, body = cap_head.post("/v1/completions", {"model": "gpt-4", "prompt": "x"})
    assert status == 404
    assert body["error"]["message"] == f"The model `gpt-4` does not exist. Valid aliases: {SERVED}."
    status, body = cap_head.post("/v1/completions", {"prompt": "x", "temperature": "hot"})
    assert status == 400
    assert body["error"]["type"] == "Bad Request" and body["error"]["param"] == "body.temperature"
    assert body["error"]["message"].endswith(" (parameter=temperature, value=hot)")
    port = free_port()
    keyed = engines([model_dir, "--port", str(port), "--host", "127.0.0.1", "--api-key", "k"], port=port).wait_ready()
    status, _unused, payload = keyed.request("POST", "/v1/completions", {"prompt": "x"})
    assert status == 401 and json.loads(payload) == {"error": "Unauthorized"}


def test_the_log_has_no_uvicorn_running_line(cap_head):
    logs = cap_head.logs()
    assert "Application startup complete." in logs and "Uvicorn running on" not in logs
