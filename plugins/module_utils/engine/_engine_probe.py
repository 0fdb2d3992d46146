# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a rank's engine is doing right now, seen from that rank: read-only and quick.

One probe answers: does the rank's container exist and run (exit code, start time, the last log
lines), and on the head, does the API serve the model, how big is the KV cache, how many requests
are in flight. The readiness wait (run on both ranks, each through its own Ansible connection),
the engine role's replace guard and the gate all read it.

The container is read through the rank's Docker engine API (:mod:`._docker_engine`); the API
over HTTP on the head, through the collection's one HTTP client (:mod:`._http`).
"""
from __future__ import annotations

import json
import re
import time

from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import DEFAULT_DOCKER_HOST, Engine, EngineError
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import ApiUnreachable, get_text, json_client
from ansible_collections.gb10.dspark.plugins.module_utils.identity._labels import PREFIX as LABEL_PREFIX
from ansible_collections.gb10.dspark.plugins.module_utils.common._site import SITE_DEFAULTS, local_api_url

# The probe's options (gb10.dspark.engine_probe; gb10.dspark.pair_ready passes them through).
ARGUMENT_SPEC = {
    "container": {"type": "str", "default": SITE_DEFAULTS["container_name"]},
    "base_url": {"type": "str", "default": local_api_url()},
    "model": {"type": "str", "required": True},
    "docker_host": {"type": "str", "default": DEFAULT_DOCKER_HOST},
    "log_lines": {"type": "int", "default": 20},
    "timeout": {"type": "float", "default": 5.0},
    "api_key": {"type": "str", "no_log": True},
}
# What gb10.dspark.engine_probe alone adds: a container-only read, and the replace guard.
PROBE_ARGUMENT_SPEC = {
    "read_api": {"type": "bool", "default": True},
    "refuse_foreign": {"type": "bool", "default": False},
    "replace_foreign": {"type": "bool", "default": False},
    "refuse_busy": {"type": "bool", "default": False},
    "force": {"type": "bool", "default": False},
    "drain_timeout": {"type": "float", "default": 0.0},
    "drain_interval": {"type": "float", "default": 2.0},
    "rank": {"type": "str"},
    "inspect": {"type": "bool", "default": False},
    "labelled": {"type": "str"},
    "engine_info": {"type": "bool", "default": False},
    "read": {"type": "list", "elements": "dict", "default": [], "options": {
        "path": {"type": "path", "required": True},
        "patterns": {"type": "list", "elements": "str", "default": ["*"]},
    }},
}
# What gb10.dspark.pair_ready adds around the probe.
WAIT_ARGUMENT_SPEC = {
    "pair": {"type": "str", "required": True},
    "role": {"type": "str", "required": True, "choices": ["head", "worker"]},
    "peer_grace": {"type": "float", "default": 120},
    "budget": {"type": "float", "default": 3600},
    "interval": {"type": "float", "default": 5},
    "progress_every": {"type": "float", "default": 30},
    "fail_log_lines": {"type": "int", "default": 30},
    "stall_timeout": {"type": "float", "default": 900},
    "progress_results": {"type": "bool", "default": False},
}

# Control characters other than tab: a container's log line carrying them (ANSI colours, a cursor
# move, a bell) is shown to the operator, so they are replaced before any log line leaves a probe.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
_ANSI_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[str, list[tuple[dict, float]]]:
    """Prometheus text exposition → {metric name: [(labels, value), …]}."""
    out: dict[str, list[tuple[dict, float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        out.setdefault(m.group(1), []).append((labels, value))
    return out


def kv_cache_tokens(metrics: dict) -> int | None:
    for _unused, value in metrics.get("vllm:kv_cache_size_tokens", []):
        return int(value)
    for labels, _unused in metrics.get("vllm:cache_config_info", []):
        if labels.get("kv_cache_size_tokens", "").isdigit():
            return int(labels["kv_cache_size_tokens"])
    return None


def _gauge_sum(metrics: dict, name: str) -> int | None:
    samples = metrics.get(name)
    if not samples:
        return None
    return int(sum(v for _unused, v in samples))


def requests_running(metrics: dict) -> int | None:
    """``vllm:num_requests_running`` (requests in the model's batches), summed over engines; None: absent."""
    return _gauge_sum(metrics, "vllm:num_requests_running")


def requests_waiting(metrics: dict) -> int | None:
    """``vllm:num_requests_waiting`` (requests queued for a batch), summed over engines; None: absent."""
    return _gauge_sum(metrics, "vllm:num_requests_waiting")


def container_state(doc: dict | None) -> dict:
    """The engine's inspect record of a container (None: no such container) → the few fields a
    probe reports: never its environment or command, which may hold the API key."""
    if not doc:
        return {"exists": False, "running": False, "status": "absent"}
    state = doc.get("State") or {}
    labels = (doc.get("Config") or {}).get("Labels") or {}
    return {
        "exists": True,
        "id": doc.get("Id"),
        "image": doc.get("Image"),
        "status": state.get("Status"),
        "running": bool(state.get("Running")),
        "exit_code": state.get("ExitCode"),
        "started_at": state.get("StartedAt"),
        "finished_at": state.get("FinishedAt"),
        "restart_count": doc.get("RestartCount"),
        "image_ref": (doc.get("Config") or {}).get("Image"),
        "labels": {k: v for k, v in labels.items() if k.startswith(LABEL_PREFIX)},
    }


def printable(line: str) -> str:
    """A log line safe for a terminal: ANSI sequences dropped, other control characters shown as
    ``?``, so a container cannot move the operator's cursor or retitle their terminal."""
    return _CONTROL.sub("?", _ANSI_CSI.sub("", line))


def rank_state(engine: Engine, container: str, log_lines: int, keep_record: bool = False) -> dict:
    """The rank's engine container and its last ``log_lines`` log lines (both streams in the order
    written, made safe for a terminal). An engine that cannot be read is status ``unknown`` with the error.
    ``keep_record``: also its whole inspect record under ``record`` (None: no such container), which
    holds its environment (the API key): only for a caller that keeps it out of every output."""
    try:
        doc = engine.inspect_container(container)
    except EngineError as exc:
        return {"exists": False, "running": False, "status": "unknown", "error": str(exc)[:500], "logs": []}
    state = container_state(doc)
    if keep_record:
        state["record"] = doc
    state["logs"] = []
    if log_lines > 0 and state["exists"]:
        try:
            state["logs"] = last_log_lines(engine, container, doc, log_lines)
        except EngineError as exc:
            state["logs_error"] = str(exc)[:500]
    return state


def last_log_lines(engine: Engine, container: str, doc: dict | None, tail: int) -> list[str]:
    """The container's last ``tail`` log lines, both streams in the order written, made safe for a
    terminal; ``doc`` is its inspect record (a TTY container logs one raw stream). EngineError when
    the log cannot be read."""
    tty = bool(((doc or {}).get("Config") or {}).get("Tty"))
    text = engine.log_text(container, tail, tty=tty).decode("utf-8", "replace")
    return [printable(line) for line in text.splitlines()[-tail:]]


def http_json(url: str, timeout: float, api_key: str | None = None) -> tuple[int | None, object, str]:
    """GET ``url`` through the one client (:func:`._http.get_text`): ``(status, parsed JSON, "")``, the text for
    ``/metrics``, or ``(status or None, None, why)``: the transport's or the key's problem, ``HTTP <status>``,
    ``not JSON``."""
    status, body, err = get_text(url, timeout, api_key)
    if status is None or body is None:  # no answer: both are None together
        return None, None, err
    if status >= 400:
        return status, None, f"HTTP {status}"
    if url.endswith("/metrics"):
        return status, body, ""
    try:
        return status, json.loads(body), ""
    except ValueError:
        return status, None, "not JSON"


def api_state(base_url: str, model: str, timeout: float, api_key: str | None = None) -> dict:
    status, doc, err = http_json(base_url.rstrip("/") + "/v1/models", timeout, api_key)
    ready = False
    ids: list[str] = []
    max_len = None
    if status == 200 and isinstance(doc, dict):
        for entry in doc.get("data") or []:
            ids.append(str(entry.get("id")))
            if entry.get("id") == model:
                ready = True
                max_len = entry.get("max_model_len")
    out = {"ready": ready, "status": status, "models": ids, "max_model_len": max_len, "error": err or None}
    status, text, err = http_json(base_url.rstrip("/") + "/metrics", timeout, api_key)
    metrics = parse_metrics(text) if status == 200 and isinstance(text, str) else {}
    out["kv_cache_size_tokens"] = kv_cache_tokens(metrics)
    out["num_requests_running"] = requests_running(metrics)
    out["num_requests_waiting"] = requests_waiting(metrics)
    if status != 200:
        out["metrics_error"] = f"/metrics: {err or f'HTTP {status}'}"
    elif out["num_requests_running"] is None:
        out["metrics_error"] = "/metrics has no vllm:num_requests_running"
    elif out["num_requests_waiting"] is None:
        out["metrics_error"] = "/metrics has no vllm:num_requests_waiting"
    else:
        out["metrics_error"] = None
    return out


def liveness_state(base_url: str, model: str, timeout: float, api_key: str | None = None,
                   clock=time.monotonic) -> dict:
    """One bounded generation of one token (``/v1/completions``, ``max_tokens`` 1, temperature 0), the only
    way to tell a serving head from a hung one: a pair whose engine is wedged on a stalled rank still
    answers /health, /v1/models and /metrics. ``{"ok", "status", "seconds", "error", "stalled"}``; a request
    that outlives ``timeout`` is ``stalled``, with the error saying for how long."""
    body = {"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}
    started = clock()
    try:
        status, _answer = json_client(base_url, api_key)("POST", "/v1/completions", body, timeout)
    except ApiUnreachable as exc:
        error = (f"the API answers, but no token came within {timeout:g} s" if exc.stalled
                 else f"a one-token completion failed: {exc}")
        return {"ok": False, "status": None, "seconds": round(clock() - started, 2), "error": error,
                "stalled": exc.stalled}
    except ValueError as exc:  # RequestNotSent: a key that cannot be a header, named, never shown
        return {"ok": False, "status": None, "seconds": round(clock() - started, 2),
                "error": f"a one-token completion failed: {exc}", "stalled": False}
    seconds = round(clock() - started, 2)
    if status != 200:
        return {"ok": False, "status": status, "seconds": seconds, "error": f"a one-token completion answered HTTP {status}",
                "stalled": False}
    return {"ok": True, "status": status, "seconds": seconds, "error": None, "stalled": False}


def _no_api(reason: str) -> dict:
    return {"ready": False, "status": None, "models": [], "max_model_len": None, "error": reason,
            "kv_cache_size_tokens": None, "num_requests_running": None, "num_requests_waiting": None,
            "metrics_error": reason}


def probe(engine: Engine, container: str, base_url: str, model: str, log_lines: int = 20, timeout: float = 5.0,
          api_key: str | None = None, read_api: bool = True, inspect: bool = False, labelled: str | None = None,
          engine_info: bool = False) -> dict:
    """This rank's container and, with ``read_api``, the API it serves (the head's). ``inspect``: also
    the container's whole inspect record (``inspect``, None when there is none or the engine cannot be
    read); ``labelled`` (a label's name): also the other containers carrying it (``labelled``,
    :func:`labelled_names`); ``engine_info``: also who the engine is (``engine``, :func:`engine_identity`).
    The last two raise EngineError when the engine cannot answer."""
    rank = rank_state(engine, container, log_lines, keep_record=inspect)
    record = rank.pop("record", None)
    if not rank.get("running"):
        api = _no_api("container not running")
    elif not read_api:
        api = _no_api("API not read (read_api=false)")
    else:
        api = api_state(base_url, model, timeout, api_key)
    out = {"container": rank, "api": api, "ready": bool(api["ready"]) and bool(rank.get("running"))}
    if inspect:
        out["inspect"] = record
    if labelled:
        out["labelled"] = labelled_names(engine, labelled, container)
    if engine_info:
        out["engine"] = engine_identity(engine)
    return out


def labelled_names(engine: Engine, label: str, container: str) -> list[str]:
    """The names of the containers (running or not) that carry the label ``label``, other than
    ``container``: leftovers of the collection when ``label`` is its pair label. The engine lists each
    name with a leading '/'; a name with a further '/' is a legacy link alias of another container,
    not a container of its own, and is left out."""
    names = set()
    for row in engine.list_containers(label):
        for name in row.get("Names") or []:
            name = str(name).removeprefix("/")
            if name and "/" not in name and name != container:
                names.add(name)
    return sorted(names)


def engine_identity(engine: Engine) -> dict:
    """Who the rank's Docker engine is: its ``id`` and host ``name`` (``GET /info``), and its image store."""
    info = engine.info()
    return {"id": info.get("ID"), "name": info.get("Name"), "image_store": engine.image_store()}


def foreign_message(result: dict, rank: str, container: str) -> str | None:
    """Why the container that holds the engine's name is not ours to replace, or None when it is
    ours (it carries the collection's labels) or there is none. Someone else's workload under
    that name is never removed without the operator's word."""
    state = result.get("container") or {}
    if not state.get("exists") or state.get("labels"):
        return None
    ref, image_id = state.get("image_ref") or "?", state.get("image")
    image = ref if not image_id or image_id == ref else f"{ref} = {image_id}"
    return (f"rank {rank}: container {container} (image {image}, started {state.get('started_at') or '?'}, "
            f"{state.get('status')}) was not made by gb10.dspark (no "
            f"{LABEL_PREFIX}* labels), expected none or the collection's engine; nothing was changed. Move that "
            f"workload away, or set dspark_engine_replace_foreign=true to replace it")


def busy_message(result: dict, rank: str) -> str | None:
    """Why a running head must not be stopped now, or None when it may be.

    A head whose container does not run serves nothing; a head whose Docker engine cannot be read
    (container status ``unknown``) is not known to be stopped, so it refuses. A running head may be
    stopped only when its ``/metrics`` says no request is in flight: ``vllm:num_requests_running``
    (in the model's batches) plus ``vllm:num_requests_waiting`` (queued for one) is 0. A head whose
    counts cannot be read (a timeout, an error, either gauge missing - vLLM always exports both, so a
    missing one is an answer we do not know) may be serving under load, and "unknown" is never taken
    for idle.
    """
    container = result.get("container") or {}
    if container.get("status") == "unknown":
        why = container.get("error") or "no reason given"
        return (f"rank {rank}: cannot tell whether the head's engine runs (its Docker engine cannot be read: {why}); "
                f"expected a readable container state before stopping its engine. Check the rank's Docker engine, "
                f"or set dspark_engine_force_replace=true to stop it anyway")
    if not container.get("running"):
        return None
    api = result.get("api") or {}
    running, waiting = api.get("num_requests_running"), api.get("num_requests_waiting")
    if running is None or waiting is None:
        missing = "vllm:num_requests_running" if running is None else "vllm:num_requests_waiting"
        why = api.get("metrics_error") or api.get("error") or f"/metrics has no {missing}"
        counts = ", ".join(f"{name} {'unknown' if n is None else n}"
                           for name, n in (("running", running), ("waiting", waiting)))
        return (f"rank {rank}: cannot tell how many requests the head is serving ({why}): {counts}; expected both "
                f"readable and 0 (vllm:num_requests_running, vllm:num_requests_waiting) before stopping its engine. "
                f"Check the head's API, or set dspark_engine_force_replace=true to stop it anyway")
    if running + waiting > 0:
        return (f"rank {rank}: the head has {running + waiting} request(s) in flight (running {running}, waiting "
                f"{waiting}), expected 0; stopping the engine would cut them off. Drain it, or set "
                f"dspark_engine_force_replace=true")
    return None


def in_flight(result: dict) -> tuple[int, int] | None:
    """(running, waiting) of a running head whose ``/metrics`` read both gauges; None for anything else (a head
    that does not run, or whose counts or container cannot be read: :func:`busy_message` judges those)."""
    container = result.get("container") or {}
    if container.get("status") == "unknown" or not container.get("running"):
        return None
    api = result.get("api") or {}
    running, waiting = api.get("num_requests_running"), api.get("num_requests_waiting")
    if running is None or waiting is None:
        return None
    return running, waiting


def drain(read, rank: str, timeout: float, interval: float = 2.0, first: dict | None = None, clock=time.monotonic,
          sleep=time.sleep) -> tuple[dict, str | None, float]:
    """Wait, up to ``timeout`` seconds, until the head may be stopped: ``read()`` is one probe (:func:`probe`),
    repeated every ``interval`` seconds while the head's only reason to refuse is requests in flight. Returns
    (the last probe, why it may not be stopped or None, the seconds waited).

    Nothing is ever cut: the wait only reads ``/metrics``. A head whose load or container cannot be read refuses
    at once (unknown is never idle, and waiting would not make it known); with ``timeout`` 0 a busy head refuses
    at once too (the rule of every play but a rollout). A head still busy at the deadline refuses, naming the
    rank, the requests still in flight and the timeout. ``first``: a probe already made, read first.
    """
    started = clock()
    result = first if first is not None else read()
    while True:
        busy = busy_message(result, rank)
        counts = in_flight(result)
        waited = round(clock() - started, 2)
        if busy is None or counts is None or timeout <= 0:
            return result, busy, waited
        if clock() - started >= timeout:
            running, waiting = counts
            return result, (f"rank {rank}: the head still has {running + waiting} request(s) in flight (running "
                            f"{running}, waiting {waiting}) after waiting {timeout:g} s for them to end "
                            f"(dspark_engine_drain_timeout), expected 0; its engine was not stopped and no request "
                            f"was cut. Let them end and run again, raise the drain timeout, or set "
                            f"dspark_engine_force_replace=true"), waited
        sleep(max(0.0, min(interval, timeout - (clock() - started))))
        result = read()
