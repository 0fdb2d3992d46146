# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where an engine is in its start-up, read from its own log lines (vLLM's formats).

A cold start of the real engine takes 12 to 60 minutes; an operator who sees nothing for that long
presses Ctrl-C. :func:`phase_of` turns a rank's log tail into one phase (launched, joined, loading
weights n/N, KV cache sized, capturing CUDA graphs n/N, API up, ...), for the readiness wait's
progress lines.

Start-up phases only move forward, and vLLM writes its log lines to stdout and its progress bars
to stderr, so the order of lines in a tail that joins the two streams says little: the phase is
the furthest one any line reaches. A counted phase (n/N) shows its latest bar: the bars, all on
stderr, keep their order. A line that
matches nothing is ignored, so a new vLLM with other wording shows an earlier phase, never a wrong
later one.

Standard library only; it runs on the control node.
"""
from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["PHASES", "Phase", "phase_of", "progress_bar"]


class _Rule(NamedTuple):
    key: str
    label: str
    pattern: re.Pattern


# In start-up order. Labels are what the operator reads; the patterns are vLLM's own lines
# (../docs/vllm-lane.md holds them to a real server).
_RULES: tuple[_Rule, ...] = (
    _Rule("launched", "launched", re.compile(
        r"Launching vLLM \(v[^)]*\) headless|Launching \d+ data parallel engine\(s\) in headless mode|"
        r"vLLM API server version|non-default args:")),
    _Rule("configured", "engine configured", re.compile(r"Initializing a V1 LLM engine")),
    _Rule("joined", "process group formed", re.compile(
        r"world_size=\d+ rank=\d+ .*backend=|ncclCommInitRank\S* .* Init COMPLETE")),
    _Rule("loading", "loading the model", re.compile(r"Starting to load model")),
    _Rule("weights", "loading weights", re.compile(
        r"Loading safetensors checkpoint shards:\s+\d+% Completed \| (\d+)/(\d+)")),
    _Rule("loaded", "model loaded", re.compile(r"Model loading took [\d.]+ GiB")),
    _Rule("kv_cache", "KV cache sized", re.compile(r"KV cache size: ([\d,]+) tokens")),
    _Rule("graphs", "capturing CUDA graphs", re.compile(r"Capturing CUDA graphs \([^)]*\):\s+\d+%\|.*\|\s*(\d+)/(\d+)")),
    _Rule("captured", "CUDA graphs captured", re.compile(r"Graph capturing finished in \d+ secs|Cudagraph is disabled")),
    _Rule("initialised", "engine initialised", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    _Rule("api_starting", "API starting", re.compile(r"Starting vLLM (API )?server( \d+)? on http")),
    _Rule("api_up", "API up", re.compile(r"Application startup complete")),
)

PHASES: tuple[str, ...] = ("starting",) + tuple(rule.key for rule in _RULES)

_ERROR = re.compile(r"Traceback \(most recent call last\)|^\s*(\([^)]* pid=\d+[^)]*\)\s*)?ERROR\b|\b[\w.]*(Error|Exception): ")


class Phase(NamedTuple):
    key: str            # one of PHASES
    label: str          # for the operator: "loading weights"
    done: int | None    # n of n/N, for counted phases
    total: int | None   # N of n/N
    detail: str | None  # "425,424 tokens" for the KV cache
    error: str | None   # the last error line seen, if any

    def text(self) -> str:
        out = self.label
        if self.total:
            out += f" {self.done}/{self.total}"
        if self.detail:
            out += f" ({self.detail})"
        return out


def phase_of(lines: list[str]) -> Phase:
    """The furthest start-up phase the log lines show (``starting`` when none)."""
    best = -1
    counts: dict[str, tuple[int, int]] = {}
    detail: dict[str, str] = {}
    error = None
    for line in lines:
        if _ERROR.search(line):
            error = line.strip()[:200]
        for index, rule in enumerate(_RULES):
            match = rule.pattern.search(line)
            if not match:
                continue
            if rule.key in ("weights", "graphs"):
                # the latest bar: progress bars all go to stderr, in order, and a second pass of
                # graph capture (decode, FULL) starts again from 0 with its own total
                counts[rule.key] = (int(match.group(1)), int(match.group(2)))
            elif rule.key == "kv_cache":
                detail[rule.key] = f"{match.group(1)} tokens"
            best = max(best, index)
            break
    if best < 0:
        return Phase("starting", "starting", None, None, None, error)
    rule = _RULES[best]
    done, total = counts.get(rule.key, (None, None))
    return Phase(rule.key, rule.label, done, total, detail.get(rule.key), error)


def progress_bar(done: int | None, total: int | None, width: int = 20) -> str:
    """``[########------------]`` for n/N; empty without a count."""
    if not total or done is None:
        return ""
    filled = max(0, min(width, round(width * done / total)))
    return "[" + "#" * filled + "-" * (width - filled) + "]"
