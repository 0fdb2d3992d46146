# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtime gate's identity of one rank, and the two ranks compared: the engine's command read into flags
(compilation config, CUDA-graph selectors, eager mode), the container's and the image's inspect data, PID 1's
environment and the manifest's sha256 in the container, each against the pin and the profile.

Split from :mod:`._runtime_gate`, which runs it per rank (:func:`collect_identity`, :func:`cross_rank_errors`)."""
from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin
from ansible_collections.gb10.dspark.plugins.module_utils.engine._container_command import command_string
from ansible_collections.gb10.dspark.plugins.module_utils.engine._container_reads import pid1_env_argv, sha256_argv
from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_text
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import redact_document
from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import (
    StrictJSONError,
    canonical_json,
    json_equal,
    loads as strict_loads,
)
from ansible_collections.gb10.dspark.plugins.module_utils.gate._runtime_gate_base import (
    GateError,
    RANKS,
    Run,
    _HEX64,
    _excerpt,
    _show,
)


EXPECTED_ARCHITECTURE = "arm64"
# Pin keys whose image label the gate records in a rank's identity, in this order.
IMAGE_IDENTITY_KEYS = ("source_revision", "model_revision", "vllm_version", "integrated_vllm_commit")

LEGACY_SELECTOR = "VLLM_USE_BREAKABLE_CUDAGRAPH="
MULTI_STREAM = "VLLM_DSV4_ENABLE_MULTI_STREAM="
MULTI_STREAM_PINNED = ["VLLM_DSV4_ENABLE_MULTI_STREAM=0"]


_SHELLS = frozenset({"bash", "sh", "dash"})
_SHELL_SCRIPT_OPTION = re.compile(r"^-[a-z]*c[a-z]*$")


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
