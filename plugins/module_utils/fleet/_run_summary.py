# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The end of a run, per pair: the phase it reached, its verdict and the reason (the callback
``gb10.dspark.pair_summary`` prints it, writes it into the evidence folder, and ``dspark --json`` returns it).

A fleet is a set of independent pairs: a run goes on for every pair whose ranks did not fail, so its end is a
list of pairs, each ``PASS`` (no rank failed), ``FAILED`` (with the phase and the first rank's reason: the rank
that failed first, never the other rank that the pair's barrier then stopped), ``UNREACHABLE`` or ``NOT STARTED``
(the failure budget kept it from starting). The phase is the prefix of the collection's task names
(``Image | ...`` is the phase ``Image``).

Standard library only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PASS, FAILED, UNREACHABLE, NOT_STARTED = "PASS", "FAILED", "UNREACHABLE", "NOT STARTED"
NO_LOG = "(output hidden: no_log)"
REASON_LIMIT = 400


def phase_of(task_name: str | None) -> str:
    """``'Image | Load the archive ...'`` -> ``'Image'``; a task name without a phase is its own phase."""
    name = " ".join(str(task_name or "").split())
    head = name.split(" | ", 1)[0] if " | " in name else name
    # a role's task names read "gb10.dspark.image : Image | ...": keep the phase, not the role
    return head.rsplit(" : ", 1)[-1].strip() or "-"


@dataclass
class HostRecord:
    """What a run did on one host: the last phase it ran a task in, and its fatal failure."""
    phase: str | None = None
    failure: tuple[int, str, str] | None = None  # (sequence, phase, message) of its last failure
    unreachable: bool = False
    not_started: bool = False


@dataclass
class Recorder:
    """Fed by the callback, one event at a time, in the order they happen."""
    hosts: dict[str, HostRecord] = field(default_factory=dict)
    pairs: dict[str, dict] = field(default_factory=dict)  # the topology's dspark_play_pairs, merged
    everywhere: set = field(default_factory=set)  # hosts a run-wide failure ended
    seq: int = 0

    def _host(self, name: str) -> HostRecord:
        return self.hosts.setdefault(str(name), HostRecord())

    def ran(self, host: str, task_name: str | None, facts: dict | None = None) -> None:
        self._host(host).phase = phase_of(task_name)
        play_pairs = (facts or {}).get("dspark_play_pairs")
        if isinstance(play_pairs, dict):
            for pair, ranks in play_pairs.items():
                if isinstance(ranks, dict):
                    self.pairs[str(pair)] = {"head": ranks.get("head"), "worker": ranks.get("worker")}

    def failed(self, host: str, task_name: str | None, message: str, not_started: bool = False) -> None:
        self.seq += 1
        record = self._host(host)
        record.phase = phase_of(task_name)
        record.failure = (self.seq, record.phase, message)
        record.not_started = not_started

    def failed_everywhere(self, hosts, task_name: str | None, message: str) -> None:
        """A run-wide failure (a ``run_once`` or ``any_errors_fatal`` task): Ansible ends every host of the play
        with it, though only one host reports it."""
        for host in hosts:
            if self._host(host).failure is None or self._host(host).failure[0] < self.seq:
                self.failed(host, task_name, message)
                self.everywhere.add(str(host))

    def unreachable(self, host: str, task_name: str | None, message: str) -> None:
        self.failed(host, task_name, message)
        self._host(host).unreachable = True


def one_line(text: object, limit: int = REASON_LIMIT) -> str:
    flat = " ".join(str(text if text is not None else "").split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def result_message(result: dict | None) -> str:
    """A failed result's message on one line, never a no_log result's."""
    result = result if isinstance(result, dict) else {}
    if result.get("_ansible_no_log") or "censored" in result:
        return NO_LOG
    return one_line(result.get("msg") or result.get("reason") or result.get("stderr") or "failed")


def rows(recorder: Recorder, failed_hosts, unreachable_hosts) -> list[dict]:
    """One row per pair of the run (the topology's pairs; a host the topology never placed stands for itself):
    ``{pair, verdict, phase, rank, reason, ranks}``. ``failed_hosts`` and ``unreachable_hosts`` are the hosts
    the run ended with as failed (Ansible's stats: a rescued failure is not one)."""
    failed_hosts = set(map(str, failed_hosts)) | recorder.everywhere
    unreachable_hosts = set(map(str, unreachable_hosts))
    if not recorder.pairs and not failed_hosts and not unreachable_hosts:
        return []  # a run that works on no pairs (the simulator's smoke play) and ended well has nothing to sum up
    groups = {pair: [str(n) for n in (ranks.get("head"), ranks.get("worker")) if n]
              for pair, ranks in recorder.pairs.items()}
    placed = {name for members in groups.values() for name in members}
    for name in sorted(set(recorder.hosts) | failed_hosts | unreachable_hosts):
        if name not in placed and name not in ("localhost",):
            groups.setdefault(name, [name])
    out = []
    for pair in sorted(groups):
        members = groups[pair]
        ended = [m for m in members if m in failed_hosts or m in unreachable_hosts]
        records = {m: recorder.hosts.get(m, HostRecord()) for m in members}
        phases = [records[m].phase for m in members if records[m].phase]
        row = {"pair": pair, "ranks": members, "verdict": PASS, "phase": phases[0] if phases else "-",
               "rank": None, "reason": ""}
        if ended:
            first = min(ended, key=lambda m: (records[m].failure or (10 ** 12, "-", ""))[0])
            seq_phase_msg = records[first].failure or (0, records[first].phase or "-", "failed")
            row.update(phase=seq_phase_msg[1], rank=first, reason=seq_phase_msg[2])
            if all(records[m].not_started for m in ended):
                row["verdict"] = NOT_STARTED
            elif first in unreachable_hosts:
                row["verdict"] = UNREACHABLE
            else:
                row["verdict"] = FAILED
        out.append(row)
    return out


def table(summary: list[dict], playbook: str = "") -> str:
    """The lines the terminal shows, one per pair."""
    width = max([len(r["pair"]) for r in summary] + [4])
    lines = [f"PAIR SUMMARY{(' ' + playbook) if playbook else ''}: "
             f"{sum(r['verdict'] == PASS for r in summary)} of {len(summary)} pairs PASS"]
    for r in summary:
        where = f"phase {r['phase']}"
        reason = r["reason"] if str(r["reason"]).startswith(("rank ", "pair ")) else f"rank {r['rank']}: {r['reason']}"
        tail = f"; {reason}" if r["verdict"] != PASS else ""
        lines.append(f"  {r['pair']:<{width}}  {r['verdict']:<11}  {where}{tail}")
    return "\n".join(lines)
