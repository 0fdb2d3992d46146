# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A release rolled out in waves (``playbooks/rollout.yml``): which pairs are the canary and which pairs each wave
takes (:func:`plan`), and what each step of the run did, per pair (:func:`report`, :func:`table`; the callback
``gb10.dspark.pair_summary`` writes it beside the run's pair summary, from the same rows).

A wave is a play's ``serial`` batch, counted in hosts: two per pair. The plan lists each pair's head then its
worker, pair after pair, so that a batch of ``2 x wave_pairs`` hosts always holds whole pairs (the pair barrier
refuses a batch that splits one). A host that forms no pair (an inventory the topology refuses) goes with the
canary, whose topology then refuses the run before any pair is touched.

Standard library only.
"""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import host_records, pairs_of
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._run_summary import NOT_STARTED, PASS

CANARY, STAGE, WAVE = "canary", "stage", "wave"
SKIPPED = "SKIPPED"  # a pair that had failed in an earlier step: the step did nothing on it


def _count(value, name: str, minimum: int) -> int:
    if isinstance(value, bool):
        value = None
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        number = None
    if number is None or number < minimum:
        raise ValueError(f"{name} is {value!r}, expected a whole number of pairs, {minimum} or more")
    return number


def plan(records: list[dict], canary_pairs, wave_pairs) -> dict:
    """The rollout of the play's hosts. ``records``: one per host (``_pair.host_records``), in the play's order.

    Returns ``{"canary": [pair, ...], "waves": [[pair, ...], ...], "canary_hosts": [...], "rest_hosts": [...],
    "wave_hosts": 2 x wave_pairs}``: the first ``canary_pairs`` pairs by name are the canary, the others follow in
    waves of ``wave_pairs`` pairs; each host list holds every pair's head then its worker. ValueError names a
    setting that is not a count."""
    canary_n = _count(canary_pairs, "dspark_rollout_canary_pairs", 1)
    wave_n = _count(wave_pairs, "dspark_rollout_wave_pairs", 1)
    pair_of = pairs_of(records)
    rank_of = {str(r.get("name")): r.get("rank") for r in records}
    members: dict[str, list[str]] = {}
    unplaced = []
    for record in records:
        name = str(record.get("name"))
        if name in pair_of:
            members.setdefault(pair_of[name], []).append(name)
        else:
            unplaced.append(name)
    pairs = sorted(members)
    for pair in pairs:
        members[pair].sort(key=lambda n: (rank_of.get(n) != 0, n))
    canary, rest = pairs[:canary_n], pairs[canary_n:]
    return {
        "canary": canary,
        "waves": [rest[i:i + wave_n] for i in range(0, len(rest), wave_n)],
        "canary_hosts": [h for p in canary for h in members[p]] + unplaced,
        "rest_hosts": [h for p in rest for h in members[p]],
        "wave_hosts": 2 * wave_n,
    }


def canary_problem(batch, canary_hosts, hostvars, passed_var: str = "__dspark_rollout_canary_passed") -> str | None:
    """Why the pairs of ``batch`` must not be touched: a canary host (``canary_hosts``) that did not reach the end of
    the canary play (its ``passed_var`` is not true in ``hostvars``). None when every canary rank passed."""
    def passed(host):
        hv = hostvars.get(host) if hasattr(hostvars, "get") else None
        return bool(hv.get(passed_var)) if hasattr(hv, "get") else False

    canary = [str(h) for h in canary_hosts or []]
    if not canary:
        return "no canary pair ran (dspark_rollout_canary_pairs), expected one or more to pass before any other pair"
    failed = [h for h in canary if not passed(h)]
    if not failed:
        return None
    pair_of = pairs_of(host_records(canary + [str(h) for h in batch or []], hostvars))
    bad = sorted({pair_of.get(h, h) for h in failed})
    waiting = sorted({pair_of.get(str(h), str(h)) for h in batch or []})
    return (f"pair {', '.join(waiting)} not started: the canary pair {', '.join(bad)} did not pass (provision, gate "
            f"and serving guard), expected every canary pair to pass before any other pair is touched; the rollout "
            f"halts and no other pair is touched (the pair summary gives the canary's reason)")


def report(steps: list[dict], rows: list[dict], planned: dict | None = None) -> dict:
    """What the rollout did, step by step: ``steps`` as the callback saw them, in order, each
    ``{"kind": canary|stage|wave, "hosts": [...], "started": ..., "ended": ..., "failed": {host: ...}}`` (the hosts of
    its batch, and the hosts that failed during it); ``rows``: the run's pair summary (``_run_summary.rows``), which
    gives each pair's ranks and its verdict; ``planned``: :func:`plan`'s result, for the pairs no step reached.

    Each step lists its pairs with the verdict the step gave them: the summary's verdict and reason for a pair that
    failed in this step, ``SKIPPED`` for one that had failed before it, ``PASS`` otherwise. The waves are numbered
    from 1; ``not_started`` names the planned pairs that no canary or wave step took (the rollout halted first), and
    ``halted`` says why."""
    pair_of = {rank: row["pair"] for row in rows for rank in row.get("ranks") or []}
    by_pair = {row["pair"]: row for row in rows}
    failed_before: set[str] = set()
    out_steps = []
    wave_no = 0
    reached: set[str] = set()
    for step in steps:
        hosts = [str(h) for h in step.get("hosts") or []]
        pairs = sorted({pair_of.get(h, h) for h in hosts})
        failed_here = {pair_of.get(str(h), str(h)) for h in step.get("failed") or {}}
        entries = []
        for pair in pairs:
            row = by_pair.get(pair, {})
            if pair in failed_before:
                entries.append({"pair": pair, "verdict": SKIPPED, "reason": "failed in an earlier step"})
            elif pair in failed_here:
                entries.append({"pair": pair, "verdict": row.get("verdict", "FAILED"), "phase": row.get("phase"),
                                "rank": row.get("rank"), "reason": row.get("reason", "")})
            else:
                entries.append({"pair": pair, "verdict": PASS})
        failed_before |= failed_here
        if step.get("kind") == WAVE:
            wave_no += 1
        if step.get("kind") in (CANARY, WAVE):
            reached |= {e["pair"] for e in entries if e["verdict"] not in (SKIPPED, NOT_STARTED)}
        out_steps.append({"step": step.get("kind"), "wave": wave_no if step.get("kind") == WAVE else None,
                          "pairs": entries, "started": step.get("started"), "ended": step.get("ended"),
                          "verdict": PASS if all(e["verdict"] in (PASS, SKIPPED) for e in entries) else "FAILED"})
    waves = (planned or {}).get("waves") or []
    planned_pairs = list((planned or {}).get("canary") or []) + [p for w in waves for p in w]
    # never taken by the canary or a wave, and not failed before (a pair whose staging failed is FAILED, not this)
    not_started = [p for p in planned_pairs
                   if p not in reached and by_pair.get(p, {}).get("verdict", NOT_STARTED) in (NOT_STARTED, PASS)]
    halted = None
    canary_steps = [s for s in out_steps if s["step"] == CANARY]
    if canary_steps and canary_steps[0]["verdict"] != PASS:
        bad = [e["pair"] for e in canary_steps[0]["pairs"] if e["verdict"] != PASS]
        halted = f"the canary pair {', '.join(bad)} did not pass: no other pair was touched"
    elif not_started:
        halted = f"the failure budget (dspark_fleet_max_failed_pairs) stopped the waves of {', '.join(not_started)}"
    return {"planned": {"canary": (planned or {}).get("canary"), "waves": (planned or {}).get("waves")},
            "steps": out_steps, "not_started": not_started, "halted": halted}


def table(doc: dict) -> str:
    """The lines the terminal shows: one per step, then why the rollout halted, if it did."""
    lines = ["ROLLOUT WAVES"]
    for step in doc["steps"]:
        name = f"wave {step['wave']}" if step["step"] == WAVE else step["step"]
        pairs = ", ".join(f"{e['pair']} {e['verdict']}" for e in step["pairs"])
        lines.append(f"  {name:<8}  {step.get('started') or '?'} -> {step.get('ended') or '?'}  {pairs}")
    if doc.get("not_started"):
        lines.append(f"  not started: {', '.join(doc['not_started'])}")
    if doc.get("halted"):
        lines.append(f"  HALTED: {doc['halted']}")
    return "\n".join(lines)
