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

This file holds the lanes and the run; beside it, by concern: :mod:`._systems_settings` (the options and their
validation), :mod:`._systems_measure` (figures, /metrics, one streamed completion), :mod:`._systems_rows` (a row,
its status and client kind, the Markdown page) and :mod:`._systems_external` (the r0b0bench client).
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from ansible_collections.gb10.dspark.plugins.module_utils.common._clock import utc_now
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic, write_text_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError, Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import redact
from ansible_collections.gb10.dspark.plugins.module_utils.serving._serving_guard import (
    Expect,
    Verdict,
    accuracy,
    check_completion,
)
from ansible_collections.gb10.dspark.plugins.module_utils.serving._systems_measure import (
    Call,
    Measure,
    SPEC_COUNTERS,
    Streamed,
    _exc_text,
    _r,
    _server_message,
    acceptance,
    counter_delta,
    measure,
    median,
    rate,
    read_counters,
    server_section,
)
from ansible_collections.gb10.dspark.plugins.module_utils.serving._systems_rows import (
    RANK,
    HTTP_LANES,
    LANES,
    _client,
    client_kinds,
    counts,
    error_row,
    finish_row,
    markdown,
    mix_reasons,
    new_row,
    overall_status,
)
from ansible_collections.gb10.dspark.plugins.module_utils.serving._systems_external import (
    NO_EXTERNAL,
    QUALITY_PILLARS,
    Runner,
    SCRUBBED,
    external_argv,
    external_env,
    external_rows,
    external_version,
    pillar_row,
    run_process,
)
from ansible_collections.gb10.dspark.plugins.module_utils.serving._systems_settings import (
    PREFILL_OUTPUT_TOKENS,
    Settings,
    external_lanes,
    unconfigured_pillars,
    validate,
)


SCHEMA_VERSION = 1
JSON_FILE = "systems.json"
MARKDOWN_FILE = "systems.md"


CANARY_PROMPT = "Compute 7 multiplied by 19. Reply with only the number."
CANARY_ANSWER = "133"
CANARY_MAX_TOKENS = 16
SETUP_TIMEOUT = 30.0
TOPICS = ("the weather over a mountain pass", "a library reading room", "a river crossing at dawn",
          "the history of a city wall", "a quiet railway station", "an orchard in autumn")
FILLER = (" The harbor ledger lists two barges of timber, a quiet tide at noon and lamps lit along"
          " the pier at the usual hour.")


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
