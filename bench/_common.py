"""Shared by the benchmarks in bench/: paths, Ansible runs (ad-hoc and playbooks) against the
simulator inventory, a command on a rank, and the peak-memory sampler of a module's process.

Importing this module has no side effect beyond putting the checkout and sim/ on sys.path.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "sim"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import _report  # noqa: E402  (bench/_report.py, beside this file)
from dspark_sim import drive  # noqa: E402  (sim/dspark_sim/drive.py: the simulator's CLI, a rank's commands, Ansible env)

GIB = 1 << 30
MIB = 1 << 20
WORK = Path(os.environ.get("BENCH_WORK_DIR", "/var/tmp/gb10-dspark-bench"))  # visible inside the ranks
INVENTORY = ROOT / "inventories" / "sim"
ARTIFACTS = ROOT / "artifacts" / "bench"


class BenchError(RuntimeError):
    """A benchmark step failed: no figure can be taken."""


def tool(name: str) -> str:
    """An executable of the virtualenv running this script (ansible, ansible-playbook)."""
    return drive.tool(name)


def ansible_env(**extra: str) -> dict:
    """The simulator's Ansible environment; ANSIBLE_NOCOLOR too, as the ``-o`` and recap parsers read plain text."""
    return drive.ansible_env(ANSIBLE_NOCOLOR="1", **extra)


# ---- peak memory of a module's process --------------------------------------------------------
def _processes(proc: Path):
    """(pid, its /proc folder, its command line) of every process in ``proc`` still there when read."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return
    for pid in entries:
        if not pid.isdigit():
            continue
        try:
            yield int(pid), proc / pid, (proc / pid / "cmdline").read_bytes()
        except OSError:
            continue


def scan_vmhwm(mark: str, proc: Path = Path("/proc")) -> dict[int, int]:
    """One look at ``proc``: {pid: VmHWM in KiB} of every process whose command line holds ``mark``."""
    found: dict[int, int] = {}
    needle = mark.encode()
    for pid, folder, cmdline in _processes(proc):
        if needle not in cmdline:
            continue
        try:
            for line in (folder / "status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    found[pid] = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return found


def peak_rss_while(fn, mark: str, interval: float = 0.02, proc: Path = Path("/proc")) -> tuple[object, dict[int, int]]:
    """Run fn(); meanwhile sample the VmHWM of every process whose command line holds ``mark``
    (the ranks share the host's PID namespace). Returns (fn's result, {pid: peak KiB})."""
    peaks: dict[int, int] = {}
    done = threading.Event()

    def sample():
        while not done.is_set():
            for pid, kib in scan_vmhwm(mark, proc).items():
                peaks[pid] = max(peaks.get(pid, 0), kib)
            time.sleep(interval)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        result = fn()
    finally:
        done.set()
        t.join()
    return result, peaks


# ---- CPU of the SSH masters (ControlPersist) ------------------------------------------------------
def ssh_master_ticks(proc: Path = Path("/proc")) -> dict[int, int]:
    """{pid: user + system clock ticks} of every persistent SSH master (``ssh: <control path> [mux]``) that
    lives in ``proc``. A master leaves the ssh client that started it, so RUSAGE_CHILDREN never counts it."""
    found: dict[int, int] = {}
    for pid, folder, cmdline in _processes(proc):
        if not (cmdline.startswith(b"ssh: ") and b"[mux]" in cmdline):
            continue
        try:
            fields = (folder / "stat").read_text().rsplit(")", 1)[1].split()
            found[pid] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        except (OSError, ValueError, IndexError):
            continue
    return found


def ticks_spent(before: dict[int, int], after: dict[int, int]) -> int:
    """Clock ticks the processes of ``after`` spent since ``before`` (a new process: all of its ticks;
    one that ended in between is not seen)."""
    return sum(t - before.get(pid, 0) if t >= before.get(pid, 0) else t for pid, t in after.items())


# ---- Ansible ---------------------------------------------------------------------------------
_ONELINE = re.compile(r"^(?P<host>\S+) \| (?P<status>SUCCESS|CHANGED|FAILED!) => (?P<json>\{.*\})\s*$")
_ONELINE_UNREACHABLE = re.compile(r"^(?P<host>\S+) \| UNREACHABLE!: (?P<msg>.*)$")
_RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$")


def parse_oneline(stdout: str) -> dict[str, dict]:
    """The ``-o`` output of an ad-hoc run: {host: {"status", "ok", "result"}}; an unreachable host
    has ``result`` {"msg": ...}."""
    hosts: dict[str, dict] = {}
    for line in stdout.splitlines():
        m = _ONELINE.match(line)
        if m:
            try:
                result = json.loads(m["json"])
            except ValueError:
                result = {"msg": f"unparsable result: {m['json'][:200]}"}
            status = m["status"].rstrip("!")
            hosts[m["host"]] = {"status": status, "ok": status in ("SUCCESS", "CHANGED"), "result": result}
            continue
        m = _ONELINE_UNREACHABLE.match(line)
        if m:
            hosts[m["host"]] = {"status": "UNREACHABLE", "ok": False, "result": {"msg": m["msg"]}}
    return hosts


def parse_recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP of ansible-playbook: {host: {"ok": n, "changed": n, "failed": n, ...}}."""
    recap: dict[str, dict[str, int]] = {}
    inside = False
    for line in stdout.splitlines():
        if line.startswith("PLAY RECAP"):
            inside = True
            continue
        if inside:
            m = _RECAP.match(line.strip())
            if m:
                recap[m["host"]] = {k: int(v) for k, v in (kv.split("=") for kv in m["counts"].split())}
    return recap


def adhoc(pattern: str, module: str, args: dict, forks: int | None = None, env: dict | None = None,
          timeout: float = 3600) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    """``ansible <pattern> --become -o -m <module> -a <json>`` on the simulator inventory (root on the
    ranks through the operator's sudo, as every play on a rank); the parsed results."""
    argv = [tool("ansible"), "-i", str(INVENTORY), pattern, "--become", "-o", "-m", module, "-a", json.dumps(args)]
    if forks:
        argv += ["-f", str(forks)]
    res = subprocess.run(argv, cwd=ROOT, env=ansible_env(**(env or {})), text=True, capture_output=True,
                         timeout=timeout, check=False)
    return res, parse_oneline(res.stdout)


def machine_cpu() -> tuple[int, int]:
    """(busy, total) clock ticks of every core of this machine, which the simulated ranks share."""
    return _report.proc_stat_cpu(Path("/proc/stat").read_text())


def children_cpu_s() -> float:
    """User and system CPU seconds of this process's waited-for children and their descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class PlaybookRun:
    argv: list[str]
    returncode: int
    seconds: float
    stdout: str
    stderr: str
    recap: dict[str, dict[str, int]] = field(default_factory=dict)
    junit: list[str] = field(default_factory=list)  # the junit callback's XML documents
    controller_cpu_s: float = 0.0  # ansible-playbook and its local children (local modules, ssh clients)
    ssh_masters_cpu_s: float = 0.0  # the persistent SSH masters' CPU during the run (outside RUSAGE_CHILDREN)
    machine_busy: float | None = None  # share of all cores busy during the run (ranks included)

    def tail(self, chars: int = 4000) -> str:
        return (self.stdout[-chars:] + "\n" + self.stderr[-chars // 2:]).strip()

    def changed(self) -> int:
        return sum(c.get("changed", 0) for c in self.recap.values())


def playbook(name: str, *extra: str, extra_vars: dict | None = None, junit_dir: Path | None = None,
             timeout: float = 3600) -> PlaybookRun:
    """``ansible-playbook -i inventories/sim playbooks/<name> ...``, timed from start to exit. With
    ``junit_dir`` the junit callback records each task's time there (read back into ``junit``)."""
    argv = [tool("ansible-playbook"), "-i", str(INVENTORY), name if "/" in name else f"playbooks/{name}", *extra]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    env = {}
    if junit_dir is not None:
        junit_dir.mkdir(parents=True, exist_ok=True)
        for old in junit_dir.glob("*.xml"):
            old.unlink()
        env = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.junit", "JUNIT_OUTPUT_DIR": str(junit_dir),
               "JUNIT_HIDE_TASK_ARGUMENTS": "true"}
    cpu0, busy0, masters0 = children_cpu_s(), machine_cpu(), ssh_master_ticks()
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=ROOT, env=ansible_env(**env), text=True, capture_output=True, timeout=timeout, check=False)
    seconds = time.monotonic() - t0
    cpu, busy = children_cpu_s() - cpu0, _report.busy_fraction(busy0, machine_cpu())
    masters = ticks_spent(masters0, ssh_master_ticks()) / os.sysconf("SC_CLK_TCK")
    junit = [p.read_text() for p in sorted(junit_dir.glob("*.xml"))] if junit_dir is not None else []
    return PlaybookRun(argv, res.returncode, seconds, res.stdout, res.stderr, parse_recap(res.stdout), junit,
                       controller_cpu_s=round(cpu, 2), ssh_masters_cpu_s=round(masters, 2), machine_busy=busy)


# ---- the simulator ---------------------------------------------------------------------------
def sim_cli(*args: str, timeout: float = 1800) -> str:
    """``python -m dspark_sim <args>``; its stdout. A failure is a BenchError."""
    res = drive.cli(*args, timeout=timeout)
    if res.returncode != 0:
        raise BenchError(f"dspark_sim {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res.stdout


def on_rank(rank, argv: list[str], check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run argv as root on a simulated rank (a ``dspark_sim.layout.Rank``), in its namespaces."""
    res = drive.run_on(rank, argv, timeout=timeout)
    if check and res.returncode != 0:
        raise BenchError(f"{rank.name}: `{shlex.join(argv)}` exited {res.returncode}: {res.stderr.strip()[-500:]}")
    return res
