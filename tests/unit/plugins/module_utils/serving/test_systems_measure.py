# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _systems_measure: the figures, the /metrics counters and one streamed completion measured."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import pytest
from tests.support import standin

from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems_measure as S_measure
from ansible_collections.gb10.dspark.plugins.module_utils.serving._serving_guard import Expect


# ---- pure figures ----------------------------------------------------------------------------------
def test_median_ignores_missing_values():
    assert S_measure.median([3.0, None, 1.0, 2.0]) == 2.0
    assert S_measure.median([4, 1, 3, 2]) == 2.5
    assert S_measure.median([None, None]) is None


def test_itl_and_decode_rate_from_text_timestamps():
    # 9 gaps between 10 tokens over 0.9 s: 0.1 s per token, 10 tokens/s after the first
    assert S_measure.itl_seconds(10.0, 10.9, 10) == pytest.approx(0.1)
    assert S_measure.decode_rate(10.0, 10.9, 10) == pytest.approx(10.0)
    assert S_measure.itl_seconds(5.0, 5.0, 10) is None and S_measure.decode_rate(5.0, 5.0, 10) is None
    assert S_measure.itl_seconds(1.0, 2.0, 1) is None


def test_rate_and_acceptance():
    assert S_measure.rate(500, 2.0) == 250.0
    assert S_measure.rate(None, 2.0) is None and S_measure.rate(5, 0) is None
    rate, length = S_measure.acceptance({"num_drafts": 10, "num_draft_tokens": 60, "num_accepted_tokens": 30})
    assert rate == pytest.approx(0.5) and length == pytest.approx(4.0)
    assert S_measure.acceptance({"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}) == (None, None)


METRICS = """# HELP vllm:prompt_tokens_total x
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 20.0
vllm:prompt_tokens_total{engine="0",model_name="other"} 999.0
vllm:generation_tokens_total 7.0
"""


def test_counter_sums_samples_of_the_model():
    from ansible_collections.gb10.dspark.plugins.module_utils.engine._engine_probe import parse_metrics
    metrics = parse_metrics(METRICS)
    assert S_measure.counter(metrics, S_measure.PROMPT_COUNTER, "m") == 120.0
    assert S_measure.counter(metrics, S_measure.GENERATION_COUNTER, "m") == 7.0
    assert S_measure.counter(metrics, S_measure.SPEC_COUNTERS["num_drafts"], "m") is None


def test_server_section_rates_and_a_decreasing_counter():
    before = {S_measure.PROMPT_COUNTER: 100.0, S_measure.GENERATION_COUNTER: 50.0}
    after = {S_measure.PROMPT_COUNTER: 300.0, S_measure.GENERATION_COUNTER: 450.0}
    sec = S_measure.server_section(before, after, 4.0, [])
    assert (sec["prompt_tokens"], sec["generation_tokens"]) == (200, 400)
    assert (sec["prompt_tok_s"], sec["generation_tok_s"], sec["error"]) == (50.0, 100.0, None)
    sec = S_measure.server_section(after, before, 4.0, [])
    assert sec["prompt_tok_s"] is None and "vllm:prompt_tokens_total went from 300 to 100" in sec["error"]
    sec = S_measure.server_section({}, {}, 4.0, ["/metrics: HTTP status is 503, expected 200"])
    assert sec["generation_tok_s"] is None and sec["error"].startswith("/metrics: HTTP status is 503")


def _sse(chunks: list[dict]) -> tuple[str, list[tuple[float, str]]]:
    payloads = [json.dumps(c) for c in chunks] + ["[DONE]"]
    return "".join(f"data: {p}\n\n" for p in payloads), [(float(i), p) for i, p in enumerate(payloads)]


def _chunks(texts: list[str], usage: dict) -> list[dict]:
    out = [{"model": "m", "choices": [{"index": 0, "text": t, "finish_reason": "length" if i == len(texts) - 1
                                       else None}]} for i, t in enumerate(texts)]
    return out + [{"model": "m", "choices": [], "usage": usage}]


def test_measure_takes_ttft_itl_e2e_from_arrival_times():
    raw, arrivals = _sse(_chunks(["a", "b", "", "c", "d"], {"prompt_tokens": 5, "completion_tokens": 4,
                                                            "total_tokens": 9}))
    streamed = S_measure.Streamed(status=200, raw=raw, arrivals=arrivals, sent=-0.5, ended=7.0)
    m = S_measure.measure("r1", streamed, Expect(served_model="m", max_tokens=4, prompt_tokens=5))
    assert m.ok, m.reasons
    # text chunks arrive at t=0, 1, 3, 4 (the empty one at t=2 carries no text)
    assert m.ttft == pytest.approx(0.5) and m.e2e == pytest.approx(7.5)
    assert m.itl == pytest.approx(4 / 3) and m.decode_tok_s == pytest.approx(3 / 4)
    assert m.text_chunks == 4


def test_measure_counts_every_token_of_the_first_text_chunk():
    # a server may put several tokens in one chunk (DSpark accepts drafts per step): with continuous
    # usage the first text chunk says it carried 3 tokens, so 4 more arrived over the 2 s that followed
    chunks = _chunks(["abc", "de", "fg"], {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12})
    for chunk, count in zip(chunks, (3, 5, 7)):
        chunk["usage"] = {"prompt_tokens": 5, "completion_tokens": count, "total_tokens": 5 + count}
    raw, arrivals = _sse(chunks)
    m = S_measure.measure("r7", S_measure.Streamed(status=200, raw=raw, arrivals=arrivals, sent=-0.5, ended=3.0),
                  Expect(served_model="m", max_tokens=7, prompt_tokens=5))
    assert m.ok, m.reasons
    assert m.ttft == pytest.approx(0.5) and m.itl == pytest.approx(2 / 4) and m.decode_tok_s == pytest.approx(4 / 2)
    # all of it in the first chunk: no span to measure
    one = _chunks(["abcdefg", ""], {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12})
    one[0]["usage"] = one[1]["usage"] = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    raw, arrivals = _sse(one)
    m = S_measure.measure("r8", S_measure.Streamed(status=200, raw=raw, arrivals=arrivals, sent=0.0, ended=3.0),
                  Expect(served_model="m", max_tokens=7, prompt_tokens=5))
    assert m.itl is None and "after the first text chunk" in m.reasons[0]


def test_a_role_only_opening_chunk_carries_no_text():
    # a real chat stream opens with {"role": "assistant", "content": ""}: TTFT starts at the first text
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
              {"choices": [{"index": 0, "delta": {"reasoning": "hm"}}]},
              {"choices": [{"index": 0, "delta": {"content": "ok"}}]},
              {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}]
    arrivals = [(float(i), json.dumps(c)) for i, c in enumerate(chunks)] + [(9.0, "[DONE]")]
    assert S_measure.text_times(arrivals) == [1.0, 2.0]


def test_measure_inconsistent_usage_names_the_field_and_has_no_figures():
    raw, arrivals = _sse(_chunks(["a", "b"], {"prompt_tokens": 6, "completion_tokens": 2, "total_tokens": 7}))
    m = S_measure.measure("r2", S_measure.Streamed(status=200, raw=raw, arrivals=arrivals, sent=0.0, ended=3.0),
                  Expect(served_model="m", max_tokens=2, prompt_tokens=5))
    assert not m.ok and m.ttft is None and m.itl is None
    assert any("usage.total_tokens is 7" in r for r in m.reasons)
    assert any("usage.prompt_tokens is 6" in r for r in m.reasons)


def test_measure_missing_usage_transport_and_http_errors():
    raw, arrivals = _sse(_chunks(["a", "b"], {})[:-1])
    m = S_measure.measure("r3", S_measure.Streamed(status=200, raw=raw, arrivals=arrivals), Expect(served_model="m", max_tokens=2))
    assert any("usage chunks is 0, expected 1" in r for r in m.reasons)
    m = S_measure.measure("r4", S_measure.Streamed(error="Connection refused"), Expect(served_model="m"))
    assert m.reasons == ['request r4: transport is "Connection refused", expected an HTTP answer']
    m = S_measure.measure("r5", S_measure.Streamed(status=400, error_body={"error": {"message": "too long"}}),
                  Expect(served_model="m"))
    assert m.reasons == ["request r5: HTTP status is 400, expected 200 (server: too long)"]


def test_measure_all_text_in_one_instant_has_no_itl():
    raw, _unused = _sse(_chunks(["a", "b"], {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}))
    payloads = [line[6:] for line in raw.split("\n\n") if line]
    m = S_measure.measure("r6", S_measure.Streamed(status=200, raw=raw, arrivals=[(1.0, p) for p in payloads], sent=0.0, ended=1.0),
                  Expect(served_model="m", max_tokens=2))
    assert m.itl is None and "text arrival span is 0.000000 s over 2 tokens" in m.reasons[0]


# ---- the streaming reader ------------------------------------------------------------------------
class _LockstepClock:
    """The streaming client's clock, in lock step with the server below: the clock moves only when the server
    sends an event, and the server sends the next event only once the client has stamped the last one. A client
    that reads line by line stamps the three events 1, 2 and 3 whatever the machine's load; one that reads the
    answer whole stamps them alike (the server waits 5 s for each stamp, then goes on)."""

    def __init__(self):
        self.now = 0.0
        self.calls = 0
        self._cond = threading.Condition()

    def monotonic(self) -> float:  # the client's only use of its clock: once at the send, once per line read
        with self._cond:
            self.calls += 1
            self._cond.notify_all()
            return self.now

    def tick(self) -> None:
        with self._cond:
            self.now += 1.0

    def wait_for_calls(self, n: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.calls >= n, timeout=5)


class _Slow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    clock: _LockstepClock

    def log_message(self, *args):
        pass

    def _chunk(self, data: bytes, last: bool = False) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) + (b"0\r\n\r\n" if last else b""))
        self.wfile.flush()

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/bad":
            data = json.dumps({"error": {"message": "no such model", "code": 404}}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(3):
            self.clock.tick()
            self._chunk(f'data: {{"n": {i}}}\n\n'.encode())
            # the client's clock calls: 1 at the send, then 2 per event (its data line and the blank line)
            self.clock.wait_for_calls(2 + 2 * i)
        self.clock.tick()
        self._chunk(b"data: [DONE]\n\n", last=True)


@pytest.fixture
def slow_server(monkeypatch):
    clock = _LockstepClock()
    monkeypatch.setattr(S_measure, "time", clock)  # the server thread keeps the real clock
    handler = type("_SlowHandler", (_Slow,), {"clock": clock})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_stream_client_timestamps_each_line_as_it_arrives(slow_server):
    got = S_measure.stream_client(slow_server, None)("/v1/completions", {"stream": True}, 10)
    assert got.status == 200 and got.error is None
    assert [p for _unused, p in got.arrivals] == ['{"n": 0}', '{"n": 1}', '{"n": 2}', "[DONE]"]
    # each event stamped when it came, after the send: read whole, all four would read 4.0
    assert got.sent == 0.0 and [t for t, _unused in got.arrivals] == [1.0, 2.0, 3.0, 4.0]
    assert got.raw.count("data: ") == 4 and got.ended == 4.0


def test_stream_client_http_error_and_refused(slow_server):
    got = S_measure.stream_client(slow_server, "sk-x")("/bad", {"stream": True}, 5)
    assert got.status == 404 and got.error_body["error"]["message"] == "no such model" and got.error is None
    got = S_measure.stream_client(f"http://127.0.0.1:{standin.free_port()}", None)("/v1/completions", {}, 2)
    assert got.status is None and got.error
