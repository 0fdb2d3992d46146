"""Integration tests run against the real pair simulator: namespaces, dockerds, sshds, SSH."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simhelpers import PAIRS, UP_ARGS, fleet2, inventory_of, layout, sim_cli  # noqa: E402


# ---- lanes: the pairs' tests run side by side (tests/support/lanes.py) --------------------------------
# A test that works on one pair asks for it as ``pair_a`` (sim01), ``pair_b`` (sim02) or ``pair_c`` (sim03, the
# second fleet's first pair); a test that asks for ``sim`` itself works on the whole fleet. `--lane a` and `--lane b`
# run the one-pair tests of one pair, in two pytest processes at once, each pair's tests in file order; `--lane c`
# runs the files of the second fleet (sim03 to sim06, inventories/sim-fleet2: whole-fleet runs there never reach
# sim01 or sim02) beside them, then the one-pair tests of pair_c, on sim03 as those files left it; `--lane first`
# and `--lane last` run the first fleet's whole-fleet files alone, before and after them. `--lane all` (the
# default) runs everything in one process, in file order but for pair_c's tests, which come right after the second
# fleet's files there too.
FLEET_FIRST = ("test_10_simulated_bed.py",)
FLEET2_FILES = ("test_80_fleet.py", "test_82_rollout.py")
FLEET_LAST = ("test_90_teardown.py",)
# Two lanes of one-pair tests on the first fleet, not more (a third, tried, made the lanes longer, not shorter); the
# second fleet's lane fills the moments they leave a core idle (waits on cold starts, drains, timeouts), and once its
# whole-fleet files have ended, takes some one-pair tests of its own (pair_c), so that the three lanes end together
# rather than two running on alone with a core partly idle.
PAIR_LANES = {"pair_a": "a", "pair_b": "b", "pair_c": "c"}
LANES = ("all", "first", "a", "b", "c", "last")


def pytest_addoption(parser):
    parser.addoption("--lane", choices=LANES, default="all",
                     help="which simulator tests this process runs (tests/support/lanes.py runs the lanes)")


def fleet_files_first(items: list, lanes: dict) -> list:
    """``items`` with pair_c's tests moved to right after the second fleet's files: those files meet the second
    fleet as the session brought it up, and pair_c's tests take sim03 as they left it, never the other way round."""
    late = [item for item in items
            if lanes[item.nodeid] == "c" and Path(str(item.fspath)).name not in FLEET2_FILES]
    moved = {id(item) for item in late}
    rest = [item for item in items if id(item) not in moved]
    fleet = [at for at, item in enumerate(rest) if Path(str(item.fspath)).name in FLEET2_FILES]
    at = fleet[-1] + 1 if fleet else len(rest)
    return rest[:at] + late + rest[at:]


def lane_of(item) -> str:
    """first or last for a test of a whole-fleet file, c for one of the second fleet's, a, b or c for a test that asks
    for one pair only (pair_a, pair_b, pair_c)."""
    name = Path(str(item.fspath)).name
    if name in FLEET_FIRST:
        return "first"
    if name in FLEET2_FILES:
        return "c"
    if name in FLEET_LAST:
        return "last"
    wants = set(item.fixturenames)
    direct = set(item._fixtureinfo.argnames)
    pairs = set(PAIR_LANES) & wants
    if "sim" not in wants:
        return "a"  # touches no pair: either lane may run it
    if "sim" in direct or len(pairs) != 1:
        raise pytest.UsageError(f"{item.nodeid}: a test outside {', '.join(FLEET_FIRST + FLEET2_FILES + FLEET_LAST)} "
                                f"works on one pair: ask for pair_a, pair_b or pair_c (it asks for {sorted(pairs) or 'neither'}"
                                f"{' and for sim' if 'sim' in direct else ''})")
    return PAIR_LANES[pairs.pop()]


@pytest.fixture(scope="session")
def sim(request):
    """The simulated fleet (the first one's pairs; the second fleet's are simhelpers.fleet2()). One process
    (--lane all) brings both down and up at the start and down at the end; the lanes share them: `first` brings
    them down and up, `a`, `b` and `c` find them up, `last` takes them down."""
    if os.geteuid() != 0:
        pytest.fail("the simulator needs root")
    lane = request.config.getoption("--lane")
    if lane in ("all", "first"):
        sim_cli("down")  # start from nothing: a fleet left up by someone else may hold stale images
        sim_cli(*UP_ARGS)
    pairs = layout.pairs(PAIRS)
    if lane in (*PAIR_LANES.values(), "c", "last"):
        missing = [r.name for p in pairs + fleet2() for r in p.ranks if not (r.dir / "run" / "init.pid").exists()]
        if missing:
            pytest.fail(f"--lane {lane} expects the simulator up (--lane first brings it up); not up: {missing}")
    yield pairs
    if lane in ("all", "last"):
        sim_cli("down", check=False)


@pytest.fixture(scope="session")
def pair_a(sim):
    """Pair sim01, for a test that works on it alone (lane a)."""
    return sim[0]


@pytest.fixture(scope="session")
def pair_b(sim):
    """Pair sim02, for a test that works on it alone (lane b)."""
    return sim[1]


@pytest.fixture(scope="session")
def pair_c(sim):
    """Pair sim03, the second fleet's first, for a one-pair test of lane c: it runs after that fleet's whole-fleet
    files (test_80, test_82), on the pair as they left it, with that fleet's inventory (simhelpers.inventory_of)."""
    return fleet2()[0]


@pytest.fixture(scope="session")
def clean_tree(tmp_path_factory):
    """A clean clone of HEAD to deploy from: the wrapper-tree check needs one, and the working
    tree under test may be mid-edit (untracked files are refused, as they should be)."""
    import subprocess

    from simhelpers import ROOT

    dest = tmp_path_factory.mktemp("wrapper") / "gb10-dspark"
    subprocess.run(["git", "clone", "--quiet", "--local", "--no-hardlinks", str(ROOT), str(dest)], check=True)
    return dest


@pytest.fixture(scope="session")
def control_node(tmp_path_factory, clean_tree):
    """README.md's control node: the built artefact installed into a fresh collections path and a
    fresh virtualenv with the control-node requirements and dspark (tests/integration/control_node.py)."""
    from control_node import install

    return install(tmp_path_factory.mktemp("control-node"), clean_tree)


@pytest.fixture
def host_vars():
    """Per-rank variables for one test (the stand-in's faults are set on the rank where they happen)."""
    written = []

    def put(rank, data: dict):
        inventory = inventory_of(rank)
        path = inventory / "host_vars" / f"{rank.name}.yml"
        path.parent.mkdir(exist_ok=True)
        merged = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
        merged.update(data)
        # Atomically: the other lane's Ansible runs read the same inventory folder at any moment.
        temp = inventory / f".{rank.name}.yml.{os.getpid()}.tmp"
        temp.write_text(yaml.safe_dump(merged))
        os.replace(temp, path)
        written.append(path)

    yield put
    for p in written:
        p.unlink(missing_ok=True)


# The fault matrix: tests claim rows with @pytest.mark.fault("<id>"); with DSPARK_RELIABILITY_REPORT
# set (make test-integration), the run writes the matrix with what it observed to that file.
from simhelpers import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT))
from tests.support import reliability  # noqa: E402

_MATRIX = reliability.load_matrix(Path(__file__).with_name("fault_matrix.yml"))


def pytest_collection_modifyitems(session, config, items):
    lane = config.getoption("--lane")
    lanes = {item.nodeid: lane_of(item) for item in items}  # every run checks that each test has its lane
    if lane != "all":
        keep = [item for item in items if lanes[item.nodeid] == lane]
        dropped = [item for item in items if item not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    items[:] = fleet_files_first(items, lanes)
    for item in items:
        for mark in item.iter_markers("fault"):
            reliability.claim(_MATRIX, item.nodeid, tuple(mark.args))


def pytest_runtest_logreport(report):
    outcome = reliability.outcome_of(report)
    if outcome is not None:
        reliability.record(_MATRIX, report.nodeid, outcome, report.duration)


def pytest_sessionfinish(session, exitstatus):
    part = os.environ.get("DSPARK_RELIABILITY_PART")
    if part:  # one lane of tests/support/lanes.py: its claims and outcomes, merged into the report by the runner
        import json

        Path(part).parent.mkdir(parents=True, exist_ok=True)
        Path(part).write_text(json.dumps(reliability.dump(_MATRIX), indent=1) + "\n")
        return
    target = os.environ.get("DSPARK_RELIABILITY_REPORT")
    if not target or not any(r.observed for r in _MATRIX):
        return
    import datetime
    import subprocess

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], text=True,
                            capture_output=True, check=False).stdout.strip() or "unknown"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "make test-integration"
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(reliability.render(_MATRIX, when=when, command=command, commit=commit) + "\n")


# ---- each test's controller CPU, for docs/TESTS.md ------------------------------------------------------------------
# The CPU seconds (user and system) of this pytest process and of every process it started and reaped while the test
# ran, setup and teardown included: its Ansible runs with their task workers and SSH clients, its own commands on the ranks. The
# ranks' side (their modules, engines and dockerds) is not counted: those are not this process's children. A
# module-scoped fixture counts in the first test that uses it, as its seconds do. tools/test_report reads the value
# from the JUnit XML (a property of the test case).
from tools.test_report.__main__ import CPU_PROPERTY, cpu_used  # noqa: E402

_CPU_START = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item.stash[_CPU_START] = cpu_used()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if _CPU_START in item.stash:  # before the teardown's report is made: the JUnit XML takes the properties from it
        item.user_properties.append((CPU_PROPERTY, f"{cpu_used() - item.stash[_CPU_START]:.1f}"))
