"""The serving guard's contract checks (vllm-contract §3.2, §3.4, §6)."""
from __future__ import annotations

import copy
import time
import json

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.serving import _serving_guard as sg

MODEL = "deepseek-v4-flash-dspark"
GOOD = {
    "id": "cmpl-0f4c", "object": "text_completion", "created": 1796219382, "model": MODEL,
    "choices": [{"index": 0, "text": "x" * 10, "logprobs": None, "finish_reason": "length", "stop_reason": None}],
    "usage": {"prompt_tokens": 64, "total_tokens": 192, "completion_tokens": 128, "prompt_tokens_details": None},
}


def expect(**kw):
    return sg.Expect(served_model=MODEL, prompt_tokens=64, **kw)


def test_good_completion_passes():
    v = sg.check_completion("7", 200, GOOD, expect())
    assert v.errors == [] and v.finish_reason == "length" and v.usage["total_tokens"] == 192


@pytest.mark.parametrize("mutate,message", [
    (lambda b: b["usage"].update(prompt_tokens=65, total_tokens=193), "request 7: usage.prompt_tokens is 65, expected 64"),
    (lambda b: b["usage"].update(total_tokens=190), "request 7: usage.total_tokens is 190, expected 64 + 128 = 192"),
    (lambda b: b["usage"].update(completion_tokens=127, total_tokens=191), "request 7: usage.completion_tokens is 127, expected 128"),
    (lambda b: b["choices"][0].update(finish_reason="stop"), 'request 7: choices[0].finish_reason is "stop", expected length'),
    (lambda b: b.update(model="other"), 'request 7: model is "other", expected deepseek-v4-flash-dspark'),
    (lambda b: b.update(object="chat.completion"), 'request 7: object is "chat.completion", expected text_completion'),
    (lambda b: b["choices"].append(dict(b["choices"][0])), "request 7: choices is 2, expected exactly one choice"),
    (lambda b: b["usage"].update(prompt_tokens=True), "request 7: usage.prompt_tokens is True, expected a non-negative integer"),
    (lambda b: b.pop("usage"), "request 7: usage is absent, expected an object"),
])
def test_each_violation_names_request_and_field(mutate, message):
    body = copy.deepcopy(GOOD)
    mutate(body)
    errors = sg.check_completion("7", 200, body, expect()).errors
    assert any(e.startswith(message) for e in errors), errors


def test_http_error_is_one_violation():
    v = sg.check_completion("3", 500, {"error": {"message": "boom"}}, expect())
    assert v.errors == ["request 3: HTTP status is 500, expected 200"]


@pytest.mark.parametrize("status, infra", [
    (500, True), (503, True), (401, True), (403, True), (404, True), (408, True), (429, True),
    (400, False), (422, False),
])
def test_only_a_refused_request_is_a_contract_failure(status, infra):
    """No answer to judge (a wrong API key, an unknown model, a busy or broken server) is infrastructure;
    a 400/422 for the guard's valid request is the server breaking the contract."""
    v = sg.check_completion("3", status, {"error": {"message": "x"}}, expect())
    assert v.errors == [f"request 3: HTTP status is {status}, expected 200"]
    assert v.infra is infra


def test_without_ignore_eos_stop_is_fine_and_fewer_tokens_allowed():
    body = copy.deepcopy(GOOD)
    body["choices"][0]["finish_reason"] = "stop"
    body["usage"].update(completion_tokens=5, total_tokens=69)
    assert sg.check_completion("a1", 200, body, expect(ignore_eos=False)).errors == []


def test_a_length_finish_below_max_tokens_is_a_capped_answer_not_a_pass():
    # vLLM 0.32 answers prompt + max_tokens over the window with HTTP 200, max_tokens cut to the room
    # left and finish_reason length: fewer tokens than asked, which is never a pass
    capped = copy.deepcopy(GOOD)
    capped["usage"].update(completion_tokens=40, total_tokens=104)
    for ignore_eos in (True, False):
        errors = sg.check_completion("9", 200, capped, expect(ignore_eos=ignore_eos)).errors
        assert len(errors) == 1, errors
        assert errors[0].startswith("request 9: usage.completion_tokens is 40")
        assert "finish_reason length below max_tokens 128: the server capped max_tokens" in errors[0]
    capped_usage = {"prompt_tokens": 64, "completion_tokens": 40, "total_tokens": 104}
    raw = sse(chunk("ab", "length"), dict(USAGE, usage=capped_usage))
    for ignore_eos in (True, False):
        errors = sg.check_stream("s9", 200, raw, expect(ignore_eos=ignore_eos)).errors
        assert len(errors) == 1 and "the server capped max_tokens" in errors[0], errors
    # a natural stop below max_tokens stays fine without ignore_eos
    stopped = copy.deepcopy(capped)
    stopped["choices"][0]["finish_reason"] = "stop"
    assert sg.check_completion("9", 200, stopped, expect(ignore_eos=False)).errors == []


def test_run_against_a_server_that_caps_fails_every_contract_request():
    out = sg.run("http://x", MODEL, None, sg.requests_plan(count=8), 2, 5, 60, 0.5,
                 http=FakeServer(window=100))
    contract = [c for c in out["completions"] if c["finish_reason"] == "length"]
    assert out["status"] == "FAIL" and len(contract) == 6 and out["contract_failures"] == 6
    assert all(c["usage"]["completion_tokens"] < 128 for c in contract)
    assert all("the server capped max_tokens" in e for e in out["errors"])


def sse(*events, done=True):
    out = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    return out + ("data: [DONE]\n\n" if done else "")


def chunk(text, finish=None):
    return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


USAGE = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL, "choices": [],
         "usage": {"prompt_tokens": 64, "completion_tokens": 128, "total_tokens": 192}}


def test_good_stream_passes_and_joins_text():
    v = sg.check_stream("s1", 200, sse(chunk("ab"), chunk("cd", "length"), USAGE), expect())
    assert v.errors == [] and v.text == "abcd"


def test_stream_without_usage_or_terminator():
    v = sg.check_stream("s2", 200, sse(chunk("ab", "length"), done=False), expect())
    assert "request s2: stream terminator is absent, expected data: [DONE]" in v.errors
    assert "request s2: usage chunks is 0, expected 1" in v.errors


def test_stream_with_two_usage_chunks_or_two_finishes():
    v = sg.check_stream("s3", 200, sse(chunk("a", "length"), chunk("b", "length"), USAGE, USAGE), expect())
    assert "request s3: chunks with a finish_reason is 2, expected 1" in v.errors
    assert "request s3: usage chunks is 2, expected 1" in v.errors


def test_stream_usage_must_come_last_and_errors_are_reported():
    v = sg.check_stream("s4", 200, sse(chunk("a"), USAGE, chunk("b", "length")), expect())
    assert any("usage chunk position" in e for e in v.errors)
    v = sg.check_stream("s5", 200, sse(chunk("a"), {"error": {"message": "engine died"}}), expect())
    assert any("stream error event" in e for e in v.errors)


def test_sse_framing():
    events, done, errors = sg.parse_sse("data: {\"a\": 1}\n\nevent: x\n\ndata: [DONE]\n\ndata: {}\n\n")
    assert events == [{"a": 1}] and done
    assert len(errors) == 2


def test_accuracy_threshold():
    sec = sg.accuracy([("133", "133\nmore"), ("42", " 42.\n"), ("7", "seven")], threshold=0.6)
    assert sec["correct"] == 2 and sec["pass"]
    assert not sg.accuracy([("133", "13")], threshold=0.5)["pass"]
    assert not sg.accuracy([], threshold=0.0)["pass"]


def test_report_fails_on_any_violation_accuracy_or_bound():
    ok = sg.check_completion("1", 200, GOOD, expect())
    acc = sg.accuracy([("1", "1")], 1.0)
    assert sg.report([ok], acc)["status"] == "PASS"
    bad = sg.check_completion("2", 200, dict(GOOD, model="x"), expect())
    r = sg.report([ok, bad], acc)
    assert r["status"] == "FAIL" and r["failed_requests"] == 1 and r["errors"][0].startswith("request 2: model")
    assert (r["contract_failures"], r["infra_failures"]) == (1, 0)  # a wrong answer is the server's, not infra
    down = sg.check_completion("3", 503, None, expect())
    refused = sg.check_completion("4", 400, None, expect())
    r = sg.report([ok, down, refused], acc)
    assert (r["failed_requests"], r["infra_failures"], r["contract_failures"]) == (2, 1, 1)
    assert sg.report([ok], sg.accuracy([("1", "2")], 1.0))["status"] == "FAIL"
    r = sg.report([ok], acc, bound_hit=True)
    assert r["status"] == "FAIL" and "time bound" in r["errors"][0]
    assert r["completions"][0]["text"] == "x" * 10


class FakeServer:
    """Answers like the stand-in: 4 characters a token plus BOS, products for the arithmetic."""

    def __init__(self, wrong_usage=False, fail_after=None, hang=False, window=None):
        self.wrong_usage, self.fail_after, self.hang, self.calls = wrong_usage, fail_after, hang, 0
        self.window = window  # like vLLM 0.32: max_tokens capped to the room the window leaves

    def count(self, prompt):
        return 1 + (len(prompt) + 3) // 4

    def __call__(self, method, path, body, timeout):
        if path == "/tokenize":
            return 200, {"count": self.count(body["prompt"])}
        self.calls += 1
        if self.hang:
            import time
            time.sleep(timeout)
            raise TimeoutError("timed out")
        if self.fail_after is not None and self.calls > self.fail_after:
            return 500, None
        p = self.count(body["prompt"]) + (1 if self.wrong_usage else 0)
        if body.get("ignore_eos"):
            c = body["max_tokens"]
            if self.window is not None:
                c = min(c, self.window - self.count(body["prompt"]))
            text, fin = "y" * 4 * c, "length"
        else:
            words = body["prompt"].split()
            text, c, fin = str(int(words[1]) * int(words[4].rstrip("."))), 2, "stop"
        usage = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": self.count(body["prompt"]) + c}
        if body.get("stream"):
            return 200, sse(chunk(text, fin), dict(USAGE, usage=usage))
        return 200, {"id": "cmpl-9", "object": "text_completion", "created": 5, "model": MODEL,
                     "choices": [{"index": 0, "text": text, "finish_reason": fin}], "usage": usage}


def test_plan_has_64_requests_of_128_tokens_with_an_accuracy_set_and_streams():
    plan = sg.requests_plan()
    assert len(plan) == 64 and {p["max_tokens"] for p in plan} == {128}
    assert sum(p["expected"] is not None for p in plan) == 16
    assert sum(p["stream"] for p in plan) >= 6 and len({p["id"] for p in plan}) == 64


def test_run_passes_on_a_healthy_server():
    out = sg.run("http://x", MODEL, None, sg.requests_plan(), 4, 5, 60, 0.9, http=FakeServer())
    assert out["status"] == "PASS", out["errors"][:3]
    assert out["accuracy"]["correct"] == 16 and out["requests"] == 64


def test_run_fails_on_wrong_usage_naming_request_and_field():
    out = sg.run("http://x", MODEL, None, sg.requests_plan(), 4, 5, 60, 0.9, http=FakeServer(wrong_usage=True))
    assert out["status"] == "FAIL" and out["failed_requests"] == 64 and out["infra_failures"] == 0
    assert any(e.startswith("request 01: usage.total_tokens") or e.startswith("request 01: usage.prompt_tokens")
               for e in out["errors"])


def test_run_fails_when_the_server_dies_after_n_requests():
    out = sg.run("http://x", MODEL, None, sg.requests_plan(), 1, 5, 60, 0.5, http=FakeServer(fail_after=3))
    assert out["status"] == "FAIL" and "request 04: HTTP status is 500, expected 200" in out["errors"]
    assert out["infra_failures"] == out["failed_requests"] > 0


def test_run_stops_at_its_bound():
    out = sg.run("http://x", MODEL, None, sg.requests_plan(count=8), 2, 0.5, 1.0, 0.5, http=FakeServer(hang=True))
    assert out["status"] == "FAIL" and any("time bound" in e for e in out["errors"])
    assert out["elapsed_s"] < 5


# --- against a real local HTTP server: fail closed on a missing /tokenize count, end at the bound -------------

class StubServer:
    """A real HTTP server on 127.0.0.1 with the stand-in's answers (FakeServer's), whose /tokenize and
    /v1/completions can be told to answer a status instead, to report a wrong prompt_tokens, or to take
    the request and never answer (``hang``: the handler waits until the test ends, as a frozen engine does)."""

    def __init__(self, tokenize_status=200, prompt_tokens=None, hang=()):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.fake, self.release, self.seen = FakeServer(), threading.Event(), []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.seen.append(self.path)
                if self.path in hang:
                    stub.release.wait(120)
                    return
                if self.path == "/tokenize" and tokenize_status != 200:
                    status, answer = tokenize_status, {"detail": "Not Found"}
                else:
                    status, answer = stub.fake("POST", self.path, body, 5)
                    if self.path == "/v1/completions" and prompt_tokens is not None:
                        answer = _with_prompt_tokens(answer, prompt_tokens)
                data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/event-stream" if isinstance(answer, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="stub-serve", daemon=True)
        self.thread.start()

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _with_prompt_tokens(answer, n):
    """The answer with usage.prompt_tokens = n and total_tokens kept the sum (only the count is wrong)."""
    def fix(usage):
        return dict(usage, prompt_tokens=n, total_tokens=n + usage["completion_tokens"])
    if isinstance(answer, str):
        events, _done, _errors = sg.parse_sse(answer)
        return sse(*[dict(e, usage=fix(e["usage"])) if e.get("usage") else e for e in events])
    return dict(answer, usage=fix(answer["usage"]))


@pytest.fixture(name="stub")
def _stub():
    made = []

    def make(**kw):
        made.append(StubServer(**kw))
        return made[-1]
    yield make
    for s in made:
        s.stop()


def guard_threads(before):
    """Threads the guard left alive: any new thread but the stub server's own."""
    import threading
    return [t.name for t in threading.enumerate()
            if t.is_alive() and t not in before and "process_request_thread" not in t.name]


@pytest.mark.timeout(60)
def test_a_tokenize_that_answers_404_is_a_violation_of_every_prompt_never_a_skipped_check(stub):
    """/tokenize answers 404 and every completion says prompt_tokens 999: no prompt's count can be checked,
    and that is a violation of each prompt, named with the request, the field and the /tokenize answer."""
    server = stub(tokenize_status=404, prompt_tokens=999)
    out = sg.run(server.url, MODEL, None, sg.requests_plan(), 8, 5, 60, 0.9, head="lab-head")
    assert out["status"] == "FAIL" and out["failed_requests"] == 64, out["errors"][:3]
    assert server.seen.count("/tokenize") == 64
    for item in sg.requests_plan():
        rid = item["id"]
        assert (f"request {rid}: usage.prompt_tokens is 999, expected the server's /tokenize count, which it did "
                f"not give (/tokenize answered HTTP status 404)") in out["errors"], (rid, out["errors"][:3])
    assert out["accuracy"]["pass"] is True  # the answers themselves are right; only the count is missing


@pytest.mark.timeout(60)
def test_the_tokenize_calls_run_inside_the_overall_bound(stub):
    """A /tokenize that takes the request and never answers: the guard still ends at its overall bound (the
    64 /tokenize calls are inside it), each request's missing count named with the stalled state."""
    import threading
    server = stub(hang=("/tokenize",))
    before = threading.enumerate()
    started = time.monotonic()
    out = sg.run(server.url, MODEL, None, sg.requests_plan(count=8), 2, 30, 2.0, 0.5, head="lab-head")
    took = time.monotonic() - started
    assert took < 2.0 + 15, took  # ended by its 2 s bound, not a 30 s or 300 s request timeout (loose: CI load)
    assert out["status"] == "FAIL" and out["failed_requests"] == 8
    assert any(f"head lab-head: POST {server.url}/tokenize took the request but sent no answer within" in e
               and "the engine is stalled (hung)" in e for e in out["errors"]), out["errors"][:4]
    assert guard_threads(before) == []


@pytest.mark.timeout(60)
def test_a_head_that_takes_requests_and_never_answers_ends_the_guard_at_its_bound_with_a_report(stub):
    """Completions taken and never answered (a frozen pair): the guard returns at its overall bound, however
    long a request may take, lists every unanswered request, names the head, its address and the stalled
    state, and leaves no request running."""
    import threading
    server = stub(hang=("/v1/completions",))
    before = threading.enumerate()
    plan = sg.requests_plan(count=16)
    started = time.monotonic()
    out = sg.run(server.url, MODEL, None, plan, 4, 300, 2.0, 0.5, head="lab-head")
    took = time.monotonic() - started
    assert took < 2.0 + 15, took  # ended by its 2 s bound, not a 30 s or 300 s request timeout (loose: CI load)
    assert guard_threads(before) == []
    assert out["status"] == "FAIL" and out["failed_requests"] == 16 and out["infra_failures"] == 16
    unanswered = out["unanswered"]
    assert [u["request"] for u in unanswered] == [item["id"] for item in plan]
    in_flight = [u for u in unanswered if u["sent"]]
    assert len(in_flight) == 4 and all(not u["sent"] for u in unanswered if u not in in_flight)
    stalled = f"head lab-head: POST {server.url}/v1/completions took the request but sent no answer within"
    for u in in_flight:
        assert u["reason"].startswith(stalled) and "the engine is stalled (hung)" in u["reason"], u
        assert u["stalled"] is True
        assert any(e.startswith(f"request {u['request']}: transport is") and stalled in e for e in out["errors"])
    summary = [e for e in out["errors"] if e.startswith("the run hit its time bound")]
    assert len(summary) == 1 and "of 2 s" in summary[0] and "4 requests sent and unanswered" in summary[0]
    assert "12 never sent" in summary[0] and stalled in summary[0] and "the engine is stalled (hung)" in summary[0]
