# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving guard's judgement: is one completion (plain or streamed) true to vLLM's contract?

Pure functions over parsed responses; the client that sends the 64 requests, bounds their
concurrency and time, and writes the report builds on them. Every violation names the request
and the field: ``request 17: usage.completion_tokens is 127, expected 128``.

Contract (vllm-contract §3.2, §3.4, §6): HTTP 200; ``id`` ``cmpl-…``, ``object``
``text_completion``, integer ``created``, ``model`` the served name, exactly one choice with a
``finish_reason``; ``usage`` with non-negative integer ``prompt_tokens``, ``completion_tokens``
and ``total_tokens`` = their sum; with ``ignore_eos`` the finish reason is ``length`` and
exactly ``max_tokens`` tokens come back; a ``length`` finish with fewer than ``max_tokens`` tokens
(a budget the server cut to fit its window, as vLLM 0.32 does instead of a 400) is a violation
with or without ``ignore_eos``; ``prompt_tokens`` equals the server's own count of the
prompt (``/tokenize``), and a prompt the server gave no count for is a violation (the check cannot be
made, so it is never skipped). A stream carries one finish chunk, then exactly one usage chunk with no
choices, then ``[DONE]``.

The run ends at its overall bound whatever its requests are doing: the ``/tokenize`` calls and the
completions share it, no request's socket may wait beyond it, and at the bound every request still in
flight is ended (its connection shut), reported as unanswered with the head, its address and the
stalled state, and its thread gone before :func:`run` returns.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils.common._http import Inflight, json_client, transport_state
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import show

PROMPTS = 64
MAX_TOKENS = 128


@dataclass
class Expect:
    served_model: str
    max_tokens: int = MAX_TOKENS
    ignore_eos: bool = True
    prompt_tokens: int | None = None  # the server's /tokenize count for this prompt
    tokenize_error: str | None = None  # why the server gave no count: then prompt_tokens cannot be checked


@dataclass
class Verdict:
    request: str
    errors: list[str] = field(default_factory=list)
    text: str = ""
    usage: dict | None = None
    finish_reason: str | None = None
    infra: bool = False  # no answer to judge: transport, a status of INFRA_STATUS or >= 500, the time bound

    def fail(self, what: str, actual: object, expected: object) -> None:
        self.errors.append(f"request {self.request}: {what} is {show(actual, 'quoted')}, expected {expected}")
        if what in ("transport", "answer") or (what == "HTTP status" and _no_answer_status(actual)):
            self.infra = True


# Statuses that leave no answer to judge, besides every 5xx: the request never reached the model (a
# wrong or missing API key, an unknown served name, a server that is busy or timed out). A 400 or
# 422 for the guard's own valid request is the server breaking the contract, and counts as such.
INFRA_STATUS = (401, 403, 404, 408, 429)


def _no_answer_status(status: object) -> bool:
    return status is None or int(status) >= 500 or int(status) in INFRA_STATUS


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_usage(v: Verdict, usage: object, expect: Expect) -> None:
    if not isinstance(usage, dict):
        v.fail("usage", usage, "an object")
        return
    v.usage = usage
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if not _is_count(usage.get(key)):
            v.fail(f"usage.{key}", usage.get(key), "a non-negative integer")
    p, c, t = usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens")
    if all(_is_count(x) for x in (p, c, t)) and p + c != t:
        v.fail("usage.total_tokens", t, f"{p} + {c} = {p + c}")
    if expect.prompt_tokens is not None and p != expect.prompt_tokens:
        v.fail("usage.prompt_tokens", p, f"{expect.prompt_tokens} (the server's /tokenize count)")
    elif expect.prompt_tokens is None and expect.tokenize_error:  # a check that cannot be made is no pass
        v.fail("usage.prompt_tokens", p, f"the server's /tokenize count, which it did not give ({expect.tokenize_error})")
    # A length finish with fewer tokens than asked is a cut budget: vLLM 0.32 caps max_tokens to the room
    # the window leaves (HTTP 200) where older releases answer 400. Never a pass, with or without ignore_eos.
    capped = v.finish_reason == "length" and _is_count(c) and c < expect.max_tokens
    why = (f" (finish_reason length below max_tokens {expect.max_tokens}: the server capped max_tokens to the "
           "room its window leaves after the prompt)") if capped else ""
    if (expect.ignore_eos and c != expect.max_tokens) or capped:
        v.fail("usage.completion_tokens", c, f"{expect.max_tokens}{why}")
    elif not expect.ignore_eos and _is_count(c) and c > expect.max_tokens:
        v.fail("usage.completion_tokens", c, f"at most {expect.max_tokens}")


def check_completion(request: str, status: int | None, body: object, expect: Expect) -> Verdict:
    """One non-streamed ``/v1/completions`` answer."""
    v = Verdict(request)
    if status != 200:
        v.fail("HTTP status", status, 200)
        return v
    if not isinstance(body, dict):
        v.fail("body", body, "a JSON object")
        return v
    if not str(body.get("id", "")).startswith("cmpl-"):
        v.fail("id", body.get("id"), "cmpl-…")
    if body.get("object") != "text_completion":
        v.fail("object", body.get("object"), "text_completion")
    if not _is_count(body.get("created")):
        v.fail("created", body.get("created"), "epoch seconds")
    if body.get("model") != expect.served_model:
        v.fail("model", body.get("model"), expect.served_model)
    choices = body.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        v.fail("choices", len(choices) if isinstance(choices, list) else choices, "exactly one choice")
    else:
        _check_choice(v, choices[0], expect)
    check_usage(v, body.get("usage"), expect)
    return v


def _check_choice(v: Verdict, choice: dict, expect: Expect) -> None:
    v.text = str(choice.get("text") or "")
    v.finish_reason = choice.get("finish_reason")
    if expect.ignore_eos and v.finish_reason != "length":
        v.fail("choices[0].finish_reason", v.finish_reason, "length")
    elif v.finish_reason not in ("stop", "length"):
        v.fail("choices[0].finish_reason", v.finish_reason, "stop or length")


def parse_sse(raw: str) -> tuple[list[object], bool, list[str]]:
    """SSE text → (decoded data events before [DONE], whether [DONE] ended it, framing errors)."""
    events: list[object] = []
    errors: list[str] = []
    done = False
    for block in raw.replace("\r\n", "\n").split("\n\n"):
        block = block.strip()
        if not block:
            continue
        if done:
            errors.append(f"data after [DONE]: {block[:80]!r}")
            continue
        if not block.startswith("data: "):
            errors.append(f"an event that is not a data line: {block[:80]!r}")
            continue
        payload = block[len("data: "):]
        if payload == "[DONE]":
            done = True
            continue
        try:
            events.append(json.loads(payload))
        except ValueError:
            errors.append(f"an event that is not JSON: {payload[:80]!r}")
    return events, done, errors


def check_stream(request: str, status: int | None, raw: str, expect: Expect) -> Verdict:
    """One streamed answer requested with ``stream_options: {include_usage: true}``."""
    v = Verdict(request)
    if status != 200:
        v.fail("HTTP status", status, 200)
        return v
    events, done, framing = parse_sse(raw)
    v.errors += [f"request {request}: stream has {e}" for e in framing]
    if not done:
        v.fail("stream terminator", None, "data: [DONE]")
    errors = [e for e in events if isinstance(e, dict) and "error" in e]
    if errors:
        v.fail("stream error event", errors[0]["error"], "none")
    chunks = [e for e in events if isinstance(e, dict) and e.get("choices")]
    usage_chunks = [e for e in events if isinstance(e, dict) and e.get("usage") and not e.get("choices")]
    finishes = [c["choices"][0].get("finish_reason") for c in chunks if c["choices"][0].get("finish_reason")]
    v.text = "".join(str(c["choices"][0].get("text") or "") for c in chunks)
    for c in chunks:
        if c.get("model") != expect.served_model:
            v.fail("chunk model", c.get("model"), expect.served_model)
            break
    if len(finishes) != 1:
        v.fail("chunks with a finish_reason", len(finishes), 1)
    else:
        _check_choice(v, {"text": v.text, "finish_reason": finishes[0]}, expect)
    if len(usage_chunks) != 1:
        v.fail("usage chunks", len(usage_chunks), 1)
    else:
        last_data = events[-1] if events else None
        if last_data is not usage_chunks[0]:
            v.fail("usage chunk position", "not last before [DONE]", "last before [DONE]")
        check_usage(v, usage_chunks[0]["usage"], expect)
    return v


def accuracy(answers: list[tuple[str, str]], threshold: float) -> dict:
    """(expected, text) pairs → the accuracy section; an answer counts when the first non-empty
    line of the text, stripped of spaces and a final period, equals the expected answer."""
    rows = []
    for expected, text in answers:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        got = first.rstrip(".").strip()
        rows.append({"expected": expected, "got": got, "correct": got == expected})
    correct = sum(r["correct"] for r in rows)
    score = correct / len(rows) if rows else 0.0
    return {"total": len(rows), "correct": correct, "score": round(score, 4), "threshold": threshold,
            "pass": bool(rows) and score >= threshold, "rows": rows}


def report(verdicts: list[Verdict], accuracy_section: dict | None, bound_hit: bool = False,
           unanswered: list[dict] | None = None, bound_note: str | None = None) -> dict:
    """The guard's JSON report: PASS only with every request true to the contract, the accuracy
    threshold met and the time bound kept. ``unanswered``: every request that got no HTTP answer
    (``request``, ``sent``, ``reason``); ``bound_note`` says what the time bound left behind."""
    errors = [e for v in verdicts for e in v.errors]
    if accuracy_section is not None and not accuracy_section["pass"]:
        errors.append(f"accuracy {accuracy_section['correct']}/{accuracy_section['total']} is below the threshold "
                      f"{accuracy_section['threshold']}")
    if bound_hit:  # first: what the bound left behind is what an operator reads first
        errors.insert(0, bound_note or "the run hit its time bound before every request finished")
    return {
        "schema_version": 1,
        "status": "PASS" if not errors else "FAIL",
        "requests": len(verdicts),
        "failed_requests": sum(1 for v in verdicts if v.errors),
        "infra_failures": sum(1 for v in verdicts if v.errors and v.infra),
        "contract_failures": sum(1 for v in verdicts if v.errors and not v.infra),
        "accuracy": accuracy_section,
        "errors": errors,
        "unanswered": unanswered or [],
        "completions": [{"request": v.request, "finish_reason": v.finish_reason, "usage": v.usage, "text": v.text}
                        for v in verdicts],
    }


# --- the run: 64 requests against the head, bounded in concurrency and time -------------------

ACCURACY_PAIRS = [(7, 19), (12, 12), (23, 4), (9, 81), (15, 16), (31, 3), (6, 47), (11, 13),
                  (25, 25), (8, 64), (17, 5), (42, 2), (13, 29), (3, 333), (21, 21), (19, 7)]
CONTRACT_TOPICS = ("the weather over a mountain pass", "a library reading room", "a river crossing at dawn",
                   "the history of a city wall", "a quiet railway station", "an orchard in autumn",
                   "a market square at noon", "a lighthouse keeper's day")


def requests_plan(count: int = PROMPTS, max_tokens: int = MAX_TOKENS, streamed_every: int = 6) -> list[dict]:
    """The guard's requests: the accuracy set (arithmetic with one right answer, EOS allowed) and
    contract prompts generated to exactly ``max_tokens`` with ``ignore_eos``; every
    ``streamed_every``-th contract prompt is streamed with usage."""
    plan = []
    for a, b in ACCURACY_PAIRS[: min(len(ACCURACY_PAIRS), count // 4)]:
        plan.append({"prompt": f"Compute {a} multiplied by {b}. Reply with only the number.",
                     "expected": str(a * b), "ignore_eos": False, "stream": False})
    n = 0
    while len(plan) < count:
        topic = CONTRACT_TOPICS[n % len(CONTRACT_TOPICS)]
        plan.append({"prompt": f"Request {n}: write a plain description of {topic}.", "expected": None,
                     "ignore_eos": True, "stream": n % streamed_every == streamed_every - 1})
        n += 1
    for i, item in enumerate(plan):
        item["id"] = f"{i + 1:02d}"
        item["max_tokens"] = max_tokens
    return plan


def request_body(item: dict, model: str) -> dict:
    body = {"model": model, "prompt": item["prompt"], "max_tokens": item["max_tokens"], "temperature": 0}
    if item["ignore_eos"]:
        body["ignore_eos"] = True
    if item["stream"]:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def judge(item: dict, status: int | None, payload: object, model: str, prompt_tokens: int | None,
          tokenize_error: str | None = None) -> Verdict:
    expect = Expect(served_model=model, max_tokens=item["max_tokens"], ignore_eos=item["ignore_eos"],
                    prompt_tokens=prompt_tokens, tokenize_error=tokenize_error)
    if item["stream"]:
        return check_stream(item["id"], status, payload if isinstance(payload, str) else "", expect)
    return check_completion(item["id"], status, payload, expect)


# Seconds the run waits, after its bound, for the requests it ended to let go of their threads.
RELEASE_S = 5.0


def _server_count(status: object, body: object) -> tuple[int | None, str | None]:
    """The /tokenize answer -> (the server's count, or why there is none)."""
    if status != 200:
        return None, f"/tokenize answered HTTP status {status}"
    count = body.get("count") if isinstance(body, dict) else None
    if not _is_count(count):
        return None, f"/tokenize answered {show(count, 'quoted')} for its count, not a non-negative integer"
    return count, None


def run(base_url: str, model: str, api_key: str | None, plan: list[dict], concurrency: int,
        request_timeout: float, overall_timeout: float, threshold: float, http=None, head: str | None = None) -> dict:
    """Send the plan, judge every answer, and return the report. ``http(method, path, body, timeout)``
    returns (status, parsed JSON or SSE text); the default speaks :func:`json_client` to ``base_url``.

    Each of ``concurrency`` daemon threads takes the next request, asks ``/tokenize`` for the server's
    count of its prompt, then sends the completion; every call's timeout is ``request_timeout`` cut to what
    is left of ``overall_timeout``. At the bound the connections still open are shut (so a frozen server
    cannot hold a thread), the threads are joined, and every request without an HTTP answer is listed."""
    import queue
    import threading
    import time

    start = time.monotonic()
    deadline = start + overall_timeout
    inflight = Inflight()
    http = http or json_client(base_url, api_key, head, inflight)
    todo: queue.SimpleQueue = queue.SimpleQueue()
    for item in plan:
        todo.put(item)
    lock = threading.Lock()
    state: dict[str, dict] = {}  # request id -> sent, path (the call waiting), count, why, answer, error

    def budget() -> float:
        return min(request_timeout, deadline - time.monotonic())

    def call(r: dict, path: str, body: dict):
        t = budget()
        if t <= 0:
            raise TimeoutError(f"{path} not sent: the run's bound had ended")
        with lock:
            r.update(sent=True, path=path, since=time.monotonic())
        return http("POST", path, body, t)

    def one(item: dict) -> None:
        r = {"sent": False}
        with lock:
            state[item["id"]] = r
        try:
            try:
                r["count"], r["why"] = _server_count(*call(r, "/tokenize", {"model": model, "prompt": item["prompt"]}))
            except Exception as exc:  # no count from the server: that prompt's check cannot be made
                r["count"], r["why"] = None, f"/tokenize got no answer: {exc}"
                if budget() <= 0:
                    raise
            status, payload = call(r, "/v1/completions", request_body(item, model))
            with lock:
                r["answer"] = (status, payload)
        except Exception as exc:  # a transport error is that request's violation
            with lock:
                r["error"], r["stalled"] = str(exc), bool(getattr(exc, "stalled", False))

    def worker() -> None:
        while time.monotonic() < deadline and not inflight.aborted:
            try:
                item = todo.get_nowait()
            except queue.Empty:
                return
            one(item)

    threads = [threading.Thread(target=worker, name=f"dspark-guard-{i}", daemon=True)
               for i in range(max(1, min(concurrency, len(plan))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    bound_hit = any(t.is_alive() for t in threads)
    if bound_hit:  # end what is still in flight: its connections are shut, its threads let go
        inflight.abort()
        release = time.monotonic() + RELEASE_S
        for t in threads:
            t.join(max(0.0, release - time.monotonic()))
    ended = time.monotonic()
    url = base_url.rstrip("/")
    who = f"head {head}: " if head else ""
    verdicts: dict[str, Verdict] = {}
    unanswered: list[dict] = []
    with lock:
        snapshot = {rid: dict(r) for rid, r in state.items()}
    for item in plan:
        rid, r = item["id"], snapshot.get(item["id"], {"sent": False})
        if "answer" in r:
            verdicts[rid] = judge(item, *r["answer"], model, r.get("count"), r.get("why"))
            continue
        v = verdicts[rid] = Verdict(rid)
        stalled = False
        if not r["sent"]:
            bound_hit = True
            v.fail("answer", None, f"one within the run's bound of {overall_timeout:g} s (never sent: the bound "
                                   "ended while earlier requests waited)")
            reason = f"never sent: the run's bound of {overall_timeout:g} s ended first"
        else:
            stalled = r.get("stalled", "error" not in r)
            reason = r.get("error") or (  # a call that did not let go of its thread (a client that ignores the abort)
                f"{who}POST {url}{r['path']} {transport_state(TimeoutError(), round(ended - r['since'], 1))} "
                "(still waiting when the run ended)")
            v.fail("transport", reason, "an HTTP answer")
        unanswered.append({"request": rid, "sent": r["sent"], "stalled": stalled, "reason": reason})
    ordered = [verdicts[item["id"]] for item in plan]
    acc = accuracy([(item["expected"], verdicts[item["id"]].text) for item in plan if item["expected"] is not None],
                   threshold)
    note = None
    if bound_hit:
        waited = [u for u in unanswered if u["sent"]]
        never = len(unanswered) - len(waited)
        ids = ", ".join(u["request"] for u in waited)
        note = (f"the run hit its time bound of {overall_timeout:g} s before every request finished: "
                f"{len(waited)} requests sent and unanswered" + (f" ({ids})" if ids else "") + f", {never} never sent"
                + (f"; {next((u for u in waited if u['stalled']), waited[-1])['reason']}" if waited else ""))
    out = report(ordered, acc, bound_hit, unanswered, note)
    out["elapsed_s"] = round(time.monotonic() - start, 2)
    out["settings"] = {"prompts": len(plan), "max_tokens": plan[0]["max_tokens"] if plan else None,
                       "concurrency": concurrency, "request_timeout_s": request_timeout,
                       "overall_timeout_s": overall_timeout, "accuracy_threshold": threshold}
    return out
