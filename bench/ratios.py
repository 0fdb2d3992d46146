"""Benchmark: the collection's speed targets as ratios, each measured side by side in one run on the
pair simulator, written to artifacts/bench/ratios.json and artifacts/reports/PERFORMANCE.md (no figure by hand).

1. re-provisioning a converged pair vs a fresh provision of it (engine start-up delay 60 s on
   both ranks; fresh = after teardown.yml with the images removed): ratio ≤ 0.2, zero container
   restarts (docker inspect ID, StartedAt and RestartCount before and after, on both ranks);
2. staging a multi-GB synthetic archive on both ranks of a pair (gb10.dspark.image_identity, one
   ad-hoc run, -f 2) vs a bare `docker load -i` of it on one rank: ratio ≤ 1.25; a second staging
   (the image held: nothing loaded) within 3 s; the module's peak memory reported;
3. staging by relay (playbooks/identity.yml): the bytes the control node sends for a pair that lacks
   the image vs the archive's size, with a multi-GB synthetic archive: ratio ≤ 1.02; and a rollout to
   every pair with the control node's uplink capped by tc (--uplink-mbit) vs the physical limit
   pairs × archive / uplink: ratio ≤ 1.15;
4. playbooks/audit.yml on 8 pairs vs on 1 pair, same forks: ratio ≤ 2.5; and the one-call-per-rank
   audit vs bench/naive_audit.yml (one command task per fact) on 8 pairs: ratio ≤ 0.5;
5. playbooks/guard.yml (64 prompts × 128 tokens, concurrency 16) against the stand-in with a fixed
   per-token delay vs the theoretical server time: ratio ≤ 1.2;
6. provision.yml on 8 pairs, one failing at start-up, vs on the 7 others alone: ratio ≤ 1.1, the 7 at
   PASS (bench/fleet.py);
7. not a ratio: the control node's CPU seconds per pair for an audit and a converged re-provision at
   1, 2, 4 and 8 pairs, and a fleet audit projected to 100 and 1,000 pairs (bench/fleet.py; a table
   of artifacts/reports/PERFORMANCE.md; `bench/fleet.py --write-doc` puts it into docs/fleet-scale.md).

Run as root (the simulator needs it), usually through `make bench`:
    .venv/bin/python bench/ratios.py [--pairs 8] [--forks 16] [--only audit guard ...]
It brings the simulator up with --pairs pairs itself, provisions what it measures, and puts back
what it changed: the host_vars files it writes are removed, pair sim01 is provisioned again with
the site's engine environment, and pairs that did not serve before the run are torn down (with
their images when they had none). A missed target is reported, not an error: the exit code is
non-zero only when a measurement could not be taken. artifacts/reports/PERFORMANCE.md is only rewritten by a
complete run without errors; artifacts/bench/ratios.json always.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import _common as common  # bench/_common.py (this script's folder is on sys.path)
import fleet as fleet_bench
import _report as report
from dspark_sim import layout, network
from dspark_sim.image import _sha256_file
from tests.support import synthetic_archive

ROOT = common.ROOT
BENCH = ROOT / "bench"
INVENTORY = common.INVENTORY
OUT_JSON = common.ARTIFACTS / "ratios.json"
OUT_DOC = ROOT / "artifacts" / "reports" / "PERFORMANCE.md"  # outside git: provisioning refuses a dirty tree
WORK = common.WORK.with_name(common.WORK.name + "-ratios")  # beside image_load_memory's, visible in the ranks
PAIR = layout.Pair(1)
HEAD, WORKER = PAIR.head, PAIR.worker
MARK = "AnsiballZ_image_identity"
STAGE_TAG = "dspark-bench:ratios"

TARGETS = {"reprovision": 0.2, "staging": 1.25, "relay-bytes": 1.02, "rollout": 1.15, "audit-scaling": 2.5,
           "audit-naive": 0.5, "guard": 1.2, "isolation": fleet_bench.TARGET_ISOLATION,
           "rollout-capacity": fleet_bench.TARGET_ROLLOUT}
SECOND_STAGING_MAX_S = 3.0
GATE_SUITE_TASK = "Provision GB10 pairs: gb10.dspark.gate : Gate | Run the runtime gate suite"
ORDER = ["reprovision", "staging", "relay-bytes", "rollout", "audit-scaling", "audit-naive", "guard",
         "isolation", "rollout-capacity"]  # for the doc
TABLES = ["control-cpu"]  # figures that are not ratios: run["tables"][id], rendered by _report.render
GROUPS = {"reprovision": ["reprovision"], "staging": ["staging"], "relay": ["relay-bytes", "rollout"],
          "audit": ["audit-scaling", "audit-naive"], "guard": ["guard"], "isolation": ["isolation"],
          "control-cpu": ["control-cpu"], "rollout-capacity": ["rollout-capacity"]}
RELAY_TAG = "dspark-bench:relay"

BenchError = common.BenchError


def say(msg: str) -> None:
    print(f"[ratios] {msg}", flush=True)


# ---- the run's context --------------------------------------------------------------------------
@dataclass
class Bench:
    args: argparse.Namespace
    tmp: Path
    tree: Path  # a clean clone of HEAD: provision's wrapper-tree check refuses a dirty tree
    site: dict
    pin: dict
    cache: dict = field(default_factory=dict)

    @property
    def evidence(self) -> Path:
        return self.tmp / "evidence"  # the bench's evidence and reports stay out of artifacts/evidence

    def playbook(self, name: str, *extra: str, extra_vars: dict | None = None, junit: bool = False,
                 check: bool = True) -> common.PlaybookRun:
        ev = {"dspark_preflight_wrapper_path": str(self.tree), "dspark_evidence_dir": str(self.evidence),
              **(extra_vars or {})}
        run = common.playbook(name, *extra, extra_vars=ev, junit_dir=self.tmp / "junit" if junit else None)
        if check and run.returncode != 0:
            raise BenchError(f"{name} {' '.join(extra)} exited {run.returncode}:\n{run.tail()}")
        return run

    def engine_env(self, **overrides: str) -> dict:
        """The site's dspark_engine_extra_env with the stand-in knobs of one measurement on top
        (a host variable replaces the whole dict, so the site's entries are carried over)."""
        return {**(self.site.get("dspark_engine_extra_env") or {}), **overrides}


@contextmanager
def host_vars(entries: dict[str, dict]):
    """Write inventories/sim/host_vars/<rank>.yml for one measurement; removed whatever happens.
    An existing file is refused: its variables would change what is measured."""
    folder = INVENTORY / "host_vars"
    made_folder = not folder.exists()
    written: list[Path] = []
    try:
        for name, data in entries.items():
            path = folder / f"{name}.yml"
            if path.exists():
                raise BenchError(f"{path} exists; the benchmark needs ranks without host variables (remove it first)")
            folder.mkdir(exist_ok=True)
            path.write_text("# written by bench/ratios.py for one measurement; removed when it ends\n"
                            + yaml.safe_dump(data, sort_keys=True))
            written.append(path)
        yield
    finally:
        for path in written:
            path.unlink(missing_ok=True)
        if made_folder and folder.exists() and not any(folder.iterdir()):
            folder.rmdir()


# ---- what a rank holds ------------------------------------------------------------------------
def container(rank, name: str) -> dict | None:
    """The engine container's ID, start time, restart count and whether it runs (None: no container)."""
    res = common.on_rank(rank, ["docker", "container", "inspect", "--format",
                                "{{.Id}} {{.State.StartedAt}} {{.RestartCount}} {{.State.Running}}", name], check=False)
    if res.returncode != 0:
        if "no such" in (res.stderr + res.stdout).lower():
            return None
        raise BenchError(f"{rank.name}: docker container inspect {name} failed: {res.stderr.strip()[-300:]}")
    cid, started, count, running = res.stdout.split()
    return {"id": cid, "started_at": started, "restart_count": int(count), "running": running == "true"}


def image_present(rank, image_id: str) -> bool:
    return common.on_rank(rank, ["docker", "image", "inspect", "--format", "{{.Id}}", image_id],
                          check=False).returncode == 0


def remove_image(rank, image_id: str) -> None:
    common.on_rank(rank, ["docker", "image", "rm", "--force", image_id], check=False, timeout=600)
    if image_present(rank, image_id):
        raise BenchError(f"{rank.name}: image {image_id} is still present after docker image rm")


def fleet_state(b: Bench, pairs: list[layout.Pair]) -> dict[int, dict]:
    """Per pair: whether its head serves (the engine container runs) and whether both ranks hold the
    pinned image, before the run changes anything."""
    name = b.site.get("dspark_container_name", "dspark_vllm")
    out = {}
    for p in pairs:
        head = container(p.head, name)
        out[p.index] = {"serving": bool(head and head["running"]),
                        "image": all(image_present(r, b.pin["image_id"]) for r in p.ranks)}
    return out


def module_floor(b: Bench) -> float:
    """Seconds one module task takes on the head, whatever the module does: bench/module_floor.yml
    runs ansible.builtin.ping ten times in one loop; the loop's time from the junit callback, over ten."""
    run = b.playbook("bench/module_floor.yml", "--limit", HEAD.name, junit=True)
    loops = [t for doc in run.junit for name, t in report.slowest_tasks(doc, limit=1) if "ping, ten times" in name]
    if not loops:
        raise BenchError(f"bench/module_floor.yml reported no loop time:\n{run.tail()}")
    return round(loops[0] / 10, 3)


# ---- 1. re-provision vs fresh provision -------------------------------------------------------------
def measure_reprovision(b: Bench) -> dict:
    name = b.site.get("dspark_container_name", "dspark_vllm")
    delay = b.args.startup_delay
    env = b.engine_env(DSPARK_SIM_STARTUP_DELAY_S=f"{delay:g}")
    archive = Path(b.site["dspark_image_archive"])
    with host_vars({r.name: {"dspark_engine_extra_env": env} for r in PAIR.ranks}):
        say(f"re-provision: teardown of {PAIR.group} with its images, then a fresh provision (start-up delay {delay:g} s)")
        b.playbook("teardown.yml", "--limit", PAIR.group, extra_vars={"dspark_teardown_remove_images": True})
        for r in PAIR.ranks:
            if image_present(r, b.pin["image_id"]):
                raise BenchError(f"{r.name}: the pinned image survived teardown.yml with dspark_teardown_remove_images")
        fresh = b.playbook("provision.yml", "--limit", PAIR.group, junit=True)
        before = {r.name: container(r, name) for r in PAIR.ranks}
        say("re-provision: provision.yml again on the converged pair")
        again = b.playbook("provision.yml", "--limit", PAIR.group, junit=True)
        after = {r.name: container(r, name) for r in PAIR.ranks}
    if not all(before.values()):
        raise BenchError(f"the fresh provision left a rank without its engine container: {before}")
    per_rank = report.restarts(before, after)
    slow_again = sorted((t for doc in again.junit for t in report.slowest_tasks(doc)), key=lambda t: -t[1])
    slow_fresh = sorted((t for doc in fresh.junit for t in report.slowest_tasks(doc)), key=lambda t: -t[1])
    notes = [
        f"Fresh: teardown.yml --limit {PAIR.group} -e dspark_teardown_remove_images=true, then provision.yml: "
        f"the stand-in archive ({archive.stat().st_size / common.MIB:.0f} MiB) is copied to and loaded on both "
        f"ranks and the engine starts with DSPARK_SIM_STARTUP_DELAY_S={delay:g} on both ranks.",
        "Re-provision: provision.yml again on the converged pair; container restarts are counted on both ranks "
        "from docker inspect (ID, StartedAt, RestartCount) before and after it.",
        "Slowest tasks of the re-provision: " + "; ".join(f"{n} ({s} s)" for n, s in slow_again[:5]) + ".",
    ]
    ran = sum(report.tasks_run(doc) for doc in again.junit)
    floor = module_floor(b)
    causes = [
        f"The re-provision changed nothing and still ran {ran} tasks (every check of preflight, image, profile, "
        f"engine and gate, and the evidence pack). On this machine one task that runs a module costs {floor:.2f} s "
        f"whatever the module does (bench/module_floor.yml: ansible.builtin.ping on {HEAD.name}, ten times); "
        f"the gate's suite alone takes {dict(slow_again).get(GATE_SUITE_TASK, 0.0):.2f} s.",
        cpu_cause("The re-provision", again.seconds, again.controller_cpu_s, again.machine_busy or 0.0),
        f"The fresh provision's {fresh.seconds:.2f} s hold the {delay:g} s start-up delay; a GB10's cold start of "
        "12 to 60 minutes is the denominator the same re-provision would have on a real pair.",
    ]
    return report.row(
        "reprovision", "Re-provision of a converged pair vs a fresh provision",
        (f"re-provision of {PAIR.group}", again.seconds), (f"fresh provision of {PAIR.group}", fresh.seconds),
        TARGETS["reprovision"], notes=notes, causes=causes,
        checks=[report.check("container restarts", sum(per_rank.values()), 0, "==")],
        extra={"restarts per rank": per_rank, "tasks changed by the re-provision": again.changed(),
               "tasks run by the re-provision": ran, "one module task on a rank (s)": floor,
               "control-node CPU, re-provision (s)": again.controller_cpu_s,
               "machine busy, re-provision": again.machine_busy,
               "tasks changed by the fresh provision": fresh.changed(), "engine start-up delay (s)": delay,
               "stand-in archive (bytes)": archive.stat().st_size,
               "slowest tasks of the re-provision": slow_again[:5], "slowest tasks of the fresh provision": slow_fresh[:5]})


# ---- 2. staging on both ranks vs a bare docker load ---------------------------------------------------
def stage(args: dict, ranks: tuple = PAIR.ranks) -> tuple[dict[str, dict], dict[int, int], float]:
    """image_identity on ``ranks`` (both ranks of sim01 by default) at once, in one ad-hoc run with
    a fork per rank, with the peak memory of the module's processes; pipelining off so that the
    module's process carries its name."""
    pattern = ",".join(r.name for r in ranks)
    t0 = time.monotonic()
    (res, hosts), peaks = common.peak_rss_while(
        lambda: common.adhoc(pattern, "gb10.dspark.image_identity", args, forks=len(ranks),
                             env={"ANSIBLE_PIPELINING": "0"}), MARK)
    seconds = time.monotonic() - t0
    missing = [r.name for r in ranks if r.name not in hosts]
    failed = {h: v["result"].get("msg") for h, v in hosts.items() if not v["ok"]}
    if res.returncode != 0 or missing or failed:
        raise BenchError(f"image_identity on {pattern} failed (exit {res.returncode}; no result from {missing}; "
                         f"failures {failed}):\n{res.stdout[-2000:]}\n{res.stderr[-1000:]}")
    return {h: v["result"] for h, v in hosts.items()}, peaks, seconds


def bare_load(ranks: tuple, path: str) -> float:
    """Seconds for `docker load -i path` on every rank of ``ranks`` at once (one SSH command each)."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(ranks)) as pool:  # on_rank raises on a failed load; list() re-raises it
        list(pool.map(lambda r: common.on_rank(r, ["docker", "load", "-i", path], timeout=3600), ranks))
    return time.monotonic() - t0


def measure_staging(b: Bench) -> dict:
    gib = b.args.archive_gib
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    made = None
    try:
        t0 = time.monotonic()
        made = synthetic_archive.write(WORK / "stage.tar", tag=STAGE_TAG, layer_bytes=int(gib * common.GIB),
                                       salt="bench-ratios")
        size = Path(made["path"]).stat().st_size
        say(f"staging: wrote a {size / common.GIB:.2f} GiB archive in {time.monotonic() - t0:.1f} s")
        # image_identity refuses to load an archive the pin has no sha256 for.
        pin = dict(b.pin, image_tag=made["tag"], image_id=made["image_id"], image_manifest_digest=None,
                   image_archive_sha256=_sha256_file(Path(made["path"])))
        args = {"rank": "{{ inventory_hostname }}", "pin": pin, "path": made["path"], "check_labels": False}
        for r in PAIR.ranks:
            remove_image(r, made["image_id"])
        say(f"staging: bare docker load on {HEAD.name}")
        bare = bare_load((HEAD,), made["path"])
        if not image_present(HEAD, made["image_id"]):
            raise BenchError(f"{HEAD.name}: docker load did not leave {made['image_id']}")
        remove_image(HEAD, made["image_id"])
        # What this machine can do: two bare loads at once (its ranks share cores and one disk), and
        # the module on one rank alone (its own cost over a bare load).
        say(f"staging: bare docker load on both ranks of {PAIR.group} at once")
        both_bare = bare_load(PAIR.ranks, made["path"])
        for r in PAIR.ranks:
            remove_image(r, made["image_id"])
        say(f"staging: image_identity on {HEAD.name} alone")
        one_rank = stage(args, (HEAD,))[2]
        remove_image(HEAD, made["image_id"])
        say(f"staging: image_identity on both ranks of {PAIR.group}")
        first, peaks, staged = stage(args)
        not_loaded = [h for h, r in first.items() if not r.get("loaded")]
        if not_loaded:
            raise BenchError(f"the first staging did not load on {not_loaded}: the image was not absent")
        say("staging: the same call again (the image is held)")
        second, peaks2, again = stage(args)
        reloaded = [h for h, r in second.items() if r.get("loaded") or r.get("changed")]
    finally:
        if made:
            for r in PAIR.ranks:
                try:
                    remove_image(r, made["image_id"])
                except BenchError as exc:
                    say(f"cleanup: {exc}")
        shutil.rmtree(WORK, ignore_errors=True)
    peak = max(peaks.values(), default=0)
    checks = [report.check("second staging", round(again, 2), SECOND_STAGING_MAX_S, "<=", "s"),
              report.check("ranks that loaded again in the second staging", len(reloaded), 0, "==")]
    contention, overhead = report.ratio(both_bare, bare), report.ratio(one_rank, bare)
    causes = [
        f"On this machine two bare `docker load -i` at once, one per rank, take {both_bare:.2f} s, {contention:.3f}× "
        f"one load: the simulated ranks share its {os.cpu_count()} cores and one disk, where a GB10 pair's ranks "
        "each load on their own. Staging on both ranks against those two bare loads at once: "
        f"{report.ratio(staged, both_bare):.3f}.",
        f"image_identity on {HEAD.name} alone takes {one_rank:.2f} s, {overhead:.3f}× the bare load on that rank "
        "(Ansible's start, the archive's identity read from its tar headers, the stream into the engine, the tag).",
    ]
    notes = [
        f"Numerator: gb10.dspark.image_identity on both ranks of {PAIR.group} at once (one ad-hoc `ansible "
        f"{HEAD.name},{WORKER.name} -f 2` run) with a pin built from the synthetic archive's identity: it reads the archive's ID, "
        "streams the archive into each rank's engine, tags the image and asserts the tag. Denominator: `docker load "
        f"-i` of the same archive run on {HEAD.name} itself (in its namespaces, as root). Both start with the image absent on the ranks; the "
        "archive is one file under BENCH_WORK_DIR, which both ranks read.",
        "The role's copy of dspark_image_archive from the control node is not in this figure: the pin names the "
        "real image, which a synthetic archive cannot match.",
        "Both ranks' dockerds share the host's disk and cores, so the two loads of the numerator compete for them. "
        "The numerator is the whole ad-hoc run, Ansible's own start included; the denominator is one command on the rank.",
        "Ansible pipelining is off for both stagings so that the module's process carries its name "
        f"({MARK}) for the memory sampling.",
    ]
    if peak == 0:
        notes.append("No sample of the module's process was taken: the peak memory is unknown.")
    return report.row(
        "staging", f"Staging a {gib:g} GiB archive on both ranks vs a bare docker load on one",
        (f"image_identity on both ranks of {PAIR.group}", staged), (f"docker load on {HEAD.name}", bare),
        TARGETS["staging"], notes=notes, checks=checks, causes=causes,
        extra={"archive (bytes)": size,
               "two bare docker loads at once, one per rank (s)": round(both_bare, 2),
               "two bare loads at once / one bare load": contention,
               "image_identity on one rank alone (s)": round(one_rank, 2),
               "image_identity on one rank / one bare load": overhead,
               "staging on both ranks / two bare loads at once": report.ratio(staged, both_bare), "module peak RSS, first staging (MiB)": round(peak / 1024, 1),
               "module processes sampled, first staging": len(peaks),
               "module peak RSS, second staging (MiB)": round(max(peaks2.values(), default=0) / 1024, 1),
               "second staging (s)": round(again, 2),
               "docker load throughput (MiB/s)": round(size / common.MIB / bare, 1),
               "staging throughput per rank (MiB/s)": round(size / common.MIB / staged, 1),
               "image store": sorted({str(r.get("image_store")) for r in first.values()})})


# ---- 3. staging by relay: the control node's bytes, and a fleet rollout at the uplink's limit -------
def unstage(b: Bench, groups: list[str], extra_vars: dict | None = None) -> None:
    """The pairs lack the image again: teardown.yml removes their engines, the pinned image (the
    pin of ``extra_vars`` when given) and its staged archive."""
    b.playbook("teardown.yml", "--limit", ",".join(groups),
               extra_vars={"dspark_teardown_remove_images": True, **(extra_vars or {})})


def staged_run(b: Bench, groups: list[str], extra_vars: dict | None = None) -> tuple[common.PlaybookRun, int]:
    """playbooks/identity.yml (preflight and the image role, under each pair's lock) on ``groups``, and
    the bytes the control node sent into the management bridge meanwhile."""
    before = network.control_sent_bytes()
    run = b.playbook("identity.yml", "-f", str(b.args.forks), "--limit", ",".join(groups), extra_vars=extra_vars,
                     junit=True)
    return run, network.control_sent_bytes() - before


COPY_TASK = "Copy the archive"  # the image role's copy from the control node, in a junit task name


def task_times(run: common.PlaybookRun) -> list[tuple[str, float]]:
    """Every task of a run with its slowest host's seconds (the junit callback), slowest first."""
    return [t for doc in run.junit for t in report.slowest_tasks(doc, limit=100)]


def copy_seconds(tasks: list[tuple[str, float]]) -> float | None:
    """The control node's copy of the archive, from :func:`task_times` (None: it did not run)."""
    return next((t for name, t in tasks if COPY_TASK in name), None)


def fabric_rx_bytes(pair: layout.Pair) -> int:
    """Bytes the worker has received on its end of the pair's primary fabric link."""
    worker_if = next(w for _a, _b, _h, w, kind in pair.fabric_links() if kind == "primary")
    res = subprocess.run(["ip", "-n", pair.worker.netns, "-s", "-j", "link", "show", "dev", worker_if],
                         text=True, capture_output=True, check=False)
    if res.returncode != 0:
        raise BenchError(f"{pair.worker.name}: no counters for {worker_if}: {res.stderr.strip()}")
    return int(json.loads(res.stdout)[0]["stats64"]["rx"]["bytes"])


def stand_in_labels(b: Bench) -> dict:
    """The labels of the pinned stand-in image as the head holds it (a synthetic archive carries them
    to pass the image role's label check)."""
    out = common.on_rank(HEAD, ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", b.pin["image_id"]])
    return json.loads(out.stdout) or {}


def measure_relay_bytes(b: Bench) -> dict:
    gib = b.args.archive_gib
    labels = stand_in_labels(b)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    made = over = None
    try:
        made = synthetic_archive.write(WORK / "relay.tar", tag=RELAY_TAG, layer_bytes=int(gib * common.GIB),
                                       labels=labels, arch=b.pin["image_architecture"], salt="bench-relay")
        size = Path(made["path"]).stat().st_size
        # The role's own path with a pin for the synthetic image: preflight, the copy to the head, the relay
        # over the pair's link, the sha256 on the worker, the load and the tag on both ranks.
        pin = dict(b.pin, image_tag=RELAY_TAG, image_id=made["image_id"], image_manifest_digest=None,
                   image_archive_sha256=_sha256_file(Path(made["path"])))
        over = {"dspark_pin": pin, "dspark_image_archive": made["path"], "dspark_image_staging": "relay"}
        say(f"relay: {PAIR.group} stages a {size / common.GIB:.2f} GiB archive by relay")
        rx0 = fabric_rx_bytes(PAIR)
        run, sent = staged_run(b, [PAIR.group], over)
        relayed = fabric_rx_bytes(PAIR) - rx0
        held = {r.name: image_present(r, made["image_id"]) for r in PAIR.ranks}
        if not all(held.values()):
            raise BenchError(f"identity.yml left the synthetic image missing: {held}")
        say("relay: the same run again (both ranks hold the image)")
        again, sent_again = staged_run(b, [PAIR.group], over)
    finally:
        if over:
            try:
                unstage(b, [PAIR.group], over)
            except BenchError as exc:
                say(f"cleanup: {exc}")
        shutil.rmtree(WORK, ignore_errors=True)
    copy = copy_seconds(task_times(run))
    notes = [
        f"playbooks/identity.yml on {PAIR.group} with dspark_image_staging=relay and a pin for a {gib:g} GiB synthetic "
        "archive that carries the stand-in's labels: preflight, one copy from the control node to the head, the relay "
        "from the head to the worker over the pair's link (the worker checks the pin's sha256), the load and the tag "
        "on both ranks. Both ranks lacked the image.",
        f"Numerator: the management bridge's transmit counter (/sys/class/net/{layout.BRIDGE}/statistics/tx_bytes) "
        "across the run: everything the control node sent to the ranks, SSH, Ansible's modules and the copy. "
        "Denominator: the archive's size.",
        f"The same run again with the image held sends {sent_again:,} bytes ({report.ratio(sent_again, size):.4f}× "
        "the archive): Ansible's own module traffic, the same for an archive of any size.",
    ]
    return report.row(
        "relay-bytes", f"Bytes the control node sends for a pair lacking the image vs the archive ({gib:g} GiB)",
        (f"sent during identity.yml on {PAIR.group}", sent), ("archive", size), TARGETS["relay-bytes"], unit="bytes",
        notes=notes,
        checks=[report.check("bytes the worker received over the pair's link / archive",
                             report.ratio(relayed, size), 1.02, "<=")],
        causes=[f"A converged run of the same playbook sends {sent_again:,} bytes: Ansible's module traffic, "
                "not the archive."],
        extra={"archive (bytes)": size, "sent by the control node (bytes)": sent,
               "received by the worker over the pair's link (bytes)": relayed,
               "sent by the control node, image held (bytes)": sent_again,
               "identity.yml, lacking the image (s)": round(run.seconds, 2),
               "identity.yml, image held (s)": round(again.seconds, 2),
               "copy to the head (s)": round(copy, 2) if copy is not None else None,
               "control node to head (MiB/s)": round(size / common.MIB / copy, 1) if copy else None})


def measure_rollout(b: Bench) -> dict:
    pairs, rate = layout.pairs(b.args.pairs), b.args.uplink_mbit
    groups = [p.group for p in pairs]
    size = Path(b.site["dspark_image_archive"]).stat().st_size
    say(f"rollout: teardown of {len(pairs)} pairs with their images and staged archives")
    unstage(b, groups)
    limit = len(pairs) * size * 8 / (rate * 1e6)
    say(f"rollout: identity.yml on {len(pairs)} pairs with the uplink capped at {rate:g} Mbit/s "
        f"(the limit: {len(pairs)} × {size:,} bytes at {rate:g} Mbit/s = {limit:.1f} s)")
    with network.uplink_cap(rate):
        run, sent = staged_run(b, groups)
    held = [r.name for p in pairs for r in p.ranks if not image_present(r, b.pin["image_id"])]
    if held:
        raise BenchError(f"the rollout left the image missing on {held}")
    tasks = task_times(run)
    copy = copy_seconds(tasks) or 0.0
    rest = sorted(((name.split(": ", 1)[-1], t) for name, t in tasks if COPY_TASK not in name),
                  key=lambda nt: -nt[1])
    notes = [
        f"All {len(pairs)} pairs lacked the image (teardown.yml with dspark_teardown_remove_images); playbooks/identity.yml "
        f"on all of them with -f {b.args.forks} and relay staging: the control node copies the stand-in archive once "
        "per pair, to its head, and each head relays it to its worker over the pair's link; then both ranks load it.",
        f"The uplink is the control node's side of the management bridge, capped with a tc token bucket (tbf) at "
        f"{rate:g} Mbit/s for the run. Denominator: the physical limit, pairs × archive size / uplink = "
        f"{len(pairs)} × {size:,} bytes × 8 / {rate:g} Mbit/s.",
        f"The control node sent {sent:,} bytes, {report.ratio(sent, len(pairs) * size):.3f}× pairs × archive.",
    ]
    return report.row(
        "rollout", f"Rollout of the image to {len(pairs)} pairs, uplink capped at {rate:g} Mbit/s, vs the uplink's limit",
        (f"identity.yml on {len(pairs)} pairs", run.seconds), ("pairs × archive / uplink", limit), TARGETS["rollout"],
        notes=notes,
        causes=[f"The copy to the heads took {copy:.2f} s, {report.ratio(copy, limit):.3f}× the limit: the token bucket "
                "counts frames with their TCP/IP headers, and SSH frames the archive; on the bridge the control node "
                f"sent {report.ratio(sent, len(pairs) * size):.3f}× pairs × archive in all.",
                f"The other {run.seconds - copy:.2f} s of the run do not use the uplink: tasks before and after the copy "
                f"that run for all {2 * len(pairs)} ranks on this machine's {os.cpu_count()} shared cores, where each "
                "GB10 rank has its own: " + "; ".join(f"{n} {t:.2f} s" for n, t in rest[:4])
                + f"; {max(0, len(rest) - 4)} more tasks {sum(t for _n, t in rest[4:]):.2f} s."],
        extra={"archive (bytes)": size, "uplink cap (Mbit/s)": rate, "sent by the control node (bytes)": sent,
               "sent / (pairs × archive)": report.ratio(sent, len(pairs) * size),
               "copy to the heads (s)": round(copy, 2),
               "uplink use during the copy (Mbit/s)": round(len(pairs) * size * 8 / 1e6 / copy, 1) if copy else None,
               "slowest tasks": rest[:5]})


# ---- 4. audits --------------------------------------------------------------------------------------
def audit_times(b: Bench) -> dict:
    """audit.yml on 1 pair and on every pair, and naive_audit.yml on every pair, all with the same
    forks: a warm-up of each, then ``--audit-repeats`` interleaved rounds; medians."""
    if "audit" in b.cache:
        return b.cache["audit"]
    forks = ["-f", str(b.args.forks)]
    ev = {"dspark_audit_report_dir": str(b.tmp / "audit")}

    def audit(*limit: str) -> common.PlaybookRun:
        return b.playbook("audit.yml", *forks, *limit, extra_vars=ev)  # converged: every pair OK, exit 0

    def naive() -> common.PlaybookRun:
        return b.playbook("bench/naive_audit.yml", *forks)

    def floor(*limit: str) -> common.PlaybookRun:  # Ansible's own cost of ten pings per rank, on the same ranks
        return b.playbook("bench/module_floor.yml", *forks, *limit)

    say("audit: warm-up (SSH connections)")
    audit()
    naive()
    runs: dict[str, list[common.PlaybookRun]] = {"one": [], "every": [], "naive": [], "floor-one": [], "floor-every": []}
    for i in range(b.args.audit_repeats):
        say(f"audit: round {i + 1} of {b.args.audit_repeats}")
        runs["one"].append(audit("--limit", PAIR.group))
        runs["every"].append(audit())
        runs["naive"].append(naive())
    say("audit: Ansible's floor, ten pings per rank, on 1 pair and on every pair")
    for _round in range(2):
        runs["floor-one"].append(floor("--limit", PAIR.group))
        runs["floor-every"].append(floor())
    counts = json.loads((b.tmp / "audit" / "audit.json").read_text()).get("counts")
    out = {k: [r.seconds for r in v] for k, v in runs.items()}
    out.update(counts=counts, median={k: statistics.median(r.seconds for r in v) for k, v in runs.items()},
               cpu={k: statistics.median(r.controller_cpu_s for r in v) for k, v in runs.items()},
               busy={k: statistics.median(r.machine_busy or 0.0 for r in v) for k, v in runs.items()})
    b.cache["audit"] = out
    return out


def cpu_cause(what: str, seconds: float, cpu_s: float, busy: float) -> str:
    """One measured sentence on how a run used this machine's cores."""
    cores = os.cpu_count() or 1
    return (f"{what}: {seconds:.2f} s, during which this machine's {cores} cores were {busy:.0%} busy "
            f"(ranks, their dockerds and engines, and the control node together); ansible-playbook and its "
            f"local children used {cpu_s:.2f} s of CPU.")


def _runs(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def measure_audit_scaling(b: Bench) -> dict:
    t = audit_times(b)
    n = b.args.pairs
    floor_ratio = report.ratio(t["median"]["floor-every"], t["median"]["floor-one"])
    return report.row(
        "audit-scaling", f"Auditing {n} pairs vs auditing 1 pair (same forks)",
        (f"audit.yml on {n} pairs", t["median"]["every"]), (f"audit.yml on {PAIR.group}", t["median"]["one"]),
        TARGETS["audit-scaling"],
        notes=[f"playbooks/audit.yml with -f {b.args.forks} on {n} pairs and with --limit {PAIR.group}; the median "
               f"of {b.args.audit_repeats} interleaved runs each, after a warm-up run; every run exited 0 (all pairs OK).",
               f"Every rank runs its own sshd and dockerd on this machine's {os.cpu_count()} cores."],
        causes=[f"Ansible's own floor grows faster on this machine: bench/module_floor.yml (ansible.builtin.ping ten "
                f"times in one loop, nothing else) takes {t['median']['floor-every']:.2f} s on the {2 * n} ranks of "
                f"{n} pairs against {t['median']['floor-one']:.2f} s on the 2 ranks of {PAIR.group}, "
                f"{floor_ratio:.3f}×, above the audit's {report.ratio(t['median']['every'], t['median']['one']):.3f}×: "
                "every rank's Python and sshd run on the same cores, so any task costs more per rank as ranks are "
                "added, which a fleet of GB10s, each rank on its own CPU, does not.",
                cpu_cause(f"audit.yml on {n} pairs (median)", t["median"]["every"], t["cpu"]["every"], t["busy"]["every"]),
                cpu_cause("audit.yml on 1 pair (median)", t["median"]["one"], t["cpu"]["one"], t["busy"]["one"])],
        extra={f"audit.yml on {n} pairs (s, each run)": _runs(t["every"]),
               "audit.yml on 1 pair (s, each run)": _runs(t["one"]), "last verdicts": t["counts"],
               f"module_floor.yml on {n} pairs (s, each run)": _runs(t["floor-every"]),
               "module_floor.yml on 1 pair (s, each run)": _runs(t["floor-one"]),
               f"module_floor.yml, {n} pairs / 1 pair": floor_ratio,
               f"control-node CPU, audit.yml on {n} pairs (s, median)": t["cpu"]["every"],
               "control-node CPU, audit.yml on 1 pair (s, median)": t["cpu"]["one"],
               f"machine busy, audit.yml on {n} pairs (median)": t["busy"]["every"],
               "machine busy, audit.yml on 1 pair (median)": t["busy"]["one"]})


def measure_audit_naive(b: Bench) -> dict:
    t = audit_times(b)
    n = b.args.pairs
    return report.row(
        "audit-naive", f"One call per rank vs a naive audit of separate shell tasks ({n} pairs)",
        (f"audit.yml on {n} pairs", t["median"]["every"]), (f"bench/naive_audit.yml on {n} pairs", t["median"]["naive"]),
        TARGETS["audit-naive"],
        notes=["bench/naive_audit.yml reads what gb10.dspark.rank_audit reads in one call with one command task per "
               "fact: docker image ls, docker container inspect, the profile env file, sha256sum of the runtime "
               "manifest, the model revision marker, and on the head curl /v1/models and /metrics.",
               "audit.yml also resolves each pair's profile, judges the pair and writes the report; the naive "
               "playbook does none of that, so the ratio is an upper bound.",
               f"Same forks (-f {b.args.forks}); the median of {b.args.audit_repeats} interleaved runs each."],
        causes=[cpu_cause(f"audit.yml on {n} pairs (median)", t["median"]["every"], t["cpu"]["every"], t["busy"]["every"]),
                cpu_cause(f"naive_audit.yml on {n} pairs (median)", t["median"]["naive"], t["cpu"]["naive"],
                          t["busy"]["naive"])],
        extra={f"naive_audit.yml on {n} pairs (s, each run)": _runs(t["naive"]),
               f"audit.yml on {n} pairs (s, each run)": _runs(t["every"]),
               f"control-node CPU, naive_audit.yml on {n} pairs (s, median)": t["cpu"]["naive"],
               f"machine busy, naive_audit.yml on {n} pairs (median)": t["busy"]["naive"]})


# ---- 5. the guard against the theoretical server time --------------------------------------------
def max_num_seqs(b: Bench) -> int:
    catalog = yaml.safe_load((ROOT / "roles" / "profile" / "vars" / "main.yml").read_text())["__dspark_profile_catalog"]
    return int(catalog[b.site.get("dspark_profile", "production")]["max_num_seqs"])


def measure_guard(b: Bench) -> dict:
    delay, concurrency = b.args.token_delay, b.args.guard_concurrency
    path = b.evidence / PAIR.group.removeprefix("pair_") / "serving-guard.json"
    path.unlink(missing_ok=True)
    with host_vars({HEAD.name: {"dspark_engine_extra_env": b.engine_env(DSPARK_SIM_TOKEN_DELAY_S=f"{delay:g}")}}):
        say(f"guard: provision {PAIR.group} with DSPARK_SIM_TOKEN_DELAY_S={delay:g} on the head")
        b.playbook("provision.yml", "--limit", PAIR.group)
        say(f"guard: guard.yml at concurrency {concurrency}")
        run = b.playbook("guard.yml", "--limit", PAIR.group, extra_vars={"dspark_guard_concurrency": concurrency},
                         check=False)
    if not path.exists():
        raise BenchError(f"guard.yml wrote no {path} (exit {run.returncode}):\n{run.tail()}")
    doc = json.loads(path.read_text())
    if run.returncode != 0 or doc.get("status") != "PASS":
        raise BenchError(f"the guard did not pass (exit {run.returncode}, status {doc.get('status')}): "
                         f"{doc.get('errors', [])[:5]}")
    tokens = [int(c["usage"]["completion_tokens"]) for c in doc["completions"]]
    slots = min(concurrency, max_num_seqs(b))
    theory = report.guard_theory(tokens, slots, delay, prefill_s=0.0)
    elapsed = float(doc["elapsed_s"])
    short = sum(1 for t in tokens if t < max(tokens))
    notes = [
        f"Numerator: the guard module's own elapsed_s (serving-guard.json): {len(tokens)} completions at concurrency "
        f"{concurrency}, including the {len(tokens)} /tokenize calls it makes first.",
        f"Denominator: the stand-in releases each generated token DSPARK_SIM_TOKEN_DELAY_S={delay:g} s apart and "
        "spends nothing per prompt (no prefill cost: sim/engine/dspark_engine/engine.py sleeps once per token), and "
        f"serves up to max_num_seqs={max_num_seqs(b)} requests at once. The theoretical server time is the "
        f"makespan of the guard's requests, in its order, through {slots} slots, each taking its own "
        f"completion_tokens × {delay:g} s: {theory['scheduled_s']:.2f} s.",
        f"The issue's nominal figure, ceil({len(tokens)}/{concurrency}) = {theory['waves']} waves × "
        f"{theory['longest']} tokens × {delay:g} s = {theory['nominal_s']:.2f} s, overstates the work: {short} "
        "accuracy answers stop at EOS after a few tokens. The stricter scheduled figure is the denominator.",
    ]
    return report.row(
        "guard", f"Guard {len(tokens)} × {theory['longest']} at concurrency {concurrency} vs the theoretical server time",
        ("guard module elapsed_s", elapsed), ("theoretical server time", theory["scheduled_s"]), TARGETS["guard"],
        notes=notes,
        extra={"guard.yml wall time (s)": round(run.seconds, 2), "nominal theoretical time (s)": theory["nominal_s"],
               "ratio to the nominal time": report.ratio(elapsed, theory["nominal_s"]) if theory["nominal_s"] else None,
               "completion tokens": theory["tokens"], "requests shorter than the longest": short,
               "per-token delay (s)": delay, "slots": slots})


MEASUREMENTS = [  # the order they run in: the audits first, on the fleet as the first provision left it
    ("control-cpu", fleet_bench.measure_control_cpu),  # a table, not a row
    ("audit-scaling", measure_audit_scaling),
    ("audit-naive", measure_audit_naive),
    ("guard", measure_guard),
    ("reprovision", measure_reprovision),
    ("staging", measure_staging),
    ("relay-bytes", measure_relay_bytes),
    ("isolation", lambda b: fleet_bench.measure_isolation(  # leaves every pair serving
        b, host_vars, lambda rank: image_present(rank, b.pin["image_id"]))),
    ("rollout-capacity", fleet_bench.measure_rollout_capacity),  # leaves every pair serving the pinned release
    ("rollout", measure_rollout),  # last: it tears every pair down (restore puts back what served)
]


# ---- putting the simulator back ---------------------------------------------------------------------
def restore(b: Bench, before: dict[int, dict]) -> None:
    """sim01 serves with the site's engine environment again (when it served before); pairs that did
    not serve before are torn down, with their images when they held none."""
    if before.get(PAIR.index, {}).get("serving"):
        say(f"restore: provision {PAIR.group} with the site's engine environment")
        b.playbook("provision.yml", "--limit", PAIR.group)
    idle = [i for i, s in before.items() if not s["serving"]]
    for remove_images in (True, False):
        group = [f"pair_sim{i:02d}" for i in idle if (not before[i]["image"]) == remove_images]
        if group:
            say(f"restore: teardown of {', '.join(group)} (images removed: {remove_images})")
            b.playbook("teardown.yml", "--limit", ",".join(group),
                       extra_vars={"dspark_teardown_remove_images": remove_images})


# ---- facts about the run -------------------------------------------------------------------------------
def machine() -> dict:
    try:
        mem = report.meminfo_total_bytes(Path("/proc/meminfo").read_text())
    except OSError:
        mem = None
    return {"cores": os.cpu_count(), "memory_bytes": mem, "kernel": platform.release(),
            "python": platform.python_version()}


def commit() -> dict:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], text=True, capture_output=True, check=False).stdout.strip()

    return {"sha": git("rev-parse", "HEAD") or "unknown",
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def command(argv: list[str]) -> str:
    exe = Path(sys.executable)
    exe_text = os.path.relpath(exe, ROOT) if ROOT in exe.parents else str(exe)
    cmd = shlex.join([exe_text, "bench/ratios.py", *argv])
    return f"make bench (which runs {cmd})" if os.environ.get("MAKELEVEL") else cmd


def sim_pairs() -> int:
    try:
        return int(json.loads(common.sim_cli("status", timeout=300)).get("pairs") or 0)
    except (BenchError, ValueError):
        return 0


def print_row(r: dict) -> None:
    say(f"{r['name']}: {report.part_text(r['numerator'])} / {report.part_text(r['denominator'])} = {r['ratio']:.3f} "
        f"(target ≤ {r['target']}): {'met' if r['met'] else 'MISSED'}")
    for c in r["checks"]:
        say(f"  {report.check_text(c)}: {'met' if c['met'] else 'MISSED'}")
    for w in r["why"]:
        say(f"  why: {w}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/ratios.py", description=__doc__.split("\n\n", maxsplit=1)[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--pairs", type=int, default=8, help="simulated pairs (the fleet audit runs on all of them)")
    ap.add_argument("--forks", type=int, default=16, help="Ansible forks for the provisions and every audit")
    ap.add_argument("--archive-gib", type=float, default=float(os.environ.get("BENCH_ARCHIVE_GIB", "4")),
                    help="GiB of the synthetic archive staged (the default comes from BENCH_ARCHIVE_GIB, else 4)")
    ap.add_argument("--startup-delay", type=float, default=60.0,
                    help="DSPARK_SIM_STARTUP_DELAY_S of the re-provision measurement, on both ranks")
    ap.add_argument("--token-delay", type=float, default=0.02, help="DSPARK_SIM_TOKEN_DELAY_S of the guard measurement")
    ap.add_argument("--guard-concurrency", type=int, default=16, help="dspark_guard_concurrency")
    ap.add_argument("--uplink-mbit", type=float, default=50.0,
                    help="the control node's uplink cap (Mbit/s) during the fleet rollout")
    ap.add_argument("--audit-repeats", type=int, default=3, help="timed rounds of each audit (the median is used)")
    ap.add_argument("--isolation-repeats", type=int, default=1,
                    help="runs of each side of the isolation measurement (the fastest of each is used)")
    ap.add_argument("--cpu-repeats", type=int, default=2,
                    help="rounds of the control-node CPU measurement at each pair count (the median is used)")
    ap.add_argument("--carry", metavar="RATIOS_JSON",
                    help="with --only: take the rows and tables not measured now from this earlier run's JSON, "
                         "marked as carried over, so that a complete artifacts/reports/PERFORMANCE.md is written")
    ap.add_argument("--only", nargs="+", choices=sorted(GROUPS), metavar="NAME",
                    help=f"measure only these ({', '.join(sorted(GROUPS))}); artifacts/reports/PERFORMANCE.md is then left alone")
    ap.add_argument("--keep-fleet", action="store_true",
                    help="leave the pairs as the run leaves them (no restore provision or teardown)")
    args = ap.parse_args(argv)
    if min(args.pairs, args.forks, args.audit_repeats, args.guard_concurrency, args.isolation_repeats,
           args.cpu_repeats) < 1:
        ap.error("--pairs, --forks and every --*-repeats and --guard-concurrency must be at least 1")
    if args.archive_gib <= 0 or args.token_delay <= 0 or args.uplink_mbit <= 0 or args.startup_delay < 0:
        ap.error("--archive-gib, --token-delay and --uplink-mbit must be positive, --startup-delay not negative")
    return args


def carry(run: dict, earlier: dict, source: str) -> None:
    """Complete ``run`` with the rows and tables of an ``earlier`` run that it did not measure, each
    marked as carried over from it (``run["carried"]`` names that run and what came from it)."""
    have = {r["id"] for r in run["results"]}
    taken = []
    for r in earlier.get("results", []):
        if r["id"] in ORDER and r["id"] not in have:
            run["results"].append({**r, "carried": True})
            taken.append(r["id"])
    for tid, table in (earlier.get("tables") or {}).items():
        if tid in TABLES and tid not in run["tables"]:
            run["tables"][tid] = {**table, "carried": True}
            taken.append(tid)
    run["results"].sort(key=lambda r: ORDER.index(r["id"]))
    if taken:
        run["carried"] = {"source": source, "date": earlier["date"], "commit": earlier["commit"],
                          "command": earlier["command"], "ids": taken}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bench/ratios.py: must run as root (the simulator needs it)", file=sys.stderr)
        return 2
    wanted = [m for m in ORDER + TABLES if not args.only or any(m in GROUPS[g] for g in args.only)]
    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.monotonic()
    results: list[dict] = []
    tables: dict[str, dict] = {}
    errors: list[str] = []
    pairs_before = sim_pairs()
    tmp = Path(tempfile.mkdtemp(prefix="gb10-dspark-ratios-"))
    try:
        say(f"simulator: up with {args.pairs} pairs (it had {pairs_before})")
        common.sim_cli("up", "--pairs", str(args.pairs))
        tree = tmp / "wrapper" / "gb10-dspark"
        subprocess.run(["git", "clone", "--quiet", "--local", "--no-hardlinks", str(ROOT), str(tree)], check=True)
        site = yaml.safe_load((INVENTORY / "group_vars" / "all" / "site.yml").read_text())
        pin = yaml.safe_load((INVENTORY / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]
        b = Bench(args, tmp, tree, site, pin)
        fleet = (layout.pairs(args.pairs)
                 if any(m.startswith("audit") or m in ("rollout", "isolation", "control-cpu", "rollout-capacity")
                        for m in wanted) else [PAIR])
        before = fleet_state(b, fleet)
        try:
            say(f"provision: {', '.join(p.group for p in fleet)} with -f {args.forks}")
            b.playbook("provision.yml", "-f", str(args.forks), "--limit", ",".join(p.group for p in fleet))
            for mid, fn in MEASUREMENTS:
                if mid not in wanted:
                    continue
                try:
                    row = fn(b)
                except (BenchError, OSError, ValueError, KeyError, subprocess.SubprocessError) as exc:
                    errors.append(f"{mid}: {exc}")
                    say(f"{mid}: ERROR {exc}")
                    continue
                if mid in TABLES:
                    tables[mid] = row
                    say(f"{mid}: {json.dumps(row)[:2000]}")
                    continue
                results.append(row)
                print_row(row)
        finally:
            if args.keep_fleet:
                say("--keep-fleet: the pairs are left as the run left them")
            else:
                try:
                    restore(b, before)
                except (BenchError, OSError, subprocess.SubprocessError) as exc:
                    errors.append(f"restore: {exc}")
                    say(f"restore: ERROR {exc}")
    except (BenchError, OSError, ValueError, KeyError, subprocess.SubprocessError) as exc:
        errors.append(str(exc))
        say(f"ERROR {exc}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results.sort(key=lambda r: ORDER.index(r["id"]))
    run = {
        "command": command(argv), "date": started, "duration_s": round(time.monotonic() - t0, 1),
        "commit": commit(), "machine": machine(),
        "settings": {"pairs": args.pairs, "forks": args.forks, "archive_gib": args.archive_gib,
                     "startup_delay_s": args.startup_delay, "token_delay_s": args.token_delay,
                     "guard_concurrency": args.guard_concurrency, "audit_repeats": args.audit_repeats,
                     "uplink_mbit": args.uplink_mbit, "isolation_repeats": args.isolation_repeats,
                     "cpu_repeats": args.cpu_repeats},
        "results": results, "tables": tables, "errors": errors,
    }
    if args.carry:
        try:
            carry(run, json.loads(Path(args.carry).read_text()), args.carry)
        except (OSError, ValueError, KeyError) as exc:
            errors.append(f"--carry {args.carry}: {exc}")
    OUT_JSON.parent.mkdir(parents=True, exist_ok=True)
    OUT_JSON.write_text(json.dumps(run, indent=2) + "\n")
    say(f"wrote {OUT_JSON.relative_to(ROOT)}")
    if [r["id"] for r in run["results"]] == ORDER and sorted(run["tables"]) == sorted(TABLES) and not errors:
        OUT_DOC.parent.mkdir(parents=True, exist_ok=True)
        OUT_DOC.write_text(report.render(run))
        say(f"wrote {OUT_DOC.relative_to(ROOT)}: {sum(r['met'] for r in run['results'])} of {len(run['results'])} "
            "targets met")
    else:
        say(f"{OUT_DOC.relative_to(ROOT)} left as it was: " + ("errors" if errors else "a partial run (--only)"))
    if pairs_before and pairs_before != args.pairs:
        say(f"the simulator keeps {args.pairs} pairs (it had {pairs_before}): `make sim-up PAIRS={pairs_before}` resizes it")
    for e in errors:
        say(f"error: {e.splitlines()[0] if e else e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
