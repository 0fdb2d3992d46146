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
"""
from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin
from ansible_collections.gb10.dspark.plugins.module_utils.engine._container_command import command_string
# PYTHON and the two codes are re-exported: the gate's tests and callers name them from here.
from ansible_collections.gb10.dspark.plugins.module_utils.engine._container_reads import (  # noqa: F401  # pylint: disable=unused-import
    PID1_ENV_CODE,
    PYTHON,
    SHA256_CODE,
    pid1_env_argv,
    sha256_argv,
)
from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_text
# Re-exported: the gate's test suite (roles/gate/files/runtime_gate) writes the document with it.
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import show
# REDACTED is re-exported: the gate's tests and its suite name the placeholder from here.
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import (  # noqa: F401  # pylint: disable=unused-import
    REDACTED,
    redact,
    redact_document,
)
from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import (
    StrictJSONError,
    canonical_json,
    json_equal,
    loads as strict_loads,
)

Run = Callable[[list[str]], tuple[int, str, str]]
Fetch = Callable[[str, str, "bytes | None", float], tuple[int, bytes]]

SCHEMA_VERSION = 3
RANKS = ("head", "worker")

IMPLEMENTATIONS = ("regular", "breakable")
CUDAGRAPH_MODES = ("FULL", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "PIECEWISE")
OPTIMIZATION_LEVELS = (2, 3)
PERFORMANCE_MODES = ("balanced", "throughput", "interactivity")
EXPECTED_ARCHITECTURE = "arm64"
# Pin keys whose image label the gate records in a rank's identity, in this order.
IMAGE_IDENTITY_KEYS = ("source_revision", "model_revision", "vllm_version", "integrated_vllm_commit")

LEGACY_SELECTOR = "VLLM_USE_BREAKABLE_CUDAGRAPH="
MULTI_STREAM = "VLLM_DSV4_ENABLE_MULTI_STREAM="
MULTI_STREAM_PINNED = ["VLLM_DSV4_ENABLE_MULTI_STREAM=0"]

# --- log markers (docs/wrapper-reference.md §5.4); matched as case-insensitive substrings of the engine's runtime lines
# (every log line except the echo of its own arguments and configuration, see ECHO_MESSAGE)
ALWAYS_REQUIRED = ("DSpark", _pin.KV_CACHE_DTYPE, "B12X", "NET/IB")
REQUIRED = {
    "regular": ("CUDA_GRAPH_RUNTIME", "requested=regular", "resolved=regular", "breakable=false",
                "enforce_eager=false", "CUDA_GRAPH_CAPTURE implementation=regular status=complete",
                "CUDA_GRAPH_REPLAY implementation=regular status=observed",
                "Capturing model for DSpark speculator..."),
    "breakable": ("CUDA_GRAPH_RUNTIME", "requested=breakable", "resolved=breakable", "breakable=true",
                  "enforce_eager=false", "Breakable CUDA graph enabled", "Capturing model for DSpark speculator...",
                  "CUDA_GRAPH_CAPTURE implementation=breakable status=complete",
                  "CUDA_GRAPH_REPLAY implementation=breakable status=observed"),
}
FORBIDDEN = {
    "regular": ("Breakable CUDA graph enabled", "implementation=breakable", "resolved=breakable",
                "enforce_eager=true", "Cudagraph is disabled under eager mode", "decode_mode=NONE",
                "fallback to eager", "fallback to breakable", "Marlin", "emulation",
                "CUDA_GRAPH_AUXILIARY implementation=regular component=dflash mode=eager",
                "does not support full CUDA graphs; running the draft eagerly"),
    "breakable": ("resolved=regular", "enforce_eager=true", "Cudagraph is disabled under eager mode",
                  "decode_mode=NONE", "fallback to eager", "Marlin", "emulation"),
}
AUTHORITATIVE_PROCESS = "Worker_TP"
RUNTIME_LINE = re.compile(
    r"CUDA_GRAPH_RUNTIME requested=(?P<requested>\S+) resolved=(?P<resolved>\S+) mode=(?P<mode>\S+) "
    r"decode_mode=(?P<decode_mode>\S+) breakable=(?P<breakable>true|false) "
    r"enforce_eager=(?P<enforce_eager>true|false) strict=(?P<strict>true|false)")
_RUNTIME_BOOLS = ("breakable", "enforce_eager", "strict")

# --- echo lines: the engine repeating what it was asked, not reporting what it did ------------
# At start-up vLLM logs its arguments and its resolved configuration once. Those lines hold the
# served model name (deepseek-v4-flash-dspark), the speculative method, the compilation config and
# so on: text the operator chose, which would satisfy the required marker "DSpark" whether or not
# the speculator ever ran, and which could trip a forbidden marker by a mere name. The markers are
# therefore looked for only in the other lines. An echo line is recognised by how its message
# starts (after the optional `docker logs --timestamps` stamp, process tag, level, date and
# [file.py:line] header), never by a word somewhere in it:
#   non-default args: {...}                          API server and headless worker (current vLLM)
#   Initializing a V1 LLM engine (vX) with config: …  engine core; "an LLM engine" in the V0 engine,
#                                                     and without "(vX)" in the oldest releases
#   args: Namespace(...)                             API server, older releases
#   vLLM API server version X [… args: …]            the API server's version banner
#   Launching vLLM (vX) headless …                   the headless worker's version banner
# The version banners echo the build's identity, not what the engine did: on the DSpark image the
# version itself says "dspark" (0.26.0+dspark.sm121.3), which would meet the "DSpark" marker
# even if the speculator never loaded. The image's identity is checked from its labels instead.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LOG_HEADER = re.compile(
    r"\s*(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\s+)?"  # docker --timestamps
    r"(?:\([^()]*\)\s+)?"                                         # (APIServer pid=N) / (… pid=N, ip=…)
    r"(?:(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+)?"
    r"(?:\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+)?"
    r"(?:\[?[\w.-]+\.py:\d+\]\s+)?")
ECHO_MESSAGE = re.compile(
    r"non-default args: \{"
    r"|args: Namespace\("
    r"|vLLM API server version "
    r"|Launching vLLM \(v[^()]*\) headless"
    r"|Initializing an? (?:V1 )?LLM engine (?:\([^()]*\) )?with config: ")

# --- API canaries (docs/wrapper-reference.md §5.3) -----------------------------------------------------------------
SEMANTIC_PROMPT = "Compute 7 multiplied by 19. Reply with only the number."
SEMANTIC_ANSWER = "133"
TOOL_PROMPT = "Use get_weather for Paris."
TOOL_NAME = "get_weather"
RETRIEVAL_FILLER = "A deterministic context sentence for retrieval validation. "
RETRIEVAL_REPEAT = 900
RETRIEVAL_NEEDLE = "R0B0TLAB-DSVF-NVFP4-7319"
RETRIEVAL_QUESTION = "Reply with the secret code only."
NO_THINKING = {"thinking": False}

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SHELLS = frozenset({"bash", "sh", "dash"})
_SHELL_SCRIPT_OPTION = re.compile(r"^-[a-z]*c[a-z]*$")
_EXCERPT = 240


class GateError(Exception):
    """A check could not be carried out; the message names the rank and goes into ``errors``."""


class ConfigError(ValueError):
    """The gate configuration is unusable; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("gate config: " + "; ".join(self.problems))


# ============================================================================================
# small helpers
# ============================================================================================
def _show(value: object) -> str:
    """How the gate's messages show a value: :func:`_identity.show` in its ``json`` style."""
    return show(value, "json")


def _excerpt(text: object, limit: int = _EXCERPT) -> str:
    text = _show(text)
    return text if len(text) <= limit else text[:limit] + "…"


# ============================================================================================
# configuration
# ============================================================================================
_CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "pair": (str,), "head": (str,), "worker": (str,), "inventory": (str,), "container": (str,),
    "base_url": (str,), "model": (str,), "pin": (dict,), "profile": (str,),
    "expected_cudagraph_implementation": (str,), "expected_cudagraph_mode": (str,),
    "expected_compilation_config": (dict,), "optimization_level": (int,), "performance_mode": (str,),
    "manifest_path": (str,), "manifest_sha256": (str,), "check_architecture": (bool,), "output": (str,),
}
_CONFIG_OPTIONAL: dict[str, object] = {
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
# the container command
# ============================================================================================
def command_tokens(path: object, args: object) -> list[str]:
    """The argv the container runs, with a ``bash -lc '<script>'`` script tokenised shell-style.

    Docker keeps ``Path`` and ``Args`` as a list, so a direct ``vllm serve …`` argv is used as
    it is (re-splitting the space-joined string would break a JSON value); a shell script
    (``bash``/``sh``/``dash`` with a ``-c`` option) is split with :func:`shlex.split` in place.
    """
    if not isinstance(path, str) or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise GateError("container Path/Args are not strings")
    tokens = [path, *args]
    out: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        out.append(token)
        if os.path.basename(token) in _SHELLS:
            options = index + 1
            while options < len(tokens) and tokens[options].startswith("-"):
                out.append(tokens[options])
                options += 1
            if options > index + 1 and any(_SHELL_SCRIPT_OPTION.match(t) for t in tokens[index + 1:options]) \
                    and options < len(tokens):
                try:
                    out.extend(shlex.split(tokens[options]))
                except ValueError as exc:
                    raise GateError(f"the shell script of the command cannot be tokenised: {exc}") from None
                out.extend(tokens[options + 1:])
                return out
            index = options
            continue
        index += 1
    return out


def _flag_name(token: str) -> str:
    """``--some_flag[=v]`` → ``--some-flag`` (vLLM's FlexibleArgumentParser), else the token."""
    if token.startswith("--"):
        return token.partition("=")[0].replace("_", "-")
    return token


def _flag_values(tokens: list[str], long_flag: str, short_flag: str | None = None) -> list[str | None]:
    """Every value given to a flag: ``--flag v``, ``--flag=v``, ``--flag_name v``, and with a short
    flag also ``-X v`` and ``-Xv``. A flag with no value (the end, or another flag next) is None."""
    values: list[str | None] = []
    for index, token in enumerate(tokens):
        nxt = tokens[index + 1] if index + 1 < len(tokens) else None
        following = nxt if nxt is not None and not nxt.startswith("-") else None
        if token.startswith("--") and _flag_name(token) == long_flag:
            values.append(token.partition("=")[2] if "=" in token else following)
        elif short_flag and token == short_flag:
            values.append(following)
        elif short_flag and token.startswith(short_flag) and len(token) > len(short_flag) \
                and token[len(short_flag)] != ".":
            rest = token[len(short_flag):]
            values.append(rest[1:] if rest.startswith("=") else rest)
    return values


def compilation_config_occurrences(tokens: list[str]) -> list[str]:
    """Every token that sets the compilation config, in any spelling (``--compilation-config``,
    ``--compilation_config``, ``=value`` forms, ``-cc``, and the dotted ``-cc.key=value`` form)."""
    out = []
    for token in tokens:
        name = _flag_name(token)
        if name == "--compilation-config" or name.startswith("--compilation-config."):
            out.append(token)
        elif token.startswith("-cc"):
            out.append(token)
    return out


def parse_compilation_config(tokens: list[str]) -> dict:
    """The one compilation config of the command, strictly parsed (GateError otherwise).

    Exactly one token may set it, as ``--compilation-config <json>`` (or ``=<json>``, or
    ``-cc <json>``), and its value must be a strict JSON object (no duplicate keys, NaN or
    Infinity).
    """
    occurrences = compilation_config_occurrences(tokens)
    if not occurrences:
        raise GateError("the command has no --compilation-config")
    if len(occurrences) > 1:
        raise GateError(f"the command sets the compilation config {len(occurrences)} times; exactly one "
                        "--compilation-config is allowed")
    values = _flag_values(tokens, "--compilation-config", "-cc")
    value = values[0] if values else None
    if _flag_name(occurrences[0]).startswith(("--compilation-config.", "-cc.")):
        raise GateError("the compilation config is set with the dotted key=value form, not one JSON object")
    if value is None:
        raise GateError("--compilation-config has no value")
    try:
        parsed = strict_loads(value)
    except StrictJSONError as exc:
        raise GateError(f"--compilation-config is not strict JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise GateError("--compilation-config is not a JSON object")
    return parsed


def config_covers(actual: dict, expected: dict) -> bool:
    """True if ``actual`` equals ``expected`` or holds every expected key with an equal JSON value
    (a superset is allowed)."""
    return all(key in actual and json_equal(actual[key], value) for key, value in expected.items())


def flag_check(tokens: list[str], long_flag: str, short_flag: str | None, expected: object) -> tuple[object, bool]:
    """(the value the command gives the flag, whether it is present with exactly ``expected``).

    Present means at least one occurrence and every occurrence equal to ``expected`` (argparse
    keeps the last one; two different values are refused rather than guessed). The value is an
    int when it is all digits.
    """
    values = _flag_values(tokens, long_flag, short_flag)
    present = bool(values) and all(v == str(expected) for v in values)
    last = values[-1] if values else None
    if isinstance(last, str) and last.isdigit():
        return int(last), present
    return last, present


def enforce_eager_of(tokens: list[str]) -> bool:
    """Whether the command turns eager mode on (the last of ``--enforce-eager``/``--no-enforce-eager``)."""
    state = False
    for token in tokens:
        name = _flag_name(token)
        if name == "--enforce-eager":
            state = True
        elif name == "--no-enforce-eager":
            state = False
    return state


# ============================================================================================
# identity pieces
# ============================================================================================
def one_inspect(text: str, what: str) -> dict:
    """The single object of a ``docker … inspect`` answer (a one-element JSON list)."""
    try:
        data = strict_loads(text)
    except StrictJSONError as exc:
        raise GateError(f"{what} is not strict JSON: {exc}") from None
    if not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], dict):
        count = len(data) if isinstance(data, list) else type(data).__name__
        raise GateError(f"{what} did not return exactly one object (got {count})")
    return data[0]


def label_mismatches(labels: object, pin: dict) -> dict[str, dict]:
    """``{label: {expected, actual}}`` for every pinned label the image does not carry exactly."""
    labels = labels if isinstance(labels, dict) else {}
    out = {}
    for label, expected in _pin.expected_labels(pin).items():
        actual = labels.get(label)
        if actual != expected:
            out[label] = {"expected": expected, "actual": actual}
    return out


def pid1_env_entries(entries: Iterable[str]) -> tuple[list[str], list[str]]:
    """(legacy CUDA-graph selector entries, DSV4 multi-stream entries) of PID 1's environment."""
    entries = list(entries)
    return ([e for e in entries if e.startswith(LEGACY_SELECTOR)],
            [e for e in entries if e.startswith(MULTI_STREAM)])


def parse_pid1_answer(text: str) -> list[str]:
    """The JSON list of strings printed by :data:`PID1_ENV_CODE`."""
    try:
        data = strict_loads(text)
    except StrictJSONError as exc:
        raise GateError(f"the PID 1 environment answer is not strict JSON: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(e, str) for e in data):
        raise GateError("the PID 1 environment answer is not a list of strings")
    return data


def pid1_errors(rank: str, legacy: list[str], multi_stream: list[str]) -> list[str]:
    errors = []
    if legacy:
        errors.append(f"{rank} PID 1 retains legacy CUDA-graph selector: {', '.join(legacy)}")
    if multi_stream != MULTI_STREAM_PINNED:
        errors.append(f"{rank} PID 1 does not pin compile-safe DSV4 streams: expected "
                      f"{MULTI_STREAM_PINNED}, got {multi_stream}")
    return errors


def manifest_mount_read_only(mounts: object, path: str) -> tuple[bool, str]:
    """(exactly one mount has ``Destination == path`` and it has ``RW is False``, a description)."""
    mounts = mounts if isinstance(mounts, list) else []
    matching = [m for m in mounts if isinstance(m, dict) and m.get("Destination") == path]
    ok = len(matching) == 1 and matching[0].get("RW") is False
    described = ", ".join(f"RW={_show(m.get('RW'))}" for m in matching) or "none"
    return ok, f"{len(matching)} mount(s) at {path} ({described})"


def parse_sha256_answer(text: str) -> str:
    value = text.strip()
    if not _HEX64.match(value):
        raise GateError(f"the manifest checksum answer is not a sha256: {_excerpt(value, 80)!r}")
    return value


def _run(run: Run, argv: list[str], what: str) -> str:
    rc, out, err = run(argv)
    if rc != 0:
        detail = _excerpt((err or out or "").strip()) or "no output"
        raise GateError(f"{what} failed (exit {rc}): {detail}")
    return out


def _identity_template(config: dict) -> dict:
    return {
        "container_id": None, "image_id": None, "image_architecture": None, "source_revision": None,
        "model_revision": None, "vllm_version": None, "integrated_vllm_commit": None,
        "cudagraph_implementation": None, "cudagraph_mode_expected": config["expected_cudagraph_mode"],
        "enforce_eager": None, "serialized_compilation_config": None, "command_sha256": None,
        "compilation_config_present": False, "optimization_level": None, "optimization_level_present": False,
        "performance_mode": None, "performance_mode_present": False, "legacy_selector_pid1_entries": None,
        "dsv4_multi_stream_pid1_entries": None, "runtime_audit_manifest_sha256": None,
        "runtime_audit_manifest_read_only": False, "label_mismatches": None, "cudagraph_mode": None,
    }


def assess_container(rank: str, container: dict, config: dict, identity: dict) -> list[str]:
    """Fill ``identity`` from a ``docker container inspect`` object; the errors it shows."""
    errors = []
    pin = config["pin"]
    identity["container_id"] = container.get("Id")
    identity["image_id"] = container.get("Image")
    state = container.get("State") if isinstance(container.get("State"), dict) else {}
    if state.get("Running") is not True:
        errors.append(f"{rank} container {config['container']} is not running "
                      f"(status {_show(state.get('Status'))})")
    # The ID this rank's image store reports for the pinned image (check_config: the pin's
    # image_id, or its image_manifest_digest on a containerd store).
    want = (config.get("expected_image_ids") or {}).get(rank, pin["image_id"])
    if identity["image_id"] != want:
        errors.append(f"{rank} image ID mismatch: expected {want}, got {_show(identity['image_id'])}")

    ok, described = manifest_mount_read_only(container.get("Mounts"), config["manifest_path"])
    identity["runtime_audit_manifest_read_only"] = ok
    if not ok:
        errors.append(f"{rank} runtime audit manifest is not mounted read-only exactly once: "
                      f"expected one mount at {config['manifest_path']} with RW=false, got {described}")

    command = command_string(container.get("Path"), container.get("Args"))
    identity["command_sha256"] = sha256_text(command)
    try:
        # the collection's one variable rule: --api-key K, --api_key=K, VLLM_API_KEY=K, --hf-token K, ...
        tokens = redact_document(command_tokens(container.get("Path"), container.get("Args")))
    except GateError as exc:
        return errors + [f"{rank} {exc}"]
    identity["enforce_eager"] = enforce_eager_of(tokens)
    if identity["enforce_eager"]:
        errors.append(f"{rank} command enables --enforce-eager: expected CUDA graphs, got eager mode")
    try:
        actual = parse_compilation_config(tokens)
    except GateError as exc:
        errors.append(f"{rank} {exc}")
    else:
        identity["compilation_config_present"] = True
        identity["serialized_compilation_config"] = canonical_json(actual)
        impl = actual.get("cudagraph_implementation")
        identity["cudagraph_implementation"] = impl.lower() if isinstance(impl, str) else impl
        expected = config["expected_compilation_config"]
        if not config_covers(actual, expected):
            errors.append(f"{rank} compilation config mismatch: expected {canonical_json(expected)} "
                          f"(a superset is allowed), got {canonical_json(actual)}")
    level, identity["optimization_level_present"] = flag_check(tokens, "--optimization-level", "-O",
                                                               config["optimization_level"])
    identity["optimization_level"] = level
    if not identity["optimization_level_present"]:
        errors.append(f"{rank} optimization level mismatch: expected --optimization-level "
                      f"{config['optimization_level']}, got {_show(level)}")
    mode, identity["performance_mode_present"] = flag_check(tokens, "--performance-mode", None,
                                                            config["performance_mode"])
    identity["performance_mode"] = mode
    if not identity["performance_mode_present"]:
        errors.append(f"{rank} performance mode mismatch: expected --performance-mode "
                      f"{config['performance_mode']}, got {_show(mode)}")
    return errors


def assess_image(rank: str, image: dict, config: dict, identity: dict) -> list[str]:
    """Fill ``identity`` from a ``docker image inspect`` object; the errors it shows."""
    errors = []
    if image.get("Id") != identity["image_id"]:
        errors.append(f"{rank} image inspect answered for {_show(image.get('Id'))}, not the container's image "
                      f"{_show(identity['image_id'])}")
    identity["image_architecture"] = image.get("Architecture")
    # The pin names the architecture (arm64 for the frozen GB10 image; the simulator's stand-in
    # is built for the machine it runs on and its pin says so).
    expected_arch = (config.get("pin") or {}).get("image_architecture") or EXPECTED_ARCHITECTURE
    if config["check_architecture"] and identity["image_architecture"] != expected_arch:
        errors.append(f"{rank} image architecture mismatch: expected {expected_arch}, "
                      f"got {_show(identity['image_architecture'])}")
    labels = (image.get("Config") or {}).get("Labels") if isinstance(image.get("Config"), dict) else None
    labels = labels if isinstance(labels, dict) else {}
    for key in IMAGE_IDENTITY_KEYS:  # the labels are the pin's (_pin.LABEL_OF), never spelled here
        identity[key] = labels.get(_pin.LABEL_OF[key])
    identity["label_mismatches"] = label_mismatches(labels, config["pin"])
    for label, diff in identity["label_mismatches"].items():
        errors.append(f"{rank} image label mismatch: {label} expected {diff['expected']}, got {_show(diff['actual'])}")
    return errors


def collect_identity(rank: str, run: Run, config: dict) -> tuple[dict, list[str]]:
    """Every per-rank identity check of docs/wrapper-reference.md §5.2 through ``run``; (identity, errors).

    A piece that cannot be read leaves its fields null and adds its error; the other pieces
    are still checked.
    """
    identity = _identity_template(config)
    errors: list[str] = []
    name = config["container"]
    try:
        container = one_inspect(_run(run, ["docker", "container", "inspect", name], "docker container inspect"),
                                "docker container inspect")
    except GateError as exc:
        errors.append(f"{rank} {exc}")
    else:
        errors += assess_container(rank, container, config, identity)
        try:
            if not isinstance(identity["image_id"], str) or not identity["image_id"]:
                raise GateError(f"container {name} names no image")
            image = one_inspect(_run(run, ["docker", "image", "inspect", identity["image_id"]],
                                     "docker image inspect"), "docker image inspect")
        except GateError as exc:
            errors.append(f"{rank} {exc}")
        else:
            errors += assess_image(rank, image, config, identity)
    try:
        answer = _run(run, ["docker", "exec", name, *pid1_env_argv([LEGACY_SELECTOR, MULTI_STREAM])],
                      "reading the PID 1 environment")
        legacy, multi = pid1_env_entries(parse_pid1_answer(answer))
    except GateError as exc:
        errors.append(f"{rank} {exc}")
    else:
        identity["legacy_selector_pid1_entries"] = legacy
        identity["dsv4_multi_stream_pid1_entries"] = multi
        errors += pid1_errors(rank, legacy, multi)
    try:
        answer = _run(run, ["docker", "exec", name, *sha256_argv(config["manifest_path"])],
                      "hashing the runtime audit manifest")
        identity["runtime_audit_manifest_sha256"] = parse_sha256_answer(answer)
    except GateError as exc:
        errors.append(f"{rank} {exc}")
    else:
        if identity["runtime_audit_manifest_sha256"] != config["manifest_sha256"]:
            errors.append(f"{rank} runtime audit manifest checksum mismatch: expected {config['manifest_sha256']}, "
                          f"got {identity['runtime_audit_manifest_sha256']}")
    return identity, errors


def cross_rank_errors(head: dict | None, worker: dict | None, expected: Mapping[str, str] | None = None) -> list[str]:
    """Both ranks run the same image and the same compilation config.

    ``expected`` is the config's ``expected_image_ids``. When both ranks expect the same ID (one
    image store, the usual pair) they must report the identical ID. When they expect different
    IDs, the ranks use different image stores, which name the one pinned image differently (config
    digest vs manifest digest), so comparing the two raw IDs would fail a correct pair; instead
    each rank must report exactly its own expected ID. Both expected IDs were checked against the
    same pin (check_config), so both ranks then run the pinned image, which is what "the same
    image" means here.
    """
    if head is None or worker is None:
        return ["rank image IDs disagree: a rank's identity could not be read"]
    errors = []
    ids = {"head": head.get("image_id"), "worker": worker.get("image_id")}
    described = f"rank image IDs disagree: head {_show(ids['head'])}, worker {_show(ids['worker'])}"
    if expected is not None and expected.get("head") != expected.get("worker"):
        if any(ids[rank] != expected.get(rank) for rank in RANKS):
            errors.append(f"{described} (the ranks use different image stores; each must run the pinned image: "
                          f"head {_show(expected.get('head'))}, worker {_show(expected.get('worker'))})")
    elif not ids["head"] or ids["head"] != ids["worker"]:
        errors.append(described)
    if head.get("serialized_compilation_config") != worker.get("serialized_compilation_config"):
        errors.append(f"rank compilation configs disagree: head {_show(head.get('serialized_compilation_config'))}, "
                      f"worker {_show(worker.get('serialized_compilation_config'))}")
    return errors


# ============================================================================================
# logs
# ============================================================================================
def marker_sets(implementation: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(required markers including the always-required ones, forbidden markers)."""
    if implementation not in IMPLEMENTATIONS:
        raise GateError(f"unknown CUDA-graph implementation {implementation!r}")
    return REQUIRED[implementation] + ALWAYS_REQUIRED, FORBIDDEN[implementation]


def marker_hits(text: str, markers: Iterable[str]) -> dict[str, bool]:
    """``{marker: present}``, as case-insensitive substrings (of the runtime text, see :func:`split_echo`)."""
    folded = text.casefold()
    return {marker: marker.casefold() in folded for marker in markers}


def is_echo_line(line: str) -> bool:
    """Whether a log line is the engine echoing its arguments or configuration (:data:`ECHO_MESSAGE`)."""
    plain = _ANSI.sub("", line)
    header = _LOG_HEADER.match(plain)
    return ECHO_MESSAGE.match(plain, header.end() if header else 0) is not None


def split_echo(text: str) -> tuple[str, int]:
    """(the log's runtime lines joined by newlines, how many echo lines were left out)."""
    kept, excluded = [], 0
    for line in text.splitlines():
        if is_echo_line(line):
            excluded += 1
        else:
            kept.append(line)
    return "\n".join(kept), excluded


def authoritative_runtime(text: str) -> dict | None:
    """The last ``CUDA_GRAPH_RUNTIME …`` match among log lines containing ``Worker_TP``.

    The parent/API processes log the requested config before the backend's capability
    normalization, so only the worker's line is the truth. Echo lines never count.
    """
    found = None
    for line in text.splitlines():
        if is_echo_line(line):
            continue
        if AUTHORITATIVE_PROCESS not in line:
            continue
        for match in RUNTIME_LINE.finditer(line):
            found = match.groupdict()
    if found is None:
        return None
    return {key: (value == "true" if key in _RUNTIME_BOOLS else value) for key, value in found.items()}


def join_logs(stdout: str, stderr: str) -> str:
    """``docker logs`` stdout and stderr as one text (stdout first)."""
    if stdout and stderr and not stdout.endswith("\n"):
        return stdout + "\n" + stderr
    return stdout + stderr


def _first_line_with(text: str, marker: str, limit: int = 240) -> str:
    """The first runtime line (not an echo line) holding ``marker`` (case-insensitive), so a
    failure shows the evidence the marker was matched in."""
    needle = marker.casefold()
    for raw in text.splitlines():
        if needle in raw.casefold() and not is_echo_line(raw):
            return raw.strip()[:limit]
    return "?"


def _last_runtime_line(text: str, limit: int = 240) -> str:
    lines = [ln for ln in text.splitlines()
             if AUTHORITATIVE_PROCESS in ln and "CUDA_GRAPH_RUNTIME" in ln and not is_echo_line(ln)]
    return lines[-1].strip()[:limit] if lines else "?"


def assess_logs(rank: str, text: str, config: dict) -> tuple[dict, list[str]]:
    """The ``runtime_logs.<rank>`` section of a rank's log text, and its errors.

    Markers are matched in the runtime lines only; ``echo_lines_excluded`` records how many echo
    lines (:func:`is_echo_line`) were left out. ``log_bytes`` and ``log_sha256`` cover the whole
    text as read.
    """
    impl = config["expected_cudagraph_implementation"]
    required, forbidden = marker_sets(impl)
    runtime, excluded = split_echo(text)
    section = {
        "required": marker_hits(runtime, required),
        "forbidden": marker_hits(runtime, forbidden),
        "authoritative_cuda_graph_runtime": authoritative_runtime(runtime),
        "echo_lines_excluded": excluded,
        "log_bytes": len(text.encode("utf-8", "surrogateescape")),
        "log_sha256": sha256_text(text),
    }
    errors = [f"{rank} required runtime marker missing: {m}" for m, hit in section["required"].items() if not hit]
    errors += [f"{rank} forbidden runtime marker present: {m} (log: {_first_line_with(text, m)})"
               for m, hit in section["forbidden"].items() if hit]
    line = section["authoritative_cuda_graph_runtime"]
    if line is None:
        errors.append(f"{rank} authoritative CUDA_GRAPH_RUNTIME line missing: no {AUTHORITATIVE_PROCESS} line "
                      "reports the resolved CUDA-graph runtime")
        return section, errors
    if line["mode"] != config["expected_cudagraph_mode"]:
        errors.append(f"{rank} resolved CUDA-graph mode mismatch: expected {config['expected_cudagraph_mode']}, "
                      f"got {line['mode']} (log: {_last_runtime_line(text)})")
    if line["resolved"] != impl:
        errors.append(f"{rank} resolved CUDA-graph implementation mismatch: expected {impl}, got {line['resolved']}")
    if line["requested"] != impl:
        errors.append(f"{rank} requested CUDA-graph implementation mismatch: expected {impl}, got {line['requested']}")
    strict = config["expected_compilation_config"].get("cudagraph_strict")
    if isinstance(strict, bool) and line["strict"] is not strict:
        errors.append(f"{rank} CUDA-graph strict flag mismatch: expected {_show(strict)}, got {_show(line['strict'])}")
    return section, errors


def collect_logs(rank: str, run: Run, config: dict) -> tuple[dict, list[str]]:
    rc, out, err = run(["docker", "logs", "--tail", str(config["log_tail"]), config["container"]])
    if rc != 0:
        raise GateError(f"{rank} docker logs failed (exit {rc}): {_excerpt((err or out).strip()) or 'no output'}")
    return assess_logs(rank, join_logs(out, err), config)


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
# API canaries
# ============================================================================================
def semantic_request(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": SEMANTIC_PROMPT}], "temperature": 0,
            "max_tokens": 64, "chat_template_kwargs": dict(NO_THINKING)}


def tool_request(model: str) -> dict:
    tool = {"type": "function", "function": {
        "name": TOOL_NAME, "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    return {"model": model, "messages": [{"role": "user", "content": TOOL_PROMPT}], "tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}}, "temperature": 0,
            "max_tokens": 128, "chat_template_kwargs": dict(NO_THINKING)}


def retrieval_prompt() -> str:
    filler = RETRIEVAL_FILLER * RETRIEVAL_REPEAT
    return f"{filler}\nSecret code: {RETRIEVAL_NEEDLE}\n{filler}\n{RETRIEVAL_QUESTION}"


def retrieval_request(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": retrieval_prompt()}], "temperature": 0,
            "max_tokens": 48, "chat_template_kwargs": dict(NO_THINKING)}


def api_call(fetch: Fetch, method: str, path: str, body: dict | None, timeout: float, what: str = "API") -> object:
    """One head API call (``what`` names it in errors): HTTP 200 and a strict-JSON body, else GateError."""
    data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
    status, payload = fetch(method, path, data, timeout)
    if status != 200:
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(payload)
        raise GateError(f"head {what}: {method} {path} answered HTTP {status}: "
                        f"{_excerpt(text.strip()) or 'empty body'}")
    try:
        return strict_loads(payload)
    except StrictJSONError as exc:
        raise GateError(f"head {what}: {method} {path} answered invalid JSON: {exc}") from None


def evaluate_models(body: object, model: str) -> tuple[dict, list[str]]:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise GateError("head API /v1/models answer has no data list")
    ids = [entry.get("id") for entry in data if isinstance(entry, dict)]
    errors = [] if model in ids else [f"head API does not serve model {model}: served ids {ids}"]
    return {"ids": ids, "entries": data}, errors


def _first_choice(body: object, canary: str) -> dict:
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise GateError(f"head {canary} canary answer has no choices")
    return choices[0]


def _message(choice: dict, canary: str) -> dict:
    message = choice.get("message")
    if not isinstance(message, dict):
        raise GateError(f"head {canary} canary answer has no message")
    return message


def evaluate_semantic(body: object) -> tuple[dict, list[str]]:
    choice = _first_choice(body, "semantic")
    content = _message(choice, "semantic").get("content")
    finish = choice.get("finish_reason")
    ok = isinstance(content, str) and content.strip() == SEMANTIC_ANSWER and finish == "stop"
    errors = [] if ok else [f"head semantic canary failed: expected content {SEMANTIC_ANSWER} with finish_reason "
                            f"stop, got content {_excerpt(content)!r} with finish_reason {_show(finish)}"]
    return {"content": content, "finish_reason": finish, "pass": ok}, errors


def evaluate_tool(body: object) -> tuple[dict, list[str]]:
    message = _message(_first_choice(body, "tool"), "tool")
    calls = message.get("tool_calls") or []
    names = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            names.append(function.get("name"))
    ok = TOOL_NAME in names
    errors = [] if ok else [f"head tool canary did not call {TOOL_NAME}: got tool calls {names}"]
    return {"names": names, "pass": ok}, errors


def evaluate_retrieval(body: object) -> tuple[dict, list[str]]:
    choice = _first_choice(body, "retrieval")
    content = _message(choice, "retrieval").get("content")
    finish = choice.get("finish_reason")
    usage = body.get("usage") if isinstance(body, dict) else None
    ok = isinstance(content, str) and RETRIEVAL_NEEDLE in content and finish == "stop"
    errors = [] if ok else [f"head retrieval canary did not return the exact code naturally: expected "
                            f"{RETRIEVAL_NEEDLE} with finish_reason stop, got content {_excerpt(content)!r} "
                            f"with finish_reason {_show(finish)}"]
    return {"content": content, "finish_reason": finish, "usage": usage, "pass": ok}, errors


def usage_errors(canary: str, body: object) -> list[str]:
    """prompt_tokens + completion_tokens == total_tokens, all non-negative integers."""
    usage = body.get("usage") if isinstance(body, dict) else None
    prefix = f"head API usage is inconsistent: {canary} canary"
    if not isinstance(usage, dict):
        return [f"{prefix} answered no usage object"]
    values = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return [f"{prefix} usage.{key} is {_show(value)}, not a non-negative integer"]
        values[key] = value
    if values["prompt_tokens"] + values["completion_tokens"] != values["total_tokens"]:
        return [f"{prefix} prompt_tokens {values['prompt_tokens']} + completion_tokens "
                f"{values['completion_tokens']} != total_tokens {values['total_tokens']}"]
    return []


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
