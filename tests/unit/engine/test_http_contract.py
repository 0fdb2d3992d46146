"""OpenAI-compatible HTTP contract of the head (vllm-contract.md section 3)."""
import http.client
import json
import re

import pytest

from dspark_engine import VERSION, template
from dspark_engine import tokenizer as tok

from .conftest import SERVED, EngineProc, free_port, metric, production_args

MAX_LEN = 65536
CANARY = "Compute 7 multiplied by 19. Reply with only the number."
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("head")
    (workdir / "model").mkdir()
    port = free_port()
    proc = EngineProc(production_args(str(workdir / "model"), port=port, master_port=free_port(), nnodes=1,
                                      max_model_len=MAX_LEN), {}, str(workdir), "head", port)
    proc.wait_ready()
    yield proc
    proc.stop()


def test_health_version_load(head):
    status, headers, body = head.request("GET", "/health")
    assert status == 200 and body == b""
    assert head.get("/version") == (200, {"version": VERSION})
    assert head.get("/load")[0] == 200
    assert head.get("/nope") == (404, {"detail": "Not Found"})
    assert head.post("/health", {})[0] == 405


def test_models_card(head):
    status, body = head.get("/v1/models")
    assert status == 200 and body["object"] == "list" and len(body["data"]) == 1
    card = body["data"][0]
    assert set(card) == {"id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"}
    assert (card["id"], card["object"], card["owned_by"], card["parent"], card["max_model_len"]) == (
        SERVED, "model", "vllm", None, MAX_LEN)
    assert card["root"].endswith("/model") and isinstance(card["created"], int)
    perm = card["permission"][0]
    assert perm["id"].startswith("modelperm-") and perm["object"] == "model_permission"
    assert perm["allow_sampling"] is True and perm["organization"] == "*" and perm["group"] is None


def test_completion_shape_and_usage(head):
    status, body = head.post("/v1/completions", {"model": SERVED, "prompt": "Hello, my name is", "max_tokens": 5,
                                                 "temperature": 0})
    assert status == 200
    assert set(body) == {"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
                         "kv_transfer_params"}
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion" and body["model"] == SERVED
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length" and choice["stop_reason"] is None and choice["logprobs"] is None
    prompt_tokens = len(tok.encode("Hello, my name is", add_bos=True))
    assert body["usage"] == {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + 5,
                             "completion_tokens": 5, "prompt_tokens_details": None}


def test_palace_guard_contract(head):
    prompt = "紫禁城南北长961米，东西宽753米。"
    status, body = head.post("/v1/completions", {"model": SERVED, "prompt": prompt, "max_tokens": 128,
                                                 "temperature": 0.8, "top_p": 1.0, "top_k": 32, "seed": 42,
                                                 "ignore_eos": True})
    assert status == 200 and len(body["choices"]) == 1
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 128
    again = head.post("/v1/completions", {"model": SERVED, "prompt": prompt, "max_tokens": 128, "temperature": 0.8,
                                          "top_k": 32, "seed": 42, "ignore_eos": True})[1]
    assert again["choices"][0]["text"] == body["choices"][0]["text"]


def test_completion_without_max_tokens_stops_on_eos(head):
    status, body = head.post("/v1/completions", {"prompt": "Tell me about the harbor."})
    assert status == 200 and body["choices"][0]["finish_reason"] == "stop"
    assert 0 < body["usage"]["completion_tokens"] < 100


def test_token_id_prompt(head):
    ids = tok.encode("Compute 6 multiplied by 7.", add_bos=True)
    status, body = head.post("/v1/completions", {"prompt": ids, "max_tokens": 10, "temperature": 0})
    assert status == 200 and body["choices"][0]["text"] == "42" and body["usage"]["prompt_tokens"] == len(ids)


def test_completion_stream(head):
    req = {"prompt": "Tell me about the harbor.", "max_tokens": 12, "temperature": 0}
    text = head.post("/v1/completions", req)[1]["choices"][0]["text"]
    events = head.stream("/v1/completions", dict(req, stream=True))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "text_completion" and "usage" not in c for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks].count("length") == 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert sum(c["choices"][0]["finish_reason"] is not None for c in chunks) == 1
    assert "".join(c["choices"][0]["text"] for c in chunks) == text


def test_completion_stream_include_usage(head):
    events = head.stream("/v1/completions", {"prompt": "Hi", "max_tokens": 7, "stream": True, "ignore_eos": True,
                                             "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 7
    assert usage_chunk["usage"]["total_tokens"] == usage_chunk["usage"]["prompt_tokens"] + 7
    assert sum(1 for e in events[:-1] if e["choices"] == []) == 1
    assert all("usage" not in e for e in events[:-2])
    continuous = head.stream("/v1/completions", {"prompt": "Hi", "max_tokens": 3, "stream": True, "ignore_eos": True,
                                                 "stream_options": {"include_usage": True,
                                                                    "continuous_usage_stats": True}})
    # a chunk per engine step (one or more tokens each), every one with the count so far, then the usage chunk
    counts = [e["usage"]["completion_tokens"] for e in continuous[:-1]]
    assert counts[0] == 1 and counts[-2:] == [3, 3] and counts[:-1] == sorted(set(counts[:-1]))
    assert continuous[-2]["choices"] == [] and all(e["choices"] for e in continuous[:-2])


def test_stream_options_without_stream_is_400(head):
    status, body = head.post("/v1/completions", {"prompt": "Hi", "stream_options": {"include_usage": True}})
    assert status == 400
    assert body["error"]["type"] == "BadRequestError" and body["error"]["code"] == 400
    assert set(body["error"]) == {"message", "type", "param", "code"}


def test_semantic_canary(head):
    status, body = head.post("/v1/chat/completions", {
        "model": SERVED, "messages": [{"role": "user", "content": CANARY}], "temperature": 0, "max_tokens": 64,
        "chat_template_kwargs": {"thinking": False}})
    assert status == 200 and body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["message"]["content"].strip() == "133" and choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant" and "tool_calls" not in choice["message"]
    assert choice["message"]["reasoning"] is None
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_default_thinking_uses_the_reasoning_parser(head):
    body = head.post("/v1/chat/completions", {"messages": [{"role": "user", "content": CANARY}],
                                              "max_tokens": 64})[1]
    message = body["choices"][0]["message"]
    assert message["content"] == "133" and message["reasoning"]


def test_tool_canary(head):
    status, body = head.post("/v1/chat/completions", {
        "model": SERVED, "messages": [{"role": "user", "content": "Use get_weather for Paris."}], "tools": [WEATHER],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "temperature": 0, "max_tokens": 64})
    assert status == 200
    choice = body["choices"][0]
    # a named tool_choice finishes with stop on a real server; only auto/required give tool_calls
    assert choice["finish_reason"] == "stop" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert call["function"]["arguments"] == '{"city": "Paris"}'
    auto = head.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Use get_weather for Paris."}],
                                              "tools": [WEATHER]})[1]
    assert auto["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert auto["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_choice_errors(head):
    status, body = head.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "tools": [WEATHER],
        "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert status == 400 and "has not been passed" in body["error"]["message"]


def test_chat_stream(head):
    req = {"messages": [{"role": "user", "content": CANARY}], "max_tokens": 64, "stream": True,
           "chat_template_kwargs": {"thinking": False}, "stream_options": {"include_usage": True}}
    events = head.stream("/v1/chat/completions", req)
    chunks = [e for e in events[:-1] if e["choices"]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "133"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]] == ["stop"]
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 4
    tool_events = head.stream("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Use get_weather for Paris."}], "tools": [WEATHER],
        "tool_choice": "required", "stream": True})
    finals = [e for e in tool_events[:-1] if e["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == "tool_calls"
    assert finals[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_retrieval_canary(head):
    filler = "A deterministic context sentence for retrieval validation. " * 900
    content = filler + "Secret code: R0B0TLAB-DSVF-NVFP4-7319 " + filler + "Reply with the secret code only."
    status, body = head.post("/v1/chat/completions", {"model": SERVED, "messages": [{"role": "user",
                                                                                    "content": content}],
                                                      "temperature": 0, "max_tokens": 48}, timeout=60)
    assert status == 200
    assert "R0B0TLAB-DSVF-NVFP4-7319" in body["choices"][0]["message"]["content"]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_niah_token_prompt_at_max_context(head):
    depth = MAX_LEN - 64
    needle = tok.encode("\nIMPORTANT SECRET VERIFICATION CODE: R0B0-NIAH-7K3M\n")
    question = tok.encode("\nQuestion: What is the secret verification code? Reply with only the code.")
    unit = tok.encode(" The archival record contains neutral observations about weather, tools, books.")
    filler = (unit * (depth // len(unit) + 1))[:depth - len(needle) - len(question) - 1]
    half = len(filler) // 2
    ids = [tok.BOS_ID] + filler[:half] + needle + filler[half:] + question
    assert len(ids) == depth
    status, body = head.post("/v1/completions", {"model": SERVED, "prompt": ids, "temperature": 0, "max_tokens": 64,
                                                 "skip_special_tokens": True}, timeout=60)
    assert status == 200 and body["usage"]["prompt_tokens"] == depth
    assert "R0B0-NIAH-7K3M" in body["choices"][0]["text"]
    # one token over the window: capped to the 64 left (the default), never past the window
    status, body = head.post("/v1/completions", {"prompt": ids, "max_tokens": 65, "ignore_eos": True}, timeout=60)
    assert status == 200 and body["usage"]["completion_tokens"] == 64 and body["usage"]["total_tokens"] == MAX_LEN


def test_tokenize_counts_match_usage(head):
    prompt = "Hello, my name is Spark."
    count = head.post("/tokenize", {"model": SERVED, "prompt": prompt})[1]
    usage = head.post("/v1/completions", {"prompt": prompt, "max_tokens": 1})[1]["usage"]
    assert count["count"] == usage["prompt_tokens"] == len(count["tokens"])
    assert count["max_model_len"] == MAX_LEN
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": CANARY}]
    tokenized = head.post("/tokenize", {"messages": msgs})[1]
    chat_usage = head.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 8})[1]["usage"]
    assert tokenized["count"] == chat_usage["prompt_tokens"]
    assert tokenized["tokens"] == template.render_ids(msgs, thinking=True)
    no_think = head.post("/tokenize", {"messages": msgs, "chat_template_kwargs": {"thinking": False}})[1]
    assert no_think["tokens"][-1] == tok.THINK_END_ID


def test_detokenize_roundtrip(head):
    text = "紫禁城 Palace 961 m!"
    ids = head.post("/tokenize", {"prompt": text, "add_special_tokens": False})[1]["tokens"]
    assert head.post("/detokenize", {"tokens": ids}) == (200, {"prompt": text})
    assert head.post("/detokenize", {"tokens": [-5]})[0] == 400


def test_errors(head):
    status, body = head.post("/v1/completions", {"model": "gpt-4", "prompt": "x"})
    assert status == 404 and body["error"]["message"] == f"The model `gpt-4` does not exist. Valid aliases: {SERVED}."
    assert body["error"]["type"] == "NotFoundError" and body["error"]["param"] == "model"
    status, body = head.post("/v1/completions", {"prompt": "Hello", "max_tokens": MAX_LEN + 1})
    assert status == 400 and body["error"]["param"] == "max_tokens"
    assert body["error"]["message"].startswith(f"max_tokens={MAX_LEN + 1} cannot be greater than max_model_len={MAX_LEN}.")
    assert head.request("POST", "/v1/completions", b"{not json")[0] == 400
    assert head.post("/v1/completions", {"prompt": "x", "n": 2})[0] == 400
    assert head.post("/v1/completions", {"prompt": "x", "temperature": "hot"})[0] == 400
    assert head.post("/v1/completions", {"prompt": "x", "max_tokens": 0})[0] == 400
    assert head.post("/v1/chat/completions", {"messages": []})[0] == 400
    for empty in ("", [], [""]):  # as vLLM: an empty prompt is refused, not completed from BOS alone
        status, body = head.post("/v1/completions", {"prompt": empty})
        assert status == 400 and body["error"]["param"] == "prompt", empty
        assert body["error"]["message"].startswith("Either prompt or prompt_embeds must be provided and non-empty.")


def test_metrics(head):
    status, body = head.get("/metrics")
    text = body.decode()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
                 "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                 "vllm:cache_config_info", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_count"):
        assert f"\n{name}{{" in text, name
    kv = 15998753178 // 12766
    assert f'kv_cache_size_tokens="{kv}"' in text and f'model_name="{SERVED}"' in text and 'engine="0"' in text
    assert "\nvllm:kv_cache_size_tokens" not in text  # a real server has the size only as a label
    assert 'position="5"' in text and 'position="6"' not in text
    before = {k: metric(head, k) for k in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total",
                                           "vllm:spec_decode_num_draft_tokens_total",
                                           "vllm:spec_decode_num_drafts_total")}
    length_before = metric(head, "vllm:request_success_total", 'finished_reason="length"')
    usage = head.post("/v1/completions", {"prompt": "count me", "max_tokens": 40, "ignore_eos": True})[1]["usage"]
    assert metric(head, "vllm:generation_tokens_total") - before["vllm:generation_tokens_total"] == 40
    assert metric(head, "vllm:prompt_tokens_total") - before["vllm:prompt_tokens_total"] == usage["prompt_tokens"]
    assert metric(head, "vllm:request_success_total", 'finished_reason="length"') == length_before + 1
    drafts = metric(head, "vllm:spec_decode_num_drafts_total") - before["vllm:spec_decode_num_drafts_total"]
    assert drafts > 0
    assert (metric(head, "vllm:spec_decode_num_draft_tokens_total")
            - before["vllm:spec_decode_num_draft_tokens_total"]) == 6 * drafts


def test_startup_log_sequence(head):
    out = head.stdout()
    order = [f"vLLM API server version {VERSION}", f"Initializing a V1 LLM engine (v{VERSION}) with config: model=",
             "kv_cache_dtype=nvfp4_ds_mla", "B12X", "Loading DSpark speculator (method=dspark, num_speculative_tokens=6)",
             "GPU KV cache size: 1,253,231 tokens, Maximum concurrency for 65,536 tokens per request: 19.12x",
             "CUDA_GRAPH_RUNTIME requested=regular resolved=regular mode=FULL_DECODE_ONLY decode_mode=FULL "
             "breakable=false enforce_eager=false strict=true",
             "Capturing model for DSpark speculator...", "CUDA_GRAPH_CAPTURE implementation=regular status=complete",
             f"Starting vLLM API server 0 on http://127.0.0.1:{head.port}", "Available routes are:",
             "Route: /v1/completions, Methods: POST"]
    positions = [out.index(needle) for needle in order]
    assert positions == sorted(positions)
    assert re.search(r"^\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[api_server\.py:\d+\] vLLM API server",
                     out, re.M)
    assert re.search(r"^\(Worker_TP0 pid=\d+\) INFO .*CUDA_GRAPH_RUNTIME", out, re.M)
    assert "compilation_config={'level': None, 'mode': <CompilationMode.NONE: 0>" in out
    assert "'cudagraph_mode': <CUDAGraphMode.FULL_DECODE_ONLY: (2, 0)>" in out
    err = head.stderr()
    for line in ("INFO:     Started server process [", "INFO:     Waiting for application startup.",
                 "INFO:     Application startup complete."):
        assert line in err
    assert "Breakable CUDA graph enabled" not in out and "Marlin" not in out
    head.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
    head.wait_for("CUDA_GRAPH_REPLAY implementation=regular status=observed")
    assert head.stdout().count("CUDA_GRAPH_REPLAY") == 1


def test_api_key_and_multiple_names(engines, model_dir):
    port = free_port()
    proc = engines([model_dir, "--port", str(port), "--host", "127.0.0.1", "--served-model-name", "a", "b"],
                   {"VLLM_API_KEY": "sekret"}, port=port).wait_ready()
    status, body = proc.get("/v1/models")
    assert status == 401 and body == {"error": "Unauthorized"}
    assert proc.post("/v1/completions", {"prompt": "x", "max_tokens": 1})[0] == 401
    assert proc.request("GET", "/health")[0] == 200
    ok, models = proc.get("/v1/models", headers={"Authorization": "Bearer sekret"})
    assert ok == 200 and [c["id"] for c in models["data"]] == ["a", "b"]
    status, body = proc.post("/v1/completions", {"model": "b", "prompt": "x", "max_tokens": 1},
                             headers={"Authorization": "Bearer sekret"})
    assert status == 200 and body["model"] == "a"
    assert proc.get("/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401


def test_keep_alive_survives_early_answers(engines, model_dir):
    port = free_port()
    engines([model_dir, "--port", str(port), "--host", "127.0.0.1", "--api-key", "k"], port=port).wait_ready()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for path, expected in (("/v1/completions", 401), ("/nope", 404), ("/health", 405)):
        conn.request("POST", path, body=json.dumps({"prompt": "x" * 5000}))
        resp = conn.getresponse()
        assert resp.status == expected
        resp.read()
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
    conn.close()
