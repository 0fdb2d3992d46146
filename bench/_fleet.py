"""Pure parts of the fleet benchmarks (bench/fleet.py): the run's pair summary read back, the control
node's CPU per pair fitted from runs on 1 to 8 pairs, the projection of a fleet audit to 100 and 1,000
pairs, the CPU table, and the "Control-node cost" section of docs/fleet-scale.md rendered from a run.

Also the serving capacity of a fleet during a release rollout, from the sampler's samples and the rollout's per-wave
report. Nothing here touches the simulator, the clock or the file system; tests/unit/bench covers it.
"""
from __future__ import annotations

import datetime
import math
import statistics

SECTION = "## Control-node cost"


# ---- the run's pair summary (<dspark_evidence_dir>/runs/*.json, written by gb10.dspark.pair_summary) -------
def summary_verdicts(doc: dict) -> dict[str, dict]:
    """{pair: its row} of one pair summary document; a document without pairs is an error."""
    rows = doc.get("pairs") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"the pair summary lists no pairs: {str(doc)[:300]}")
    out = {}
    for r in rows:
        if not isinstance(r, dict) or "pair" not in r or "verdict" not in r:
            raise ValueError(f"a pair summary row without pair and verdict: {r!r}")
        out[str(r["pair"])] = r
    return out


def isolation_outcome(rows: dict[str, dict], healthy: list[str], broken: str) -> dict:
    """What the isolation run did: the healthy pairs at PASS, the others (with verdict, phase and reason),
    and whether the broken pair failed (and nothing else did)."""
    passed = sorted(p for p in healthy if rows.get(p, {}).get("verdict") == "PASS")
    not_passed = {p: {k: rows.get(p, {}).get(k) for k in ("verdict", "phase", "reason")}
                  for p in healthy if p not in passed}
    b = rows.get(broken, {})
    return {"passed": passed, "healthy_not_passed": not_passed, "broken_verdict": b.get("verdict"),
            "broken_phase": b.get("phase"), "broken_reason": b.get("reason")}


# ---- CPU per pair ------------------------------------------------------------------------------------
def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y = a + b x; at least two distinct x."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        raise ValueError(f"a line needs at least two distinct pair counts, got {sorted(set(xs))}")
    mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def cpu_table(samples: dict[int, dict[str, list[float]]]) -> list[dict]:
    """Per pair count, the medians of its runs: ``samples`` is {pairs: {"wall": [s...], "cpu": [s...]}}, with
    "masters" (the SSH masters' part of "cpu") when known. Rows ``{"pairs", "wall_s", "cpu_s", "cpu_per_pair_s",
    "runs"}`` (and "masters_s") by pair count."""
    out = []
    for n in sorted(samples):
        wall, cpu = samples[n]["wall"], samples[n]["cpu"]
        if n < 1 or not wall or len(wall) != len(cpu):
            raise ValueError(f"{n} pairs: need as many wall as CPU figures, at least one ({wall}, {cpu})")
        c = statistics.median(cpu)
        out.append({"pairs": n, "wall_s": round(statistics.median(wall), 2), "cpu_s": round(c, 2),
                    "cpu_per_pair_s": round(c / n, 2), "runs": len(wall)})
        if samples[n].get("masters"):
            out[-1]["masters_s"] = round(statistics.median(samples[n]["masters"]), 2)
    return out


def cpu_model(table: list[dict]) -> dict:
    """The control node's CPU as a fixed part plus a part per pair, fitted over the table's medians:
    ``{"fixed_s", "per_pair_s", "max_residual_s"}`` (the largest distance of a median from the line)."""
    a, b = fit_line([(r["pairs"], r["cpu_s"]) for r in table])
    resid = max(abs(r["cpu_s"] - (a + b * r["pairs"])) for r in table)
    return {"fixed_s": round(a, 3), "per_pair_s": round(b, 3), "max_residual_s": round(resid, 3)}


# ---- projection -----------------------------------------------------------------------------------------
def project(pairs: int, cores: int, forks: int, fixed_s: float, per_pair_s: float, one_pair_wall_s: float) -> dict:
    """The time of a fleet audit of ``pairs`` pairs from a control node of ``cores`` cores running
    ``forks`` forks, as the larger of two bounds:

    - ranks: Ansible works on ``forks`` hosts at once and each pair has two ranks, so the fleet goes
      through in ceil(2 × pairs / forks) rounds; a round takes as long as the audit of one pair
      (``one_pair_wall_s``, measured), as every rank does its own part on its own machine;
    - control node: its CPU, ``fixed_s + per_pair_s × pairs`` (measured), spread over
      min(cores, forks) processes at best.
    """
    if min(pairs, cores, forks) < 1:
        raise ValueError("pairs, cores and forks must be at least 1")
    rounds = math.ceil(2 * pairs / forks)
    ranks_s = rounds * one_pair_wall_s
    cpu_s = fixed_s + per_pair_s * pairs
    control_s = cpu_s / min(cores, forks)
    return {"pairs": pairs, "cores": cores, "forks": forks, "rounds": rounds, "ranks_bound_s": round(ranks_s, 1),
            "control_cpu_s": round(cpu_s, 1), "control_bound_s": round(control_s, 1),
            "projected_s": round(max(ranks_s, control_s), 1),
            "bound": "control node's CPU" if control_s > ranks_s else "ranks (rounds of forks)"}


def duration(seconds: float) -> str:
    """``45 s``, ``12.5 min``, ``2.1 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# ---- rendering ------------------------------------------------------------------------------------------
def table_lines(control: dict) -> list[str]:
    """The measured CPU table (audit and converged re-provision, per pair count) in Markdown."""
    audit = {r["pairs"]: r for r in control["audit"]["table"]}
    prov = {r["pairs"]: r for r in control["reprovision"]["table"]}
    out = ["| Pairs | audit.yml wall (s) | audit.yml control-node CPU (s) | CPU per pair (s) "
           "| converged provision.yml wall (s) | its control-node CPU (s) | CPU per pair (s) |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    for n in sorted(set(audit) | set(prov)):
        a, p = audit.get(n, {}), prov.get(n, {})
        out.append(f"| {n} | {a.get('wall_s', '-')} | {a.get('cpu_s', '-')} | {a.get('cpu_per_pair_s', '-')} "
                   f"| {p.get('wall_s', '-')} | {p.get('cpu_s', '-')} | {p.get('cpu_per_pair_s', '-')} |")
    ma, mp = control["audit"]["model"], control["reprovision"]["model"]
    out += ["", f"Fitted over the medians (least squares, CPU = fixed + per pair × pairs): audit {ma['fixed_s']:.2f} s "
            f"+ {ma['per_pair_s']:.2f} s per pair (largest residual {ma['max_residual_s']:.2f} s); converged "
            f"re-provision {mp['fixed_s']:.2f} s + {mp['per_pair_s']:.2f} s per pair (largest residual "
            f"{mp['max_residual_s']:.2f} s)."]
    big_a, big_p = audit.get(max(audit), {}), prov.get(max(prov), {})
    if "masters_s" in big_a and "masters_s" in big_p:
        out += ["", f"Of the CPU at {max(audit)} pairs, the persistent SSH masters spent {big_a['masters_s']:.2f} s "
                f"(audit) and {big_p['masters_s']:.2f} s (re-provision)."]
    return out


def projection_lines(control: dict) -> list[str]:
    out = ["| Control node | Pairs | Rounds of forks | Ranks' bound | Control-node CPU | CPU bound | Projected audit | Bound by |",
           "|---|---:|---:|---:|---:|---:|---:|---|"]
    for p in control["projection"]:
        out.append(f"| {p['cores']} cores, {p['forks']} forks | {p['pairs']:,} | {p['rounds']} | "
                   f"{duration(p['ranks_bound_s'])} | {p['control_cpu_s']:.0f} s | {duration(p['control_bound_s'])} | "
                   f"**{duration(p['projected_s'])}** | {p['bound']} |")
    return out


def reprovision_cpu(control: dict, pairs: int) -> float:
    """The control node's CPU seconds of a converged re-provision of ``pairs`` pairs, by the fit."""
    m = control["reprovision"]["model"]
    return m["fixed_s"] + m["per_pair_s"] * pairs


def section(control: dict) -> str:
    """docs/fleet-scale.md's "Control-node cost" section from a run's ``control`` figures."""
    ma = control["audit"]["model"]
    one = control["audit"]["one_pair_wall_s"]
    one_cpu = control["audit"]["table"][0]["cpu_s"]
    return "\n".join([
        SECTION, "",
        f"Measured by `{control['command']}` ({control['date']}, commit `{control['commit'][:12]}`"
        + (" with uncommitted changes to tracked files" if control.get("dirty") else "") + ") on the pair simulator: "
        f"{control['machine']}, -f {control['forks']}, the median of {control['repeats']} runs per figure after a "
        "warm-up run. Every pair is converged (serving the pinned release), so the audit finds every pair OK and "
        f"the re-provision changes nothing (the most tasks any re-provision reported changed: "
        f"{control.get('most_changed', {}).get('reprovision', '-')}).",
        "",
        "What is counted: the CPU time (user + system) of `ansible-playbook` and of every local process it "
        "starts (its forks, the modules it runs on the control node, the `ssh` clients): the runner's "
        "`RUSAGE_CHILDREN` across the run, plus the CPU the run's persistent SSH masters (`ssh: ... [mux]`, "
        "ControlPersist) spent during it, read from /proc (they leave the process tree, so `RUSAGE_CHILDREN` "
        "misses them). Not counted: anything on the ranks (their sshd, Python and modules, dockerd).",
        "",
        *table_lines(control),
        "",
        "By the same fit, a converged re-provision of 100 pairs needs "
        f"{reprovision_cpu(control, 100):,.0f} s of the control node's CPU and one of 1,000 pairs "
        f"{reprovision_cpu(control, 1000):,.0f} s: {duration(reprovision_cpu(control, 1000) / 8)} on 8 busy cores "
        "at best. Size the control node for the re-provision, not for the audit.",
        "",
        "The simulated ranks share this machine's cores with the control node, and other work ran on them "
        "during the measurement: the wall times are noisy and longer than on real GB10 ranks; the CPU "
        "seconds are the control node's own and less sensitive to that, though contention still inflates them.",
        "",
        "### A fleet audit at 100 and 1,000 pairs (projected)",
        "",
        "The projection takes the larger of two bounds (`bench/_fleet.py`, `project`):",
        "",
        f"- **Ranks.** Ansible works on `forks` hosts at a time and a pair is two hosts, so a fleet of P pairs "
        f"goes through each task in ceil(2P / forks) rounds. A round lasts as long as the audit of one pair "
        f"(measured: {one:.2f} s), because each rank does its part on its own machine, in parallel with the "
        f"others of its round. On this machine that audit of one pair used {one_cpu:.2f} s of the control node's "
        "CPU: the round measured here is mostly the control node's own work on shared cores, so this bound "
        "overstates a round on a control node with free cores.",
        f"- **Control node.** The CPU it needs grows with the pairs: {ma['fixed_s']:.2f} s + {ma['per_pair_s']:.2f} s "
        "per pair (the fit above). At best it spreads over min(cores, forks) processes, so this bound is that "
        "CPU divided by min(cores, forks). Once forks × the CPU per host of a round exceeds the cores, this "
        "bound is the larger one and more forks no longer help.",
        "",
        "Assumed: the CPU per pair stays linear beyond the 8 pairs measured; the network and the ranks are not "
        "the bottleneck; Ansible's main process (one core: it queues results and runs the strategy) keeps up; "
        "nothing else runs on the control node. Not measured: a run of more than 8 pairs.",
        "",
        *projection_lines(control),
        "",
        "Above the control node's bound, split the fleet between control nodes or execution nodes by whole "
        "pairs (Job slicing, Instance groups), each run under its own bound.",
    ]) + "\n"


def replace_section(text: str, body: str, heading: str = SECTION) -> str:
    """``text`` with its ``heading`` section (up to the next heading of the same level, or the end)
    replaced by ``body``; a text without that heading is an error."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == heading]
    if len(starts) != 1:
        raise ValueError(f"expected one {heading!r} heading, found {len(starts)}")
    start = starts[0]
    level = heading.split(" ", 1)[0] + " "
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)), len(lines))
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + body.rstrip("\n") + "\n" + ("\n" + tail if tail else "")


# ---- serving capacity during a rollout ---------------------------------------------------------------------------
def capacity(samples: list[tuple[float, list[str]]], pairs: list[str]) -> dict:
    """From ``(seconds since the start, the pairs serving then)`` samples: the lowest count of serving pairs and
    when, and each pair's longest run of samples not serving (its outage, in samples)."""
    if not samples:
        raise ValueError("no samples: the sampler did not run")
    counts = [(t, len(set(up) & set(pairs))) for t, up in samples]
    low_t, low = min(counts, key=lambda c: (c[1], c[0]))
    outage: dict[str, int] = {}
    for pair in pairs:
        run = longest = 0
        for _t, up in samples:
            run = 0 if pair in up else run + 1
            longest = max(longest, run)
        outage[pair] = longest
    return {"samples": len(samples), "lowest": low, "lowest_at_s": round(low_t, 1), "pairs": len(pairs),
            "longest_outage_samples": outage}


def _seconds(step: dict) -> float | None:
    try:
        began = datetime.datetime.fromisoformat(str(step["started"]).replace("Z", "+00:00"))
        ended = datetime.datetime.fromisoformat(str(step["ended"]).replace("Z", "+00:00"))
    except (KeyError, TypeError, ValueError):
        return None
    return (ended - began).total_seconds()


def rollout_ratio_at(run_s: float, waves: dict, delay_s: float, cold_start_s: float) -> float:
    """The rollout's ratio (run time against waves × one wave's time) had every canary and wave step waited
    ``cold_start_s`` for its engines instead of the stand-in's ``delay_s``: each of the ``waves['waves']`` steps
    grows by the difference, on both sides; what no step holds (planning, staging, evidence) stays as measured."""
    grow = max(0.0, cold_start_s - delay_s)
    n = waves["waves"]
    return round((run_s + n * grow) / (n * (waves["one_wave_s"] + grow)), 3)


def wave_times(doc: dict) -> dict:
    """From a rollout's per-wave report (``<evidence>/runs/*-rollout-waves-*.json``): each step's seconds, the
    number of waves the rollout took (the canary counts as one), and one wave's time (the median of the waves that
    took the full count of pairs)."""
    steps = [{"step": s.get("step"), "wave": s.get("wave"), "pairs": [e.get("pair") for e in s.get("pairs") or []],
              "seconds": _seconds(s), "verdict": s.get("verdict")} for s in doc.get("steps") or []]
    waves = [s for s in steps if s["step"] == "wave"]
    if not waves or any(s["seconds"] is None for s in steps):
        raise ValueError(f"the report has no timed waves: {steps}")
    full = max(len(s["pairs"]) for s in waves)
    one = statistics.median(s["seconds"] for s in waves if len(s["pairs"]) == full)
    counted = len(waves) + sum(1 for s in steps if s["step"] == "canary")
    return {"steps": steps, "waves": counted, "one_wave_s": round(one, 2), "wave_pairs": full}
