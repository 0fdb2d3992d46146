# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systems lanes: how fast a pair's engine answers, measured from its head.

Lanes, always run in this order (each one selectable):

1. ``canary``      one plain completion with a known answer at temperature 0 (PASS / FAIL).
2. ``latency``     sequential streamed completions with ``ignore_eos``; the first is a warm-up and
                   is recorded as dropped; TTFT, ITL, e2e and decode tokens/s are medians of the rest.
3. ``concurrency`` per level N, ``reps`` rounds of N concurrent streamed completions; aggregate
                   tokens/s = sum(completion_tokens) / wall time of the level.
4. ``throughput``  ``decode``: (completion_tokens - tokens of the first text chunk) / (t_last_text -
                   t_first_text) of single long completions; ``prefill``: prompt_tokens / TTFT of long
                   token-id prompts, each asking for at most PREFILL_OUTPUT_TOKENS so that prompt +
                   max_tokens fits the window (``max_model_len`` of ``GET /v1/models``): a server that caps
                   an over-long request and one that refuses it then answer the same.
5. ``spec_decode`` the speculative-decoding counters of ``/metrics`` sampled before the first lane
                   and after the throughput lane: acceptance rate and mean acceptance length.
6. ``external``    an optional external benchmark client (r0b0bench 1.0.0rc2 or newer), run as a child
                   process the way the original wrapper runs it (``run --profile systems --tokenizer ...
                   --only canary,bfcl_mt,bfcl_ast,latency,concurrency,throughput`` with the BFCL settings in
                   its environment). The quality pillars (qa, ifeval, humaneval, gsm8k) are rows too:
                   NOT_IMPLEMENTED with a reason unless they are among the client's lanes.

Every prompt is sent as token ids built with the server's ``/tokenize`` and starts with a nonce,
so the prefix cache cannot help and ``usage.prompt_tokens`` is known exactly. Every answer is held
to the serving guard's contract (:mod:`._serving_guard`): HTTP 200, one finish chunk, exactly one
usage chunk, ``prompt_tokens + completion_tokens == total_tokens``, ``completion_tokens ==
max_tokens`` under ``ignore_eos``. A row with any violation (or a transport error) is ``ERROR``, its
reasons listed and every figure null - never a number measured on a broken answer.

Streams ask for ``continuous_usage_stats``: a server may send several tokens in one chunk (a
speculative-decoding step), and the first text chunk's count is what ITL and the decode rate leave
out. Client figures (timestamps taken as each SSE line arrives) and server figures (``/metrics``
``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total`` deltas over the row's wall time)
are kept in separate sections of each row.

Every row records the kind of client that measured it (``client_kind``): the suite's own lanes
send their requests to the engine's OpenAI-compatible API with this module's own client, so they
are ``openai_portable``; an external row takes the ``backend`` its client's report states (else
``openai_portable``: r0b0bench lanes are OpenAI-API clients); a NOT_IMPLEMENTED row measured
nothing and has none. A report whose rows mix ``openai_portable`` and ``vllm-bench`` is refused:
its status is ERROR and ``reasons`` names both kinds and their rows.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import math
import os
import re
import secrets
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from ansible_collections.gb10.dspark.plugins.module_utils.common._clock import utc_now
from ansible_collections.gb10.dspark.plugins.module_utils.engine._engine_probe import parse_metrics
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic, write_text_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import auth_headers, open_http
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError, Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import redact
from ansible_collections.gb10.dspark.plugins.module_utils.serving._serving_guard import (
    Expect,
    Verdict,
    accuracy,
    check_completion,
    check_stream,
)
from ansible_collections.gb10.dspark.plugins.module_utils.common._site import local_api_url

# call(method, path, body or None, timeout) -> (status, parsed body); see _http.json_client.
Call = Callable[[str, str, "dict | None", float], tuple]
# run(argv, cwd, env, timeout) -> (rc, stdout, stderr), for the external client.
Runner = Callable[[list, str, dict, float], tuple]

LANES = ("canary", "latency", "concurrency", "throughput", "spec_decode", "external")
HTTP_LANES = ("canary", "latency", "concurrency", "throughput", "spec_decode")
STATUSES = ("PASS", "FAIL", "ERROR", "NOT_IMPLEMENTED")
RANK = "head"
SCHEMA_VERSION = 1
JSON_FILE = "systems.json"
MARKDOWN_FILE = "systems.md"

# The original wrapper's r0b0bench run: its --only list, in its order (niah runs apart, on long-1m).
DEFAULT_EXTERNAL_LANES = ("canary", "bfcl_mt", "bfcl_ast", "latency", "concurrency", "throughput")
BFCL_LANES = ("bfcl_mt", "bfcl_ast")
QUALITY_PILLARS = ("qa", "ifeval", "humaneval", "gsm8k")
DEFAULT_EXTERNAL_TIMEOUT = 86400.0
NO_EXTERNAL = "no external benchmark client configured"
SCRUBBED = "********"  # stands for the API key in the external client's output
EXTERNAL_STATUSES = {"PASS": "PASS", "FAIL": "FAIL", "ERROR": "ERROR", "NOT_IMPLEMENTED": "NOT_IMPLEMENTED",
                     "SKIP": "NOT_IMPLEMENTED"}
EXTERNAL_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
# The client's own entry point: r0b0bench has no __main__, its console script calls r0b0bench.cli:main.
EXTERNAL_MODULE = "r0b0bench.cli"
MIN_R0B0BENCH_VERSION = "1.0.0rc2"
VERSION_FORMS = "X.Y.Z[{a|b|rc}N][.postN][.devN]"
VERSION_TIMEOUT = 120.0
# Named options of external_client that reach the child as environment variables, and the defaults
# of the integer ones (the original wrapper's exports).
EXTERNAL_PATH_ENV = (("aquila_scripts", "R0B0BENCH_AQUILA_SCRIPTS"), ("bfcl_python", "R0B0BENCH_BFCL_PYTHON"))
EXTERNAL_INT_ENV = (("bfcl_num_threads", "BFCL_NUM_THREADS", 4), ("bfcl_http_timeout", "BFCL_HTTP_TIMEOUT", 3600),
                    ("bfcl_max_tokens", "BFCL_MAX_TOKENS", 8192))
EXTERNAL_PUBLIC = ("path", "python", "lanes", "timeout", "tokenizer", "aquila_scripts", "bfcl_python",
                   "bfcl_num_threads", "bfcl_http_timeout", "bfcl_max_tokens")

# Who measured a row. The suite's own lanes are OpenAI-compatible API clients; vllm-bench rows come
# from vLLM's own benchmark tool; the two are never reported together.
OWN_CLIENT_KIND = "openai_portable"
CLIENT_KINDS = ("openai_portable", "vllm-bench")
_KIND_SPELLINGS = {"openai_portable": "openai_portable", "openai-portable": "openai_portable",
                   "vllm-bench": "vllm-bench", "vllm_bench": "vllm-bench"}

CANARY_PROMPT = "Compute 7 multiplied by 19. Reply with only the number."
CANARY_ANSWER = "133"
CANARY_MAX_TOKENS = 16
PREFILL_OUTPUT_TOKENS = 16
MIN_PREFILL_PROMPT_TOKENS = 128
SETUP_TIMEOUT = 30.0
TOPICS = ("the weather over a mountain pass", "a library reading room", "a river crossing at dawn",
          "the history of a city wall", "a quiet railway station", "an orchard in autumn")
FILLER = (" The harbor ledger lists two barges of timber, a quiet tide at noon and lamps lit along"
          " the pier at the usual hour.")

PROMPT_COUNTER = "vllm:prompt_tokens_total"
GENERATION_COUNTER = "vllm:generation_tokens_total"
SPEC_COUNTERS = {"num_drafts": "vllm:spec_decode_num_drafts_total",
                 "num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
                 "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total"}
COUNTERS = (PROMPT_COUNTER, GENERATION_COUNTER, *SPEC_COUNTERS.values())

# Keys of a row's ``client`` and ``server`` sections that describe the setup, not a measurement;
# everything else is a figure and is null in an ERROR row.
_SETUP_KEYS = frozenset({"tok_s_kind", "max_tokens", "max_model_len", "requests", "reps", "dropped_reps",
                         "concurrency", "prompt_tokens_constructed", "expected", "error", "report", "argv", "backend",
                         "quality_pillar"})


# ---- settings --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """What one suite is asked to do (the module's options)."""

    model: str
    output_dir: str
    base_url: str = local_api_url()
    lanes: tuple[str, ...] = LANES
    latency_reps: int = 5
    latency_max_tokens: int = 128
    concurrency_levels: tuple[int, ...] = (1, 2, 4, 6, 16)
    concurrency_reps: int = 3
    concurrency_max_tokens: int = 512
    decode_reps: int = 5
    decode_max_tokens: int = 2048
    prefill_reps: int = 3
    prefill_prompt_tokens: int = 14000
    request_timeout: float = 600.0
    external_client: dict | None = None
    context: dict | None = None  # what served the run (profile, implementation, image), recorded as given

    def public(self) -> dict:
        """The settings as recorded in the report (no secret is part of them)."""
        ext = None
        if self.external_client:
            ext = {k: self.external_client.get(k) for k in EXTERNAL_PUBLIC}
            for key, _unused, default in EXTERNAL_INT_ENV:
                if ext[key] is None:
                    ext[key] = default
        return {"base_url": self.base_url, "model": self.model, "lanes": [x for x in LANES if x in self.lanes],
                "latency_reps": self.latency_reps, "latency_max_tokens": self.latency_max_tokens,
                "concurrency_levels": list(self.concurrency_levels), "concurrency_reps": self.concurrency_reps,
                "concurrency_max_tokens": self.concurrency_max_tokens, "decode_reps": self.decode_reps,
                "decode_max_tokens": self.decode_max_tokens, "prefill_reps": self.prefill_reps,
                "prefill_prompt_tokens": self.prefill_prompt_tokens,
                "prefill_output_tokens": PREFILL_OUTPUT_TOKENS, "request_timeout": self.request_timeout,
                "external_client": ext}


def external_lanes(s: Settings) -> list[str]:
    if s.external_client and s.external_client.get("lanes") is not None:
        return list(s.external_client["lanes"])
    return list(DEFAULT_EXTERNAL_LANES)


def unconfigured_pillars(s: Settings) -> list[str]:
    """The quality pillars that are not among the external lanes: reported NOT_IMPLEMENTED."""
    names = external_lanes(s)
    return [p for p in QUALITY_PILLARS if p not in names]


# ---- r0b0bench's version --------------------------------------------------------------------------
_VERSION = re.compile(r"(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?", re.IGNORECASE)
_PRE_PHASES = {"a": 0, "b": 1, "rc": 2}


def version_key(text: object) -> tuple | None:
    """A sort key with PEP 440 order for ``X.Y.Z[{a|b|rc}N][.postN][.devN]`` (1.0.0.dev1 < 1.0.0a1 <
    1.0.0rc1 < 1.0.0rc2 < 1.0.0 < 1.0.0.post1 < 1.0.1; trailing zeros of the release do not count);
    None for anything else (local labels, other spellings), which is never compared."""
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        return None
    release = [int(x) for x in match.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    phase, number, post, dev = match.group(2), match.group(3), match.group(4), match.group(5)
    if phase:
        pre = (_PRE_PHASES[phase.lower()], int(number))
    elif dev is not None and post is None:
        pre = (-1, 0)  # X.Y.Z.devN comes before every pre-release of X.Y.Z
    else:
        pre = (len(_PRE_PHASES), 0)  # the final release, after its release candidates
    return (tuple(release), pre, -1 if post is None else int(post), math.inf if dev is None else int(dev))


def version_at_least(found: str, minimum: str) -> bool:
    key, floor = version_key(found), version_key(minimum)
    return key is not None and floor is not None and key >= floor


def external_version(ext: dict, runner: Runner) -> str:
    """The version the external client reports (``<python> -m r0b0bench.cli --version`` in its checkout,
    answered ``r0b0bench <version>``); refused below MIN_R0B0BENCH_VERSION or when it cannot be compared."""
    argv = [str(ext["python"]), "-m", EXTERNAL_MODULE, "--version"]
    where = f"r0b0bench in {ext['path']}"
    floor = f"{MIN_R0B0BENCH_VERSION} or newer"
    rc, out, err = runner(argv, str(ext["path"]), external_env(None), VERSION_TIMEOUT)
    lines = (out or "").strip().splitlines()
    match = re.fullmatch(r"r0b0bench\s+(\S+)", lines[-1].strip()) if lines else None
    if rc != 0 or not match:
        tail = " ".join((err or out or "").split())[-300:]
        raise CheckError(RANK, f"{where} did not report its version ({' '.join(argv)} exited {rc}"
                               + (f": {tail}" if tail else "") + f"), expected 'r0b0bench <version>', {floor}")
    found = match.group(1)
    if version_key(found) is None:
        raise CheckError(RANK, f"{where} reports version {found}, which this check cannot compare (it knows "
                               f"{VERSION_FORMS}), expected {floor}")
    if not version_at_least(found, MIN_R0B0BENCH_VERSION):
        raise IdentityError(Mismatch(rank=RANK, item="r0b0bench version", expected=floor, actual=found,
                                     reason=f"reported by {' '.join(argv)} in {ext['path']}; older clients "
                                            "do not run the systems package as the wrapper does",
                                     expected_word="expected"))
    return found


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _validate_bench_options(ext: dict, names: list[str], runs: bool) -> list[Mismatch]:
    """The seed's options of the external client: absolute paths, positive integers, and - when the
    external lane runs - paths that exist and the BFCL settings the BFCL lanes need."""
    bad: list[Mismatch] = []
    paths = {key: ext.get(key) for key in ("tokenizer", "aquila_scripts", "bfcl_python")}
    for key, value in paths.items():
        if value not in (None, "") and not (isinstance(value, str) and os.path.isabs(value)):
            bad.append(_opt(f"external_client.{key}", value, "an absolute path"))
            paths[key] = None
    for key, _unused, _unused in EXTERNAL_INT_ENV:
        value = ext.get(key)
        if value is not None and not _positive_int(value):
            bad.append(_opt(f"external_client.{key}", value, "a positive integer"))
    if not runs:
        return bad
    bfcl = [n for n in names if n in BFCL_LANES]
    need = f"lanes {', '.join(bfcl)} need it" if len(bfcl) > 1 else f"lane {''.join(bfcl)} needs it"
    tokenizer, scripts, python = paths["tokenizer"], paths["aquila_scripts"], paths["bfcl_python"]
    if tokenizer and not os.path.exists(tokenizer):
        bad.append(_opt("external_client.tokenizer", tokenizer, "an existing tokenizer file or model folder"))
    if scripts and not os.path.isdir(scripts):
        bad.append(_opt("external_client.aquila_scripts", scripts,
                        "an existing folder (the DSV4 BFCL served-id registry scripts)"))
    elif not ext.get("aquila_scripts") and bfcl:
        bad.append(_opt("external_client.aquila_scripts", None, f"the DSV4 BFCL registry scripts folder ({need})"))
    if python and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        bad.append(_opt("external_client.bfcl_python", python, "an executable interpreter (the BFCL virtualenv's)"))
    elif not ext.get("bfcl_python") and bfcl:
        bad.append(_opt("external_client.bfcl_python", None, f"the BFCL virtualenv's python ({need})"))
    return bad


def _opt(item: str, actual: object, expected: str) -> Mismatch:
    return Mismatch(rank=RANK, item=f"option {item}", expected=expected, actual=actual, expected_word="expected")


def validate(s: Settings) -> list[Mismatch]:
    """Every option that cannot give a meaningful measurement."""
    bad: list[Mismatch] = []
    unknown = [x for x in s.lanes if x not in LANES]
    if unknown:
        bad.append(_opt("lanes", unknown, "names among " + ", ".join(LANES)))
    if not s.lanes:
        bad.append(_opt("lanes", [], "at least one lane"))
    if not s.model:
        bad.append(_opt("model", s.model, "the served model name"))
    checks = (("latency_reps", s.latency_reps, 2, "at least 2 (the first is a dropped warm-up)"),
              ("latency_max_tokens", s.latency_max_tokens, 2, "at least 2 (ITL needs two tokens)"),
              ("concurrency_reps", s.concurrency_reps, 1, "at least 1"),
              ("concurrency_max_tokens", s.concurrency_max_tokens, 2, "at least 2 (ITL needs two tokens)"),
              ("decode_reps", s.decode_reps, 1, "at least 1"),
              ("decode_max_tokens", s.decode_max_tokens, 2, "at least 2 (decode rate needs two tokens)"),
              ("prefill_reps", s.prefill_reps, 1, "at least 1"),
              ("prefill_prompt_tokens", s.prefill_prompt_tokens, MIN_PREFILL_PROMPT_TOKENS,
               f"at least {MIN_PREFILL_PROMPT_TOKENS}"))
    for name, value, low, text in checks:
        if value < low:
            bad.append(_opt(name, value, text))
    if not s.concurrency_levels:
        bad.append(_opt("concurrency_levels", [], "at least one level"))
    elif any(level < 1 for level in s.concurrency_levels):
        bad.append(_opt("concurrency_levels", list(s.concurrency_levels), "levels of at least 1"))
    elif len(set(s.concurrency_levels)) != len(s.concurrency_levels):
        bad.append(_opt("concurrency_levels", list(s.concurrency_levels), "distinct levels"))
    if not s.request_timeout > 0:
        bad.append(_opt("request_timeout", s.request_timeout, "greater than 0"))
    ext = s.external_client
    if ext:
        if ext.get("lanes") is not None and not ext["lanes"]:
            bad.append(_opt("external_client.lanes", ext.get("lanes"), "at least one lane name"))
        elif any(not n or "," in n for n in external_lanes(s)):
            bad.append(_opt("external_client.lanes", external_lanes(s), "lane names without commas"))
        if not (ext.get("timeout") or 0) > 0:
            bad.append(_opt("external_client.timeout", ext.get("timeout"), "greater than 0"))
        if "external" in s.lanes:
            if not os.path.isdir(str(ext.get("path"))):
                bad.append(_opt("external_client.path", ext.get("path"), "an existing checkout directory"))
            python = str(ext.get("python"))
            if not (os.path.isfile(python) and os.access(python, os.X_OK)):
                bad.append(_opt("external_client.python", ext.get("python"), "an executable interpreter"))
        bad += _validate_bench_options(ext, external_lanes(s), "external" in s.lanes)
    return bad


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


# ---- the suite -----------------------------------------------------------------------------------
class PromptError(Exception):
    """A prompt could not be built (``/tokenize`` failed); the lane's row becomes ERROR."""


@dataclass
class Ctx:
    s: Settings
    call: Call
    post: Callable[[str, dict, float], Streamed]
    runner: Runner
    api_key: str | None
    run_id: str
    suite_before: dict = field(default_factory=dict)
    suite_before_error: str | None = None
    filler_ids: list[int] | None = None
    external_version: str | None = None
    max_model_len: int | None = None  # the served model's window, from GET /v1/models


def tokenize(ctx: Ctx, text: str, special: bool = True) -> list[int]:
    try:
        status, doc = ctx.call("POST", "/tokenize", {"model": ctx.s.model, "prompt": text,
                                                     "add_special_tokens": special}, ctx.s.request_timeout)
    except OSError as exc:
        raise PromptError(f"/tokenize: transport is {_exc_text(exc)}, expected an HTTP answer") from None
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if status != 200 or not isinstance(tokens, list) or not tokens or \
            not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        detail = _server_message(doc)
        raise PromptError(f"/tokenize: HTTP status is {status} with {'token ids' if tokens else 'no token ids'}, "
                          f"expected 200 with token ids" + (f" (server: {detail})" if detail else ""))
    if doc.get("count") is not None and doc.get("count") != len(tokens):
        raise PromptError(f"/tokenize: count is {doc.get('count')}, expected {len(tokens)} (the ids returned)")
    return tokens


def nonce(ctx: Ctx, label: str) -> str:
    return f"[run {ctx.run_id} request {label} nonce {secrets.token_hex(4)}]"


def short_prompt(ctx: Ctx, label: str, index: int) -> list[int]:
    topic = TOPICS[index % len(TOPICS)]
    return tokenize(ctx, f"{nonce(ctx, label)} Write a long, plain description of {topic}.")


def long_prompt(ctx: Ctx, label: str, length: int) -> list[int]:
    """Exactly ``length`` token ids: a unique header, then the filler sentence repeated."""
    header = tokenize(ctx, f"{nonce(ctx, label)} Read the harbor ledger below, then summarise it.\n")
    if ctx.filler_ids is None:
        ctx.filler_ids = tokenize(ctx, FILLER, special=False)
    if len(header) >= length:
        raise PromptError(f"the prompt header alone is {len(header)} tokens, expected fewer than {length}")
    need = length - len(header)
    body = ctx.filler_ids * (need // len(ctx.filler_ids) + 1)
    return header + body[:need]


def stream_body(model: str, ids: list[int], max_tokens: int) -> dict:
    """A streamed completion; ``continuous_usage_stats`` makes every chunk say how many tokens have come,
    so a first chunk that carries several (a speculative step) is counted as such."""
    return {"model": model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def stream_one(ctx: Ctx, label: str, ids: list[int], max_tokens: int) -> Measure:
    streamed = ctx.post("/v1/completions", stream_body(ctx.s.model, ids, max_tokens), ctx.s.request_timeout)
    return measure(label, streamed, Expect(served_model=ctx.s.model, max_tokens=max_tokens, ignore_eos=True,
                                           prompt_tokens=len(ids)))


class Window:
    """The wall time of a row and the /metrics counters before and after it."""

    def __init__(self, ctx: Ctx):
        self.ctx = ctx
        self.before, err = read_counters(ctx.call, ctx.s.model, SETUP_TIMEOUT)
        self.errors = [err] if err else []
        self.t0 = time.monotonic()
        self.wall: float | None = None

    def close(self) -> dict:
        self.wall = time.monotonic() - self.t0
        after, err = read_counters(self.ctx.call, self.ctx.s.model, SETUP_TIMEOUT)
        return server_section(self.before, after, self.wall, self.errors + ([err] if err else []))


def new_row(lane: str, level: object = None) -> dict:
    """A row; the suite's own lanes are measured by its OpenAI-API client (``openai_portable``), an
    external row's kind is set from its client's report."""
    return {"lane": lane, "level": level, "status": "PASS", "reasons": [], "client": {}, "server": {},
            "samples": [], "client_kind": OWN_CLIENT_KIND if lane in HTTP_LANES else None}


def _null(section: dict) -> dict:
    return {k: (v if k in _SETUP_KEYS else None) for k, v in section.items()}


def finish_row(row: dict) -> dict:
    """An ERROR row keeps its reasons and setup but no figure: client, server and samples nulled."""
    if row["status"] == "ERROR":
        row["client"] = _null(row["client"])
        row["server"] = _null(row["server"])
        row["samples"] = [{"request": s.get("request"), "dropped": s.get("dropped"), "usage": s.get("usage"),
                           "reasons": s.get("reasons", [])} for s in row["samples"]]
    return row


def error_row(row: dict, reasons: list[str]) -> dict:
    row["status"] = "ERROR"
    row["reasons"] = list(reasons)
    return finish_row(row)


def _client(ttft=None, itl=None, e2e=None, tok_s=None, kind=None, **extra) -> dict:
    return {"ttft_ms": _ms(ttft), "itl_ms": _ms(itl), "e2e_s": _r(e2e), "tok_s": _r(tok_s), "tok_s_kind": kind,
            **extra}


def _judge(row: dict, measures: list[Measure]) -> None:
    reasons = [r for m in measures for r in m.reasons]
    if reasons:
        row["status"] = "ERROR"
        row["reasons"] = reasons


def lane_canary(ctx: Ctx) -> list[dict]:
    row = new_row("canary")
    row["client"] = _client(kind=None, expected=CANARY_ANSWER, answer=None, max_tokens=CANARY_MAX_TOKENS)
    try:
        ids = tokenize(ctx, CANARY_PROMPT)
    except PromptError as exc:
        return [error_row(row, [f"canary: {exc}"])]
    window = Window(ctx)
    body = {"model": ctx.s.model, "prompt": ids, "max_tokens": CANARY_MAX_TOKENS, "temperature": 0}
    sent = time.monotonic()
    try:
        status, doc = ctx.call("POST", "/v1/completions", body, ctx.s.request_timeout)
    except OSError as exc:
        status, doc = None, None
        verdict = Verdict("canary")
        verdict.fail("transport", _exc_text(exc), "an HTTP answer")
    else:
        verdict = check_completion("canary", status, doc, Expect(served_model=ctx.s.model,
                                                                 max_tokens=CANARY_MAX_TOKENS, ignore_eos=False,
                                                                 prompt_tokens=len(ids)))
        message = _server_message(doc) if status != 200 else None
        if verdict.errors and message:
            verdict.errors[0] += f" (server: {message})"
    e2e = time.monotonic() - sent
    row["server"] = window.close()
    row["samples"] = [{"request": "canary", "usage": verdict.usage, "text": verdict.text[:200],
                       "reasons": list(verdict.errors)}]
    if verdict.errors:
        return [error_row(row, verdict.errors)]
    judged = accuracy([(CANARY_ANSWER, verdict.text)], 1.0)
    row["client"] = _client(e2e=e2e, kind=None, expected=CANARY_ANSWER, answer=judged["rows"][0]["got"],
                            max_tokens=CANARY_MAX_TOKENS)
    if not judged["pass"]:
        row["status"] = "FAIL"
        row["reasons"] = [f"canary: answer is {json.dumps(judged['rows'][0]['got'])}, expected {CANARY_ANSWER}"]
    return [row]


def lane_latency(ctx: Ctx) -> list[dict]:
    s = ctx.s
    row = new_row("latency")
    setup = {"max_tokens": s.latency_max_tokens, "reps": s.latency_reps, "dropped_reps": [1]}
    row["client"] = _client(kind="decode", **setup)
    try:
        prompts = [short_prompt(ctx, f"latency-{i + 1}", i) for i in range(s.latency_reps)]
    except PromptError as exc:
        return [error_row(row, [f"latency: {exc}"])]
    window = Window(ctx)
    measures = [stream_one(ctx, f"latency-{i + 1}", ids, s.latency_max_tokens) for i, ids in enumerate(prompts)]
    row["server"] = window.close()
    row["samples"] = [m.record(dropped=(i == 0)) for i, m in enumerate(measures)]
    _judge(row, measures)
    kept = measures[1:]
    row["client"] = _client(median([m.ttft for m in kept]), median([m.itl for m in kept]),
                            median([m.e2e for m in kept]), median([m.decode_tok_s for m in kept]), "decode",
                            **setup)
    return [finish_row(row)]


def lane_concurrency(ctx: Ctx) -> list[dict]:
    s = ctx.s
    rows = []
    for level in s.concurrency_levels:
        row = new_row("concurrency", level)
        setup = {"concurrency": level, "reps": s.concurrency_reps, "requests": level * s.concurrency_reps,
                 "max_tokens": s.concurrency_max_tokens}
        row["client"] = _client(kind="aggregate", completion_tokens=None, **setup)
        try:
            rounds = [[short_prompt(ctx, f"c{level}-r{r + 1}-{j + 1}", j) for j in range(level)]
                      for r in range(s.concurrency_reps)]
        except PromptError as exc:
            rows.append(error_row(row, [f"concurrency {level}: {exc}"]))
            continue
        measures: list[Measure] = []
        window = Window(ctx)
        with cf.ThreadPoolExecutor(max_workers=level) as pool:
            for r, prompts in enumerate(rounds):
                futures = [pool.submit(stream_one, ctx, f"c{level}-r{r + 1}-{j + 1}", ids, s.concurrency_max_tokens)
                           for j, ids in enumerate(prompts)]
                measures += [f.result() for f in futures]
        row["server"] = window.close()
        row["samples"] = [m.record() for m in measures]
        _judge(row, measures)
        total = sum(int(m.completion_tokens or 0) for m in measures)
        row["client"] = _client(median([m.ttft for m in measures]), median([m.itl for m in measures]),
                                median([m.e2e for m in measures]), rate(total, window.wall), "aggregate",
                                completion_tokens=total, wall_s=_r(window.wall), **setup)
        rows.append(finish_row(row))
    return rows


def lane_throughput(ctx: Ctx) -> list[dict]:
    s = ctx.s
    decode = new_row("throughput", "decode")
    setup = {"reps": s.decode_reps, "max_tokens": s.decode_max_tokens}
    decode["client"] = _client(kind="decode", **setup)
    try:
        prompts = [short_prompt(ctx, f"decode-{i + 1}", i) for i in range(s.decode_reps)]
    except PromptError as exc:
        decode = error_row(decode, [f"throughput decode: {exc}"])
    else:
        window = Window(ctx)
        measures = [stream_one(ctx, f"decode-{i + 1}", ids, s.decode_max_tokens) for i, ids in enumerate(prompts)]
        decode["server"] = window.close()
        decode["samples"] = [m.record() for m in measures]
        _judge(decode, measures)
        decode["client"] = _client(median([m.ttft for m in measures]), median([m.itl for m in measures]),
                                   median([m.e2e for m in measures]), median([m.decode_tok_s for m in measures]),
                                   "decode", **setup)
        decode = finish_row(decode)
    return [decode, lane_prefill(ctx)]


def prefill_max_tokens(prompt_tokens: int, window: int | None, model: str) -> tuple[int | None, str | None]:
    """(max_tokens, None) for a prefill prompt, at most PREFILL_OUTPUT_TOKENS and with prompt + max_tokens
    within the window, or (None, why) when no answer of at least 2 tokens (ITL needs two) fits. What a
    server does with an over-long request is version-sensitive (vLLM 0.32 caps max_tokens silently,
    older releases answer 400), so the request never is one."""
    if window is None:
        return None, (f"max_model_len of {model} is not in GET /v1/models, expected a positive integer to fit "
                      "prompt + max_tokens in the window")
    room = window - prompt_tokens
    if room < 2:
        return None, (f"prefill_prompt_tokens {prompt_tokens} leaves {max(room, 0)} of max_model_len {window}, "
                      "expected at least 2 for the answer")
    return min(PREFILL_OUTPUT_TOKENS, room), None


def lane_prefill(ctx: Ctx) -> dict:
    s = ctx.s
    prefill = new_row("throughput", "prefill")
    max_tokens, why = prefill_max_tokens(s.prefill_prompt_tokens, ctx.max_model_len, s.model)
    setup = {"reps": s.prefill_reps, "max_tokens": max_tokens, "max_model_len": ctx.max_model_len,
             "prompt_tokens_constructed": s.prefill_prompt_tokens}
    prefill["client"] = _client(kind="prefill", prompt_tokens=None, **setup)
    if why:
        return error_row(prefill, [f"throughput prefill: {why}"])
    try:
        prompts = [long_prompt(ctx, f"prefill-{i + 1}", s.prefill_prompt_tokens) for i in range(s.prefill_reps)]
    except PromptError as exc:
        return error_row(prefill, [f"throughput prefill: {exc}"])
    window = Window(ctx)
    measures = [stream_one(ctx, f"prefill-{i + 1}", ids, max_tokens) for i, ids in enumerate(prompts)]
    prefill["server"] = window.close()
    rates = [rate(m.prompt_tokens, m.ttft) if m.ok else None for m in measures]
    prefill["samples"] = [m.record(prompt_tokens_constructed=len(ids), prefill_tok_s=_r(r))
                          for m, ids, r in zip(measures, prompts, rates)]
    _judge(prefill, measures)
    prompt_counts = sorted({m.prompt_tokens for m in measures if m.ok})
    prefill["client"] = _client(median([m.ttft for m in measures]), median([m.itl for m in measures]),
                                median([m.e2e for m in measures]), median(rates), "prefill",
                                prompt_tokens=prompt_counts[0] if len(prompt_counts) == 1 else None, **setup)
    return finish_row(prefill)


def spec_decode_section(before: dict, before_error: str | None, after: dict, after_error: str | None) -> dict:
    """The suite's speculative-decoding figures; ``reasons`` is empty when they are sound."""
    reasons = [e for e in (before_error, after_error) if e]
    deltas: dict = {}
    if not reasons:
        for key, name in SPEC_COUNTERS.items():
            deltas[key], err = counter_delta(before, after, name)
            if err:
                reasons.append(f"spec_decode: {err}")
    if not reasons and not deltas.get("num_draft_tokens"):
        reasons.append("spec_decode: draft tokens during the suite is 0, expected more than 0 "
                       "(no speculative decoding happened)")
    acc_rate, acc_len = acceptance(deltas) if not reasons else (None, None)
    if acc_rate is not None and not 0 < acc_rate <= 1:
        reasons.append(f"spec_decode: acceptance rate is {acc_rate:.4f}, expected in (0, 1]")
    ok = not reasons
    return {"acceptance_rate": _r(acc_rate, 4) if ok else None,
            "mean_acceptance_length": _r(acc_len, 4) if ok else None,
            "deltas": deltas if ok else {k: None for k in SPEC_COUNTERS}, "reasons": reasons}


def lane_spec_decode(ctx: Ctx) -> tuple[list[dict], dict]:
    after, err = read_counters(ctx.call, ctx.s.model, SETUP_TIMEOUT)
    section = spec_decode_section(ctx.suite_before, ctx.suite_before_error, after, err)
    row = new_row("spec_decode")
    row["client"] = _client()
    row["server"] = {"acceptance_rate": section["acceptance_rate"],
                     "mean_acceptance_length": section["mean_acceptance_length"], **section["deltas"]}
    if section["reasons"]:
        return [error_row(row, section["reasons"])], section
    return [row], section


# ---- the external client ---------------------------------------------------------------------------
def external_argv(ext: dict, base_url: str, model: str, output_root: str, run_id: str) -> list[str]:
    """The original wrapper's ``r0b0bench run``, through the configured interpreter. No secret is on it."""
    lanes = ext.get("lanes") if ext.get("lanes") is not None else DEFAULT_EXTERNAL_LANES
    tokenizer = ["--tokenizer", str(ext["tokenizer"])] if ext.get("tokenizer") else []
    return [str(ext["python"]), "-m", EXTERNAL_MODULE, "run", "--profile", "systems",
            "--base-url", base_url.rstrip("/") + "/v1", "--model", model, *tokenizer, "--output", output_root,
            "--only", ",".join(lanes), "--run-id", run_id]


def external_env(api_key: str | None, environ: dict | None = None, ext: dict | None = None) -> dict:
    """A minimal environment for the child: locale and search path, the BFCL settings of ``ext`` (named
    options, never taken from the caller's environment), and the key only as OPENAI_API_KEY."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in EXTERNAL_ENV_KEYS if environ.get(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONUNBUFFERED"] = "1"
    if ext is not None:
        for key, name in EXTERNAL_PATH_ENV:
            if ext.get(key):
                env[name] = str(ext[key])
        for key, name, default in EXTERNAL_INT_ENV:
            env[name] = str(ext[key] if ext.get(key) is not None else default)
    if api_key:
        env["OPENAI_API_KEY"] = api_key
    return env


def run_process(argv: list, cwd: str, env: dict, timeout: float) -> tuple[int, str, str]:
    """The default runner: the child with exactly ``env``, bounded by ``timeout`` seconds."""
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out, f"timed out after {timeout:g} s"
    except OSError as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr


def _finite(value: object) -> object:
    """``value`` with every non-finite float replaced by None (the report must stay strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _stated_backend(entry: dict, report: dict) -> object:
    """The backend a report states for a lane: the lane's own, its summary's, else the report's."""
    summary = entry.get("summary") if isinstance(entry.get("summary"), dict) else {}
    for value in (entry.get("backend"), summary.get("backend"), report.get("backend")):
        if value not in (None, ""):
            return value
    return None


def external_rows(names: list[str], report: object, report_path: str, failure: str | None) -> list[dict]:
    """One row per requested external lane, from the external client's ``report.json``. A lane that
    measured records its client kind: the backend its report states, else ``openai_portable``."""
    rows = []
    entries: dict[str, dict] = {}
    if isinstance(report, dict) and isinstance(report.get("lanes"), list):
        for entry in report["lanes"]:
            if isinstance(entry, dict):
                name = entry.get("lane_id", entry.get("lane", entry.get("name")))
                if isinstance(name, str):
                    entries.setdefault(name, entry)
    for name in names:
        row = new_row("external", name)
        row["client"] = _client(report=report_path, quality_pillar=name in QUALITY_PILLARS)
        if failure:
            rows.append(error_row(row, [f"external {name}: {failure}"]))
            continue
        entry = entries.get(name)
        if entry is None:
            row["status"] = "NOT_IMPLEMENTED"
            row["reasons"] = [f"external {name}: lane is absent from {report_path}, expected a lane result"]
            row["client"]["summary"] = None
            rows.append(row)
            continue
        raw = str(entry.get("status", "")).upper()
        status = EXTERNAL_STATUSES.get(raw)
        infra = entry.get("infra_errors")
        backend = _stated_backend(entry, report if isinstance(report, dict) else {})
        kind = OWN_CLIENT_KIND if backend is None else _KIND_SPELLINGS.get(str(backend).strip().lower())
        if status is None:
            status = "ERROR"
            row["reasons"].append(f"external {name}: status is {json.dumps(entry.get('status'))}, expected "
                                  "PASS, FAIL, ERROR, SKIP or NOT_IMPLEMENTED")
        elif kind is None and status != "NOT_IMPLEMENTED":
            row["reasons"].append(f"external {name}: backend is {json.dumps(backend)}, expected "
                                  + " or ".join(CLIENT_KINDS))
            status = "ERROR"
        elif status in ("PASS", "FAIL") and isinstance(infra, int) and infra > 0:
            row["reasons"].append(f"external {name}: infra_errors is {infra}, expected 0")
            status = "ERROR"
        elif raw != "PASS":
            row["reasons"].append(f"external {name}: the external client reported {raw}")
        row["status"] = status
        row["client_kind"] = kind if status != "NOT_IMPLEMENTED" else None
        row["client"] = _client(report=report_path, external_status=raw, infra_errors=infra,
                                summary=_finite(entry.get("summary")), elapsed_s=_finite(entry.get("elapsed_s")),
                                imported=entry.get("imported"), backend=_finite(backend),
                                quality_pillar=name in QUALITY_PILLARS)
        rows.append(finish_row(row))
    return rows


def pillar_row(name: str) -> dict:
    """A quality pillar that is not among the external lanes: visible, not measured, no score."""
    row = new_row("external", name)
    row["status"] = "NOT_IMPLEMENTED"
    row["reasons"] = [f"quality pillar {name}: not among the external client's lanes, so not measured; "
                      "no score is reported"]
    row["client"] = _client(quality_pillar=True)
    return row


def lane_external(ctx: Ctx) -> list[dict]:
    s = ctx.s
    names = external_lanes(s)
    pillars = [pillar_row(name) for name in unconfigured_pillars(s)]
    if not s.external_client:
        rows = []
        for name in names:
            row = new_row("external", name)
            row["status"] = "NOT_IMPLEMENTED"
            row["reasons"] = [NO_EXTERNAL]
            row["client"] = _client(quality_pillar=name in QUALITY_PILLARS)
            rows.append(row)
        return rows + pillars
    ext = s.external_client
    output_root = os.path.join(s.output_dir, "r0b0bench")
    run_id = f"systems-{ctx.run_id}"
    report_path = os.path.join(output_root, run_id, "report.json")
    argv = external_argv(ext, s.base_url, s.model, output_root, run_id)
    rc, out, err = ctx.runner(argv, str(ext["path"]), external_env(ctx.api_key, ext=ext), float(ext["timeout"]))
    report, failure = None, None
    try:
        with open(report_path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, ValueError) as exc:
        tail = redact((err or out or "").strip()[-500:], [ctx.api_key], SCRUBBED)
        failure = (f"report {report_path} is unreadable ({_exc_text(exc)}), expected the client's report.json; "
                   f"the client exited {rc}" + (f": {tail}" if tail else ""))
    rows = external_rows(names, report, report_path, failure)
    for row in rows:
        row["client"]["argv"] = argv
        row["client"]["rc"] = rc
        row["client"]["r0b0bench_version"] = ctx.external_version
    return rows + pillars


# ---- report and files -------------------------------------------------------------------------------
def counts(rows: list[dict]) -> dict:
    out = {status: sum(1 for r in rows if r["status"] == status) for status in STATUSES}
    out["total"] = len(rows)
    return out


def overall_status(rows: list[dict]) -> str:
    """PASS unless a row is ERROR (then ERROR) or FAIL (then FAIL); NOT_IMPLEMENTED does not fail."""
    statuses = {r["status"] for r in rows}
    return "ERROR" if "ERROR" in statuses else "FAIL" if "FAIL" in statuses else "PASS"


def row_label(row: dict) -> str:
    return f"external {row['level']}" if row["lane"] == "external" else str(row["lane"])


def client_kinds(rows: list[dict]) -> dict[str, list[str]]:
    """Each client kind among the rows, with the rows (by lane) that carry it, in row order."""
    kinds: dict[str, list[str]] = {}
    for row in rows:
        kind = row.get("client_kind")
        if kind:
            labels = kinds.setdefault(kind, [])
            if row_label(row) not in labels:
                labels.append(row_label(row))
    return kinds


def mix_reasons(kinds: dict[str, list[str]]) -> list[str]:
    """The refusal of a report whose rows were measured by more than one kind of client."""
    if len(kinds) < 2:
        return []
    parts = [f"{kind} ({', '.join(labels)})" for kind, labels in sorted(kinds.items())]
    return ["rows mix client kinds: " + " and ".join(parts) + "; vllm-bench and openai_portable rows are never "
            "reported together"]


def _cell(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _notes(row: dict) -> str:
    notes = list(row["reasons"])
    server = row.get("server") or {}
    if row["lane"] == "spec_decode" and server.get("acceptance_rate") is not None:
        notes.append(f"acceptance {server['acceptance_rate']:.4f}, mean length {server['mean_acceptance_length']:.3f}")
    if row["lane"] == "latency" and row["status"] != "ERROR":
        notes.append("rep 1 dropped (warm-up)")
    if row["lane"] == "canary" and row["client"].get("answer") is not None:
        notes.append(f"answer {row['client']['answer']}")
    if row["lane"] == "external" and row["client"].get("report"):
        notes.append(f"report {row['client']['report']}")
    if server.get("error"):
        notes.append(f"server: {server['error']}")
    return "; ".join(notes)


def markdown(report: dict) -> str:
    lines = [f"# Systems lanes: {report['model']}", "",
             f"- status: **{report['status']}**",
             f"- base URL: `{report['base_url']}`",
             f"- started: {report['started']}, finished: {report['finished']}",
             "- rows: " + ", ".join(f"{k} {v}" for k, v in report["counts"].items()),
             "- client kinds: " + (", ".join(report.get("client_kinds") or []) or "none")]
    if report.get("r0b0bench_version"):
        lines.append(f"- r0b0bench: {report['r0b0bench_version']}")
    lines += [f"- refused: {_cell(reason)}" for reason in report.get("reasons") or []]
    lines += ["",
              "| lane | level | status | TTFT ms | ITL ms | e2e s | client tok/s | server tok/s | notes |",
              "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for row in report["rows"]:
        c, srv = row["client"], row.get("server") or {}
        server_rate = srv.get("prompt_tok_s") if c.get("tok_s_kind") == "prefill" else srv.get("generation_tok_s")
        lines.append("| " + " | ".join([row["lane"], _cell(row["level"]), row["status"], _cell(c.get("ttft_ms")),
                                        _cell(c.get("itl_ms"), 2), _cell(c.get("e2e_s"), 3), _cell(c.get("tok_s")),
                                        _cell(server_rate), _cell(_notes(row))]) + " |")
    lines += ["", "Client figures are medians over the row's requests (latency: without the dropped warm-up; "
              "concurrency tok/s: sum of completion tokens over the level's wall time). Server tok/s: "
              "/metrics counter deltas over the row's wall time (prompt tokens for prefill, generated tokens "
              "otherwise). ERROR rows carry no figures. NOT_IMPLEMENTED rows were not measured: they carry no "
              "figure and no score, and do not fail the run."]
    return "\n".join(lines) + "\n"


def prepare_output_dir(path: str) -> None:
    """Create ``path`` (mode 0750) and prove it is writable, before anything is sent."""
    try:
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            os.chmod(path, 0o750)
        fd, probe = tempfile.mkstemp(prefix=".systems-probe.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise CheckError(RANK, f"output_dir {path} is not writable: {_exc_text(exc)}") from None


def previous(output_dir: str) -> dict:
    """What an earlier run left in ``output_dir`` (status, finished, counts), for the diff."""
    try:
        with open(os.path.join(output_dir, JSON_FILE), encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {"status": doc.get("status"), "finished": doc.get("finished"), "counts": doc.get("counts")}


def check_served(call: Call, model: str) -> int | None:
    """Raise unless ``model`` is served; return its ``max_model_len`` (None when the card has none)."""
    try:
        status, doc = call("GET", "/v1/models", None, SETUP_TIMEOUT)
    except OSError as exc:
        raise CheckError(RANK, f"the engine's API is unreachable: {_exc_text(exc)}") from None
    if status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise CheckError(RANK, f"GET /v1/models answered HTTP {status}, expected 200 with a model list")
    served = [str(card.get("id")) for card in doc["data"] if isinstance(card, dict)]
    if model not in served:
        raise IdentityError(Mismatch(rank=RANK, item="served models", expected=model, actual=served,
                                     reason="the model is not served", expected_word="expected"))
    card = next(c for c in doc["data"] if isinstance(c, dict) and str(c.get("id")) == model)
    window = card.get("max_model_len")
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def _check_external(s: Settings, runner: Runner) -> str | None:
    """The external client's version, when it is to run; refused (raises) below the floor."""
    if "external" in s.lanes and s.external_client:
        return external_version(s.external_client, runner)
    return None


def plan(s: Settings, runner: Runner | None = None) -> dict:
    """Check mode: what a run would send and write; nothing is sent to the engine and nothing written.
    The external client is asked its version (a read-only child process) so a client too old is
    refused here too."""
    bad = validate(s)
    if bad:
        raise IdentityError(bad)
    version = _check_external(s, runner or run_process)
    selected = [x for x in LANES if x in s.lanes]
    steps: list[dict] = []
    for lane in selected:
        if lane == "canary":
            steps.append({"lane": lane, "level": None, "requests": 1, "max_tokens": CANARY_MAX_TOKENS})
        elif lane == "latency":
            steps.append({"lane": lane, "level": None, "requests": s.latency_reps,
                          "max_tokens": s.latency_max_tokens, "dropped": 1})
        elif lane == "concurrency":
            steps += [{"lane": lane, "level": n, "requests": n * s.concurrency_reps, "concurrent": n,
                       "max_tokens": s.concurrency_max_tokens} for n in s.concurrency_levels]
        elif lane == "throughput":
            steps.append({"lane": lane, "level": "decode", "requests": s.decode_reps,
                          "max_tokens": s.decode_max_tokens})
            steps.append({"lane": lane, "level": "prefill", "requests": s.prefill_reps,
                          "max_tokens": PREFILL_OUTPUT_TOKENS, "prompt_tokens": s.prefill_prompt_tokens})
        elif lane == "spec_decode":
            steps.append({"lane": lane, "level": None, "requests": 0})
        elif s.external_client:
            argv = external_argv(s.external_client, s.base_url, s.model,
                                 os.path.join(s.output_dir, "r0b0bench"), "systems-<run id>")
            steps += [{"lane": lane, "level": name, "argv": argv} for name in external_lanes(s)]
        else:
            steps += [{"lane": lane, "level": name, "status": "NOT_IMPLEMENTED", "reason": NO_EXTERNAL}
                      for name in external_lanes(s)]
        if lane == "external":
            steps += [{"lane": lane, "level": row["level"], "status": row["status"], "reason": row["reasons"][0]}
                      for row in (pillar_row(name) for name in unconfigured_pillars(s))]
    files = [os.path.join(s.output_dir, JSON_FILE), os.path.join(s.output_dir, MARKDOWN_FILE)]
    return {"changed": False, "report": None, "status": None,
            "plan": {"steps": steps, "files": files, "output_dir_exists": os.path.isdir(s.output_dir),
                     "settings": s.public(), "r0b0bench_version": version},
            "diff": {"before": previous(s.output_dir), "after": {"status": "(would run)", "files": files}}}


def run(s: Settings, call: Call, post: Callable[[str, dict, float], Streamed], api_key: str | None = None,
        runner: Runner = run_process) -> dict:
    """Run the selected lanes in order, write ``systems.json`` and ``systems.md``, return the report.
    Setup problems (bad options, an unwritable output_dir, an unreachable engine, the model not served)
    raise before any completion is sent; a lane that goes wrong is an ERROR row, not an exception."""
    bad = validate(s)
    if bad:
        raise IdentityError(bad)
    version = _check_external(s, runner)
    prepare_output_dir(s.output_dir)
    before_doc = previous(s.output_dir)
    selected = [x for x in LANES if x in s.lanes]
    http_lanes = [x for x in selected if x in HTTP_LANES]
    window = check_served(call, s.model) if http_lanes else None
    ctx = Ctx(s=s, call=call, post=post, runner=runner, api_key=api_key,
              run_id=datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3),
              external_version=version, max_model_len=window)
    started = utc_now()
    if http_lanes:
        ctx.suite_before, ctx.suite_before_error = read_counters(call, s.model, SETUP_TIMEOUT)
    rows: list[dict] = []
    spec = None
    lanes = {"canary": lane_canary, "latency": lane_latency, "concurrency": lane_concurrency,
             "throughput": lane_throughput, "external": lane_external}
    for lane in selected:
        if lane == "spec_decode":
            spec_rows, spec = lane_spec_decode(ctx)
            rows += spec_rows
        else:
            rows += lanes[lane](ctx)
    json_path = os.path.join(s.output_dir, JSON_FILE)
    md_path = os.path.join(s.output_dir, MARKDOWN_FILE)
    kinds = client_kinds(rows)
    refused = mix_reasons(kinds)
    report = {"schema_version": SCHEMA_VERSION, "tool": "gb10.dspark.systems_lanes", "run_id": ctx.run_id,
              "model": s.model, "base_url": s.base_url, "settings": s.public(), "started": started,
              "finished": utc_now(), "status": "ERROR" if refused else overall_status(rows), "reasons": refused,
              "client_kinds": sorted(kinds), "r0b0bench_version": version, "counts": counts(rows), "rows": rows,
              "spec_decode": spec, "files": {"json": json_path, "markdown": md_path}, "context": dict(s.context or {})}
    write_json_atomic(json_path, report)
    write_text_atomic(md_path, markdown(report))
    after = {"status": report["status"], "finished": report["finished"], "counts": report["counts"]}
    return {"changed": True, "report": report, "status": report["status"], "output_dir": s.output_dir,
            "diff": {"before": before_doc, "after": after}}
