# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The max-context needle-in-a-haystack (NIAH) client that runs on a pair's head.

One run is a ladder of prompt depths, fractions of the usable window ``max_model_len - reserve``.
Each prompt is built from token ids only, so its length is exact:

    prefix ids | filler | needle | filler | suffix ids          (exactly ``depth`` ids)

``prefix`` and ``suffix`` are the server's own chat-template rendering (``POST /tokenize`` with
``messages``) of one user message, split at a marker line; the needle and the filler are the
tokens of a code line and of a neutral sentence. Every prompt goes to ``/v1/completions`` as a
token-id list at temperature 0; a depth passes when the answer holds the code.

Everything a run decides is written as it happens, so a run of many hours survives a lost
controller: ``depth-<n>.json`` per finished depth, ``progress.json`` at the start and the end of
each depth, ``niah.json`` (the summary) at the end, all atomically. A second run with the same
``run_key`` reuses the PASS and FAIL rows whose prompt is the same (``prompt_sha256``: sha256
of the decimal ids joined by ``,``) and runs the rest again. ``.lock`` (``flock``) keeps two
runs out of one directory (the files and the lock: :mod:`._niah_files`).

Setup problems (the engine is unreachable, the model is not served, the marker cannot be found,
the directory belongs to another run or is in use) raise :class:`CheckError`; a failed or
unanswered depth is a result (a row with status FAIL or ERROR), not an exception.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from ansible_collections.gb10.dspark.plugins.module_utils.engine._engine_probe import kv_cache_tokens, parse_metrics
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import ApiUnreachable
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError
from ansible_collections.gb10.dspark.plugins.module_utils.serving._niah_files import (
    PROGRESS_FILE,
    RunLock,
    SUMMARY_FILE,
    _load_optional,
    existing_rows,
    lock_held,
    make_output_dir,
    row_files,
    row_path,
)

# call(method, path, body or None, timeout) -> (status, parsed body); see _http.json_client.
Call = Callable[[str, str, "dict | None", float], tuple]
Encode = Callable[[str], list]

MARKER = "DSPARK_NIAH_SLOT"
DEFAULT_CODE = "GB10-NIAH-7Q4K"
DEFAULT_FRACTIONS = (0.25, 0.5, 0.9)
DEFAULT_RESERVE = 64
DEFAULT_MIN_DEPTH = 1024
DEFAULT_REQUEST_TIMEOUT = 43200.0
DEFAULT_NEEDLE_FRACTION = 0.5
SETUP_TIMEOUT = 60.0
DEPTH_POLICY = "frac_of_max_context"
TEMPLATE_SOURCE = "server:/tokenize"
SERVER_TOKENIZER = "server:/tokenize"
# Rendered with thinking off, so that the reserve of generated tokens goes to the answer.
CHAT_TEMPLATE_KWARGS = {"thinking": False}

QUESTION = "What is the secret verification code? Reply with only the code."
TEMPLATE = (
    "Below is a long record copied from the archive of a regional shipping office: ledgers, "
    "weather notes and routine entries written over many years. Exactly one line somewhere in "
    "it states a secret verification code. Read all of it before you answer.\n"
    "\n"
    "=== ARCHIVE RECORD BEGINS ===\n"
    f"{MARKER}\n"
    "=== ARCHIVE RECORD ENDS ===\n"
    "\n"
    f"{QUESTION}"
)
NEEDLE = "\nSECRET VERIFICATION CODE: {code}\n"
FILLER = (" The harbor ledger lists two barges of timber, a quiet tide at noon and lamps lit along"
          " the pier at the usual hour.")

# gb10.dspark.niah_wait (an action plugin with a documentation stub): one spec for both
WAIT_ARGUMENT_SPEC = {
    "output_dir": {"type": "path", "required": True},
    "jid": {"type": "str"},
    "budget": {"type": "float", "default": 86400},
    "interval": {"type": "float", "default": 30},
    "progress_every": {"type": "float", "default": 300},
    "progress_results": {"type": "bool", "default": False},
}

KEPT_STATUSES = ("PASS", "FAIL")


@dataclass(frozen=True)
class Settings:
    """What one run is asked to do (the module's options)."""

    model: str
    output_dir: str
    run_key: str
    fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    reserve: int = DEFAULT_RESERVE
    min_depth: int = DEFAULT_MIN_DEPTH
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    code: str = DEFAULT_CODE
    needle_fraction: float = DEFAULT_NEEDLE_FRACTION
    tokenizer_file: str | None = None
    stop_on_infra_error: bool = True
    rank: str = "head"


@dataclass(frozen=True)
class PromptParts:
    """The token ids a prompt of any depth is made of."""

    prefix: list[int]
    suffix: list[int]
    needle: list[int]
    filler: list[int]


@dataclass
class Prompt:
    depth: int
    fraction: float
    sha256: str
    needle_fraction_effective: float


@dataclass
class Setup:
    max_model_len: int
    kv_cache_size_tokens: int | None
    ladder: list[tuple[int, float]]
    tokenizer: str
    parts: PromptParts
    prompts: list[Prompt]
    warnings: list[str] = field(default_factory=list)


# ---- options ---------------------------------------------------------------------------------
def validate(s: Settings) -> list[str]:
    """Every problem with the options, as sentences; empty when they are usable."""
    errors = []
    if not s.fractions:
        errors.append("fractions must not be empty")
    for value in s.fractions:
        if not 0 < value <= 1:
            errors.append(f"fractions must lie in (0, 1], got {value}")
    if s.reserve < 1:
        errors.append(f"reserve must be at least 1, got {s.reserve}")
    if s.min_depth < 1:
        errors.append(f"min_depth must be at least 1, got {s.min_depth}")
    if not s.request_timeout > 0:
        errors.append(f"request_timeout must be greater than 0, got {s.request_timeout}")
    if not 0 <= s.needle_fraction <= 1:
        errors.append(f"needle_fraction must lie in [0, 1], got {s.needle_fraction}")
    if not s.code or any(ch.isspace() for ch in s.code):
        errors.append(f"code must be a non-empty word without whitespace, got {s.code!r}")
    if not s.run_key or not s.run_key.strip():
        errors.append("run_key must not be empty")
    if not s.model:
        errors.append("model must not be empty")
    return errors


def depth_ladder(max_model_len: int, reserve: int, fractions, min_depth: int) -> list[tuple[int, float]]:
    """(depth, fraction) per fraction, in the given order: ``int(U * f)`` clamped to
    ``[min_depth, U]`` with ``U = max_model_len - reserve``; a depth that two fractions share
    appears once, with the first of them."""
    usable = max_model_len - reserve
    ladder: list[tuple[int, float]] = []
    for fraction in fractions:
        depth = min(max(int(usable * fraction), min_depth), usable)
        if depth not in [d for d, _unused in ladder]:
            ladder.append((depth, fraction))
    return ladder


# ---- the engine ------------------------------------------------------------------------------
def _ask(call: Call, rank: str, method: str, path: str, body: dict | None) -> object:
    """A setup request that must answer 200; anything else is a CheckError."""
    try:
        status, doc = call(method, path, body, SETUP_TIMEOUT)
    except OSError as exc:
        raise CheckError(rank, f"{method} {path} failed: {_reason(exc)}") from None
    if status != 200:
        raise CheckError(rank, f"{method} {path} answered HTTP {status}, expected 200{_error_text(doc)}")
    return doc


def served_window(call: Call, rank: str, model: str) -> int:
    """``max_model_len`` of ``model`` from ``GET /v1/models``."""
    doc = _ask(call, rank, "GET", "/v1/models", None)
    entries = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise CheckError(rank, "GET /v1/models answered without a data list")
    ids = [entry.get("id") for entry in entries if isinstance(entry, dict)]
    for entry in entries:
        if isinstance(entry, dict) and entry.get("id") == model:
            window = entry.get("max_model_len")
            if not isinstance(window, int) or isinstance(window, bool) or window < 1:
                raise CheckError(rank, f"max_model_len of {model} is {window}, expected a positive integer")
            return window
    served = "[" + ", ".join(str(i) for i in ids) + "]"
    raise CheckError(rank, f"served model is {served}, expected {model}")


def kv_capacity(call: Call) -> tuple[int | None, str | None]:
    """KV cache size in tokens from ``GET /metrics`` (None when unknown) and why it is unknown."""
    try:
        status, text = call("GET", "/metrics", None, SETUP_TIMEOUT)
    except OSError as exc:
        return None, f"GET /metrics failed: {_reason(exc)}"
    if status != 200 or not isinstance(text, str):
        return None, f"GET /metrics answered HTTP {status}"
    tokens = kv_cache_tokens(parse_metrics(text))
    return tokens, None if tokens is not None else "/metrics has no KV cache size"


def _token_ids(doc: object, rank: str, what: str) -> list[int]:
    ids = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise CheckError(rank, f"/tokenize of {what} answered without a list of token ids")
    return ids


def server_encoder(call: Call, rank: str, model: str) -> Encode:
    """Token ids of a plain text, without special tokens, by the server's ``/tokenize``."""
    def encode(text: str) -> list[int]:
        doc = _ask(call, rank, "POST", "/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
        return _token_ids(doc, rank, "a text")
    return encode


def render_template(call: Call, rank: str, model: str) -> list[int]:
    """The server's chat-template rendering of the one user message, with the generation prompt."""
    body = {"model": model, "messages": [{"role": "user", "content": TEMPLATE}], "add_generation_prompt": True,
            "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS)}
    return _token_ids(_ask(call, rank, "POST", "/tokenize", body), rank, "the template")


def tokenizers_library():
    """The ``tokenizers`` package, or None when it is not installed."""
    try:
        return importlib.import_module("tokenizers")
    except ImportError:
        return None


def choose_encoder(tokenizer_file: str | None, server_encode: Encode,
                   load_library: Callable[[], object] = tokenizers_library) -> tuple[Encode, str, list[str]]:
    """(encode, label, warnings): the model's ``tokenizer.json`` through the ``tokenizers``
    library when both are there, else the server's ``/tokenize``."""
    if not tokenizer_file:
        return server_encode, SERVER_TOKENIZER, []
    if not os.path.isfile(tokenizer_file):
        return server_encode, SERVER_TOKENIZER, [f"tokenizer_file {tokenizer_file} does not exist; "
                                                 "tokenized with the server's /tokenize"]
    library = load_library()
    if library is None:
        return server_encode, SERVER_TOKENIZER, ["the tokenizers library is not installed; "
                                                 "tokenized with the server's /tokenize"]
    tokenizer = library.Tokenizer.from_file(tokenizer_file)

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)
    return encode, "file:" + os.path.basename(tokenizer_file), []


# ---- prompts ---------------------------------------------------------------------------------
def find_sequence(haystack: list[int], needle: list[int]) -> list[int]:
    """Every start index of ``needle`` in ``haystack``."""
    width = len(needle)
    if not width:
        return []
    return [i for i in range(len(haystack) - width + 1) if haystack[i:i + width] == needle]


def prompt_parts(rendered: list[int], encode: Encode, code: str, rank: str) -> PromptParts:
    """Split the rendered template at the marker and tokenize the needle and the filler."""
    marker = encode(MARKER)
    starts = find_sequence(rendered, marker)
    if len(starts) != 1:
        found = "is not" if not starts else f"is {len(starts)} times"
        raise CheckError(rank, f"the marker {MARKER} {found} in the rendered template "
                               f"({len(rendered)} ids, marker ids {marker}), expected exactly once")
    needle = encode(NEEDLE.format(code=code))
    filler = encode(FILLER)
    if not needle or not filler:
        raise CheckError(rank, "the needle or the filler tokenized to nothing")
    start = starts[0]
    return PromptParts(rendered[:start], rendered[start + len(marker):], needle, filler)


def build_prompt(parts: PromptParts, depth: int, needle_fraction: float) -> tuple[list[int], float]:
    """(ids, effective needle fraction): exactly ``depth`` ids, the needle after
    ``round(needle_fraction * F)`` of the ``F`` filler ids. The effective fraction is that count
    divided by ``F`` (0 when there is no filler). ValueError when the template alone is longer."""
    room = depth - len(parts.prefix) - len(parts.suffix) - len(parts.needle)
    if room < 0:
        raise ValueError(f"depth {depth} is shorter than the template and the needle "
                         f"({depth - room} ids)")
    repeats = -(-room // len(parts.filler))
    filler = (parts.filler * repeats)[:room]
    before = int(room * needle_fraction + 0.5)
    ids = parts.prefix + filler[:before] + parts.needle + filler[before:] + parts.suffix
    return ids, round(before / room, 6) if room else 0.0


def prompt_sha256(ids: list[int]) -> str:
    """sha256 of the decimal ids joined by ``,`` (no spaces, no brackets)."""
    return hashlib.sha256(",".join(map(str, ids)).encode("ascii")).hexdigest()


def prepare(call: Call, s: Settings, load_library: Callable[[], object] = tokenizers_library) -> Setup:
    """Everything a run needs from the engine, read-only: window, KV size, ladder, prompts."""
    errors = validate(s)
    if errors:
        raise CheckError(s.rank, "; ".join(errors))
    window = served_window(call, s.rank, s.model)
    if window - s.reserve < 1:
        raise CheckError(s.rank, f"max_model_len {window} leaves no room after the reserve of {s.reserve} tokens")
    kv, kv_problem = kv_capacity(call)
    encode, label, warnings = choose_encoder(s.tokenizer_file, server_encoder(call, s.rank, s.model), load_library)
    if kv_problem:
        warnings.append(f"KV cache size unknown ({kv_problem}); every depth is sent")
    parts = prompt_parts(render_template(call, s.rank, s.model), encode, s.code, s.rank)
    ladder = depth_ladder(window, s.reserve, s.fractions, s.min_depth)
    prompts = []
    for depth, fraction in ladder:
        try:
            ids, effective = build_prompt(parts, depth, s.needle_fraction)
        except ValueError as exc:
            raise CheckError(s.rank, str(exc)) from None
        prompts.append(Prompt(depth, fraction, prompt_sha256(ids), effective))
    return Setup(window, kv, ladder, label, parts, prompts, warnings)


# ---- rows ------------------------------------------------------------------------------------
def new_row(s: Settings, setup: Setup, prompt: Prompt) -> dict:
    return {
        "depth": prompt.depth, "max_model_len": setup.max_model_len, "fraction_of_usable": prompt.fraction,
        "prompt_tokens_constructed": prompt.depth, "prompt_sha256": prompt.sha256,
        "needle_fraction_effective": prompt.needle_fraction_effective, "elapsed_s": 0.0, "http_status": None,
        "finish_reason": None, "response_text": None, "passed": False, "status": "ERROR", "usage": None,
        "infra_errors": [], "reason": None, "kind": None, "run_key": s.run_key,
    }


def capacity_problem(depth: int, reserve: int, kv: int | None) -> str | None:
    if kv is not None and depth + reserve > kv:
        return f"KV cache holds {kv} tokens, depth {depth} + reserve {reserve} does not fit"
    return None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ApiUnreachable):
        return str(exc)  # it names the head, the address and the state already
    reason = getattr(exc, "reason", None) or exc
    return f"{type(exc).__name__}: {reason}"


def _error_text(doc: object) -> str:
    error = doc.get("error") if isinstance(doc, dict) else None
    message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
    return f" ({str(message)[:300]})" if message else ""


def _infra(row: dict, problem: str) -> dict:
    row.update(status="ERROR", passed=False, kind="infra", reason=problem)
    row["infra_errors"].append(problem)
    return row


def send_depth(call: Call, s: Settings, ids: list[int], row: dict,
               monotonic: Callable[[], float] = time.monotonic) -> dict:
    """Send one prompt and judge the answer into ``row``."""
    if len(ids) != row["depth"]:  # build_prompt guarantees it; a prompt of another length proves nothing
        raise CheckError(s.rank, f"prompt for depth {row['depth']} has {len(ids)} ids, expected {row['depth']}")
    body = {"model": s.model, "prompt": ids, "max_tokens": s.reserve, "temperature": 0, "skip_special_tokens": True}
    started = monotonic()
    try:
        status, doc = call("POST", "/v1/completions", body, s.request_timeout)
    except OSError as exc:
        row["elapsed_s"] = round(monotonic() - started, 3)
        stalled = isinstance(exc, TimeoutError) or getattr(exc, "stalled", False)
        what = f"no answer within {s.request_timeout} s" if stalled else "transport error"
        return _infra(row, f"{what}: {_reason(exc)}")
    row["elapsed_s"] = round(monotonic() - started, 3)
    row["http_status"] = status
    if status != 200:
        return _infra(row, f"HTTP {status}{_error_text(doc)}")
    choices = doc.get("choices") if isinstance(doc, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    if choice is None or not isinstance(choice.get("text"), str):
        return _infra(row, "HTTP 200 without choices[0].text")
    row["response_text"] = choice["text"]
    row["finish_reason"] = choice.get("finish_reason")
    row["usage"] = doc.get("usage") if isinstance(doc.get("usage"), dict) else None
    counted = (row["usage"] or {}).get("prompt_tokens")
    if counted != row["depth"]:  # the server did not read the prompt that was built: the row proves nothing
        row.update(status="ERROR", passed=False, kind="accounting",
                   reason=f"usage.prompt_tokens is {counted}, the prompt has {row['depth']} tokens")
        return row
    if s.code in choice["text"]:
        row.update(status="PASS", passed=True, kind=None, reason=None)
    else:
        row.update(status="FAIL", passed=False, kind="model",
                   reason=f"the answer does not contain the code {s.code}")
    return row


def reusable(old: dict | None, s: Settings, prompt: Prompt) -> bool:
    """A finished row of this run for the same prompt: not sent again."""
    return (isinstance(old, dict) and old.get("status") in KEPT_STATUSES and old.get("run_key") == s.run_key
            and old.get("prompt_sha256") == prompt.sha256 and old.get("depth") == prompt.depth)


# ---- the run ---------------------------------------------------------------------------------
def summarize(s: Settings, setup: Setup, rows: list[dict], resumed: list[int], ran: list[int]) -> dict:
    statuses = [row["status"] for row in rows]
    errors = statuses.count("ERROR")
    fails = statuses.count("FAIL")
    passes = statuses.count("PASS")
    kv, window = setup.kv_cache_size_tokens, setup.max_model_len
    return {
        "model": s.model, "max_model_len": window, "kv_cache_size_tokens": kv,
        "kv_below_window": None if kv is None else kv < window,
        "depths": [depth for depth, _unused in setup.ladder], "fractions": list(s.fractions),
        "generation_reserve": s.reserve, "code": s.code, "marker": MARKER, "template_source": TEMPLATE_SOURCE,
        "tokenizer": setup.tokenizer, "depth_policy": DEPTH_POLICY,
        "pass_count": passes, "fail_count": fails, "error_count": errors,
        "infra_error_count": sum(1 for row in rows if row.get("infra_errors")),
        "total": len(rows), "all_passed": bool(rows) and passes == len(rows),
        "status": "ERROR" if errors else "FAIL" if fails else "PASS",
        "rows": rows, "resumed": resumed, "ran": ran, "run_key": s.run_key,
        "settings": {"request_timeout_s": s.request_timeout, "min_depth": s.min_depth,
                     "needle_fraction": s.needle_fraction, "stop_on_infra_error": s.stop_on_infra_error,
                     "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS)},
    }


def _diff(before: dict[int, dict], after: dict[int, str]) -> dict:
    return {"before": {f"depth-{d}": (row.get("status") if isinstance(row, dict) else None)
                       for d, row in sorted(before.items())},
            "after": {f"depth-{d}": status for d, status in sorted(after.items())}}


def plan(s: Settings, setup: Setup, old: dict[int, dict]) -> list[dict]:
    """What a run would do per depth: resume, run, or capacity_error (nothing is sent)."""
    out = []
    for prompt in setup.prompts:
        if reusable(old.get(prompt.depth), s, prompt):
            action, reason = "resume", None
        else:
            reason = capacity_problem(prompt.depth, s.reserve, setup.kv_cache_size_tokens)
            action = "capacity_error" if reason else "run"
        out.append({"depth": prompt.depth, "fraction_of_usable": prompt.fraction, "action": action,
                    "prompt_sha256": prompt.sha256, "reason": reason})
    return out


def _claimable(s: Settings) -> dict[int, dict]:
    """The directory's rows, after the options, the run key and the lock were found usable."""
    errors = validate(s)
    if errors:
        raise CheckError(s.rank, "; ".join(errors))
    old = existing_rows(s.output_dir, s.run_key, s.rank)
    if lock_held(s.output_dir):
        raise CheckError(s.rank, f"a NIAH run is already in progress in {s.output_dir}")
    return old


def check_run(call: Call, s: Settings, load_library: Callable[[], object] = tokenizers_library) -> dict:
    """Check mode: the plan, with no completion sent and no file written."""
    old = _claimable(s)
    setup = prepare(call, s, load_library)
    steps = plan(s, setup, old)
    after = {step["depth"]: {"resume": old.get(step["depth"], {}).get("status"), "run": "would run",
                             "capacity_error": "ERROR"}[step["action"]] for step in steps}
    return {"changed": any(step["action"] == "run" for step in steps), "summary": None, "plan": steps,
            "ran": [step["depth"] for step in steps if step["action"] == "run"],
            "resumed": [step["depth"] for step in steps if step["action"] == "resume"],
            "warnings": setup.warnings, "diff": _diff(old, after)}


def run(call: Call, s: Settings, load_library: Callable[[], object] = tokenizers_library,
        now: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> dict:
    """One NIAH run (see the module docstring); returns changed, summary, ran, resumed, diff, warnings."""
    _claimable(s)  # refuse another run's directory, or one in use, before asking the engine or writing
    setup = prepare(call, s, load_library)
    make_output_dir(s.output_dir)
    with RunLock(s.output_dir, s.rank):
        old = existing_rows(s.output_dir, s.run_key, s.rank)  # again, now that no other run can write
        started = now()
        total = len(setup.prompts)
        rows: list[dict] = []
        resumed: list[int] = []
        ran: list[int] = []
        stopped_at: int | None = None

        def progress(state: str, index: int, depth: int | None, current_started: float | None) -> None:
            write_json_atomic(os.path.join(s.output_dir, PROGRESS_FILE), {
                "pid": os.getpid(), "state": state, "run_key": s.run_key, "depth": depth, "index": index,
                "total": total, "started": started, "updated": now(), "rows_done": len(rows),
                "current_started": current_started})

        for index, prompt in enumerate(setup.prompts, 1):
            depth_started = now()
            progress("running", index, prompt.depth, depth_started)
            previous = old.get(prompt.depth)
            if reusable(previous, s, prompt):
                rows.append(previous)
                resumed.append(prompt.depth)
                progress("running", index, prompt.depth, depth_started)
                continue
            row = new_row(s, setup, prompt)
            capacity = capacity_problem(prompt.depth, s.reserve, setup.kv_cache_size_tokens)
            if stopped_at is not None:
                row.update(kind="infra", reason=f"not run: ladder stopped after an infra error at depth {stopped_at}")
            elif capacity:
                row.update(kind="capacity", reason=capacity)
            else:
                ids, _unused = build_prompt(setup.parts, prompt.depth, s.needle_fraction)
                send_depth(call, s, ids, row, monotonic)
                del ids
                ran.append(prompt.depth)
                if row["kind"] == "infra" and s.stop_on_infra_error:
                    stopped_at = prompt.depth
            write_json_atomic(row_path(s.output_dir, prompt.depth), row)
            rows.append(row)
            progress("running", index, prompt.depth, depth_started)
        summary = summarize(s, setup, rows, resumed, ran)
        write_json_atomic(os.path.join(s.output_dir, SUMMARY_FILE), summary)
        progress("finished", total, None, None)
    return {"changed": bool(ran), "summary": summary, "ran": ran, "resumed": resumed, "warnings": setup.warnings,
            "diff": _diff(old, {row["depth"]: row["status"] for row in rows})}


def busy(work_dir: str) -> dict:
    """Read-only scan of the head's NIAH work folder, in one module run: the run folders under it (each holding a
    progress file) whose ladder holds its lock now, sorted. A missing folder holds none."""
    running = []
    if os.path.isdir(work_dir):
        for folder, _subdirs, files in os.walk(work_dir):
            if PROGRESS_FILE in files and lock_held(folder):
                running.append(folder)
    return {"changed": False, "running_dirs": sorted(running)}


def status(output_dir: str, rank: str) -> dict:
    """Read-only view of a directory: is a run holding it, its progress, its summary, its rows."""
    return {
        "changed": False,
        "running": lock_held(output_dir),
        "progress": _load_optional(os.path.join(output_dir, PROGRESS_FILE), rank),
        "summary": _load_optional(os.path.join(output_dir, SUMMARY_FILE), rank),
        "rows_done": list(row_files(output_dir)),
    }
