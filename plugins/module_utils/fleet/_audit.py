# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet audit: what one rank holds (:func:`collect`), and one verdict per pair (:func:`pair_verdict`).

:func:`collect` runs on a rank (module ``gb10.dspark.rank_audit``) and gathers, in one module
call, everything the verdict needs: the images the engine holds, the engine container (state,
image, the collection's labels (``_labels``), the sha256 of its command and of its
non-secret environment), the rendered profile env file of the labelled profile and whether the
container still runs with it, the runtime manifest's sha256, the model revision marker and, on
the head, the OpenAI API and a few ``/metrics`` values. It reads Docker through the engine's
socket (``_docker_engine.Engine``, the collection's one Docker client: the docker SDK), the same client
as the identity modules. It only reads.
With ``runtime`` it also gathers, in the same call, what the runtime gate reads of the rank (the
raw container and image inspect records, PID 1 environment entries, the manifest's sha256 inside
the container and the log tail), each piece as ``docker`` would have answered it
(:func:`runtime_state`).
Nothing that is down makes it fail: a dead engine is ``docker.reachable false``, a missing file
is ``present false``.

:func:`pair_verdict` (in :mod:`._audit_verdict`, with :func:`fleet_verdicts`) is pure: the two ranks' audits against the pair's desired state give exactly
one verdict, checked in this order: ``UNREACHABLE`` (a rank could not be audited), ``DOWN`` (an
engine, a container or the head's API is not up), ``DRIFT`` (anything differs; every difference is
listed), else ``OK``.

No secret reaches a result: the API key is only sent as a header, environment values of names
that look secret (``_secrets.is_secret_name``) are neither returned nor hashed, and any secret value seen
is scrubbed from every returned string (``_secrets.redact``: the API key whatever its length, the values of
secret-named env entries from ``_secrets.MIN_SECRET_LENGTH`` characters on).

Standard library only, but for the Docker client (:mod:`._docker_engine`); it runs on the ranks.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable

from ansible_collections.gb10.dspark.plugins.module_utils.engine._container_command import command_string
from ansible_collections.gb10.dspark.plugins.module_utils.engine._container_reads import pid1_env_argv, sha256_argv
from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file, sha256_text
from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import Engine, EngineError
from ansible_collections.gb10.dspark.plugins.module_utils.engine._engine_probe import (
    api_state,
    container_state,
    http_json,
    last_log_lines,
    liveness_state,
    parse_metrics,
)
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import read_limited
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError
from ansible_collections.gb10.dspark.plugins.module_utils.identity._labels import LABELS
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import (
    is_secret_name,
    redact,
    redact_document,
    secret_env_values,
)
from ansible_collections.gb10.dspark.plugins.module_utils.common._site import SITE_DEFAULTS, local_api_url

# HUNG: the head's API answers, but a one-token generation does not finish within the liveness
# timeout (a wedged rank: vLLM keeps answering /health, /v1/models and /metrics until a step outlives
# its execute timeout). FAILED: the audit itself failed for the pair before it could be judged (a bad
# inventory value, a task error); the pair is reported with the reason, never left out of the report.
VERDICTS = ("OK", "DRIFT", "DOWN", "HUNG", "UNREACHABLE", "FAILED")
ROLES = ("head", "worker")
LAST_LOG_LINES = 10  # of an engine container, in the report of a pair that is DOWN or HUNG
REASON_LOG_LINES = 5  # of a stopped container without exception lines, in its DOWN reason
LOG_SCAN_LINES = 1000  # read of a stopped container's log to find its exception lines (access lines follow them)
LAST_ERROR_LINES = 3  # exception lines in its DOWN reason
# ``SomeError: ...``, also behind vLLM's process prefix ``(EngineCore_DP0 pid=212) `` and its logger's
# ``ERROR 12-05 02:58:01 [core.py:935] ``
_EXCEPTION_LINE = re.compile(r"^(\([^)]*\)\s+)?((ERROR|CRITICAL|WARNING)\s+\S+\s+\S+\s+\[[^\]]*\]\s+)?"
                             r"[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b[^:]*: ")
EXIT_OK = 0
EXIT_NOT_OK = 2

# The label names the verdict reads, from the collection's one table (_labels).
LABEL_PAIR = LABELS["pair"]
LABEL_RANK = LABELS["rank"]
LABEL_PROFILE = LABELS["profile"]
LABEL_PROFILE_SHA256 = LABELS["profile_sha256"]
LABEL_CUDAGRAPH = LABELS["cudagraph_implementation"]
LABEL_IMAGE_ID = LABELS["image_id"]
LABEL_MANIFEST_SHA256 = LABELS["manifest_sha256"]
LABEL_MODEL_REVISION = LABELS["model_revision"]

REVISION_MARKER = ".r0b0tlab-model-revision"
MARKER_LIMIT = 4096  # a marker holds one revision
ENV_FILE_LIMIT = 1 << 20
_PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ERROR_LIMIT = 300

DESIRED_REQUIRED = ("image_id", "manifest_sha256", "model_revision", "profile", "profile_sha256", "served_model")
AUDIT_KEYS = ("rank", "docker", "images", "container", "profile_file", "manifest", "model", "api", "metrics")
RUNTIME_KEYS = ("log_tail", "env_prefixes")
RC_FAILED = 1  # what the docker CLI exits with when the engine refuses or fails a command
RC_NO_CONTAINER = 125  # ... and when there is no such container


# ============================================================================================
# small helpers
# ============================================================================================
def _excerpt(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _ERROR_LIMIT else text[:_ERROR_LIMIT] + "..."


def _env_name(entry: str) -> str:
    return entry.partition("=")[0]


def env_sha256(env: Iterable[str]) -> str:
    """sha256 of the sorted ``NAME=value`` lines (each ending in a newline) whose NAME is not
    secret-looking: changes when a non-secret variable of the container changes."""
    kept = sorted(e for e in env if isinstance(e, str) and not is_secret_name(_env_name(e)))
    return sha256_text("".join(e + "\n" for e in kept))


# ============================================================================================
# docker
# ============================================================================================
def image_list(rows: object) -> list[dict]:
    """The engine's ``GET /images/json`` records → ``[{id, tags}]`` (sorted by ID; an image is listed
    once with all its tags, sorted; ``<none>`` tags are left out), as ``docker image ls`` shows them."""
    images: dict[str, set[str]] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("Id"), str) or not row["Id"]:
            continue
        tags = images.setdefault(row["Id"], set())
        for ref in row.get("RepoTags") or []:
            if not isinstance(ref, str):
                continue
            colon = ref.rfind(":")
            if colon <= ref.rfind("/"):
                continue  # no tag
            repo, tag = ref[:colon], ref[colon + 1:]
            if repo and repo != "<none>" and tag and tag != "<none>":
                tags.add(ref)
    return [{"id": image_id, "tags": sorted(tags)} for image_id, tags in sorted(images.items())]


def read_images(engine: Engine) -> tuple[dict, list[dict]]:
    """(``docker`` section, images). An engine that does not answer the image list is unreachable."""
    try:
        rows = engine.list_images()
    except EngineError as exc:
        return {"reachable": False, "error": _excerpt(str(exc)) or "the Docker engine did not answer"}, []
    return {"reachable": True, "error": None}, image_list(rows)


def _empty_container(name: str, exists: bool | None, error: str | None) -> dict:
    return {"name": name, "exists": exists, "running": False if exists is False else None,
            "status": "absent" if exists is False else None, "exit_code": None, "image_id": None, "labels": {},
            "started_at": None, "finished_at": None, "restart_count": None, "command_sha256": None,
            "env_sha256": None, "profile": None, "error": error}


def read_container(engine: Engine, name: str) -> tuple[dict, list[str] | None]:
    """(the ``container`` section, the container's Env list or None when unknown)."""
    section, env, _doc, _error = _read_container(engine, name)
    return section, env


def _read_container(engine: Engine, name: str) -> tuple[dict, list[str] | None, dict | None, str | None]:
    """(section, Env or None, the raw inspect record or None, the engine's error or None): one inspect."""
    try:
        doc = engine.inspect_container(name)
    except EngineError as exc:
        error = _excerpt(str(exc)) or "the Docker engine did not answer"
        return _empty_container(name, None, error), None, None, error
    if doc is None:
        return _empty_container(name, False, None), None, None, None
    state = container_state(doc)  # the fields the probe reports
    config = doc.get("Config") if isinstance(doc.get("Config"), dict) else {}
    env = [e for e in (config.get("Env") or []) if isinstance(e, str)]
    labels = state.get("labels") or {}
    section = {
        "name": name,
        "exists": True,
        "running": state.get("running"),
        "status": state.get("status"),
        "exit_code": state.get("exit_code"),
        "image_id": state.get("image"),
        "labels": dict(sorted(labels.items())),
        "started_at": state.get("started_at"),
        "finished_at": state.get("finished_at"),
        "restart_count": state.get("restart_count"),
        "command_sha256": sha256_text(command_string(doc.get("Path"), doc.get("Args"))),
        "env_sha256": env_sha256(env),
        "profile": labels.get(LABEL_PROFILE),
        "error": None,
        "last_log_lines": [],
        "error_lines": [],
    }
    stopped = state.get("running") is False
    section["last_log_lines"], section["error_lines"] = _last_logs(engine, name, doc, stopped)
    return section, env, doc, None


def _last_logs(engine: Engine, name: str, doc: dict, stopped: bool) -> tuple[list[str], list[str]]:
    """What the container last logged, both streams in the order written, for the report of a pair
    that is DOWN or HUNG: its last LAST_LOG_LINES lines; for a ``stopped`` one also the first distinct
    exception lines (``SomeError: ...``) among its last LOG_SCAN_LINES, the root cause coming first
    (vLLM logs the engine's error, then the API's, then what its clients saw). Unreadable: nothing."""
    try:
        read = last_log_lines(engine, name, doc, LOG_SCAN_LINES if stopped else LAST_LOG_LINES)
    except EngineError:
        return [], []
    lines = [line[:300] for line in read if line.strip()]
    errors = list(dict.fromkeys(line for line in lines if _EXCEPTION_LINE.match(line))) if stopped else []
    return lines[-LAST_LOG_LINES:], errors[:LAST_ERROR_LINES]  # errors: distinct, first seen first


# ============================================================================================
# files on the rank
# ============================================================================================
def parse_env_file(text: str) -> list[str]:
    """The entries of a Docker env file: stripped lines, blank lines and ``#`` comments left out.
    A line without ``=`` is a bare NAME (Docker passes the caller's value through)."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def env_file_differences(entries: list[str], container_env: list[str]) -> list[str]:
    """The names of the env file entries the container does not run with (names only: the
    values may be secret)."""
    have = set(container_env)
    names = {_env_name(e) for e in container_env}
    missing = []
    for entry in entries:
        if "=" in entry:
            if entry not in have:
                missing.append(_env_name(entry))
        elif entry not in names:
            missing.append(entry)
    return sorted(set(missing))


def profile_file_state(profiles_dir: str, profile: str | None, container_env: list[str] | None) -> dict:
    """The rendered env file ``<profiles_dir>/<profile>.env`` of the profile the container is
    labelled with, and whether every one of its entries is in the container's environment."""
    out: dict = {"profile": profile, "path": None, "present": False, "sha256": None,
                 "env_matches_container": None, "env_differences": [], "error": None}
    if profile is None:
        out["error"] = "no profile label on the container"
        return out
    if not _PROFILE_NAME.match(profile):
        out["error"] = f"profile label {profile!r} is not a plain name"
        return out
    path = os.path.join(profiles_dir, profile + ".env")
    out["path"] = path
    if not os.path.isfile(path):
        out["error"] = f"no env file {path}"
        return out
    out["present"] = True
    try:
        out["sha256"] = sha256_file(path)
        entries = parse_env_file(read_limited(path, ENV_FILE_LIMIT).decode("utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        out["error"] = f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
        return out
    if container_env is not None:
        out["env_differences"] = env_file_differences(entries, container_env)
        out["env_matches_container"] = not out["env_differences"]
    return out


def manifest_state(path: str) -> dict:
    out: dict = {"path": path, "present": os.path.isfile(path), "sha256": None, "error": None}
    if not out["present"]:
        out["error"] = f"no file {path}"
        return out
    try:
        out["sha256"] = sha256_file(path)
    except OSError as exc:
        out["error"] = f"cannot read {path}: {exc.strerror or exc}"
    return out


def model_state(model_dir: str, marker: str) -> dict:
    out: dict = {"dir": model_dir, "present": os.path.isdir(model_dir), "marker": marker, "revision": None,
                 "error": None}
    if not out["present"]:
        out["error"] = f"no directory {model_dir}"
        return out
    path = os.path.join(model_dir, marker)
    if not os.path.isfile(path):
        out["error"] = f"no marker file {path}"
        return out
    try:
        out["revision"] = read_limited(path, MARKER_LIMIT).decode("utf-8").strip() or None
    except (OSError, ValueError) as exc:
        out["error"] = f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
        return out
    if out["revision"] is None:
        out["error"] = f"marker {path} is empty"
    return out


def check_marker_name(rank: str, marker: str) -> None:
    """The revision marker is a plain file name inside the model directory (CheckError otherwise)."""
    if not marker or "/" in marker or marker in (".", ".."):
        raise CheckError(rank, f"revision_marker {marker!r} is not a file name inside model_dir")


# ============================================================================================
# the head's API
# ============================================================================================
def _counter(metrics: dict, name: str) -> int | None:
    samples = metrics.get(name)
    if not samples:
        return None
    return int(sum(value for _unused, value in samples))


def metrics_state(base_url: str, timeout: float, api_key: str | None) -> dict:
    status, text, err = http_json(base_url.rstrip("/") + "/metrics", timeout, api_key)
    if status != 200 or not isinstance(text, str):
        return {"generation_tokens_total": None, "prompt_tokens_total": None,
                "error": err or f"HTTP {status}"}
    metrics = parse_metrics(text)
    return {"generation_tokens_total": _counter(metrics, "vllm:generation_tokens_total"),
            "prompt_tokens_total": _counter(metrics, "vllm:prompt_tokens_total"), "error": None}


# ============================================================================================
# what the runtime gate reads of the rank
# ============================================================================================
def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _failed(rc: int, message: str) -> dict:
    return {"rc": rc, "stdout": "", "stderr": message}


def _engine_failure(exc: EngineError) -> dict:
    """A piece the engine refused, as the docker CLI would have failed it."""
    return _failed(RC_NO_CONTAINER if exc.status == 404 else RC_FAILED, str(exc) or "the Docker engine did not answer")


def _exec_piece(engine: Engine, container: str, argv: list[str]) -> dict:
    try:
        rc, out, err = engine.exec_run(container, argv)
    except EngineError as exc:
        return _engine_failure(exc)
    return {"rc": rc, "stdout": _text(out), "stderr": _text(err)}


def check_runtime(rank: str, runtime: object) -> dict:
    """The ``runtime`` option: ``log_tail`` (a whole number >= 0) and ``env_prefixes`` (a list of
    non-empty strings); CheckError otherwise."""
    if not isinstance(runtime, dict):
        raise CheckError(rank, f"runtime must be a mapping, not {type(runtime).__name__}")
    unknown = sorted(set(runtime) - set(RUNTIME_KEYS))
    if unknown:
        raise CheckError(rank, f"runtime has unknown keys: {', '.join(map(str, unknown))}")
    tail = runtime.get("log_tail", 20000)
    if isinstance(tail, bool) or not isinstance(tail, int) or tail < 0:
        raise CheckError(rank, f"runtime.log_tail must be a whole number >= 0, not {tail!r}")
    prefixes = runtime.get("env_prefixes")
    if not isinstance(prefixes, list) or not all(isinstance(p, str) and p for p in prefixes):
        raise CheckError(rank, f"runtime.env_prefixes must be a list of non-empty strings, not {prefixes!r}")
    return {"log_tail": tail, "env_prefixes": list(prefixes)}


def runtime_state(engine: Engine, container: str, doc: dict | None, inspect_error: str | None,
                  reachable: bool, runtime: dict, manifest_path: str) -> dict:
    """What the runtime gate reads of the rank, each piece as ``docker`` answers it.

    ``doc``/``inspect_error``: the one container inspect the audit made (None/None: no such
    container). ``container`` and ``image`` are the engine's raw inspect records (None when they
    could not be read; then ``errors`` says why, under the same key). ``pid1_env`` (the PID 1
    environment entries starting with one of ``env_prefixes``, printed as a JSON list),
    ``manifest_sha256`` (the sha256 of ``manifest_path`` inside the container) and ``logs`` (the
    last ``log_tail`` lines) are ``{rc, stdout, stderr}`` as ``docker exec`` / ``docker logs``
    would exit and print: rc 125 when there is no such container, 1 when the engine refused or
    failed, never an exception."""
    errors: dict[str, str] = {}
    out: dict = {"container": None, "image": None, "pid1_env": None, "manifest_sha256": None, "logs": None,
                 "errors": errors}
    if not reachable:
        errors["container"] = "docker engine unreachable"
        for key in ("pid1_env", "manifest_sha256", "logs"):
            out[key] = _failed(RC_FAILED, "docker engine unreachable")
        return out
    if doc is None:
        missing = inspect_error is None
        errors["container"] = f"No such container: {container}" if missing else inspect_error  # type: ignore[assignment]
        if missing:
            for key in ("pid1_env", "manifest_sha256", "logs"):
                out[key] = _failed(RC_NO_CONTAINER, f"Error: No such container: {container}")
            return out
    else:
        # by the collection's one secret rule, whatever the value's length (``redact`` below scrubs
        # only the values of _secrets.MIN_SECRET_LENGTH characters and more from text)
        out["container"] = redact_document(doc)
        image_id = doc.get("Image")
        if not isinstance(image_id, str) or not image_id:
            errors["image"] = f"container {container} names no image"
        else:
            try:
                out["image"] = engine.inspect_image(image_id)
            except EngineError as exc:
                errors["image"] = str(exc) or "the Docker engine did not answer"
            else:
                if out["image"] is None:
                    errors["image"] = f"No such image: {image_id}"
    out["pid1_env"] = _exec_piece(engine, container, pid1_env_argv(runtime["env_prefixes"]))
    out["manifest_sha256"] = _exec_piece(engine, container, sha256_argv(manifest_path))
    config = doc.get("Config") if doc is not None and isinstance(doc.get("Config"), dict) else {}
    try:
        stdout, stderr = engine.logs(container, runtime["log_tail"], tty=config.get("Tty") is True)
    except EngineError as exc:
        out["logs"] = _engine_failure(exc)
    else:
        out["logs"] = {"rc": 0, "stdout": _text(stdout), "stderr": _text(stderr)}
    return out


# ============================================================================================
# the rank's audit
# ============================================================================================
def open_engine(rank: str, docker_host: str) -> Engine:
    """The rank's Docker engine at ``docker_host`` (``unix:///path`` or a path; CheckError otherwise).
    Opening it does not contact it: an engine that does not answer is reported by :func:`collect`."""
    try:
        return Engine(docker_host)
    except EngineError as exc:
        raise CheckError(rank, str(exc)) from exc


def collect(engine: Engine, *, rank: str, container: str = SITE_DEFAULTS["container_name"],
            manifest_path: str = "/etc/dspark/runtime-manifest.json", profiles_dir: str = "/etc/dspark/profiles",
            model_dir: str | None = None, revision_marker: str = REVISION_MARKER, api: bool = False,
            base_url: str = local_api_url(), model: str | None = None, api_key: str | None = None,
            timeout: float = 5.0, runtime: dict | None = None, liveness_timeout: float | None = None) -> dict:
    """Everything the fleet audit needs from one rank. ``engine`` is the rank's Docker engine
    (:class:`_docker_engine.Engine`, or any object with its ``list_images``, ``inspect_container``
    and ``log_text``, and with ``runtime`` also ``inspect_image``, ``exec_run`` and
    ``logs``); one that does not answer reads as unreachable. Raises CheckError only for unusable
    options, before the engine is asked anything.

    ``liveness_timeout`` (with ``api``): when the API serves ``model``, one bounded generation of one
    token too (``liveness``, :func:`_engine_probe.liveness_state`); None: not tried.

    ``model_dir`` None: the model is not read (``model`` is None). ``runtime``
    (``{log_tail, env_prefixes}``): also ``runtime``, what the runtime gate reads
    (:func:`runtime_state`; the manifest hashed inside the container is ``manifest_path``)."""
    check_marker_name(rank, revision_marker)
    if api and not model:
        raise CheckError(rank, "model (the served model name) is required when api is true")
    if runtime is not None:
        runtime = check_runtime(rank, runtime)
    env: list[str] | None = None
    doc: dict | None = None
    inspect_error: str | None = None
    docker_section, images = read_images(engine)
    if docker_section["reachable"]:
        container_section, env, doc, inspect_error = _read_container(engine, container)
    else:
        container_section = _empty_container(container, None, "docker engine unreachable")
    audit = {
        "rank": rank,
        "docker": docker_section,
        "images": images,
        "container": container_section,
        "profile_file": profile_file_state(profiles_dir, container_section["profile"], env),
        "manifest": manifest_state(manifest_path),
        "model": None if model_dir is None else model_state(model_dir, revision_marker),
        "api": None,
        "metrics": None,
        "liveness": None,
    }
    if runtime is not None:
        audit["runtime"] = runtime_state(engine, container, doc, inspect_error, docker_section["reachable"],
                                         runtime, manifest_path)
    if api:
        audit["api"] = api_state(base_url, model, timeout, api_key)  # type: ignore[arg-type]
        audit["metrics"] = metrics_state(base_url, timeout, api_key)
        if liveness_timeout and audit["api"].get("ready"):
            audit["liveness"] = liveness_state(base_url, model, liveness_timeout, api_key)  # type: ignore[arg-type]
    secrets = ([api_key] if api_key else []) + secret_env_values(env or [])
    return redact(audit, secrets)  # type: ignore[return-value]
