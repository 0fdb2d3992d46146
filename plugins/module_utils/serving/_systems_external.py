# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systems suite's external benchmark client (r0b0bench): its version floor, its argv and environment, the
child process, and its report read back as rows (the quality pillars among them).

Split from :mod:`._systems` (the suite), whose ``external`` lane runs it."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
from typing import Callable

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError, Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.serving._systems_rows import (
    RANK,
    CLIENT_KINDS,
    OWN_CLIENT_KIND,
    _KIND_SPELLINGS,
    _client,
    error_row,
    finish_row,
    new_row,
)


# run(argv, cwd, env, timeout) -> (rc, stdout, stderr), for the external client.
Runner = Callable[[list, str, dict, float], tuple]


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
