"""Pure parts of the ratio benchmarks (bench/ratios.py): ratios, target checks, the guard's
theoretical server time, machine facts, and artifacts/reports/PERFORMANCE.md rendered from one run's results.

Nothing here touches the simulator, the clock or the file system; tests/unit/bench covers it.

A *row* is one measured ratio, as bench/ratios.py builds it with :func:`row`::

    {"id", "name", "unit", "numerator": {"label", "value", "unit"}, "denominator": {"label", "value", "unit"},
     "ratio", "target", "met", "checks": [...], "why": [...], "notes": [...], "extra": {...}}

Most rows divide seconds by seconds (unit "s"; their parts also carry "seconds", and the row
"numerator_s" and "denominator_s"); the relay rows divide bytes by bytes (unit "bytes").

A *check* is an absolute target beside a ratio (zero container restarts, a second staging within
3 s): ``{"name", "value", "target", "op", "unit", "met"}``. A row is met when its ratio is within
its target and every check holds; ``why`` lists what missed, followed by the row's notes.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import _fleet  # bench/_fleet.py, beside this file

RATIO_DIGITS = 3  # ratios are shown, and judged, at this precision

OPS = {
    "<=": lambda value, target: value <= target,
    "==": lambda value, target: value == target,
    ">=": lambda value, target: value >= target,
}
OP_SIGN = {"<=": "≤", "==": "=", ">=": "≥"}


# ---- ratios and targets ---------------------------------------------------------------------
def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator (seconds or bytes), rounded to RATIO_DIGITS; a denominator that is not
    positive has no ratio."""
    if not isinstance(denominator, (int, float)) or not math.isfinite(denominator) or denominator <= 0:
        raise ValueError(f"denominator must be a positive number, got {denominator!r}")
    if not isinstance(numerator, (int, float)) or not math.isfinite(numerator) or numerator < 0:
        raise ValueError(f"numerator must be a non-negative number, got {numerator!r}")
    return round(numerator / denominator, RATIO_DIGITS)


def target_met(value: float, target: float, op: str = "<=") -> bool:
    """Whether ``value op target`` holds. Targets read "≤ target": a value equal to the target meets
    it. Ratios are compared as shown (rounded to RATIO_DIGITS by :func:`ratio`)."""
    if op not in OPS:
        raise ValueError(f"unknown comparison {op!r}; known: {', '.join(OPS)}")
    return bool(OPS[op](value, target))


def check(name: str, value: float, target: float, op: str = "<=", unit: str = "") -> dict:
    """An absolute target beside a ratio, judged now."""
    return {"name": name, "value": value, "target": target, "op": op, "unit": unit,
            "met": target_met(value, target, op)}


def _num(value: float, unit: str = "") -> str:
    if isinstance(value, float):
        text = f"{value:.2f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    else:
        text = str(value)
    return f"{text} {unit}".strip()


def check_text(c: dict) -> str:
    """``second staging 3.4 s, target ≤ 3 s``."""
    return f"{c['name']} {_num(c['value'], c['unit'])}, target {OP_SIGN[c['op']]} {_num(c['target'], c['unit'])}"


def amount(value: float, unit: str) -> str:
    """``30.00 s``, ``4,295,032,832 bytes`` (bytes as the exact count a counter gave)."""
    return f"{int(value):,} bytes" if unit == "bytes" else f"{value:.2f} {unit}"


def _part(label: str, value: float, unit: str) -> dict:
    part = {"label": label, "value": round(value, 2) if unit == "s" else value, "unit": unit}
    if unit == "s":
        part["seconds"] = part["value"]
    return part


def row(row_id: str, name: str, numerator: tuple[str, float], denominator: tuple[str, float], target: float,
        notes: list[str] | None = None, checks: list[dict] | None = None, extra: dict | None = None,
        causes: list[str] | None = None, unit: str = "s") -> dict:
    """One measured ratio of two amounts in ``unit`` (seconds unless told) with its verdict: met only
    when the ratio is within ``target`` (≤) and every check holds. ``why`` says what missed, followed by
    ``causes`` (measured explanations the caller gives) when anything missed; the notes explain the
    measurement."""
    (num_label, num), (den_label, den) = numerator, denominator
    value = ratio(num, den)
    checks = list(checks or [])
    ratio_ok = target_met(value, target, "<=")
    why = []
    if not ratio_ok:
        why.append(f"ratio {value:.{RATIO_DIGITS}f} is above the target {target} "
                   f"({num_label} {amount(num, unit)} against {den_label} {amount(den, unit)})")
    why += [f"{check_text(c)}: missed" for c in checks if not c["met"]]
    if why:
        why += list(causes or [])
    out = {
        "id": row_id,
        "name": name,
        "unit": unit,
        "numerator": _part(num_label, num, unit),
        "denominator": _part(den_label, den, unit),
        "ratio": value,
        "target": target,
        "met": ratio_ok and all(c["met"] for c in checks),
        "checks": checks,
        "why": why,
        "notes": list(notes or []),
        "extra": dict(extra or {}),
    }
    if unit == "s":
        out["numerator_s"], out["denominator_s"] = round(num, 2), round(den, 2)
    return out


# ---- the guard's theoretical server time ----------------------------------------------------
def pool_makespan(durations: list[float], workers: int) -> float:
    """Seconds a pool of ``workers`` needs for jobs taken in list order, each by the first free
    worker (as a thread pool serves a queue)."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    free = [0.0] * min(workers, max(1, len(durations)))
    for d in durations:
        i = min(range(len(free)), key=free.__getitem__)
        free[i] += d
    return max(free) if durations else 0.0


def guard_theory(completion_tokens: list[int], concurrency: int, token_delay_s: float,
                 prefill_s: float = 0.0) -> dict:
    """The server time the guard cannot go below on the stand-in, which spends ``prefill_s`` per
    request and ``token_delay_s`` per generated token and serves every admitted request at once:

    - ``scheduled_s``: the requests, in the guard's order, through a pool of ``concurrency`` slots,
      each taking prefill + its own completion_tokens × delay;
    - ``nominal_s``: the issue's figure, ceil(requests / concurrency) waves of the longest answer.
    """
    n = len(completion_tokens)
    longest = max(completion_tokens, default=0)
    scheduled = pool_makespan([prefill_s + t * token_delay_s for t in completion_tokens], concurrency)
    waves = math.ceil(n / concurrency) if n else 0
    return {"requests": n, "concurrency": concurrency, "token_delay_s": token_delay_s, "prefill_s": prefill_s,
            "tokens": sum(completion_tokens), "longest": longest, "waves": waves,
            "scheduled_s": round(scheduled, 4), "nominal_s": round(waves * (prefill_s + longest * token_delay_s), 4)}


# ---- container restarts ---------------------------------------------------------------------
def restarts(before: dict, after: dict) -> dict:
    """Per rank, how often its engine container was (re)started between two looks.

    ``before``/``after`` map a rank to ``{"id", "started_at", "restart_count"}`` (or None: no
    container). A new ID or a new start time is one start; Docker's own restarts of the same
    container add their count. A container that disappeared counts once."""
    out = {}
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name), after.get(name)
        if a is None:
            out[name] = 0 if b is None else 1
        elif b is None or a["id"] != b["id"]:
            out[name] = 1 + int(a.get("restart_count") or 0)
        else:  # the same container: a restart by Docker's policy also moves StartedAt, so take the larger
            by_docker = max(0, int(a.get("restart_count") or 0) - int(b.get("restart_count") or 0))
            out[name] = max(by_docker, int(a["started_at"] != b["started_at"]))
    return out


# ---- Ansible's per-task times (the junit callback) -----------------------------------------
def slowest_tasks(junit_xml: str, limit: int = 5) -> list[tuple[str, float]]:
    """The slowest tasks of a playbook run from the junit callback's XML: ``(play: task, seconds)``,
    one entry per task (the slowest host, as hosts run a task side by side), slowest first."""
    root = ET.fromstring(junit_xml)
    worst: dict[str, float] = {}
    for case in root.iter("testcase"):
        name = _task_name(case)
        try:
            seconds = float(case.get("time", "0"))
        except ValueError:
            continue
        worst[name] = max(worst.get(name, 0.0), seconds)
    ranked = sorted(worst.items(), key=lambda kv: (-kv[1], kv[0]))
    return [(name, round(s, 2)) for name, s in ranked[:limit]]


def tasks_run(junit_xml: str) -> int:
    """How many tasks of a playbook run did work on at least one host (not skipped everywhere),
    from the junit callback's XML."""
    return len({_task_name(case) for case in ET.fromstring(junit_xml).iter("testcase") if case.find("skipped") is None})


def _task_name(case: ET.Element) -> str:
    """A junit testcase's task, without the ``[host] `` the callback puts in front of it."""
    name = case.get("name", "")
    return name.split("] ", 1)[1] if name.startswith("[") and "] " in name else name


# ---- machine facts --------------------------------------------------------------------------
def meminfo_total_bytes(meminfo: str) -> int | None:
    """MemTotal of /proc/meminfo in bytes (None when absent)."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            scale = 1024 if len(parts) > 2 and parts[2].lower() == "kb" else 1
            return int(parts[1]) * scale
    return None


def proc_stat_cpu(stat: str) -> tuple[int, int]:
    """(busy, total) clock ticks of all cores from the ``cpu`` line of /proc/stat; idle and iowait
    are not busy, guest time is already inside user and nice."""
    for line in stat.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            ticks = [int(v) for v in parts[1:9]]  # user nice system idle iowait irq softirq steal
            total = sum(ticks)
            return total - ticks[3] - ticks[4], total
    raise ValueError("no cpu line in /proc/stat")


def busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Share of all cores' time spent busy between two proc_stat_cpu readings (None: no time passed)."""
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 3) if total > 0 else None


# ---- artifacts/reports/PERFORMANCE.md --------------------------------------------------------------------
def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def part_text(part: dict) -> str:
    """``re-provision of pair_sim01: 18.91 s``; rows written before units were recorded are in seconds."""
    return f"{part['label']}: {amount(part.get('value', part.get('seconds')), part.get('unit', 's'))}"


def _extra_value(value: object) -> str:
    if isinstance(value, list):
        if value and all(isinstance(v, (list, tuple)) and len(v) == 2 for v in value):
            return "; ".join(f"{a} ({b} s)" for a, b in value)
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def render(run: dict) -> str:
    """artifacts/reports/PERFORMANCE.md from a run (``ratios.json``): every figure comes from ``run``."""
    rows = run["results"]
    m = run["machine"]
    mem = m.get("memory_bytes")
    mem_text = f"{mem / (1 << 30):.1f} GiB" if mem else "unknown"
    commit = run["commit"]
    commit_text = f"`{commit['sha']}`" + (" with uncommitted changes to tracked files" if commit.get("dirty") else "")
    met = sum(1 for r in rows if r["met"])
    carried = run.get("carried")
    out = [
        "# Performance",
        "",
        "Generated by `bench/ratios.py`; every figure on this page comes from the run described here"
        + (", except those marked *carried over*, which come from the earlier run named below." if carried else "."),
        "Do not edit it by hand: run the command again.",
        "",
        f"- Command: `{run['command']}`",
        f"- Date: {run['date']} (the run took {run['duration_s']:.0f} s)",
        f"- Commit: {commit_text}",
        f"- Machine: {m.get('cores')} cores (`os.cpu_count()`), {mem_text} memory (MemTotal of /proc/meminfo), "
        f"kernel {m.get('kernel')}, Python {m.get('python')}",
        "- Settings: " + ", ".join(f"{k} {v}" for k, v in run["settings"].items()),
    ]
    if carried:
        c = carried["commit"]
        out.append(f"- Carried over from the run of {carried['date']} (`{carried['command']}`, commit `{c['sha']}`"
                   + (" with uncommitted changes" if c.get("dirty") else "") + f"): {', '.join(carried['ids'])}")
    out += [
        "",
        f"## Ratios ({met} of {len(rows)} met)",
        "",
        "| Measurement | Numerator | Denominator | Ratio | Target | Result | Notes |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for r in rows:
        notes = ([f"Missed: {'; '.join(r['why'])}."] if not r["met"] else []) + r["notes"]
        out.append("| " + " | ".join(_cell(x) for x in (
            r["name"] + (" (*carried over*)" if r.get("carried") else ""), part_text(r["numerator"]), part_text(r["denominator"]), f"{r['ratio']:.{RATIO_DIGITS}f}",
            f"≤ {r['target']}", "met" if r["met"] else "**missed**", " ".join(notes))) + " |")
    checks = [(r, c) for r in rows for c in r["checks"]]
    if checks:
        out += ["", "## Other targets", "", "| Measurement | Target | Value | Result |", "|---|---|---:|---|"]
        for r, c in checks:
            out.append("| " + " | ".join(_cell(x) for x in (
                r["name"], f"{c['name']} {OP_SIGN[c['op']]} {_num(c['target'], c['unit'])}",
                _num(c["value"], c["unit"]), "met" if c["met"] else "**missed**")) + " |")
    control = (run.get("tables") or {}).get("control-cpu")
    if control:
        out += ["", "## Control node's CPU per pair" + (" (*carried over*)" if control.get("carried") else ""), "",
                f"playbooks/audit.yml and a converged provision.yml with -f {control['forks']} on "
                f"{', '.join(str(n) for n in control['sizes'])} pairs (`--limit`), the median of {control['repeats']} "
                "runs each after a warm-up. CPU: user + system seconds of ansible-playbook and its local children "
                "(RUSAGE_CHILDREN of the runner) plus the persistent SSH masters' CPU during the run (/proc); "
                "nothing of the ranks. The projection of a fleet audit is explained in docs/fleet-scale.md "
                "(Control-node cost).", ""]
        out += _fleet.table_lines(control) + [""] + _fleet.projection_lines(control)
    missed = [r for r in rows if not r["met"]]
    out += ["", "## Missed targets", ""]
    if missed:
        for r in missed:
            out.append(f"- **{r['name']}**")
            out += [f"  - {_cell(w)}" for w in r["why"]]
    else:
        out.append("None: every target was met.")
    out += ["", "## Details", ""]
    for r in rows:
        out += [f"### {r['name']}", ""]
        out += [f"- {_cell(n)}" for n in r["notes"]]
        if r["extra"]:
            out += ["", "| Figure | Value |", "|---|---|"]
            out += [f"| {_cell(k)} | {_cell(_extra_value(v))} |" for k, v in r["extra"].items()]
        out.append("")
    return "\n".join(out).rstrip() + "\n"
