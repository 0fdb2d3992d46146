# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision logic of the schema-3 runtime gate (docs/wrapper-reference.md §5).

The gate proves that a running pair serves what was pinned: per rank the container's image,
labels, command flags, PID 1 environment and runtime-audit manifest; on the head three API
canaries; on both ranks the CUDA-graph log markers. The pytest-testinfra suite of the gate role
(``roles/gate/files/runtime_gate``) only moves bytes: it hands this module a ``run(argv)``
callable per rank (commands as argv lists, run on the rank) and a ``fetch(method, path, body,
timeout)`` callable for the head's HTTP API. Everything that decides lives here, so the unit
tests cover it.

:class:`Gate` runs the checks as named steps (each one once, in the spec's order: identity and
API canaries before the logs, so that a graph replay has been logged), keeps every error (a
failed check never stops the others) and assembles the schema-3 document; :func:`write_json_atomic`
writes it.

The API key never reaches the document: the gate records the command's sha256 and the parsed
flags, never the command, reads only two variables of PID 1's environment, redacts every secret
variable of the command (``--api-key`` values, ``…API_KEY=`` assignments: ``_secrets.redact_document``)
before its tokens are used, and scrubs any secret it was given from every string it returns
(``_secrets.redact``). Standard library only.

This file holds the configuration, the runner over the audit's record (:func:`recorded_run`), the documents and
:class:`Gate`; beside it, by concern: :mod:`._runtime_gate_identity` (one rank's identity and the two ranks
compared), :mod:`._runtime_gate_logs` (the log markers), :mod:`._runtime_gate_api` (the API canaries) and
:mod:`._runtime_gate_base` (what they share).
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin
# PYTHON and the two codes are re-exported: the gate's tests and callers name them from here.
from ansible_collections.gb10.dspark.plugins.module_utils.engine._container_reads import (  # noqa: F401  # pylint: disable=unused-import
    PID1_ENV_CODE,
    PYTHON,
    SHA256_CODE,
    pid1_env_argv,
    sha256_argv,
)
# Re-exported: the gate's test suite (roles/gate/files/runtime_gate) writes the document with it.
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic  # noqa: F401  # pylint: disable=unused-import
# REDACTED is re-exported: the gate's tests and its suite name the placeholder from here.
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import (  # noqa: F401  # pylint: disable=unused-import
    REDACTED,
    redact,
    redact_document,
)
from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import (
    StrictJSONError,
    loads as strict_loads,
)
from ansible_collections.gb10.dspark.plugins.module_utils.gate._runtime_gate_base import (
    Fetch,
    GateError,
    IMPLEMENTATIONS,
    RANKS,
    Run,
    _HEX64,
    _show,
)
# LEGACY_SELECTOR and MULTI_STREAM are re-exported: the gate's suite (conftest.make_runners) names them from here.
from ansible_collections.gb10.dspark.plugins.module_utils.gate._runtime_gate_identity import (  # noqa: F401  # pylint: disable=unused-import
    LEGACY_SELECTOR,
    MULTI_STREAM,
    collect_identity,
    cross_rank_errors,
)
from ansible_collections.gb10.dspark.plugins.module_utils.gate._runtime_gate_logs import collect_logs
from ansible_collections.gb10.dspark.plugins.module_utils.gate._runtime_gate_api import (
    api_call,
    evaluate_models,
    evaluate_retrieval,
    evaluate_semantic,
    evaluate_tool,
    retrieval_request,
    semantic_request,
    tool_request,
    usage_errors,
)


SCHEMA_VERSION = 3

CUDAGRAPH_MODES = ("FULL", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "PIECEWISE")
OPTIMIZATION_LEVELS = (2, 3)
PERFORMANCE_MODES = ("balanced", "throughput", "interactivity")


class ConfigError(ValueError):
    """The gate configuration is unusable; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("gate config: " + "; ".join(self.problems))


# ============================================================================================
# configuration
# ============================================================================================
_CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "pair": (str,), "head": (str,), "worker": (str,), "container": (str,),
    "base_url": (str,), "model": (str,), "pin": (dict,), "profile": (str,),
    "expected_cudagraph_implementation": (str,), "expected_cudagraph_mode": (str,),
    "expected_compilation_config": (dict,), "optimization_level": (int,), "performance_mode": (str,),
    "manifest_path": (str,), "manifest_sha256": (str,), "check_architecture": (bool,), "output": (str,),
}
_CONFIG_OPTIONAL: dict[str, object] = {
    # The operator's inventory for the rank calls; empty when the action hands the suite the play's connection
    # settings in memory (a run by hand must name one: the suite's conftest says so).
    "inventory": "",
    "collections_path": None, "command_timeout": 60, "api_timeout": 300, "retrieval_timeout": 600,
    "log_tail": 20000,
    # Per rank ({"head": …, "worker": …}): the image ID the image role resolved for that rank's
    # image store, and the store it found (classic | containerd | null when unknown). Absent: the
    # pin's image_id on both ranks, stores unknown.
    "expected_image_ids": None, "image_stores": None,
}
CONFIG_KEYS = tuple(_CONFIG_TYPES) + tuple(_CONFIG_OPTIONAL)
IMAGE_STORES = ("classic", "containerd")


def check_config(data: object) -> dict:
    """The validated gate configuration (optional keys filled in), or :class:`ConfigError`."""
    if not isinstance(data, dict):
        raise ConfigError([f"the gate config must be a JSON object, not {type(data).__name__}"])
    problems = []
    for key, kinds in _CONFIG_TYPES.items():
        value = data.get(key)
        if value is None:
            problems.append(f"{key} is missing")
        elif not isinstance(value, kinds) or (kinds != (bool,) and isinstance(value, bool)):
            problems.append(f"{key} must be a {kinds[0].__name__}, not {value!r}")
        elif isinstance(value, str) and not value:
            problems.append(f"{key} is empty")
    for key in ("command_timeout", "api_timeout", "retrieval_timeout", "log_tail"):
        value = data.get(key, _CONFIG_OPTIONAL[key])
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{key} must be a positive integer, not {value!r}")
    if data.get("collections_path") is not None and not isinstance(data["collections_path"], str):
        problems.append("collections_path must be a string")
    if not isinstance(data.get("inventory", ""), str):
        problems.append(f"inventory must be a str, not {data['inventory']!r}")
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        problems.append("unknown keys: " + ", ".join(unknown))
    if problems:
        raise ConfigError(problems)

    impl, mode = data["expected_cudagraph_implementation"], data["expected_cudagraph_mode"]
    if impl not in IMPLEMENTATIONS:
        problems.append(f"expected_cudagraph_implementation {impl!r} is not one of {', '.join(IMPLEMENTATIONS)}")
    if mode not in CUDAGRAPH_MODES:
        problems.append(f"expected_cudagraph_mode {mode!r} is not one of {', '.join(CUDAGRAPH_MODES)}")
    if data["optimization_level"] not in OPTIMIZATION_LEVELS:
        problems.append(f"optimization_level {data['optimization_level']!r} is not one of 2, 3")
    if data["performance_mode"] not in PERFORMANCE_MODES:
        problems.append(f"performance_mode {data['performance_mode']!r} is not one of {', '.join(PERFORMANCE_MODES)}")
    if not _HEX64.match(data["manifest_sha256"]):
        problems.append("manifest_sha256 must be 64 lowercase hex digits")
    if not data["manifest_path"].startswith("/"):
        problems.append("manifest_path must be absolute")
    cc = data["expected_compilation_config"]
    for key, expected in (("cudagraph_implementation", impl), ("cudagraph_mode", mode)):
        if key in cc and cc[key] != expected:
            problems.append(f"expected_compilation_config.{key} is {cc[key]!r} but "
                            f"expected_cudagraph_{key.split('_', 1)[1]} is {expected!r}")
    problems.extend(_pin.problems(data["pin"]))
    if problems:
        raise ConfigError(problems)
    out = dict(_CONFIG_OPTIONAL)
    out.update(data)
    out["expected_image_ids"], out["image_stores"], image_problems = _check_rank_images(
        data["pin"], data.get("expected_image_ids"), data.get("image_stores"))
    if image_problems:
        raise ConfigError(image_problems)
    return out


def _check_rank_images(pin: dict, expected: object, stores: object) -> tuple[dict, dict, list[str]]:
    """(expected image ID per rank, image store per rank, problems).

    Docker names one image two ways: a classic store reports the config digest (the pin's
    ``image_id``), the containerd image store the manifest digest (the pin's
    ``image_manifest_digest``). A rank may be expected to run either, nothing else; when its
    store is known the ID must be the one that store reports.
    """
    image_id, manifest = pin["image_id"], pin.get("image_manifest_digest")
    problems = []
    if expected is None:
        expected = {rank: image_id for rank in RANKS}
    elif not isinstance(expected, dict) or set(expected) != set(RANKS):
        problems.append(f"expected_image_ids must map exactly head and worker to an image ID, not {expected!r}")
        expected = {rank: image_id for rank in RANKS}
    if stores is None:
        stores = {rank: None for rank in RANKS}
    elif not isinstance(stores, dict) or set(stores) != set(RANKS):
        problems.append(f"image_stores must map exactly head and worker to classic, containerd or null, not {stores!r}")
        stores = {rank: None for rank in RANKS}
    pinned_manifest = manifest if manifest else "(the pin has none)"
    for rank in RANKS:
        want, store = expected[rank], stores[rank]
        if store is not None and store not in IMAGE_STORES:
            problems.append(f"image_stores.{rank} must be classic, containerd or null, not {store!r}")
            continue
        if store == "containerd" and not manifest:
            problems.append(f"image_stores.{rank} is containerd, where Docker reports an image's manifest digest as "
                            "its ID, but the pin has no image_manifest_digest: pin it, or serve from a classic image "
                            "store")
            continue
        if not isinstance(want, str) or want not in (image_id, manifest):
            problems.append(f"expected_image_ids.{rank} {_show(want)} is neither the pin's image_id {image_id} nor "
                            f"its image_manifest_digest {pinned_manifest}")
            continue
        if store == "classic" and want != image_id:
            problems.append(f"expected_image_ids.{rank} is {want}, but a classic image store names the pinned image "
                            f"by the pin's image_id {image_id}")
        elif store == "containerd" and want != manifest:
            problems.append(f"expected_image_ids.{rank} is {want}, but a containerd image store names the pinned "
                            f"image by the pin's image_manifest_digest {manifest}")
    return dict(expected), dict(stores), problems


def load_config(text: str | bytes) -> dict:
    """Parse (strictly) and validate a gate configuration file's content."""
    try:
        data = strict_loads(text)
    except StrictJSONError as exc:
        raise ConfigError([f"not strict JSON: {exc}"]) from None
    return check_config(data)


# ============================================================================================
# the audit's record, answering the gate's reads
# ============================================================================================
def recorded_run(runtime: Mapping, container: str) -> Run:
    """``run(argv)`` answering the gate's reads of one rank from that rank's record - the
    ``runtime`` section of one ``gb10.dspark.rank_audit`` call, the fleet audit's own collector -
    as the docker CLI answered them: the container and image inspect, the two reads inside the
    container (PID 1 environment, manifest sha256) and the log tail. A read the record does not
    hold fails (exit 127); a rank whose call failed (``errors.call``) fails every read with that
    reason. The checks themselves are :func:`collect_identity` and :func:`collect_logs`."""
    errors = runtime.get("errors") if isinstance(runtime.get("errors"), Mapping) else {}
    unread = errors.get("call")

    def piece(key: str) -> tuple[int, str, str]:
        got = runtime.get(key)
        if not isinstance(got, Mapping):
            return 1, "", str(unread or f"the rank's record has no {key}")
        rc = got.get("rc")
        return (rc if isinstance(rc, int) and not isinstance(rc, bool) else 1,
                str(got.get("stdout") or ""), str(got.get("stderr") or ""))

    def run(argv: list[str]) -> tuple[int, str, str]:
        if unread:
            return 1, "", str(unread)
        if argv == ["docker", "container", "inspect", container]:
            found = runtime.get("container")
            if isinstance(found, Mapping):
                return 0, json.dumps([found]), ""
            return 1, "", str(errors.get("container") or f"Error: No such container: {container}")
        if argv[:3] == ["docker", "image", "inspect"] and len(argv) == 4:
            image = runtime.get("image")
            if isinstance(image, Mapping) and image.get("Id") == argv[3]:
                return 0, json.dumps([image]), ""
            return 1, "", str(errors.get("image") or f"Error: No such image: {argv[3]}")
        if argv[:3] == ["docker", "exec", container]:
            inner = argv[3:]
            if inner[:3] == [PYTHON, "-c", PID1_ENV_CODE]:
                return piece("pid1_env")
            if inner[:3] == [PYTHON, "-c", SHA256_CODE]:
                return piece("manifest_sha256")
        if argv[:3] == ["docker", "logs", "--tail"] and argv[4:] == [container]:
            return piece("logs")
        return 127, "", f"the rank's record does not answer {shlex.join(argv)}"

    return run


# ============================================================================================
# the document
# ============================================================================================
def _evidence(profile: object, implementation: object) -> dict:
    return {"profile": profile, "expected_cudagraph_implementation": implementation, "runtime_identity": None,
            "models": None, "semantic": None, "tool_call": None, "retrieval": None, "runtime_logs": None}


def make_document(evidence: dict, errors: list[str]) -> dict:
    """The schema-3 document: PASS if and only if there are no errors."""
    return {"schema_version": SCHEMA_VERSION, "status": "FAIL" if errors else "PASS", "evidence": evidence,
            "errors": list(errors)}


def failure_document(errors: list[str], profile: object = None, implementation: object = None,
                     secrets: Iterable[str] = ()) -> dict:
    """A FAIL document for a gate that could not run at all (every section null)."""
    errors = list(errors) or ["the runtime gate did not run"]
    return redact(make_document(_evidence(profile, implementation), errors), secrets)  # type: ignore[return-value]


@dataclass
class StepResult:
    section: object
    errors: list[str]


API_STEPS = ("models", "semantic", "tool_call", "retrieval")
STEPS = ("identity:head", "identity:worker", "cross_rank", *API_STEPS, "usage", "logs:head", "logs:worker")
_DEPENDS = {
    # API canaries first, so that at least one graph replay has been logged (docs/wrapper-reference.md
    # §5.4); then each rank is read once (identity and logs from one record, see recorded_run).
    "identity:head": API_STEPS,
    "identity:worker": API_STEPS,
    "cross_rank": ("identity:head", "identity:worker"),
    "usage": ("semantic", "tool_call", "retrieval"),
    "logs:head": ("identity:head", "identity:worker", *API_STEPS),
    "logs:worker": ("identity:head", "identity:worker", *API_STEPS),
}


class Gate:
    """The gate's steps over injected I/O: ``runners`` maps ``head``/``worker`` to a ``run(argv)``
    on that rank, ``fetch`` calls the head's API. Each step runs once; :meth:`document` assembles
    the schema-3 result from whatever ran."""

    def __init__(self, config: dict, runners: Mapping[str, Run], fetch: Fetch, secrets: Iterable[str] = ()):
        self.config = config
        self.runners = runners
        self.fetch = fetch
        self.secrets = [s for s in secrets if s]
        self.results: dict[str, StepResult] = {}
        self._bodies: dict[str, object] = {}

    # ---- steps ---------------------------------------------------------------------------------
    def step(self, name: str) -> list[str]:
        """Run step ``name`` (and what must come before it) once; its errors."""
        if name not in STEPS:
            raise KeyError(f"unknown gate step {name!r}")
        if name not in self.results:
            for before in _DEPENDS.get(name, ()):
                self.step(before)
            try:
                section, errors = self._run_step(name)
            except GateError as exc:
                section, errors = None, [str(exc)]
            except Exception as exc:  # a step that threw: its section is null, the text goes to errors
                section, errors = None, [f"{name} step failed: {type(exc).__name__}: {exc}"]
            self.results[name] = StepResult(redact(section, self.secrets), redact(errors, self.secrets))  # type: ignore[arg-type]
        return self.results[name].errors

    def run_all(self) -> None:
        for name in STEPS:
            self.step(name)

    def _run_step(self, name: str) -> tuple[object, list[str]]:
        kind, _sep, rank = name.partition(":")
        cfg = self.config
        if kind == "identity":
            return collect_identity(rank, self.runners[rank], cfg)
        if kind == "logs":
            return collect_logs(rank, self.runners[rank], cfg)
        if name == "cross_rank":
            return None, cross_rank_errors(self.results["identity:head"].section,  # type: ignore[arg-type]
                                           self.results["identity:worker"].section,  # type: ignore[arg-type]
                                           cfg.get("expected_image_ids"))
        if name == "models":
            body = api_call(self.fetch, "GET", "/v1/models", None, cfg["api_timeout"], "model list")
            return evaluate_models(body, cfg["model"])
        if name == "usage":
            errors = []
            for canary in ("semantic", "tool_call", "retrieval"):
                if canary in self._bodies:
                    errors += usage_errors(canary.replace("_call", ""), self._bodies[canary])
            if not self._bodies:
                errors.append("head API usage could not be checked: no canary answered")
            return None, errors
        request, evaluate, timeout = {
            "semantic": (semantic_request, evaluate_semantic, cfg["api_timeout"]),
            "tool_call": (tool_request, evaluate_tool, cfg["api_timeout"]),
            "retrieval": (retrieval_request, evaluate_retrieval, cfg["retrieval_timeout"]),
        }[name]
        body = api_call(self.fetch, "POST", "/v1/chat/completions", request(cfg["model"]), timeout,
                        f"{name.replace('_call', '')} canary")
        self._bodies[name] = body
        return evaluate(body)

    # ---- result --------------------------------------------------------------------------------
    def section(self, name: str) -> object:
        result = self.results.get(name)
        return None if result is None else result.section

    def errors(self) -> list[str]:
        """Every error, in step order; a step that never ran is an error too (fail closed)."""
        out = []
        for name in STEPS:
            result = self.results.get(name)
            out += [f"{name} was not checked"] if result is None else result.errors
        return out

    def document(self) -> dict:
        cfg = self.config
        evidence = _evidence(cfg["profile"], cfg["expected_cudagraph_implementation"])
        identities = {rank: self.section(f"identity:{rank}") for rank in RANKS}
        logs = {rank: self.section(f"logs:{rank}") for rank in RANKS}
        for rank, identity in identities.items():
            line = logs[rank].get("authoritative_cuda_graph_runtime") if isinstance(logs[rank], dict) else None
            if isinstance(identity, dict):
                identity["cudagraph_mode"] = line.get("mode") if isinstance(line, dict) else None
        if any(v is not None for v in identities.values()):
            evidence["runtime_identity"] = identities
        if any(v is not None for v in logs.values()):
            evidence["runtime_logs"] = logs
        for name in API_STEPS:
            evidence[name] = self.section(name)
        return redact(make_document(evidence, self.errors()), self.secrets)  # type: ignore[return-value]


def summary_line(document: dict, output: str) -> str:
    return f"RUNTIME_GATE status={document['status']} errors={len(document['errors'])} output={output}"
