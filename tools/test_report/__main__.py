"""`make test`'s phase times: artifacts/reports/TESTS.md (docs/TESTS.md keeps the copy of the last full run).

    python -m tools.test_report begin                 # a new record (artifacts/reports/test-phases.json)
    python -m tools.test_report run NAME -- CMD ...   # run CMD, record NAME's seconds and exit code
    python -m tools.test_report together GROUP NAME=TARGET ... [--idle NAME=TARGET ...]
                                                      # run `make TARGET` (TARGET may add make variables,
                                                      # "test-unit UNIT=tests/unit/plugins") for each NAME
                                                      # side by side (each one's
                                                      # output in artifacts/reports/NAME.log, shown when it ends);
                                                      # those after --idle on idle CPU and disk only;
                                                      # record each NAME and GROUP's wall time
    python -m tools.test_report end                   # write TESTS.md: phases, total, the 15 slowest simulator tests
                                                      # and the 15 that used the most controller CPU;
                                                      # print the failed tests last; exits 1 if a phase failed

`begin` and `end` each time a fixed pure-Python loop (the machine's speed probe: the same work on every run, so
its CPU seconds say how fast this machine ran at that moment; every figure of the run scales with it, and on a
shared machine it changes by tens of percent in an afternoon), and the machine's fork probe: the CPU that a
forked child costs which touches its parent's 200,000 small objects and exits, as each of Ansible's task workers
does (Ansible forks one per task and host; on this machine that cost moves on its own, the loop's figure unchanged,
and the simulator tests' with it). TESTS.md shows both, at the start and the end of the run.

Each phase also records how busy the machine's cores were while it ran (/proc/stat, every process on the
machine counted: the simulated ranks' modules and engines are not children of the phase); TESTS.md shows it
per phase and, for the run, the CPU time in all and the wall time it would take on these cores if they were
never idle: how far scheduling alone could shorten the run.

When a phase fails, it and `end` print the failed tests last, where a log cut to its tail still shows them: each
failed simulator test with the assertion lines of its failure (from the JUnit XML), then every other pytest run's
FAILED and ERROR lines (from the members' logs). The lanes run side by side, so a lane's own summary is far up.

The simulator tests' own times come from the JUnit XML that `make test-integration` writes
(artifacts/reports/integration-junit.xml). A phase that fails still has its time recorded and TESTS.md
written; `run` then exits with the phase's code, so `make test` stops as before.

`together` is for the phases that share nothing and leave each other room (molecule, which waits on its pair's
cold start, and the real-vLLM lane): on a 2-core machine they take the wall time of the longest instead of the sum.
The total counts the group's wall time once; its members' own times are listed under it.

`--idle` members run under Linux's SCHED_IDLE policy and the idle I/O class (their children too): they get a core
and the disk only when nothing else wants them, so they take little from the members before ``--idle`` (not
nothing: measured, vLLM's install beside test_80's fleet set-up still made it ~10 % slower).
``make test`` runs vLLM's virtualenv install and lint that way beside the simulator tests' first and pair steps
(they fill those steps' moments of idle CPU), with the two halves of the unit tests beside them too, not idle (their
waits on threads and sockets would starve there): the checks fill idle cores instead of taking minutes of their own.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "artifacts" / "reports"
RECORD = REPORTS / "test-phases.json"
JUNIT = REPORTS / "integration-junit.xml"
OUT = REPORTS / "TESTS.md"
SLOWEST = 15
CPU_PROPERTY = "controller_cpu_s"  # a test case's property in the JUnit XML (tests/integration/conftest.py)
PROBE_N = 10**7  # the speed probe's loop: about half a second of CPU on this project's 2-core machine
FORK_PROBE = (40, 200_000)  # the fork probe: forks, and the parent's objects each child touches (a 65 MB parent)


def _load() -> dict:
    try:
        return json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return {"started": time.time(), "phases": []}


def _save(record: dict) -> None:
    REPORTS.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=1) + "\n")


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def speed_probe(n: int | None = None) -> float:
    """CPU seconds of a fixed loop: ``sum(i * i for i in range(n))``, n being PROBE_N unless given (lower is faster)."""
    start = time.process_time()
    sum(i * i for i in range(PROBE_N if n is None else n))
    return round(time.process_time() - start, 3)


def fork_probe(forks: int | None = None, objects: int | None = None) -> float:
    """CPU milliseconds per fork (parent and child, user and system) of a parent holding ``objects`` small dicts
    whose child reads each of them and exits at once: the copy-on-write and page-table work of an Ansible task
    worker, which the speed probe's loop does not see (lower is faster)."""
    forks, objects = forks or FORK_PROBE[0], objects or FORK_PROBE[1]
    heap = [{"i": i, "s": str(i)} for i in range(objects)]
    before = cpu_used()
    for _ in range(forks):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child: read the parent's objects (their reference counts change), leave
            for item in heap:
                item.get("i")
            os._exit(0)
        os.waitpid(pid, 0)
    return round(1000.0 * (cpu_used() - before) / forks, 1)


def cpu_used() -> float:
    """CPU seconds, user and system, of this process and its waited-for children: getrusage(2), which counts in
    microseconds where os.times() counts in clock ticks (10 ms: a few cheap forks could all round to nothing). The
    fork probe and each simulator test's controller CPU (tests/integration/conftest.py) are read with it."""
    import resource

    return sum(usage.ru_utime + usage.ru_stime
               for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def cpu_sample(stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """(busy, all) clock ticks of every core since boot, from the first line of /proc/stat (iowait counts as
    idle: a core waiting on the disk runs nothing); None where there is no /proc/stat."""
    try:
        with open(stat, encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 8:
        return None
    user, nice, system, idle, iowait, irq, softirq = (int(v) for v in fields[1:8])
    steal = int(fields[8]) if len(fields) > 8 else 0
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def cpu_between(before: tuple[int, int] | None, after: tuple[int, int] | None) -> dict:
    """The record's CPU fields of a phase: the cores' busy share (%) and their busy time (core-seconds)."""
    if before is None or after is None or after[1] <= before[1]:
        return {}
    busy, every = after[0] - before[0], after[1] - before[1]
    return {"cpu_busy_pct": round(100.0 * busy / every, 1),
            "cpu_busy_s": round(busy / os.sysconf("SC_CLK_TCK"), 1)}


def _start() -> tuple[float, tuple[int, int] | None]:
    """The clock and the cores' ticks at a phase's start, for :func:`_measured`."""
    return time.monotonic(), cpu_sample()


def _measured(start: tuple[float, tuple[int, int] | None]) -> dict:
    """A phase's record fields since ``start``: its wall seconds and how busy the cores were."""
    return {"seconds": round(time.monotonic() - start[0], 1), **cpu_between(start[1], cpu_sample())}


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def _cases(path: Path | None = None) -> list[tuple[str, float, str, float | None]]:
    """(test id, seconds, outcome, controller CPU seconds or None) of every test case of a JUnit XML file (``make
    test-integration``'s; the CPU is the ``controller_cpu_s`` property that tests/integration/conftest.py records)."""
    try:
        tree = ET.parse(path or JUNIT)
    except (OSError, ET.ParseError):
        return []
    rows = []
    for case in tree.iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        cpu = next((prop.get("value") for prop in case.iter("property") if prop.get("name") == CPU_PROPERTY), None)
        try:
            cpu = float(cpu) if cpu is not None else None
        except ValueError:
            cpu = None
        rows.append((name, float(case.get("time") or 0.0), outcome, cpu))
    return rows


def slowest_tests(path: Path | None = None, count: int = SLOWEST) -> list[tuple[str, float, str]]:
    """(test id, seconds, outcome) of the ``count`` slowest test cases of a JUnit XML file, slowest first."""
    rows = sorted(_cases(path), key=lambda r: -r[1])[:count]
    return [(name, seconds, outcome) for name, seconds, outcome, _cpu in rows]


def cpu_heaviest_tests(path: Path | None = None, count: int = SLOWEST) -> list[tuple[str, float, float]]:
    """(test id, controller CPU seconds, seconds) of the ``count`` test cases that used the most controller CPU, most
    first; the cases without the figure are left out."""
    rows = sorted((r for r in _cases(path) if r[3] is not None), key=lambda r: -r[3])[:count]
    return [(name, cpu, seconds) for name, seconds, _outcome, cpu in rows]


FAILED_SHOWN = 8  # failed simulator tests shown at the end, each with its last assertion lines
ASSERT_LINES = 6
# pytest's -ra line, a lane's prefix or none; its group is the test's id
SUMMARY_LINE = re.compile(r"^(?:\[[\w-]+\] )?(?:FAILED|ERROR) (\S+::\S+)")


def failed_tests(since: float = 0.0, junit: Path | None = None, logs: Path | None = None) -> list[str]:
    """What to print when the run failed: each failed or errored simulator test of the JUnit XML with the last
    ``E`` lines of its failure (up to FAILED_SHOWN tests), then the pytest summary lines (FAILED/ERROR) of every log
    in ``logs`` whose test the XML did not already name. Files older than ``since`` (an earlier run's) are left out."""
    lines, named = [], set()
    junit = junit or JUNIT
    try:
        cases = list(ET.parse(junit).iter("testcase")) if junit.stat().st_mtime >= since else []
    except (OSError, ET.ParseError):
        cases = []
    for case in cases:
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is None:
            continue
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name', '')}"
        named.add(name)
        if len(named) > FAILED_SHOWN:
            continue
        text = (bad.text or "").splitlines()
        said = [line for line in text if line.startswith("E ")][-ASSERT_LINES:] or [(bad.get("message") or "")[:300]]
        lines += [f"FAILED {name}", *(f"    {line}" for line in said)]
    if len(named) > FAILED_SHOWN:
        lines.append(f"... and {len(named) - FAILED_SHOWN} more failed simulator tests (artifacts/reports/"
                     "integration-junit.xml)")
    for log in sorted(path for path in (logs or REPORTS).glob("*.log") if path.stat().st_mtime >= since):
        for line in log.read_text(errors="replace").splitlines():
            found = SUMMARY_LINE.match(line)
            if found and found.group(1) not in named:
                lines.append(f"{log.stem}: {line[:240]}")
    return lines


def _start_and_end(record: dict, keys: tuple[str, str], figure: str) -> str:
    """"<figure> of CPU at the start of the run[ and <figure> at its end]" from a probe's begin and end values in the
    record (``keys``); "" when the record has neither."""
    found = [record[key] for key in keys if key in record]
    if not found:
        return ""
    return f"{figure.format(found[0])} of CPU at the start of the run" + (
        f" and {figure.format(found[1])} at its end" if len(found) == 2 else "")


def render(record: dict, commit: str, slow: list[tuple[str, float, str]],
           hungry: list[tuple[str, float, float]] = ()) -> str:
    phases = record.get("phases", [])
    total = sum(p["seconds"] for p in phases if not p.get("within"))
    failed = [p["name"] for p in phases if p["code"] != 0 and not p.get("within")]
    started = datetime.fromtimestamp(record.get("started", time.time()), timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cores = record.get("cores") or os.cpu_count() or 1
    lines = ["# make test: phase times", "",
             "Generated by `make test` (tools/test_report); docs/TESTS.md is the copy from the last full run.", "",
             f"- commit `{commit}`, started {started}, on {cores} cores",
             f"- total **{_clock(total)}** ({'green' if not failed else 'FAILED in ' + ', '.join(failed)})"]
    when = _start_and_end(record, ("probe_begin_s", "probe_end_s"), "{:.2f} s")
    if when:
        lines.append(f"- machine speed: a fixed pure-Python loop (the sum of i*i for i below {PROBE_N:,}) took {when} "
                     "(lower is faster; every figure here scales with it)")
    when = _start_and_end(record, ("fork_begin_ms", "fork_end_ms"), "{:.0f} ms")
    if when:
        lines.append(f"- fork cost: a child forked from a parent of {FORK_PROBE[1]:,} small objects, reading each and "
                     f"exiting (what each of Ansible's task workers does), took {when} (lower is faster; the "
                     "simulator tests' Ansible runs scale with it)")
    top = [p for p in phases if not p.get("within")]
    if top and all("cpu_busy_s" in p for p in top):
        busy = sum(p["cpu_busy_s"] for p in top)
        lines.append(f"- CPU: the machine's cores were busy {100.0 * busy / (cores * total or 1):.0f} % of the run, "
                     f"{_clock(busy)} of CPU time in all; on {cores} cores that are never idle, the same work "
                     f"takes {_clock(busy / cores)}")
    lines += ["", "| phase | time | exit | cores busy |", "|---|---|---|---|"]
    lines += [f"| {_phase_name(p)} | {_clock(p['seconds'])} | {p['code']} | {_busy(p)} |" for p in phases]
    lines += ["", f"## The {len(slow)} slowest simulator tests", "",
              "The simulator tests run in lanes (tests/support/lanes.py): the pairs' tests side by side, so a "
              "test's seconds are its wall time with the other pairs' tests running beside it.", "",
              "| test | seconds | outcome |", "|---|---|---|"]
    lines += [f"| `{name}` | {seconds:.0f} | {outcome} |" for name, seconds, outcome in slow]
    if hungry:
        lines += ["", f"## The {len(hungry)} simulator tests that used the most controller CPU", "",
                  "CPU seconds (user and system) of the test's pytest process and of every process it started and "
                  "waited for: its Ansible runs with their task workers and SSH clients, its own commands on the ranks; not the "
                  "ranks' side. A module-scoped fixture counts in the first test that uses it.", "",
                  "| test | controller CPU s | seconds |", "|---|---|---|"]
        lines += [f"| `{name}` | {cpu:.0f} | {seconds:.0f} |" for name, cpu, seconds in hungry]
    return "\n".join(lines) + "\n"


def _busy(phase: dict) -> str:
    """A phase's cell of the cores-busy column (a group's members share its cores: theirs is the group's)."""
    return f"{phase['cpu_busy_pct']:.0f} %" if "cpu_busy_pct" in phase else "-"


def _record(entries: list[dict], code: int) -> None:
    """Add ``entries`` to the record; a failing phase writes TESTS.md at once and prints the failed tests
    (``make test`` may stop after it, before `end`)."""
    record = _load()
    record["phases"] += entries
    _save(record)
    if code != 0:
        _write_tests_md(record)
        _print_failed(record)


def _write_tests_md(record: dict) -> None:
    OUT.write_text(render(record, _commit(), slowest_tests(), cpu_heaviest_tests()))


def _print_failed(record: dict) -> None:
    """This run's failed tests (failed_tests), each line after ``[test]``."""
    for line in failed_tests(since=record.get("started", 0.0)):
        print(f"[test] {line}")
    sys.stdout.flush()


def _phase_name(phase: dict) -> str:
    if phase.get("within"):
        return (f"&nbsp;&nbsp;{phase['name']} (in {phase['within']}"
                f"{', after ' + phase['after'] if phase.get('after') else ''}{', on idle CPU' if phase.get('idle') else ''})")
    if phase.get("members"):
        return f"{phase['name']}: {' ‖ '.join(phase['members'])}, side by side"
    return phase["name"]


_OUT = threading.Lock()  # a member's log shown whole, never cut by a line of a member shown live


def _show(name: str, code: int, seconds: float, log: Path) -> None:
    with _OUT:
        print(f"[test] ---- {name}: exit {code} after {_clock(seconds)} (its output, {log.relative_to(ROOT)}) ----",
              flush=True)
        sys.stdout.write(log.read_text(errors="replace"))
        print(f"[test] ---- end of {name} ----", flush=True)


def _tee(stream, log: Path) -> None:
    """Copy a member's output to the terminal as it comes and to its log."""
    with open(log, "wb") as handle:
        for line in iter(stream.readline, b""):
            handle.write(line)
            handle.flush()
            with _OUT:
                sys.stdout.flush()
                sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
    stream.close()


# ioprio_set(2) by architecture (Python has no wrapper); IOPRIO_WHO_PROCESS, and the idle class in the top bits.
IOPRIO_SET = {"x86_64": 251, "aarch64": 30}
IOPRIO_WHO_PROCESS, IOPRIO_IDLE = 1, 3 << 13


def _io_idle() -> None:
    """The disk only when no other process wants it (the idle I/O class; the kernel's mq-deadline and BFQ
    schedulers honour it). Best effort: elsewhere the member keeps its I/O priority."""
    import ctypes

    number = IOPRIO_SET.get(os.uname().machine)
    if number is not None:
        ctypes.CDLL(None).syscall(number, IOPRIO_WHO_PROCESS, 0, IOPRIO_IDLE)  # its result unread: best effort


def _idle() -> None:
    """In the child, before make starts: CPU and disk only when no other process wants them (inherited by its
    children). A pip install of vLLM writes gigabytes: at the default I/O priority it held up the simulator's
    image loads beside it even on idle CPU."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux: the lowest priority nice allows
        os.nice(19)
    _io_idle()


def together(group: str, pairs: list[str]) -> int:
    """Run ``make TARGET`` for each ``NAME=TARGET`` side by side, those after ``--idle`` on idle CPU only; record
    each and the group's wall time. ``NAME@OTHER=TARGET`` starts when the member OTHER (named before it) has ended,
    whatever its code: a target that needs what OTHER does first, while the rest of the group goes on. The group's
    code is the first failing member's (all members run to their end either way)."""
    idle_from = pairs.index("--idle") if "--idle" in pairs else len(pairs)
    members, after = [], {}
    for i, p in enumerate(pairs):
        if i == idle_from:
            continue
        name, sep, target = p.partition("=")
        name, at, other = name.partition("@")
        if not (sep and name and target) or (at and other not in [m[0] for m in members]):
            members = []
            break
        members.append((name, target, i > idle_from))
        if at:
            after[name] = other
    if not members:
        print(f"together {group}: expected NAME=TARGET or NAME@EARLIER_NAME=TARGET pairs, got {pairs}",
              file=sys.stderr)
        return 64
    REPORTS.mkdir(parents=True, exist_ok=True)
    make = shlex.split(os.environ.get("MAKE") or "make")
    start = _start()
    running = {}
    # With idle members, the first member's output is shown as it comes (a long phase is never silent), every
    # other member's when it ends (one check's lines are not cut into another's); without, every member's when it ends.
    live = any(idle for _n, _t, idle in members)

    def launch(position: int, name: str, target: str, idle: bool) -> None:
        log = REPORTS / f"{name}.log"
        argv = [*make, "--no-print-directory", *shlex.split(target)]
        if live and not idle and position == 0:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            pump = threading.Thread(target=_tee, args=(proc.stdout, log), daemon=True)
            pump.start()
        else:
            pump = None
            with open(log, "wb") as handle:
                proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        preexec_fn=_idle if idle else None)
        running[proc] = (name, log, time.monotonic(), pump)
        print(f"[test] {name}: started (make {target}) beside the others of {group}"
              f"{f' after {after[name]}' if name in after else ''}{' on idle CPU' if idle else ''}", flush=True)

    waiting = []
    for position, (name, target, idle) in enumerate(members):
        if name in after:
            waiting.append((position, name, target, idle))
        else:
            launch(position, name, target, idle)
    results = {}
    while running or waiting:
        ended = [proc for proc in running if proc.poll() is not None]
        if not ended:
            time.sleep(0.5)
        for proc in ended:
            name, log, begun, pump = running.pop(proc)
            results[name] = (proc.returncode, round(time.monotonic() - begun, 1))
            if pump:
                pump.join(timeout=5)
                print(f"[test] ---- {name}: exit {proc.returncode} after {_clock(results[name][1])} ----", flush=True)
            else:
                _show(name, proc.returncode, results[name][1], log)
        for entry in [w for w in waiting if after[w[1]] in results]:
            waiting.remove(entry)
            launch(*entry)
    codes = [results[name][0] for name, _t, _i in members]
    code = next((c for c in codes if c != 0), 0)
    _record([{"name": group, **_measured(start), "code": code, "members": [name for name, _t, _i in members]}]
            + [{"name": name, "seconds": results[name][1], "code": results[name][0], "within": group,
                **({"after": after[name]} if name in after else {}), **({"idle": True} if idle else {})}
               for name, _t, idle in members], code)
    return code


def main(argv: list[str]) -> int:
    if argv[:1] == ["begin"]:
        _save({"started": time.time(), "cores": os.cpu_count(), "probe_begin_s": speed_probe(),
               "fork_begin_ms": fork_probe(), "phases": []})
        return 0
    if argv[:1] == ["run"] and len(argv) >= 4 and argv[2] == "--":
        start = _start()
        code = subprocess.call(argv[3:])
        _record([{"name": argv[1], **_measured(start), "code": code}], code)
        return code
    if argv[:1] == ["together"] and len(argv) >= 3:
        return together(argv[1], argv[2:])
    if argv[:1] == ["end"]:
        record = _load()
        record["probe_end_s"] = speed_probe()
        record["fork_end_ms"] = fork_probe()
        _save(record)
        _write_tests_md(record)
        print(f"[test] phase times: {OUT.relative_to(ROOT)}")
        failed = [p["name"] for p in record.get("phases", []) if p["code"] != 0 and not p.get("within")]
        if failed:  # a phase whose failure did not stop make (its make line ignores errors) still fails the run
            _print_failed(record)
            print(f"[test] FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1 if failed else 0
    print(__doc__, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
