"""Live progress and the end-of-run verdict of a `dspark` run, computed from ansible-runner events.

Nothing here prints a task result beyond its ``msg``: results may carry secrets, and a result marked
``no_log`` shows no message at all.
"""
from __future__ import annotations

import re
import sys
from typing import Callable, Mapping, TextIO

CONTROL = "control"
CONTROL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
MSG_LIMIT = 300
NO_LOG_MSG = "(output hidden: no_log)"
# Lines a long wait still prints itself (gb10.dspark.niah_wait's progress, unless its task runs it with
# progress_results): ansible-runner hands them on as ``verbose`` events. gb10.dspark.pair_ready's start-up
# phases and READY line come in its results instead, printed by the gb10.dspark.progress callback's own
# function (``texts``).
WAIT_LINE = re.compile(r"^\[(?P<host>[^\]\s]+)\] (?P<text>NIAH .*)$")
# Tasks whose result message is the point of the task: the gate's verdict, a summary.
SHOWN_ACTIONS = frozenset({"ansible.builtin.debug", "debug", "gb10.dspark.runtime_gate"})


def pair_map(inventory: Mapping | None, pairing=None) -> dict[str, str]:
    """Host -> pair name from an ``ansible-inventory --list`` document (its ``_meta.hostvars``), grouped by
    ``pairing``, the collection's ``_pair`` module (``main.collection_pairing``): the one grouping of hosts into
    pairs that the topology makes, never a second one here. Without it, no host has a pair."""
    hostvars = ((inventory or {}).get("_meta") or {}).get("hostvars") or {}
    if pairing is None or not isinstance(hostvars, Mapping):
        return {}
    return pairing.pairs_of(pairing.host_records([str(host) for host in hostvars], hostvars))


def pair_of(host: str, mapping: Mapping[str, str]) -> str:
    """The pair a host belongs to; the control node is ``control``, any other host stands for itself."""
    if host in mapping:
        return mapping[host]
    if host in CONTROL_HOSTS:
        return CONTROL
    return host


def one_line(value: object, limit: int = MSG_LIMIT) -> str:
    """A message on one line, at most ``limit`` characters."""
    if isinstance(value, (list, tuple)):
        value = "; ".join(str(v) for v in value)
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def result_msg(res: object) -> str:
    if not isinstance(res, Mapping):
        return ""
    if res.get("_ansible_no_log") or "censored" in res:  # ansible-runner replaces no_log results by {censored}
        return NO_LOG_MSG
    msg = res.get("msg")
    return "" if msg in (None, "") else one_line(msg)


class Progress:
    """ansible-runner ``event_handler``: one line per host result, flushed, and ``== <play>`` per play.

    Returns True for every event so that ansible-runner still writes it to ``job_events`` (the run's
    stats are read back from there).

    ``texts`` is the gb10.dspark.progress callback's function from a task result to its progress lines
    (``main.collection_progress``): the start-up phases and READY line of a pair's wait, which come as
    retries (``runner_retry``) and in the wait's last result. Without it they are not shown.
    """

    def __init__(self, mapping: Mapping[str, str] | None = None, out: TextIO | None = None,
                 texts: Callable[[object], list] | None = None):
        self.mapping = dict(mapping or {})
        self.out = out
        self.texts = texts
        self.from_results: set[str] = set()  # hosts whose wait hands its lines over as results

    def _print(self, line: str) -> None:
        out = self.out if self.out is not None else sys.stdout
        print(line, file=out, flush=True)

    def lines(self, event: Mapping) -> list[str]:
        """The lines an event prints: a wait's progress lines (from the callback's ``texts``), then the
        event's own line."""
        shown = []
        data = event.get("event_data") or {}
        if self.texts is not None and event.get("event") in ("runner_retry", "runner_on_ok"):
            host = str(data.get("host") or "?")
            shown = [f"[{pair_of(host, self.mapping)}] {host} {one_line(text)}"
                     for text in self.texts(data.get("res") or {})]
            if shown:
                self.from_results.add(host)
        own = self.line(event)
        return shown + ([own] if own is not None else [])

    def line(self, event: Mapping) -> str | None:
        """The event's own line, or None."""
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            return f"== {data.get('play') or data.get('name') or '(unnamed play)'}"
        if kind == "playbook_on_no_hosts_matched":
            return "   (no hosts matched)"
        if kind == "verbose":
            match = WAIT_LINE.match(str(event.get("stdout") or "").strip())
            if not match:
                return None
            host = match["host"]
            if host in self.from_results:  # the progress callback's own copy of a line shown from its result
                return None
            return f"[{pair_of(host, self.mapping)}] {host} {one_line(match['text'])}"
        if kind not in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            return None  # runner_on_start, runner_on_skipped, items, stats, verbose output...
        host = str(data.get("host") or "?")
        task = data.get("task") or data.get("task_action") or "(unnamed task)"
        res = data.get("res") or {}
        msg = ""
        if kind == "runner_on_ok":
            status = "changed" if isinstance(res, Mapping) and res.get("changed") else "ok"
            if data.get("task_action") in SHOWN_ACTIONS:
                msg = result_msg(res)
        elif kind == "runner_on_failed" and data.get("ignore_errors"):
            status = "failed (ignored)"
        else:
            status = "FAILED" if kind == "runner_on_failed" else "UNREACHABLE"
            msg = result_msg(res)
        text = f"[{pair_of(host, self.mapping)}] {host} {status} {task}"
        return f"{text} -- {msg}" if msg else text

    def __call__(self, event: Mapping) -> bool:
        try:
            texts = self.lines(event)
        except Exception:  # a progress line must never break the run
            texts = []
        for text in texts:
            self._print(text)
        return True


def failing_hosts(stats: Mapping | None) -> dict[str, str]:
    """Host -> ``failed`` or ``unreachable`` from ansible-runner's ``stats``; hosts only ignored are fine."""
    found: dict[str, str] = {}
    if not stats:
        return found
    for host, count in (stats.get("failures") or {}).items():
        if count:
            found[host] = "failed"
    for host, count in (stats.get("dark") or {}).items():
        if count:
            found[host] = "unreachable"
    return found


def failing_pairs_line(stats: Mapping | None, mapping: Mapping[str, str]) -> str | None:
    """``failing pairs: p1 (h2: failed), control (localhost: unreachable)``, or None when no host failed."""
    hosts = failing_hosts(stats)
    if not hosts:
        return None
    by_pair: dict[str, list[str]] = {}
    for host in sorted(hosts):
        by_pair.setdefault(pair_of(host, mapping), []).append(f"{host}: {hosts[host]}")
    return "failing pairs: " + ", ".join(f"{pair} ({', '.join(items)})" for pair, items in sorted(by_pair.items()))


def _judge(status: str | None, rc: int | None, stats: Mapping | None, mapping: Mapping[str, str],
           canceled: bool, audit: Mapping | None) -> tuple[int, list[str], str | None]:
    """(exit code, failing pairs, the ``failing pairs`` line or None) of a run: one decision for the
    exit code, the printed line and the ``--json`` document."""
    if canceled or status == "canceled":
        return 130, [], None
    if isinstance(audit, Mapping):
        code = audit.get("exit_code")
        if isinstance(code, int) and not isinstance(code, bool) and code != 0:
            not_ok = [str(p) for p in audit.get("not_ok") or []]
            return code, not_ok, "failing pairs: " + (", ".join(not_ok) if not_ok else "(audit.json lists none)")
    if status == "successful" and rc == 0:
        return 0, [], None
    code = rc if isinstance(rc, int) and rc != 0 else 1
    pairs = sorted({pair_of(host, mapping) for host in failing_hosts(stats)})
    line = failing_pairs_line(stats, mapping)
    if line is None:
        line = f"failing pairs: none in the play recap (ansible-runner status {status}, rc {rc})"
    return code, pairs, line


def decide_exit(status: str | None, rc: int | None, stats: Mapping | None, mapping: Mapping[str, str],
                canceled: bool = False, audit: Mapping | None = None) -> tuple[int, str | None]:
    """The exit code of a run and the ``failing pairs`` line to print before exiting (None: print none).

    0 when ansible-runner says ``successful`` with rc 0; 130 when canceled; otherwise the playbook's rc
    (1 when that is 0 or missing). For the audit, a written ``audit.json`` whose ``exit_code`` is not 0
    decides: its exit code and its ``not_ok`` pairs.
    """
    code, _unused, line = _judge(status, rc, stats, mapping, canceled, audit)
    return code, line


def host_counts(stats: Mapping | None, mapping: Mapping[str, str]) -> dict[str, dict]:
    """Host -> its pair and its play-recap counts (ok, changed, failed, unreachable, skipped) from
    ansible-runner's ``stats``; empty without stats."""
    stats = stats or {}
    keys = {"ok": "ok", "changed": "changed", "failed": "failures", "unreachable": "dark", "skipped": "skipped"}
    hosts: set[str] = set()
    for key in (*keys.values(), "processed", "ignored", "rescued"):
        hosts.update(str(host) for host in (stats.get(key) or {}))
    counts = {}
    for host in sorted(hosts):
        row: dict = {"pair": pair_of(host, mapping)}
        for name, key in keys.items():
            value = (stats.get(key) or {}).get(host, 0)
            row[name] = value if isinstance(value, int) else 0
        counts[host] = row
    return counts


def failing_pairs(status: str | None, rc: int | None, stats: Mapping | None, mapping: Mapping[str, str],
                  canceled: bool = False, audit: Mapping | None = None) -> list[str]:
    """The pairs ``decide_exit``'s ``failing pairs`` line names, as a list (empty when none)."""
    return _judge(status, rc, stats, mapping, canceled, audit)[1]
