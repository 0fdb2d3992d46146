"""The tiny deterministic 'model' behind the stand-in.

It answers the runtime-gate canaries and the NIAH probe, and otherwise produces
pseudo-random filler text.  What it answers, in this order:

1. a tool call (chat only): a forced ``tool_choice`` naming a function, ``"required"``, or
   ``"auto"`` with a tool whose name appears in the last user message.  Arguments are filled
   from the function's JSON schema (required properties, or all when none are required): a
   string gets the capitalised phrase after "for/in/at/of/near/about" ("Use get_weather for
   Paris." -> ``{"city": "Paris"}``), a number the first number of the message. Content null;
   finish_reason ``tool_calls`` for ``auto``/``required``, ``stop`` for a named function (as a
   real vLLM server answers);
2. a secret code: the prompt contains ``Secret code: <CODE>`` or ``SECRET VERIFICATION CODE:
   <CODE>`` and a question asking for the code -> replies ``<CODE>``;
3. arithmetic: ``A multiplied by B`` (also ``A times B``, ``A * B``, ``A × B``) in the last user
   message (the whole prompt for completions) -> replies the product;
4. otherwise filler words seeded by the prompt token ids (plus seed, temperature, top_p and
   top_k when temperature > 0), 12-63 tokens and a full stop.

An answer ends with EOS (finish ``stop``; EOS counts as a completion token) unless
``ignore_eos``, in which case filler continues up to ``max_tokens``.  ``max_tokens`` is always
honoured (finish ``length``, exactly ``max_tokens`` completion tokens).  In a chat with thinking
on, the answer is preceded by a short reasoning text and ``</think>``; with a reasoning parser
they go to ``reasoning``, otherwise they stay in the content (as with a real model).

``speculate`` also splits the output into decode steps (``SpecStats.steps``): the first token
from prefill, then one step per draft round (the accepted drafts plus one); a stream sends one
chunk per step.
"""
import hashlib
import json
import random
import re
from array import array
from dataclasses import dataclass, field

from . import tokenizer as tok

REASONING_TEXT = "Thinking it through."
_WORDS = (
    "the spark node model token graph cache kernel tensor stream memory signal router expert "
    "layer batch river stone garden lantern harbor meadow summit orbit quiet bright steady gentle "
    "rapid simple careful patient and of with under over near through across"
).split()
_ACCEPT_PROB = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)

_CODE_RE = re.compile(r"(?:SECRET VERIFICATION CODE|Secret code)\s*:\s*([A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?)",
                      re.IGNORECASE)
_QUESTION_RE = re.compile(r"\b(?:what\s+is|what's|reply\s+with|return|tell\s+me|give\s+me|report|repeat|provide)"
                          r"\b[^.?!\n]{0,60}\bcode\b", re.IGNORECASE)
_MUL_RE = re.compile(r"(-?\d+)\s*(?:multiplied\s+by|times|\*|×)\s*(-?\d+)", re.IGNORECASE)
_PLACE_RE = re.compile(r"\b(?:for|in|at|of|near|about)\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)")
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass
class Sampling:
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int = None
    ignore_eos: bool = False
    stop: tuple = ()
    skip_special_tokens: bool = True


@dataclass
class ChatContext:
    last_user: str
    tools: list = field(default_factory=list)
    tool_choice: str = "none"          # "none" | "auto" | "required" | a function name
    thinking: bool = False
    reasoning_parser: bool = False


@dataclass
class Token:
    id: int
    text: str
    channel: str                       # "content" | "reasoning" | "tool" | "hidden"


@dataclass
class SpecStats:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list = field(default_factory=list)
    steps: list = field(default_factory=list)   # output tokens per engine step, in order; sums to the output


@dataclass
class Output:
    tokens: list
    finish_reason: str                 # "stop" | "length" | "tool_calls"
    stop_reason: object = None         # the matched stop string, else None
    tool_call: dict = None             # {"name": ..., "arguments": "<json>"}
    spec: SpecStats = field(default_factory=SpecStats)

    def _text(self, channel):
        return "".join(t.text for t in self.tokens if t.channel == channel)

    @property
    def content(self):
        return None if self.tool_call else self._text("content")

    @property
    def reasoning(self):
        return self._text("reasoning") if any(t.channel == "reasoning" for t in self.tokens) else None

    @property
    def engine_finish_reason(self):
        """The engine-level reason counted in metrics (tool calls stop on EOS)."""
        return "stop" if self.finish_reason == "tool_calls" else self.finish_reason


def _seed(prompt_ids, s):
    h = hashlib.sha256(b"dspark-sim-v1")
    h.update(array("Q", prompt_ids).tobytes())
    if s.temperature > 0:
        h.update(repr((s.seed or 0, s.temperature, s.top_p, s.top_k)).encode())
    return int.from_bytes(h.digest()[:8], "big")


def _filler_words(rng):
    """Endless filler, one list of token ids per word (full stops included)."""
    first, since_stop = True, 0
    while True:
        word = rng.choice(_WORDS)
        ids = tok.encode(word if first else " " + word)
        first, since_stop = False, since_stop + 1
        if since_stop >= 6 and rng.random() < 0.2:
            ids += tok.encode(".")
            since_stop = 0
        yield ids


def _filler(rng, natural):
    """Filler token ids: ``natural`` -> a finite sentence; else an endless stream."""
    words = _filler_words(rng)  # endless: the loops below end only by returning or breaking
    if not natural:
        for ids in words:
            yield from ids
    target, out = 12 + rng.randrange(52), []
    for ids in words:  # target >= 12, so at least one word, as many as reach it
        out += ids
        if len(out) >= target:
            break
    if out[-1] != tok.encode(".")[0]:
        out += tok.encode(".")
    yield from out


def _string_argument(text):
    match = _PLACE_RE.search(text)
    if match:
        return match.group(1)
    quoted = re.search(r"\"([^\"]+)\"|'([^']+)'", text)
    if quoted:
        return quoted.group(1) or quoted.group(2)
    caps = re.findall(r"\b[A-Z][a-z][\w-]*", text)
    return caps[-1] if caps else ""


def tool_arguments(parameters, text):
    """Arguments (a dict) for a function with JSON-schema ``parameters``, taken from ``text``."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    props = props if isinstance(props, dict) else {}
    required = parameters.get("required") if isinstance(parameters, dict) else None
    names = [n for n in required if isinstance(n, str)] if isinstance(required, list) and required else list(props)
    args = {}
    for name in names:
        schema = props.get(name) if isinstance(props.get(name), dict) else {}
        kind = schema.get("type")
        number = _NUMBER_RE.search(text)
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            args[name] = schema["enum"][0]
        elif kind == "integer":
            args[name] = int(float(number.group())) if number else 0
        elif kind == "number":
            args[name] = float(number.group()) if number else 0.0
        elif kind == "boolean":
            args[name] = True
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = _string_argument(text)
    return args


def _choose_tool(chat):
    if not chat or not chat.tools or chat.tool_choice == "none":
        return None
    names = [t["function"]["name"] for t in chat.tools]
    mentioned = [n for n in names if n in chat.last_user]
    if chat.tool_choice == "auto":
        name = mentioned[0] if mentioned else None
    elif chat.tool_choice == "required":
        name = mentioned[0] if mentioned else names[0]
    else:
        name = chat.tool_choice
    if name is None:
        return None
    function = next(t["function"] for t in chat.tools if t["function"]["name"] == name)
    arguments = tool_arguments(function.get("parameters") or {}, chat.last_user)
    return {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}


def answer_text(prompt_text, question_text):
    """The canned answer for a prompt, or None for filler text."""
    code = _CODE_RE.search(prompt_text)
    if code and _QUESTION_RE.search(prompt_text):
        return code.group(1)
    product = _MUL_RE.search(question_text)
    if product:
        return str(int(product.group(1)) * int(product.group(2)))
    return None


def speculate(num_tokens, k, rng):
    """DSpark counters for ``num_tokens`` outputs: the first comes from prefill, then each
    decode step drafts ``k`` tokens, accepts a deterministic prefix of them and adds one."""
    stats = SpecStats(per_position=[0] * k, steps=[1] if num_tokens > 0 else [])
    remaining = num_tokens - 1
    if not k:
        stats.steps += [1] * max(0, remaining)
    while k and remaining > 0:
        accepted = 0
        while accepted < k and rng.random() < _ACCEPT_PROB[min(accepted, len(_ACCEPT_PROB) - 1)]:
            accepted += 1
        accepted = min(accepted, remaining - 1)
        stats.drafts += 1
        stats.draft_tokens += k
        stats.accepted += accepted
        for pos in range(accepted):
            stats.per_position[pos] += 1
        stats.steps.append(accepted + 1)
        remaining -= accepted + 1
    return stats


def _apply_stop(tokens, stops):
    """Cut ``tokens`` after the one that completes the earliest stop string in the content."""
    content, ends = "", []
    for t in tokens:
        if t.channel == "content":
            content += t.text
        ends.append(len(content))
    best = None
    for s in stops:
        pos = content.find(s) if s else -1
        if pos >= 0 and (best is None or pos < best[0]):
            best = (pos, s)
    if best is None:
        return None
    pos, stop = best
    cut = next(i for i, end in enumerate(ends) if end >= pos + len(stop))
    kept, start = [], 0
    for t, end in zip(tokens[:cut + 1], ends):
        if t.channel == "content":
            t = Token(t.id, content[start:min(end, pos)] if start < pos else "", "content")
            start = end
        kept.append(t)
    return kept, stop


def generate(prompt_ids, prompt_text, sampling, chat=None, num_spec_tokens=0):
    """Deterministic completion of a prompt (see the module docstring)."""
    rng = random.Random(_seed(prompt_ids, sampling))
    plan = []
    if chat and chat.thinking:
        channel = "reasoning" if chat.reasoning_parser else "content"
        plan += [(t, channel) for t in tok.encode(REASONING_TEXT)]
        plan.append((tok.THINK_END_ID, "hidden" if chat.reasoning_parser else "content"))
    tool_call = _choose_tool(chat)
    if tool_call:
        plan += [(t, "tool") for t in tok.encode(json.dumps(tool_call, ensure_ascii=False))]
    else:
        answer = answer_text(prompt_text, chat.last_user if chat else prompt_text)
        body = tok.encode(answer) if answer is not None else _filler(rng, natural=True)
        for t in body:
            plan.append((t, "content"))
            if len(plan) > sampling.max_tokens:
                break
    if sampling.ignore_eos:
        filler = _filler(rng, natural=False)
        while len(plan) < sampling.max_tokens:
            plan.append((next(filler), "content"))
    else:
        plan.append((tok.EOS_ID, "hidden"))
    finished = len(plan) <= sampling.max_tokens and not sampling.ignore_eos
    plan = plan[:sampling.max_tokens]
    tokens = [Token(t, "" if ch == "hidden" else tok.token_text(t, sampling.skip_special_tokens), ch)
              for t, ch in plan]
    finish, stop_reason = ("stop" if finished else "length"), None
    stopped = _apply_stop(tokens, sampling.stop)
    if stopped:
        (tokens, stop_reason), finish = stopped, "stop"
    if tool_call and finish == "stop" and stop_reason is None:
        finish = "tool_calls" if chat.tool_choice in ("auto", "required") else "stop"
    else:
        tool_call = None
        tokens = [Token(t.id, t.text, "content") if t.channel == "tool" else t for t in tokens]
    return Output(tokens, finish, stop_reason, tool_call, speculate(len(tokens), num_spec_tokens, rng))
