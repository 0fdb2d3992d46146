# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness wait of a pair, watched from both ranks at once (gb10.dspark.pair_ready).

Each rank's wait reads its own engine through its own Ansible connection (no rank reaches the
other, no SSH trust between them) and writes a small report - its container's state, its start-up
phase, its last log lines, and at the end its verdict - into a folder on the control node that
only this run's two waits of this pair share. The head's wait reads the worker's report, so it
fails within one interval when the worker's engine exits, and shows both ranks' phases; the
worker's wait ends with the head's verdict, so a failed start fails on both ranks.

The verdicts (:func:`head_verdict`, :func:`worker_verdict`) and the progress line are pure
functions of the reports; the action plugin only loops, probes and prints.

When the run has too few forks to watch both ranks at once, each wait goes on alone after
``peer_grace`` seconds instead of waiting for the other forever: the head judges readiness by its
API (the gate then checks both containers), the worker leaves while its engine runs.

Standard library only; it runs on the control node.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from typing import NamedTuple

from ansible_collections.gb10.dspark.plugins.module_utils.common._files import read_limited, write_json_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.engine._startup import Phase, progress_bar

__all__ = ["HEAD", "WORKER", "Verdict", "folder_for", "make_report", "write_report", "read_report",
           "head_verdict", "worker_verdict", "progress_line", "logs_text", "Progress", "stalled_message",
           "progress_record", "record_text", "RECORD_KIND"]

HEAD, WORKER = "head", "worker"
ERROR_SHOWN = 120  # characters of a rank's last error line in the progress line
READY, FAILED, LEFT = "ready", "failed", "left"


class Verdict(NamedTuple):
    final: str | None  # READY, FAILED, LEFT (a worker going on alone), or None: keep waiting
    msg: str | None


def folder_for(base: str, task_id: str, pair: str) -> str:
    """The folder the two waits of one pair share: under the run's own temporary folder on the
    control node (Ansible removes it when the run ends), one per task and pair."""
    return os.path.join(base, "pair-ready-" + re.sub(r"[^A-Za-z0-9_.-]", "_", f"{pair}-{task_id}"))


def make_report(role: str, host: str, container: dict, phase: Phase, now: float, log_lines: int,
                final: str | None = None, msg: str | None = None) -> dict:
    return {"role": role, "host": host, "t": now, "status": container.get("status"),
            "exists": bool(container.get("exists")), "running": bool(container.get("running")),
            "exit_code": container.get("exit_code"), "error": container.get("error"),
            "phase": phase.key, "phase_text": phase.text(), "done": phase.done, "total": phase.total,
            "log_error": phase.error, "logs": list(container.get("logs") or [])[-log_lines:] if log_lines else [],
            "progress": _progress_mark(phase, container.get("logs") or []), "final": final, "msg": msg}


def _progress_mark(phase: Phase, logs: list) -> str:
    """What moves while a rank makes progress: its phase, the phase's count, and its newest log line."""
    last = str(logs[-1]) if logs else ""
    return hashlib.sha256(f"{phase.key}|{phase.done}|{last}".encode()).hexdigest()[:16]


class Progress:
    """When each rank's progress mark last moved, as the head's wait saw it (monotonic seconds)."""

    def __init__(self):
        self.marks: dict[str, tuple[str | None, float]] = {}

    def see(self, role: str, report: dict | None, now: float) -> None:
        mark = (report or {}).get("progress")
        if role not in self.marks or self.marks[role][0] != mark:
            self.marks[role] = (mark, now)

    def quiet_for(self, role: str, now: float) -> float:
        return now - self.marks[role][1] if role in self.marks else 0.0


def stalled_message(head: dict, worker: dict | None, quiet: dict[str, float], bound: float, lines: int) -> str:
    """Neither rank moved (no new log line, no phase change) for ``bound`` seconds: name the one that
    went quiet first, both ranks' phases, and both ranks' last log lines."""
    ranks = [(HEAD, head)] + ([(WORKER, worker)] if worker is not None else [])
    first_role, first = max(ranks, key=lambda r: quiet.get(r[0], 0.0))
    phases = "; ".join(f"{role} {rep['host']} in {rep.get('phase_text')}, quiet {quiet.get(role, 0.0):.0f} s"
                       for role, rep in ranks)
    return (f"STALLED rank {first['host']}: the pair made no progress (no new log line, no phase change on either "
            f"rank) for {bound:.0f} s; the {first_role} went quiet first ({phases})\n{logs_text([head, worker], lines)}")


def write_report(folder: str, role: str, report: dict) -> None:
    write_json_atomic(os.path.join(folder, f"{role}.json"), report, mode=0o600, make_dirs=True)


def read_report(folder: str, role: str) -> dict | None:
    """The other rank's latest report, or None when it has written none (yet)."""
    try:
        doc = json.loads(read_limited(os.path.join(folder, f"{role}.json"), 1 << 20))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def logs_text(reports: list[dict | None], lines: int) -> str:
    parts = []
    for rep in reports:
        if not rep:
            continue
        parts.append(f"--- {rep['role']} {rep['host']} ({rep.get('status')}, exit {rep.get('exit_code')}), "
                     f"last {lines} log lines:")
        parts += list(rep.get("logs") or [])[-lines:] or ["(none)"]
    return "\n".join(parts)


def _missing(rep: dict) -> str:
    if rep.get("status") == "unknown":
        return f"rank {rep['host']}: its Docker engine cannot be read ({rep.get('error')}); nothing to wait for"
    return f"rank {rep['host']}: no engine container on the {rep['role']}; nothing to wait for"


def _exited(rep: dict, elapsed: float, reports: list[dict | None], lines: int) -> str:
    return (f"rank {rep['host']}: the pair's engine exited on {rep['role']} (exit {rep.get('exit_code')}) after "
            f"{elapsed:.0f} s before serving\n{logs_text(reports, lines)}")


def head_verdict(head: dict, worker: dict | None, api: dict, elapsed: float, budget: float, model: str,
                 lines: int, quiet: dict[str, float] | None = None, stall_timeout: float = 0.0) -> Verdict:
    """The head's verdict, from its own report, the API and the worker's latest report. ``quiet``: how
    long each rank's progress mark has not moved; with ``stall_timeout`` set, a pair where neither rank
    moved for that long fails as STALLED (a wedged rank: its container runs, nothing advances)."""
    both = [head, worker]
    if not head["exists"]:
        return Verdict(FAILED, _missing(head))
    if not head["running"]:
        return Verdict(FAILED, _exited(head, elapsed, both, lines))
    if worker is not None and worker.get("final") != LEFT:
        if worker.get("final") == FAILED and not worker["exists"]:
            return Verdict(FAILED, worker.get("msg") or _missing(worker))
        if worker["exists"] and not worker["running"]:
            return Verdict(FAILED, _exited(worker, elapsed, both, lines))
        if worker.get("final") == FAILED:
            return Verdict(FAILED, f"rank {worker['host']}: {worker.get('msg')}")
    if api.get("ready"):
        return Verdict(READY, f"READY served={model} kv_cache_size_tokens={api.get('kv_cache_size_tokens')} "
                              f"after {elapsed:.0f} s")
    if stall_timeout and quiet and min(quiet.values()) >= stall_timeout:
        return Verdict(FAILED, stalled_message(head, worker, quiet, stall_timeout, lines))
    if elapsed >= budget:
        return Verdict(FAILED, f"TIMEOUT rank {head['host']}: the pair did not serve {model} within {budget:.0f} s "
                               f"(API: {api.get('error') or api.get('status')})\n{logs_text(both, lines)}")
    return Verdict(None, None)


def worker_verdict(worker: dict, head: dict | None, now: float, elapsed: float, budget: float, peer_grace: float,
                   lines: int) -> Verdict:
    """The worker's verdict, from its own report and the head's latest one."""
    if not worker["exists"]:
        return Verdict(FAILED, _missing(worker))
    if not worker["running"]:
        return Verdict(FAILED, _exited(worker, elapsed, [head, worker], lines))
    if head is not None and head.get("final") == READY:
        return Verdict(READY, f"the head {head['host']} serves; this worker's engine runs")
    if head is not None and head.get("final") == FAILED:
        first = (head.get("msg") or "").splitlines()[0] if head.get("msg") else "no reason given"
        return Verdict(FAILED, f"the pair did not serve; the head's wait failed: {first}")
    if head is None and elapsed >= peer_grace:
        return Verdict(LEFT, f"the head's wait had not started after {elapsed:.0f} s (too few forks to watch both "
                             f"ranks at once?); the worker's engine runs, the head's wait judges the pair alone")
    if head is not None and now - float(head.get("t") or 0) >= peer_grace:
        return Verdict(FAILED, f"the head's wait stopped reporting {now - float(head.get('t') or 0):.0f} s ago; "
                               f"the pair's readiness is unknown")
    if elapsed >= budget + peer_grace:
        return Verdict(FAILED, f"TIMEOUT: the head's wait gave no verdict within {budget + peer_grace:.0f} s")
    return Verdict(None, None)


def _rank_text(role: str, rep: dict | None, show_bar: bool) -> str:
    if rep is None:
        return f"{role}: its wait has not reported yet"
    text = f"{role} {rep['phase_text']}"
    if show_bar and rep.get("total"):
        text += " " + progress_bar(rep.get("done"), rep.get("total"))
    if rep.get("final") == LEFT:
        text += " (its wait went on alone)"
    if rep.get("log_error"):
        text += f"; last error line: {rep['log_error'][:ERROR_SHOWN]}"
    return text


def progress_line(elapsed: float, budget: float, head: dict, worker: dict | None, show_bar: bool = False) -> str:
    """One line for the operator: time waited, and each rank's start-up phase."""
    return f"waited {elapsed:.0f}/{budget:.0f} s; {_rank_text(HEAD, head, show_bar)}; {_rank_text(WORKER, worker, show_bar)}"


def phase_key(rep: dict | None) -> str:
    """What must change for the operator to get a new line: the phase or its count."""
    return "" if rep is None else str(rep.get("phase_text"))


RECORD_KIND = "pair_wait"
# What of a rank's report the progress line shows (never its log lines: the record goes into the task's result).
_RECORD_FIELDS = ("phase_text", "done", "total", "final", "log_error")


def progress_record(elapsed: float, budget: float, head: dict, worker: dict | None, now: float) -> dict:
    """The head's progress report as data, for the gb10.dspark.progress callback to print with
    :func:`record_text` (engine/_progress.py): the time, the time waited, each rank's phase."""
    def slim(rep: dict | None) -> dict | None:
        if rep is None:
            return None
        out = {key: rep.get(key) for key in _RECORD_FIELDS}
        out["log_error"] = out["log_error"][:ERROR_SHOWN] if out["log_error"] else out["log_error"]
        return out
    return {"kind": RECORD_KIND, "t": now, "elapsed": elapsed, "budget": budget,
            HEAD: slim(head), WORKER: slim(worker)}


def record_text(record: dict, show_bar: bool = False) -> str:
    """``12:34:56 waited 5/600 s; head ...; worker ...``: the one format of a progress report (the
    clock is the control node's local time of the probe)."""
    clock = time.strftime("%H:%M:%S", time.localtime(float(record["t"])))
    return f"{clock} {progress_line(float(record['elapsed']), float(record['budget']), record[HEAD], record[WORKER], show_bar)}"
