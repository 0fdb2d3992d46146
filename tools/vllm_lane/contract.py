"""The same requests to two servers, and what differs between their answers.

:func:`probes` lists the requests (a name, a method, a path and a body; a body may depend on what
the same server answered earlier, e.g. ``/detokenize`` of that server's own token ids).
:func:`observe` sends them to one server and reduces each answer to what a client can rely on:
the status, the content type, the JSON shape (every path with its JSON types; list elements share
the path ``[]``), for streams the SSE framing and the shape of the chunks, a few properties (usage
arithmetic, error wording), and for ``/metrics`` the sample names, their label names and the
``# TYPE`` declarations of the ``vllm:`` namespace. :func:`compare` lists every difference between
two observations; :mod:`.accepted` says which of them are accepted and why.

Values are never compared (a random model and a stand-in write different text); types, presence,
framing and arithmetic are.
"""
from __future__ import annotations

import http.client
import json
import re
from dataclasses import dataclass, field
from typing import Callable

WINDOW_RE = re.compile(r"maximum context length|context length is only", re.IGNORECASE)
SHORT_PROMPT = "Compute 7 multiplied by 19. Reply with only the number."
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
NO_THINKING = {"thinking": False}
MAX_TOKENS = 16


@dataclass(frozen=True)
class Probe:
    name: str
    method: str
    path: str
    body: dict | Callable[[dict], dict] | None = None
    stream: bool = False
    # a regex the error message must match (a property compared between the servers)
    message: re.Pattern | None = None
    # under ignore_eos the completion must be exactly max_tokens long
    exact_tokens: bool = False
    # a 200 answer must use the whole window (max_tokens capped to the room the prompt leaves)
    fills_window: bool = False


def long_text(words: int = 6000) -> str:
    """A prompt longer than a 4096-token window for any tokenizer that gives a word a token or more."""
    base = ("harbor ledger timber tide lamp pier river orchard market station archive weather").split()
    return " ".join(base[i % len(base)] for i in range(words))


def probes(model: str, window: int) -> list[Probe]:
    user = [{"role": "user", "content": SHORT_PROMPT}]
    tool_user = [{"role": "user", "content": "Use get_weather for Paris."}]
    chat = {"model": model, "messages": user, "max_tokens": MAX_TOKENS, "temperature": 0,
            "chat_template_kwargs": NO_THINKING}
    completion = {"model": model, "prompt": SHORT_PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0,
                  "ignore_eos": True}
    usage = {"stream": True, "stream_options": {"include_usage": True}}

    def tools(choice):
        return {**chat, "messages": tool_user, "tools": [TOOL], "tool_choice": choice, "max_tokens": 64}

    def detokenize(seen: dict) -> dict:
        return {"model": model, "tokens": (seen.get("tokenize") or {}).get("tokens") or [1, 2, 3]}

    return [
        Probe("health", "GET", "/health"),
        Probe("models", "GET", "/v1/models"),
        Probe("version", "GET", "/version"),
        Probe("tokenize", "POST", "/tokenize", {"model": model, "prompt": SHORT_PROMPT}),
        Probe("tokenize_chat", "POST", "/tokenize", {"model": model, "messages": user, "add_generation_prompt": True,
                                                     "chat_template_kwargs": NO_THINKING}),
        Probe("detokenize", "POST", "/detokenize", detokenize),
        Probe("completion", "POST", "/v1/completions", completion, exact_tokens=True),
        Probe("completion_stream", "POST", "/v1/completions", {**completion, **usage}, stream=True,
              exact_tokens=True),
        Probe("completion_stream_no_usage", "POST", "/v1/completions", {**completion, "stream": True}, stream=True,
              exact_tokens=True),
        Probe("chat", "POST", "/v1/chat/completions", chat),
        Probe("chat_stream", "POST", "/v1/chat/completions", {**chat, **usage}, stream=True),
        Probe("chat_tools_auto", "POST", "/v1/chat/completions", tools("auto")),
        Probe("chat_tools_required", "POST", "/v1/chat/completions", tools("required")),
        Probe("chat_tools_named", "POST", "/v1/chat/completions",
              tools({"type": "function", "function": {"name": "get_weather"}})),
        Probe("chat_tools_named_stream", "POST", "/v1/chat/completions",
              {**tools({"type": "function", "function": {"name": "get_weather"}}), **usage}, stream=True),
        Probe("bad_empty_prompt", "POST", "/v1/completions", {**completion, "prompt": ""}),
        Probe("bad_unknown_model", "POST", "/v1/completions", {**completion, "model": "no-such-model"}),
        Probe("bad_unknown_model_chat", "POST", "/v1/chat/completions", {**chat, "model": "no-such-model"}),
        Probe("bad_max_tokens_over_window", "POST", "/v1/completions", {**completion, "max_tokens": window + 904}),
        Probe("bad_prompt_plus_max_tokens_over_window", "POST", "/v1/completions",
              {**completion, "max_tokens": window - 4}, fills_window=True),
        Probe("bad_prompt_over_window", "POST", "/v1/completions", {**completion, "prompt": long_text()},
              message=WINDOW_RE),
        Probe("bad_type_max_tokens", "POST", "/v1/completions", {**completion, "max_tokens": "ten"}),
        Probe("bad_type_temperature", "POST", "/v1/completions", {**completion, "temperature": "hot"}),
        Probe("bad_type_messages", "POST", "/v1/chat/completions", {**chat, "messages": "hello"}),
        Probe("bad_stream_options_without_stream", "POST", "/v1/completions",
              {**completion, "stream_options": {"include_usage": True}}),
        Probe("metrics", "GET", "/metrics"),
    ]


# ---- one server ------------------------------------------------------------------------------
@dataclass
class Answer:
    status: int
    content_type: str
    text: str


def send(base_url: str, method: str, path: str, body: dict | None, timeout: float = 120.0,
         api_key: str | None = None) -> Answer:
    host, _sep, port = base_url.split("://", 1)[1].rstrip("/").partition(":")
    conn = http.client.HTTPConnection(host, int(port or 80), timeout=timeout)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        return Answer(resp.status, (resp.getheader("Content-Type") or "").split(";")[0].strip(), text)
    finally:
        conn.close()


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return "object"


def shape(value: object, prefix: str = "", out: dict | None = None) -> dict[str, set[str]]:
    """Every path of a JSON value with the set of JSON types seen there."""
    out = {} if out is None else out
    out.setdefault(prefix or ".", set()).add(type_name(value))
    if isinstance(value, dict):
        for key, item in value.items():
            shape(item, f"{prefix}.{key}" if prefix else key, out)
    elif isinstance(value, list):
        for item in value:
            shape(item, f"{prefix}[]", out)
    return out


def sse_events(text: str) -> tuple[list[object], dict]:
    """The decoded ``data:`` events and the framing facts of a stream."""
    blocks = [b for b in text.replace("\r\n", "\n").split("\n\n") if b.strip()]
    events: list[object] = []
    data_lines = True
    for block in blocks:
        if not block.startswith("data: ") or "\n" in block.strip():
            data_lines = False
            continue
        payload = block[len("data: "):].strip()
        events.append(payload if payload == "[DONE]" else _json_or_text(payload))
    return events, {"every event is one data: line": data_lines, "ends with a blank line": text.endswith("\n\n")}


def _json_or_text(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _usage_sum(usage: object) -> bool | None:
    if not isinstance(usage, dict):
        return None
    p, c, t = (usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    return all(isinstance(x, int) for x in (p, c, t)) and p + c == t


def stream_facts(probe: Probe, text: str, body: dict, prompt_count: int | None) -> tuple[dict, dict]:
    """(shape of the chunks, framing and usage facts) of a streamed answer."""
    events, facts = sse_events(text)
    done = [i for i, e in enumerate(events) if e == "[DONE]"]
    facts["[DONE] exactly once, last"] = len(done) == 1 and done[0] == len(events) - 1
    chunks = [e for e in events if isinstance(e, dict) and e.get("choices")]
    usage_chunks = [e for e in events if isinstance(e, dict) and e.get("choices") == [] and e.get("usage")]
    finishes = [c for c in chunks if any(ch.get("finish_reason") for ch in c["choices"])]
    facts["chunks with a finish_reason"] = len(finishes)
    facts["usage chunks (choices [])"] = len(usage_chunks)
    wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    if wants_usage:
        before_done = events[done[0] - 1] if done and done[0] > 0 else None
        facts["usage chunk is the last before [DONE]"] = bool(usage_chunks) and before_done is usage_chunks[-1]
        facts["usage adds up"] = _usage_sum(usage_chunks[-1]["usage"]) if usage_chunks else None
        if probe.exact_tokens and usage_chunks:
            facts["completion_tokens == max_tokens"] = usage_chunks[-1]["usage"].get("completion_tokens") == \
                body.get("max_tokens")
        if prompt_count is not None and usage_chunks:
            facts["prompt_tokens == /tokenize count"] = usage_chunks[-1]["usage"].get("prompt_tokens") == prompt_count
    facts["chunks carry usage without include_usage"] = (not wants_usage) and any(
        isinstance(e, dict) and e.get("usage") for e in events)
    if probe.path.endswith("/chat/completions") and chunks:
        delta = chunks[0]["choices"][0].get("delta") or {}
        facts["first chunk is role-only"] = set(delta) <= {"role", "content"} and not delta.get("content") \
            and delta.get("role") == "assistant"
    out: dict[str, set[str]] = {}
    for chunk in chunks:
        shape(chunk, "chunk", out)
    for chunk in usage_chunks:
        shape(chunk, "usage_chunk", out)
    return out, facts


def metric_facts(text: str) -> dict:
    """Sample names, label names per sample name, and ``# TYPE`` declarations, of the vllm: namespace."""
    labels: dict[str, set[str]] = {}
    declared: dict[str, str] = {}
    sample = re.compile(r"^(vllm:[a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+\S+")
    for line in text.splitlines():
        if line.startswith("# TYPE vllm:"):
            _hash, _type, name, kind = line.split(None, 3)
            declared[name] = kind.strip()
            continue
        match = sample.match(line)
        if match:
            names = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', match.group(2) or ""))
            labels.setdefault(match.group(1), set()).update(names)
    return {"samples": labels, "declared": declared}


@dataclass
class Observation:
    """What one server answered to every probe."""

    statuses: dict[str, int] = field(default_factory=dict)
    content_types: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    facts: dict[str, dict] = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    bodies: dict[str, object] = field(default_factory=dict)


def observe(base_url: str, model_probes: list[Probe], window: int) -> Observation:
    obs = Observation()
    seen: dict[str, object] = {}
    for probe in model_probes:
        body = probe.body(seen) if callable(probe.body) else probe.body
        answer = send(base_url, probe.method, probe.path, body)
        obs.statuses[probe.name] = answer.status
        obs.content_types[probe.name] = answer.content_type
        facts: dict = {}
        if probe.name == "metrics":
            obs.metrics = metric_facts(answer.text)
            obs.facts[probe.name] = {}
            continue
        prompt_count = _count(seen.get("tokenize")) if body and body.get("prompt") == SHORT_PROMPT else None
        if probe.stream and answer.status == 200:
            obs.shapes[probe.name], facts = stream_facts(probe, answer.text, body or {}, prompt_count)
        else:
            doc = _json_or_text(answer.text) if answer.text else None
            seen[probe.name] = doc
            obs.bodies[probe.name] = doc
            obs.shapes[probe.name] = shape(doc) if answer.text else {".": {"empty"}}
            if isinstance(doc, dict) and isinstance(doc.get("usage"), dict):
                facts["usage adds up"] = _usage_sum(doc["usage"])
                if probe.exact_tokens:
                    facts["completion_tokens == max_tokens"] = doc["usage"].get("completion_tokens") == \
                        (body or {}).get("max_tokens")
                if prompt_count is not None:
                    facts["prompt_tokens == /tokenize count"] = doc["usage"].get("prompt_tokens") == prompt_count
                if probe.fills_window:
                    facts["total_tokens == the window"] = doc["usage"].get("total_tokens") == window
            if probe.message is not None:
                error = doc.get("error") if isinstance(doc, dict) else None
                message = error.get("message") if isinstance(error, dict) else None
                facts[f"error message matches /{probe.message.pattern}/"] = bool(
                    isinstance(message, str) and probe.message.search(message))
        obs.facts[probe.name] = facts
    return obs


def _count(doc: object) -> int | None:
    return doc.get("count") if isinstance(doc, dict) and isinstance(doc.get("count"), int) else None


# ---- two servers -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Difference:
    probe: str  # the probe's name, or "metrics"
    kind: str  # status | content_type | only_real | only_standin | type | fact | declared
    path: str  # the JSON path, fact, metric sample or "label:<sample>:<label>"
    real: object
    standin: object

    def line(self) -> str:
        return f"{self.probe} {self.kind} {self.path}: real {self.real!r}, stand-in {self.standin!r}"


def _types(value: set[str] | None) -> str | None:
    return None if value is None else "|".join(sorted(value))


def family(sample: str) -> str:
    """The metric family a sample belongs to (``_created``, histogram and counter suffixes dropped)."""
    for suffix in ("_created", "_bucket", "_count", "_sum", "_total"):
        if sample.endswith(suffix):
            sample = sample[: -len(suffix)]
    return sample


def compare(real: Observation, standin: Observation) -> list[Difference]:
    """Every difference; a probe answered with two different statuses is one ``status``
    difference (its two bodies are not compared further)."""
    out: list[Difference] = []
    for name in real.statuses:
        if real.statuses[name] != standin.statuses.get(name):
            out.append(Difference(name, "status", "", real.statuses[name], standin.statuses.get(name)))
            continue
        if real.content_types[name] != standin.content_types.get(name):
            out.append(Difference(name, "content_type", "", real.content_types[name],
                                  standin.content_types.get(name)))
        a, b = real.shapes.get(name, {}), standin.shapes.get(name, {})
        for path in sorted(set(a) | set(b)):
            if path not in b:
                out.append(Difference(name, "only_real", path, _types(a[path]), None))
            elif path not in a:
                out.append(Difference(name, "only_standin", path, None, _types(b[path])))
            elif a[path] != b[path]:
                out.append(Difference(name, "type", path, _types(a[path]), _types(b[path])))
        fa, fb = real.facts.get(name, {}), standin.facts.get(name, {})
        for fact in sorted(set(fa) | set(fb)):
            if fa.get(fact) != fb.get(fact):
                out.append(Difference(name, "fact", fact, fa.get(fact), fb.get(fact)))
    return out + compare_metrics(real.metrics, standin.metrics)


def compare_metrics(real: dict, standin: dict) -> list[Difference]:
    """Families only one server has; within shared families, samples only one has and label names
    only one uses; and ``# TYPE`` declarations that differ."""
    out: list[Difference] = []
    sa, sb = real.get("samples", {}), standin.get("samples", {})
    fa, fb = {family(s) for s in sa}, {family(s) for s in sb}
    for name in sorted(fa - fb):
        out.append(Difference("metrics", "only_real", name, sorted(s for s in sa if family(s) == name), None))
    for name in sorted(fb - fa):
        out.append(Difference("metrics", "only_standin", name, None, sorted(s for s in sb if family(s) == name)))
    for sample in sorted(set(sa) | set(sb)):
        if family(sample) not in fa & fb:
            continue
        if sample not in sb:
            out.append(Difference("metrics", "only_real", sample, sorted(sa[sample]), None))
        elif sample not in sa:
            out.append(Difference("metrics", "only_standin", sample, None, sorted(sb[sample])))
        else:
            for label in sorted(sa[sample] ^ sb[sample]):
                out.append(Difference("metrics", "label", f"{sample}:{label}", label in sa[sample],
                                      label in sb[sample]))
    da, db = real.get("declared", {}), standin.get("declared", {})
    for name in sorted(set(da) | set(db)):
        if family(name) in fa & fb and da.get(name) != db.get(name):
            out.append(Difference("metrics", "declared", name, da.get(name), db.get(name)))
    return out
