"""_engine_probe against the real server: readiness, the served window, the KV size, the requests in flight."""
from __future__ import annotations

import http.client
import json
import threading
import time

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _engine_probe as P
from ansible_collections.gb10.dspark.plugins.module_utils.engine._startup import PHASES, phase_of

TIMEOUT = 10.0


class _RunningContainer:
    """The lane has no docker: the head's container is reported running, and its log is the real
    server's log; everything else is real."""

    def __init__(self, log: str):
        self.log = log

    def inspect_container(self, name):
        return {"Id": "lane", "Image": "sha256:lane", "State": {"Status": "running", "Running": True},
                "Config": {"Labels": {}, "Tty": False}}

    def log_text(self, name, tail, tty=False):
        return "\n".join(self.log.splitlines()[-tail:]).encode()


def test_readiness_and_kv_size_from_the_real_metrics(real, note):
    """api_state: ready with the served model and its window, the KV size from vllm:cache_config_info's labels
    (equal to the size the engine logged), no request running."""
    state = P.api_state(real.url, real.model, TIMEOUT)
    logged = real.logged_kv_tokens()
    assert logged, "the engine logged no KV cache size"
    assert state["ready"] is True and state["status"] == 200 and state["error"] is None
    assert state["models"] == [real.model]
    assert state["max_model_len"] == real.window
    assert state["kv_cache_size_tokens"] == logged
    assert state["num_requests_running"] == 0 and state["metrics_error"] is None
    status, text, _unused = P.http_json(real.url + "/metrics", TIMEOUT)
    metrics = P.parse_metrics(text)
    assert status == 200 and "vllm:kv_cache_size_tokens" not in metrics
    assert [labels.get("kv_cache_size_tokens") for labels, _unused in metrics["vllm:cache_config_info"]] == [str(logged)]
    note(f"KV {state['kv_cache_size_tokens']} tokens from vllm:cache_config_info; window {state['max_model_len']}")


def test_probe_reports_the_head_ready(real):
    """probe() with the head's container running (docker stubbed: the lane has none) and the real API: ready,
    nothing exited, and busy_message lets an idle head be replaced."""
    result = P.probe(_RunningContainer(real.log()), "dspark_vllm", real.url, real.model, log_lines=1, timeout=TIMEOUT)
    assert result["ready"] is True and result["container"]["running"] is True
    assert result["api"]["kv_cache_size_tokens"] == real.logged_kv_tokens()
    assert P.busy_message(result, "head") is None


def _stream_in_background(real, stop: threading.Event, first_chunk: threading.Event) -> threading.Thread:
    """Streams one long completion after another until stop is set, so that a request is in flight whenever the
    test looks, however fast the machine generates (a fast host finishes 3500 tokens of the tiny model in well
    under a second, quicker than one metrics read under load). A request that fails is kept in the thread's
    ``errors`` (the test shows them) and another is started: the thread never dies unseen."""
    body = {"model": real.model, "prompt": "Describe the harbor ledger at length.", "max_tokens": 3500,
            "ignore_eos": True, "temperature": 0, "stream": True}

    def one_request():
        host, port = real.url.split("://", 1)[1].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200, resp.read()[:300]
            resp.readline()
            first_chunk.set()
            while not stop.is_set() and resp.readline():
                pass
        finally:
            conn.close()  # the server aborts the request when its client goes away

    def reader():
        while not stop.is_set():
            try:
                one_request()
            except Exception as exc:  # noqa: BLE001 - a failed request is kept for the test's message, and retried
                errors.append(f"{type(exc).__name__}: {exc}")
                stop.wait(0.2)

    errors: list[str] = []
    thread = threading.Thread(target=reader, daemon=True)
    thread.errors = errors
    thread.start()
    return thread


def _poll_running(real, want: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    state = P.api_state(real.url, real.model, TIMEOUT)
    while state["num_requests_running"] != want and time.monotonic() < deadline:
        time.sleep(0.05)
        state = P.api_state(real.url, real.model, TIMEOUT)
    return state


def test_a_request_in_flight_blocks_a_replace(real, note):
    """num_requests_running counts a streamed request while it runs, and busy_message refuses to stop the
    engine under it; once the client has gone (and no new request follows), the count is 0 again and the
    replace is allowed."""
    stop, first = threading.Event(), threading.Event()
    thread = _stream_in_background(real, stop, first)
    try:
        assert first.wait(60), f"the streamed request never sent a chunk; its errors: {thread.errors[-3:]}"
        busy = _poll_running(real, 1, 30)
        assert busy["num_requests_running"] == 1, (busy, thread.is_alive(), thread.errors[-3:])
        message = P.busy_message({"container": {"running": True}, "api": busy}, "head")
        assert message is not None and "(running 1, waiting " in message and "expected 0" in message
    finally:
        stop.set()
        thread.join(60)
    idle = _poll_running(real, 0, 60)
    assert idle["num_requests_running"] == 0
    assert P.busy_message({"container": {"running": True}, "api": idle}, "head") is None
    note("running 1 while streaming, 0 after the client left")


def _standin_only_kv_reader(metrics: dict) -> int | None:
    for _unused, value in metrics.get("vllm:kv_cache_size_tokens", []):
        return int(value)
    return None


def test_a_kv_reader_that_trusts_only_the_standin_metric_finds_nothing(real, monkeypatch, note):
    """A broken client, on purpose: a KV reader pointed at vllm:kv_cache_size_tokens alone (the name the stand-in
    printed) reports the KV size missing against the real server, which has no such metric."""
    monkeypatch.setattr(P, "kv_cache_tokens", _standin_only_kv_reader)
    state = P.api_state(real.url, real.model, TIMEOUT)
    assert state["ready"] is True
    assert state["kv_cache_size_tokens"] is None
    note("kv_cache_size_tokens None with the stand-in-only reader")


def test_start_up_phases_read_from_the_real_servers_log(real, note):
    """The readiness wait's phases (_startup.phase_of) follow the real server's own start-up log:
    read line by line they only move forward, pass the engine config, the KV cache size and the API,
    and the whole log reads "API up"."""
    lines = real.log().splitlines()
    seen: list[str] = []
    for end in range(1, len(lines) + 1):
        key = phase_of(lines[:end]).key
        if not seen or seen[-1] != key:
            seen.append(key)
    order = [PHASES.index(key) for key in seen]
    assert order == sorted(order), seen
    assert {"configured", "kv_cache", "api_starting", "api_up"} <= set(seen), seen
    final = phase_of(lines)
    assert final.key == "api_up", final
    note(f"phases seen in the real log: {', '.join(seen)}")
