# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtime gate's reading of an engine's log: the markers a run must show and must not show (per CUDA-graph
implementation), the engine's echo of its own arguments left out, and the authoritative runtime line of its worker
process.

Split from :mod:`._runtime_gate`, which reads each rank's log through it (:func:`collect_logs`)."""
from __future__ import annotations

import re
from collections.abc import Iterable

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin
from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_text
from ansible_collections.gb10.dspark.plugins.module_utils.gate._runtime_gate_base import (
    GateError,
    IMPLEMENTATIONS,
    Run,
    _excerpt,
    _show,
)


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
