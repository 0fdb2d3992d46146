"""Benchmarks of a fleet of simulated pairs, run by bench/ratios.py (``--only isolation control-cpu``):

- isolation cost: 8 pairs provisioned from stopped engines with one pair's worker crashing at start-up
  (the stand-in's DSPARK_SIM_FAULT=crash_on_start, switched through host variables) against the same
  provision of the 7 other pairs alone (``--limit``): the 7 must reach PASS in the run's pair summary,
  and the run time must be within 1.1 × the run without the failing pair;
- serving capacity during a release rollout: playbooks/rollout.yml of the simulator's next release on 8 pairs in
  waves of 2 while every pair's /v1/models and a one-token completion are sampled each second: the lowest count of
  serving pairs must be at least 8 - 2, and the run's time within 1.15 × waves × one wave's time;
- the control node's CPU seconds per pair for playbooks/audit.yml and for a converged re-provision,
  at 1, 2, 4 and 8 pairs, and the projection of a fleet audit to 100 and 1,000 pairs (bench/_fleet.py).

Also a command: ``python bench/fleet.py --write-doc [docs/fleet-scale.md]`` rewrites that document's
"Control-node cost" section from the last run's artifacts/bench/ratios.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _common as common  # bench/_common.py (this script's folder is on sys.path)
import _fleet as fleet
import _report as report
from dspark_sim import layout

ROOT = common.ROOT
TARGET_ISOLATION = 1.1
TARGET_ROLLOUT = 1.15  # a release rollout's time against waves × one wave's time
COLD_START_S = 12 * 60  # the shortest cold start of a real pair's engine (the brief: 12 to 60 minutes)
CPU_PAIRS = (1, 2, 4, 8)
NODES = ((2, 16), (8, 20), (32, 100))  # (cores, forks) of the control nodes the audit is projected for
FLEET_SIZES = (100, 1000)

BenchError = common.BenchError


def say(msg: str) -> None:
    print(f"[fleet] {msg}", flush=True)


def _groups(pairs: list[layout.Pair]) -> str:
    return ",".join(p.group for p in pairs)


def _new_summary(runs: Path, before: set[Path]) -> dict:
    written = sorted(set(runs.glob("*.json")) - before) if runs.is_dir() else []
    if len(written) != 1:
        raise BenchError(f"expected one new pair summary in {runs}, found {[p.name for p in written]}")
    return json.loads(written[0].read_text())


# ---- isolation cost ----------------------------------------------------------------------------------
def measure_isolation(b, host_vars, has_image) -> dict:
    """``b`` is bench/ratios.py's Bench, ``host_vars`` its context manager for host variable files,
    ``has_image(rank)`` whether a rank holds the pinned image. Pairs that lack the image are provisioned
    first (untimed), so that neither timed run copies the archive."""
    n = b.args.pairs
    if n < 2:
        raise BenchError("the isolation measurement needs at least 2 pairs")
    pairs = layout.pairs(n)
    healthy, broken = pairs[:-1], pairs[-1]
    forks = ["-f", str(b.args.forks)]
    runs = b.evidence / "runs"
    fault_env = b.engine_env(DSPARK_SIM_FAULT="crash_on_start")
    lacking = [p for p in pairs if not all(has_image(r) for r in p.ranks)]
    if lacking:
        say(f"isolation: provision.yml of {_groups(lacking)} first (untimed): they lack the pinned image")
        b.playbook("provision.yml", *forks, "--limit", _groups(lacking))
    timings: dict[str, list[float]] = {"with": [], "without": []}
    cpu: dict[str, list[float]] = {"with": [], "without": []}  # the control node's CPU of each run
    last: dict = {}
    for i in range(b.args.isolation_repeats):
        say(f"isolation {i + 1}/{b.args.isolation_repeats}: teardown.yml of every pair (images kept), "
            f"then provision.yml of {len(healthy)} pairs")
        b.playbook("teardown.yml", *forks, "--limit", _groups(pairs))
        alone = b.playbook("provision.yml", *forks, "--limit", _groups(healthy))
        timings["without"].append(alone.seconds)
        cpu["without"].append(run_cpu(alone))
        say(f"isolation {i + 1}: teardown.yml again, then provision.yml of {n} pairs, {broken.worker.name} "
            "crashing at start-up")
        b.playbook("teardown.yml", *forks, "--limit", _groups(pairs))
        before = set(runs.glob("*.json")) if runs.is_dir() else set()
        with host_vars({broken.worker.name: {"dspark_engine_extra_env": fault_env}}):
            run = b.playbook("provision.yml", *forks, "--limit", _groups(pairs), check=False)
        timings["with"].append(run.seconds)
        cpu["with"].append(run_cpu(run))
        rows = fleet.summary_verdicts(_new_summary(runs, before))
        last = fleet.isolation_outcome(rows, [p.name for p in healthy], broken.name)
        last["returncode"] = run.returncode
        if last["healthy_not_passed"]:
            raise BenchError(f"pairs other than {broken.name} did not reach PASS: {last['healthy_not_passed']}\n"
                             f"{run.tail()}")
    say(f"isolation: provision.yml of {broken.group} without the fault, so that it serves again")
    b.playbook("provision.yml", "--limit", broken.group)
    with_s = min(timings["with"])
    without_s = min(timings["without"])
    rep = b.args.isolation_repeats
    pick = "one run each" if rep == 1 else f"the fastest of {rep} runs each"
    notes = [
        "Starting state of both runs: teardown.yml --limit every pair with the images kept, so every engine is "
        "stopped and removed and both ranks of every pair hold the pinned image: each provision starts every "
        "engine (a start-up failure needs an engine to start) and copies nothing, so the copy of the archive, "
        "which competes for this machine's one disk, is not in either figure.",
        f"Numerator: provision.yml -f {b.args.forks} on {n} pairs with DSPARK_SIM_FAULT=crash_on_start in "
        f"{broken.worker.name}'s dspark_engine_extra_env (host variables, as the pair-isolation-crash simulator "
        f"test does): its engine exits at start-up. Denominator: provision.yml -f {b.args.forks} --limit the "
        f"{len(healthy)} other pairs. Wall time of the whole run, {pick}.",
        f"The pair summary of the failing run (runs/*.json in the run's evidence folder): {len(last['passed'])} "
        f"of {len(healthy)} healthy pairs PASS; {broken.name} {last['broken_verdict']} at {last['broken_phase']}: "
        f"{str(last['broken_reason'])[:160]}...; ansible-playbook exited {last['returncode']}.",
    ]
    cores = os.cpu_count() or 1
    fast_with, fast_without = timings["with"].index(with_s), timings["without"].index(without_s)
    causes = [f"Both runs share this machine's {cores} cores with every simulated rank and with other work; the "
              "failing pair's ranks still run their tasks until its engine exits.",
              f"The control node's own CPU (ansible-playbook, its children and the SSH masters): "
              f"{cpu['with'][fast_with]:.2f} s with {n} pairs against {cpu['without'][fast_without]:.2f} s with "
              f"{len(healthy)} ({cpu['with'][fast_with] / max(cpu['without'][fast_without], 0.01):.3f}×; "
              f"{n} / {len(healthy)} = {n / len(healthy):.3f}): where it is the bound, as on this machine, every "
              "pair of a run adds its tasks' CPU until it fails."]
    return report.row(
        "isolation", f"Provision of {n} pairs with one failing at start-up vs the {len(healthy)} others alone",
        (f"provision.yml on {n} pairs, {broken.name} failing", with_s),
        (f"provision.yml on the {len(healthy)} others", without_s), TARGET_ISOLATION, notes=notes, causes=causes,
        checks=[report.check("healthy pairs at PASS", len(last["passed"]), len(healthy), "=="),
                report.check(f"{broken.name} FAILED", int(last["broken_verdict"] == "FAILED"), 1, "=="),
                report.check("exit code", last["returncode"], 2, "==")],
        extra={f"with {broken.name} failing (s, each run)": ", ".join(f"{s:.2f}" for s in timings["with"]),
               f"{len(healthy)} pairs alone (s, each run)": ", ".join(f"{s:.2f}" for s in timings["without"]),
               f"{broken.name}'s phase and reason": f"{last['broken_phase']}: {str(last['broken_reason'])[:300]}",
               "pairs provisioned first, untimed (they lacked the image)": [p.name for p in lacking] or "none"})


# ---- serving capacity during a release rollout ---------------------------------------------------------------
def _serving(pair: layout.Pair, timeout: float = 3.0) -> bool:
    """The pair's head answers /v1/models and a one-token completion of the model it lists."""
    base = f"http://{pair.head.mgmt_ip}:8888"
    try:
        with urllib.request.urlopen(f"{base}/v1/models", timeout=timeout) as answer:
            model = json.loads(answer.read())["data"][0]["id"]
        body = json.dumps({"model": model, "prompt": "ping", "max_tokens": 1}).encode()
        request = urllib.request.Request(f"{base}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status == 200 and len(json.loads(answer.read()).get("choices") or []) == 1
    except (OSError, ValueError, KeyError, IndexError):
        return False


class CapacitySampler:
    """Every second, every pair's /v1/models and a one-token completion, all pairs at once, in a thread of its own;
    ``samples`` holds (seconds since the start, the pairs that answered both)."""

    def __init__(self, pairs: list[layout.Pair], interval: float = 1.0):
        self.pairs, self.interval = pairs, interval
        self.samples: list[tuple[float, list[str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(self.pairs)) as pool:
            while not self._stop.is_set():
                tick = time.monotonic()
                up = [p.name for p, ok in zip(self.pairs, pool.map(_serving, self.pairs)) if ok]
                self.samples.append((tick - t0, up))
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - tick)))

    def __enter__(self) -> "CapacitySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)


def measure_rollout_capacity(b) -> dict:
    """playbooks/rollout.yml of the simulator's next release on every pair (8), waves of 2, while every pair is
    sampled each second; then provision.yml puts every pair back on the inventory's release."""
    pairs = layout.pairs(b.args.pairs)
    if len(pairs) < 4:
        raise BenchError("the rollout capacity measurement needs at least 4 pairs")
    release = layout.RELEASES_DIR / "sim-v027.yml"
    if not release.is_file():
        raise BenchError(f"{release} is missing: `sim up` writes the next release's file")
    forks = ["-f", str(b.args.forks)]
    runs = b.evidence / "runs"
    before = set(runs.glob("*-rollout-waves-*.json")) if runs.is_dir() else set()
    say(f"rollout-capacity: rollout.yml of {release.stem} on {len(pairs)} pairs in waves of 2, every pair sampled "
        "each second")
    # The engines of the release start with the bench's start-up delay, as the re-provision's fresh start does: a
    # stand-in that serves in a second would make the rollout's fixed costs (planning, staging, the canary's guard)
    # look like the pace, which a GB10 pair's cold start of 12 to 60 minutes never lets them be.
    delay = b.args.startup_delay
    env = b.engine_env(DSPARK_SIM_STARTUP_DELAY_S=f"{delay:g}")
    with CapacitySampler(pairs) as sampler:
        time.sleep(3)  # a few samples of the fleet before the run: every pair serves
        run = b.playbook("rollout.yml", *forks, "-e", f"@{release}", "-e", "dspark_rollout_wave_pairs=2",
                         extra_vars={"dspark_engine_extra_env": env}, check=False)
        time.sleep(3)
    written = sorted(set(runs.glob("*-rollout-waves-*.json")) - before) if runs.is_dir() else []
    if run.returncode != 0 or len(written) != 1:
        raise BenchError(f"rollout.yml exited {run.returncode} with {len(written)} wave report(s):\n{run.tail()}")
    doc = json.loads(written[0].read_text())
    cap = fleet.capacity(sampler.samples, [p.name for p in pairs])
    waves = fleet.wave_times(doc)
    say("rollout-capacity: provision.yml of every pair back on the inventory's release")
    b.playbook("provision.yml", *forks, "--limit", _groups(pairs))
    need = len(pairs) - waves["wave_pairs"]
    timed = sum(s["seconds"] for s in waves["steps"] if s["step"] in ("canary", "wave"))
    fixed = run.seconds - timed  # what no wave or canary step holds: planning, staging, evidence
    projected = fleet.rollout_ratio_at(run.seconds, waves, delay, COLD_START_S)
    steps = "; ".join(f"{s['step']}{' ' + str(s['wave']) if s['wave'] else ''} {'+'.join(s['pairs'])} "
                      f"{s['seconds']:.1f} s {s['verdict']}" for s in waves["steps"])
    notes = [
        f"Every pair served the inventory's release (sim-v026); playbooks/rollout.yml -f {b.args.forks} -e @{release.name} "
        "-e dspark_rollout_wave_pairs=2 took it to the next one (another image ID, staged and loaded by the run): the "
        "canary pair (provision, gate, serving guard), the image staged on the other pairs, then the waves.",
        f"A sampler asked every pair's head for /v1/models and a one-token completion every second, all pairs at once, "
        f"from 3 s before the run to 3 s after it ({cap['samples']} samples); a pair served when both answered.",
        f"Every engine of the release started with DSPARK_SIM_STARTUP_DELAY_S={delay:g} (the bench's --startup-delay, "
        "as the re-provision's fresh start).",
        f"Numerator: the run's wall time. Denominator: {waves['waves']} waves (the canary counts as one) × one wave's "
        f"time, the median of the waves of {waves['wave_pairs']} pairs in the run's per-wave report. Steps: {steps}.",
        f"{fixed:.1f} s of the run are in no canary or wave step (planning, the staging play, the evidence). With the "
        f"shortest real cold start, {COLD_START_S // 60} minutes, in place of the stand-in's {delay:g} s in every "
        f"canary and wave step, the same run would give {projected:.3f}.",
    ]
    causes = [f"{fixed:.1f} s of the run are in no wave: the staging play (the release's image copied to and loaded "
              "on every other pair, after the canary passed and before the first wave) and the planning and evidence "
              "plays; the canary's step also holds its serving guard, which no wave runs. Both are fixed costs: the "
              f"stand-in starts in {delay:g} s, where a GB10 pair's cold start of 12 to 60 minutes makes each wave the "
              f"pace (projected ratio {projected:.3f} with 12-minute cold starts)."]
    return report.row(
        "rollout-capacity", f"Release rollout to {len(pairs)} pairs in waves of 2 vs waves × one wave's time",
        (f"rollout.yml on {len(pairs)} pairs", run.seconds),
        (f"{waves['waves']} waves × {waves['one_wave_s']:.1f} s", waves["waves"] * waves["one_wave_s"]),
        TARGET_ROLLOUT, notes=notes, causes=causes,
        checks=[report.check("lowest count of serving pairs", cap["lowest"], need, ">=")],
        extra={"lowest serving pairs (and when, s into the sampling)": f"{cap['lowest']} of {cap['pairs']} at "
                                                                      f"{cap['lowest_at_s']} s",
               "each pair's longest outage (samples of 1 s)": cap["longest_outage_samples"],
               "waves report": written[0].name})


# ---- the control node's CPU per pair -------------------------------------------------------------------------
def run_cpu(run: common.PlaybookRun) -> float:
    """The control node's CPU of one run: ansible-playbook and its children, and the SSH masters."""
    return run.controller_cpu_s + run.ssh_masters_cpu_s


def measure_control_cpu(b) -> dict:
    """Audit and converged re-provision on 1, 2, 4 and 8 pairs (as many as the fleet has), interleaved,
    ``--cpu-repeats`` rounds after a warm-up; every pair converged before (the run's first provision)."""
    sizes = [k for k in CPU_PAIRS if k <= b.args.pairs]
    forks = ["-f", str(b.args.forks)]
    ev = {"dspark_audit_report_dir": str(b.tmp / "audit-cpu")}
    samples = {kind: {k: {"wall": [], "cpu": [], "masters": []} for k in sizes} for kind in ("audit", "reprovision")}
    changed = {kind: 0 for kind in samples}  # the most tasks any run reported changed (converged: 0)
    say("control-cpu: warm-up (an audit of every pair: SSH masters)")
    b.playbook("audit.yml", *forks, "--limit", _groups(layout.pairs(max(sizes))), extra_vars=ev)
    for i in range(b.args.cpu_repeats):
        for k in sizes:
            limit = ["--limit", _groups(layout.pairs(k))]
            say(f"control-cpu round {i + 1}/{b.args.cpu_repeats}: audit.yml and provision.yml on {k} pair(s)")
            for kind, name, extra in (("audit", "audit.yml", ev), ("reprovision", "provision.yml", None)):
                run = b.playbook(name, *forks, *limit, extra_vars=extra)
                changed[kind] = max(changed[kind], run.changed())
                samples[kind][k]["wall"].append(run.seconds)
                samples[kind][k]["cpu"].append(run_cpu(run))
                samples[kind][k]["masters"].append(run.ssh_masters_cpu_s)
    out = {}
    for kind in samples:
        table = fleet.cpu_table(samples[kind])
        out[kind] = {"table": table, "model": fleet.cpu_model(table)}
    one = out["audit"]["table"][0]
    out["audit"]["one_pair_wall_s"] = one["wall_s"]
    model = out["audit"]["model"]
    out["projection"] = [fleet.project(p, c, f, model["fixed_s"], model["per_pair_s"], one["wall_s"])
                         for c, f in NODES for p in FLEET_SIZES]
    out.update(forks=b.args.forks, repeats=b.args.cpu_repeats, sizes=sizes, most_changed=changed)
    return out


# ---- docs/fleet-scale.md ----------------------------------------------------------------------------------------
def write_doc(doc: Path, run: dict) -> None:
    control = run.get("tables", {}).get("control-cpu")
    if not control:
        raise BenchError("the run has no control-cpu figures (bench/ratios.py --only control-cpu)")
    m = run["machine"]
    # A table carried over from an earlier run (ratios.py --carry) was measured by that run: name it.
    source = run["carried"] if control.get("carried") and run.get("carried") else run
    control = {**control, "date": source["date"], "commit": source["commit"]["sha"],
               "dirty": source["commit"].get("dirty"), "command": source["command"],
               "machine": f"{m.get('cores')} cores shared by the control node and every simulated rank"}
    doc.write_text(fleet.replace_section(doc.read_text(), fleet.section(control)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/fleet.py", description="Rewrite docs/fleet-scale.md's Control-node "
                                 "cost section from a run of bench/ratios.py (the measurements run there).")
    ap.add_argument("--write-doc", nargs="?", const=str(ROOT / "docs" / "fleet-scale.md"), required=True,
                    metavar="PATH")
    ap.add_argument("--run", default=str(common.ARTIFACTS / "ratios.json"), help="the run's JSON")
    args = ap.parse_args(argv)
    write_doc(Path(args.write_doc), json.loads(Path(args.run).read_text()))
    print(f"[fleet] wrote the Control-node cost section of {args.write_doc} from {args.run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
