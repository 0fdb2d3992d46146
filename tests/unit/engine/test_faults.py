"""Fault injection through DSPARK_SIM_* environment variables."""
import json
import re
import signal
import socket
import time

import pytest

from dspark_engine import faults

from .conftest import free_port, production_args


def start_head(engines, model_dir, env, name="head"):
    port = free_port()
    args = production_args(model_dir, port=port, master_port=free_port(), nnodes=1, max_model_len=32768)
    return engines(args, env, name=name, port=port)


def test_settings_parsing():
    assert faults.load({}) == faults.SimSettings()
    slow = faults.load({"DSPARK_SIM_FAULT": "slow_tokens, wrong_usage"})
    assert slow.faults == {"slow_tokens", "wrong_usage"} and slow.token_delay_s == 0.25
    assert faults.load({"DSPARK_SIM_FAULT": "slow_tokens", "DSPARK_SIM_TOKEN_DELAY_S": "0.01"}).token_delay_s == 0.01
    assert faults.load({"DSPARK_SIM_KV_TOKENS": "42"}).kv_tokens == 42
    matched = faults.load({"DSPARK_SIM_TOKEN_DELAY_S": "2", "DSPARK_SIM_TOKEN_DELAY_MATCH": "NEEDLE-7"})
    assert matched.token_delay_for("a haystack with NEEDLE-7 in it") == 2.0
    assert matched.token_delay_for("a runtime-gate canary") == 0.0 and matched.token_delay_for(None) == 0.0
    assert faults.load({"DSPARK_SIM_TOKEN_DELAY_S": "2"}).token_delay_for("anything") == 2.0
    with pytest.raises(faults.SettingsError, match="unknown fault name"):
        faults.load({"DSPARK_SIM_FAULT": "crash_on_start,explode"})
    for bad in ({"DSPARK_SIM_STARTUP_DELAY_S": "soon"}, {"DSPARK_SIM_TOKEN_DELAY_S": "-1"},
                {"DSPARK_SIM_JOIN_TIMEOUT_S": "nan"}, {"DSPARK_SIM_DIE_AFTER_REQUESTS": "0"}):
        with pytest.raises(faults.SettingsError):
            faults.load(bad)


def test_unknown_fault_refuses_to_start(engines, model_dir):
    proc = start_head(engines, model_dir, {"DSPARK_SIM_FAULT": "meteor_strike"})
    assert proc.wait_exit() == 1
    assert "unknown fault name(s) meteor_strike" in proc.stderr()
    assert "crash_on_start" in proc.stderr() and proc.stdout() == ""


def test_crash_on_start(engines, model_dir):
    proc = start_head(engines, model_dir, {"DSPARK_SIM_FAULT": "crash_on_start"})
    assert proc.wait_exit() == 1
    out = proc.stdout()
    assert "Initializing a V1 LLM engine" in out
    assert out.index("Initializing a V1 LLM engine") < out.index("EngineCore failed to start.")
    assert "Traceback (most recent call last):" in out and "RuntimeError: CUDA error" in out
    assert "Starting vLLM API server" not in out


def test_wrong_usage(engines, model_dir):
    proc = start_head(engines, model_dir, {"DSPARK_SIM_FAULT": "wrong_usage"}).wait_ready()
    usage = proc.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4, "ignore_eos": True})[1]["usage"]
    real_prompt = proc.post("/tokenize", {"prompt": "Hi"})[1]["count"]
    assert usage["prompt_tokens"] == real_prompt + 1 and usage["completion_tokens"] == 4
    assert usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"]


def test_forbidden_marker_and_wrong_cudagraph_mode(engines, model_dir):
    proc = start_head(engines, model_dir, {"DSPARK_SIM_FAULT": "forbidden_marker,wrong_cudagraph_mode"}).wait_ready()
    out = proc.stdout()
    assert any("Marlin" in line and "fallback to eager" in line for line in out.splitlines())
    worker_lines = [l for l in out.splitlines() if "Worker_TP" in l and "CUDA_GRAPH_RUNTIME" in l]
    assert len(worker_lines) == 1 and "mode=PIECEWISE decode_mode=PIECEWISE" in worker_lines[0]
    engine_lines = [l for l in out.splitlines() if "EngineCore_DP0" in l and "CUDA_GRAPH_RUNTIME" in l]
    assert "mode=FULL_DECODE_ONLY" in engine_lines[0]


def test_slow_tokens(engines, model_dir):
    proc = start_head(engines, model_dir, {"DSPARK_SIM_FAULT": "slow_tokens",
                                           "DSPARK_SIM_TOKEN_DELAY_S": "0.1"}).wait_ready()
    started = time.monotonic()
    assert proc.post("/v1/completions", {"prompt": "Hi", "max_tokens": 5, "ignore_eos": True})[0] == 200
    assert time.monotonic() - started >= 0.5


def test_slow_tokens_only_for_matching_prompts(engines, model_dir):
    proc = start_head(engines, model_dir, {"DSPARK_SIM_TOKEN_DELAY_S": "0.2",
                                           "DSPARK_SIM_TOKEN_DELAY_MATCH": "slow-me"}).wait_ready()
    started = time.monotonic()
    assert proc.post("/v1/completions", {"prompt": "Hi", "max_tokens": 5, "ignore_eos": True})[0] == 200
    assert time.monotonic() - started < 1.0  # delayed, its 5 tokens would take 5 x 0.2 s; a busy machine may add some
    started = time.monotonic()
    assert proc.post("/v1/completions", {"prompt": "Hi slow-me", "max_tokens": 5, "ignore_eos": True})[0] == 200
    assert time.monotonic() - started >= 1.0


def _gauge(proc, name: str, labels: str = "") -> float:
    status, body = proc.get("/metrics")
    assert status == 200
    pattern = rf"^{re.escape(name)}\{{[^}}]*{re.escape(labels)}[^}}]*\}} (\S+)$"
    return sum(float(v) for v in re.findall(pattern, body.decode(), re.M))


def test_a_non_streamed_request_whose_client_goes_is_aborted(engines, model_dir):
    """As vLLM's API server (with_cancellation): the client closes its connection mid-request, the engine stops
    generating at once and counts it aborted, and writes no access line for it (uvicorn writes none for a client
    that has gone); a client that stays gets every token."""
    proc = start_head(engines, model_dir, {"DSPARK_SIM_TOKEN_DELAY_S": "0.1",
                                           "DSPARK_SIM_TOKEN_DELAY_MATCH": "slow-me"}).wait_ready()
    body = json.dumps({"prompt": "Hi slow-me", "max_tokens": 300, "ignore_eos": True}).encode()  # 30 s if left
    client = socket.create_connection(("127.0.0.1", proc.port), timeout=10)
    client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    deadline = time.monotonic() + 10
    while _gauge(proc, "vllm:num_requests_running") != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gauge(proc, "vllm:num_requests_running") == 1
    aborted = _gauge(proc, "vllm:request_success_total", 'finished_reason="abort"')
    client.close()
    gone = time.monotonic()
    while _gauge(proc, "vllm:num_requests_running") and time.monotonic() - gone < 10:
        time.sleep(0.05)
    assert _gauge(proc, "vllm:num_requests_running") == 0 and time.monotonic() - gone < 5
    assert _gauge(proc, "vllm:request_success_total", 'finished_reason="abort"') == aborted + 1
    assert not [line for line in proc.stdout().splitlines() if '"POST /v1/completions HTTP/1.1"' in line]
    status, answer = proc.post("/v1/completions", {"prompt": "Hi slow-me", "max_tokens": 3, "ignore_eos": True})
    assert status == 200 and answer["usage"]["completion_tokens"] == 3


def test_die_after_requests(engines, model_dir):
    proc = start_head(engines, model_dir, {"DSPARK_SIM_FAULT": "die_after_requests",
                                           "DSPARK_SIM_DIE_AFTER_REQUESTS": "2"}).wait_ready()
    for _attempt in range(2):
        assert proc.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})[0] == 200
    assert proc.request("GET", "/health")[0] == 503
    status, body = proc.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert status == 500 and "EngineCore encountered an issue" in body["error"]["message"]
    assert proc.wait_exit(5) == 1
    assert "EngineDeadError" in proc.stdout()


def test_worker_never_joins(engines, model_dir):
    port, master = free_port(), free_port()
    worker = engines(production_args(model_dir, port=port, master_port=master, node_rank=1),
                     {"DSPARK_SIM_FAULT": "worker_never_joins"}, name="worker")
    head = engines(production_args(model_dir, port=port, master_port=master),
                   {"DSPARK_SIM_JOIN_TIMEOUT_S": "1"}, name="head", port=port)
    assert head.wait_exit(10) == 1
    assert "0 remote" not in head.logs() and "1/2 clients joined" in head.logs()
    assert worker.proc.poll() is None
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(5) == 0
