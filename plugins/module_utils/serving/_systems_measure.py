# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the systems lanes measure, and how: the figures (medians, ITL, decode and token rates, speculative
acceptance), the engine's /metrics counters, and one streamed completion read and judged (:func:`measure`).

Split from :mod:`._systems` (the suite); nothing here knows a lane."""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from ansible_collections.gb10.dspark.plugins.module_utils.engine._engine_probe import parse_metrics
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import auth_headers, open_http
from ansible_collections.gb10.dspark.plugins.module_utils.serving._serving_guard import Expect, Verdict, check_stream


# call(method, path, body or None, timeout) -> (status, parsed body); see _http.json_client.
Call = Callable[[str, str, "dict | None", float], tuple]


PROMPT_COUNTER = "vllm:prompt_tokens_total"
GENERATION_COUNTER = "vllm:generation_tokens_total"
SPEC_COUNTERS = {"num_drafts": "vllm:spec_decode_num_drafts_total",
                 "num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
                 "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total"}
COUNTERS = (PROMPT_COUNTER, GENERATION_COUNTER, *SPEC_COUNTERS.values())


# ---- pure figures ------------------------------------------------------------------------------
def median(values: list) -> float | None:
    """The median of the values that are numbers, or None when there are none."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(nums) if nums else None


def itl_seconds(t_first: float, t_last: float, completion_tokens: int, first_tokens: int = 1) -> float | None:
    """Mean inter-token latency: the text span over the tokens that arrived after the first text
    chunk (``first_tokens`` of the ``completion_tokens`` came in that chunk)."""
    after = completion_tokens - first_tokens
    if after < 1 or t_last <= t_first:
        return None
    return (t_last - t_first) / after


def decode_rate(t_first: float, t_last: float, completion_tokens: int, first_tokens: int = 1) -> float | None:
    """Client decode tokens/s: the tokens after the first text chunk over the time they took to arrive."""
    after = completion_tokens - first_tokens
    if after < 1 or t_last <= t_first:
        return None
    return after / (t_last - t_first)


def rate(amount: float | None, seconds: float | None) -> float | None:
    if amount is None or seconds is None or seconds <= 0:
        return None
    return amount / seconds


def acceptance(deltas: dict) -> tuple[float | None, float | None]:
    """(acceptance rate, mean acceptance length) of spec-decode counter deltas:
    accepted / draft_tokens and 1 + accepted / drafts (vLLM's definitions)."""
    drafts, draft_tokens, accepted = (deltas.get(k) for k in ("num_drafts", "num_draft_tokens",
                                                              "num_accepted_tokens"))
    rate_ = accepted / draft_tokens if accepted is not None and draft_tokens else None
    length = 1 + accepted / drafts if accepted is not None and drafts else None
    return rate_, length


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


# ---- /metrics ------------------------------------------------------------------------------------
def counter(metrics: dict, name: str, model: str) -> float | None:
    """The sum of a counter's samples for ``model`` (samples without a model label count too)."""
    samples = [v for labels, v in metrics.get(name, []) if labels.get("model_name") in (None, model)]
    return float(sum(samples)) if samples else None


def read_counters(call: Call, model: str, timeout: float) -> tuple[dict, str | None]:
    """The counters this module reads, and an error text when /metrics could not be read."""
    try:
        status, text = call("GET", "/metrics", None, timeout)
    except OSError as exc:
        return {}, f"/metrics: transport is {_exc_text(exc)}, expected an HTTP answer"
    if status != 200 or not isinstance(text, str):
        return {}, f"/metrics: HTTP status is {status}, expected 200"
    metrics = parse_metrics(text)
    return {name: counter(metrics, name, model) for name in COUNTERS}, None


def counter_delta(before: dict, after: dict, name: str) -> tuple[float | None, str | None]:
    a, b = before.get(name), after.get(name)
    if a is None or b is None:
        return None, f"{name} is absent, expected a counter on /metrics"
    if b < a:
        return None, f"{name} went from {a:g} to {b:g}, expected it not to decrease (engine restarted?)"
    delta = b - a
    return (int(delta) if float(delta).is_integer() else delta), None


def server_section(before: dict, after: dict, wall: float, errors: list[str]) -> dict:
    """Server-side token rates over a row's wall time, from two samples of /metrics."""
    problems = list(errors)
    prompt = gen = None
    if not problems:
        prompt, e1 = counter_delta(before, after, PROMPT_COUNTER)
        gen, e2 = counter_delta(before, after, GENERATION_COUNTER)
        problems += [e for e in (e1, e2) if e]
    return {"wall_s": _r(wall), "prompt_tokens": prompt, "generation_tokens": gen,
            "prompt_tok_s": _r(rate(prompt, wall)), "generation_tok_s": _r(rate(gen, wall)),
            "error": "; ".join(problems) or None}


# ---- streaming ---------------------------------------------------------------------------------
@dataclass
class Streamed:
    """One streamed answer: each ``data:`` line with the time (monotonic) it arrived."""

    status: int | None = None
    raw: str = ""
    arrivals: list[tuple[float, str]] = field(default_factory=list)
    sent: float = 0.0
    ended: float = 0.0
    error: str | None = None
    error_body: object = None


def _exc_text(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc) or type(exc).__name__


def _read_events(resp, out: Streamed, lines: list[str], deadline: float, timeout: float) -> None:
    """Read a streamed answer line by line as it arrives, timestamping every ``data:`` line."""
    while True:
        line = resp.readline()
        now = time.monotonic()
        if not line:
            return
        text = line.decode("utf-8", "replace")
        lines.append(text)
        stripped = text.rstrip("\r\n")
        if stripped.startswith("data:"):
            out.arrivals.append((now, stripped[5:].lstrip(" ")))
        if now > deadline:
            raise TimeoutError(f"the answer took longer than {timeout:g} s")


def stream_client(base_url: str, api_key: str | None) -> Callable[[str, dict, float], Streamed]:
    """``post(path, body, timeout)`` -> :class:`Streamed`. Reads the answer line by line as it
    arrives (``json_client`` reads whole bodies) and timestamps every ``data:`` line; the whole
    answer must arrive within ``timeout`` seconds. The key goes only into the Authorization header."""
    authorization = auth_headers(api_key)  # a key that cannot be a header is refused here, before any request

    def post(path: str, body: dict, timeout: float) -> Streamed:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **authorization}
        out = Streamed()
        lines: list[str] = []
        out.sent = time.monotonic()
        deadline = out.sent + timeout
        try:
            with open_http("POST", base_url.rstrip("/") + path, json.dumps(body).encode(), headers, timeout) as resp:
                out.status = resp.status
                if resp.status >= 400:
                    try:
                        out.error_body = json.loads(resp.read().decode("utf-8", "replace"))
                    except (OSError, ValueError):
                        out.error_body = None
                else:
                    _read_events(resp, out, lines, deadline, timeout)
        except (OSError, ValueError) as exc:  # open_http: transport failures are OSError, a bad request ValueError
            out.error = _exc_text(exc)
        out.ended = time.monotonic()
        out.raw = "".join(lines)
        return out
    return post


def _server_message(doc: object) -> str | None:
    if isinstance(doc, dict):
        err = doc.get("error") if isinstance(doc.get("error"), dict) else doc
        message = err.get("message")
        if isinstance(message, str) and message:
            return message[:300]
    return None


@dataclass
class Measure:
    """The client figures of one streamed request (seconds), or the reasons it has none."""

    label: str
    reasons: list[str] = field(default_factory=list)
    usage: dict | None = None
    ttft: float | None = None
    itl: float | None = None
    e2e: float | None = None
    decode_tok_s: float | None = None
    text_chunks: int = 0

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def completion_tokens(self) -> int | None:
        return self.usage.get("completion_tokens") if self.usage else None

    @property
    def prompt_tokens(self) -> int | None:
        return self.usage.get("prompt_tokens") if self.usage else None

    def record(self, **extra) -> dict:
        return {"request": self.label, **extra, "ttft_ms": _ms(self.ttft), "itl_ms": _ms(self.itl),
                "e2e_s": _r(self.e2e), "decode_tok_s": _r(self.decode_tok_s), "text_chunks": self.text_chunks,
                "usage": self.usage, "reasons": list(self.reasons)}


def text_chunks(arrivals: list[tuple[float, str]]) -> list[tuple[float, dict]]:
    """(arrival time, decoded chunk) of the chunks that carry generated text (completion or chat delta);
    a role-only opening chunk (``content: ""``) carries none."""
    out = []
    for t, payload in arrivals:
        try:
            doc = json.loads(payload)
        except ValueError:
            continue
        choices = doc.get("choices") if isinstance(doc, dict) else None
        if not choices or not isinstance(choices[0], dict):
            continue
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        if choice.get("text") or delta.get("content") or delta.get("reasoning"):
            out.append((t, doc))
    return out


def text_times(arrivals: list[tuple[float, str]]) -> list[float]:
    """Arrival times of the chunks that carry generated text."""
    return [t for t, _unused in text_chunks(arrivals)]


def first_chunk_tokens(chunks: list[tuple[float, dict]], completion_tokens: int) -> int:
    """How many tokens the first text chunk carried: its continuous usage count (``continuous_usage_stats``),
    else 1 (a server that does not count per chunk is taken to send one token per chunk)."""
    usage = chunks[0][1].get("usage") if chunks else None
    count = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= completion_tokens:
        return count
    return 1


def measure(label: str, streamed: Streamed, expect: Expect) -> Measure:
    """Judge one streamed answer against the contract, then take its figures."""
    m = Measure(label)
    if streamed.error is not None:
        v = Verdict(label)
        v.fail("transport", streamed.error, "an HTTP answer")
        m.reasons = v.errors
        return m
    verdict = check_stream(label, streamed.status, streamed.raw, expect)
    m.reasons = list(verdict.errors)
    m.usage = verdict.usage
    message = _server_message(streamed.error_body)
    if m.reasons and message:
        m.reasons[0] += f" (server: {message})"
    chunks = text_chunks(streamed.arrivals)
    times = [t for t, _unused in chunks]
    m.text_chunks = len(times)
    if streamed.status == 200 and not times:
        m.reasons.append(f"request {label}: chunks carrying text is 0, expected at least 1")
    if m.reasons:
        return m
    tokens = int(m.completion_tokens or 0)
    first = first_chunk_tokens(chunks, tokens)
    m.ttft = times[0] - streamed.sent
    m.e2e = streamed.ended - streamed.sent
    m.itl = itl_seconds(times[0], times[-1], tokens, first)
    m.decode_tok_s = decode_rate(times[0], times[-1], tokens, first)
    if m.itl is None:
        m.reasons.append(f"request {label}: text arrival span is {times[-1] - times[0]:.6f} s over "
                         f"{tokens} tokens ({first} in the first text chunk), expected a positive span over "
                         "at least one token after the first text chunk")
    return m
