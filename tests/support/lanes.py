"""Run the simulator tests in lanes: the whole-fleet files alone first, then the one-pair tests side by side
(one pytest process per pair: sim01, sim02) with the second fleet's files beside them (sim03 to sim06, their own
inventory: lane c), then the whole-fleet files that end the run (tests/integration/conftest.py says which test
belongs where). A fleet is a set of independent pairs; so are the tests of its two simulated pairs, and on this
machine's two cores one pair's Ansible run leaves room for the other's; the second fleet's runs, which wait on
cold starts, drains and timeouts much of the time, fill what the two leave idle.

    python -m tests.support.lanes [pytest options...]      # what `make test-integration` runs
    python -m tests.support.lanes --steps first,pairs ...  # some of the steps (first, pairs, last), in that order

Every lane runs whatever happened before it (a failed lane does not stop the next: `last` brings the
simulator down). The lanes' JUnit files are merged into artifacts/reports/integration-junit.xml and their
fault-matrix outcomes into the report that DSPARK_RELIABILITY_REPORT names: every lane's that is on disk, so a
run of `--steps last` after one of `--steps first,pairs` reports the whole suite (a run that starts with the
first step forgets every lane of an earlier run first). `make test` runs the steps that way, in two parts, so
that the unit tests run beside the last step alone, which leaves a core idle. Each line a lane prints is prefixed
with its name; the exit status is the first non-zero lane's, else 0.
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "artifacts" / "reports"
JUNIT = REPORTS / "integration-junit.xml"
MATRIX = ROOT / "tests" / "integration" / "fault_matrix.yml"
STEPS = {"first": ("first",), "pairs": ("a", "b", "c"), "last": ("last",)}  # lanes of a step run at the same time
ALL_LANES = [lane for step in STEPS.values() for lane in step]


def _pump(name: str, stream, out, lock: threading.Lock) -> None:
    for line in iter(stream.readline, ""):
        with lock:
            out.write(f"[{name}] {line}")
            out.flush()
    stream.close()


def run_step(lanes: tuple[str, ...], extra: list[str], out=sys.stdout) -> dict[str, int]:
    """Start each lane of the step, stream its lines with its name, and wait for all of them."""
    lock = threading.Lock()
    procs, pumps = {}, []
    for lane in lanes:
        env = dict(os.environ, DSPARK_RELIABILITY_PART=str(REPORTS / f"reliability-{lane}.json"))
        argv = [sys.executable, "-m", "pytest", "--lane", lane, "--durations=15",
                f"--junitxml={REPORTS / f'integration-junit-{lane}.xml'}", *extra, "tests/integration"]
        procs[lane] = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, bufsize=1)
        pump = threading.Thread(target=_pump, args=(lane, procs[lane].stdout, out, lock), daemon=True)
        pump.start()
        pumps.append(pump)
    codes = {lane: proc.wait() for lane, proc in procs.items()}
    for pump in pumps:
        pump.join()
    return codes


def merge_junit(parts: list[Path], dest: Path) -> None:
    """One JUnit document holding every lane's test suites (tools/test_report reads it)."""
    merged = ET.Element("testsuites")
    for part in parts:
        try:
            root = ET.parse(part).getroot()
        except (OSError, ET.ParseError):
            continue
        for suite in ([root] if root.tag == "testsuite" else list(root.iter("testsuite"))):
            merged.append(suite)
    dest.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(merged).write(dest, encoding="utf-8", xml_declaration=True)


def merge_reliability(parts: list[Path], target: Path) -> bool:
    """The fault-matrix report from every lane's claims and outcomes; False when no lane observed a row."""
    sys.path.insert(0, str(ROOT))
    from tests.support import reliability

    rows = reliability.load_matrix(MATRIX)
    for part in parts:
        if part.is_file():
            reliability.merge(rows, json.loads(part.read_text()))
    if not any(r.observed for r in rows):
        return False
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], text=True,
                            capture_output=True, check=False).stdout.strip() or "unknown"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(reliability.render(rows, when=when, command="make test-integration", commit=commit) + "\n")
    return True


def steps_of(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the steps to run, in suite order; the pytest options left): ``--steps a,b`` picks them, default all."""
    if "--steps" not in argv:
        return list(STEPS), argv
    at = argv.index("--steps")
    if at + 1 >= len(argv):
        raise SystemExit("--steps needs a value: a comma-separated list of " + ", ".join(STEPS))
    chosen = [s.strip() for s in argv[at + 1].split(",") if s.strip()]
    unknown = [s for s in chosen if s not in STEPS]
    if unknown or not chosen:
        raise SystemExit(f"--steps: unknown step(s) {unknown or chosen}; the steps are " + ", ".join(STEPS))
    return [s for s in STEPS if s in chosen], argv[:at] + argv[at + 2:]


def main(argv: list[str]) -> int:
    REPORTS.mkdir(parents=True, exist_ok=True)
    steps, argv = steps_of(argv)
    lanes = [lane for step in steps for lane in STEPS[step]]
    # nothing from an earlier run is merged: a run from the first step forgets every lane, a later part its own
    for lane in ALL_LANES if steps[0] == "first" else lanes:
        for stale in (REPORTS / f"integration-junit-{lane}.xml", REPORTS / f"reliability-{lane}.json"):
            stale.unlink(missing_ok=True)
    codes: dict[str, int] = {}
    for step in steps:
        codes.update(run_step(STEPS[step], argv))
    merge_junit([REPORTS / f"integration-junit-{lane}.xml" for lane in ALL_LANES], JUNIT)
    target = os.environ.get("DSPARK_RELIABILITY_REPORT")
    if target:
        merge_reliability([REPORTS / f"reliability-{lane}.json" for lane in ALL_LANES], Path(target))
    # pytest exits 5 when a lane collected no test: a lane with nothing to run has not failed.
    failed = {lane: code for lane, code in codes.items() if code not in (0, 5)}
    print("lanes: " + ", ".join(f"{lane} exit {codes[lane]}" for lane in lanes), flush=True)
    return next(iter(failed.values()), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
