"""Integration tests run against the real pair simulator: namespaces, dockerds, sshds, SSH."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simhelpers import INVENTORY, PAIRS, layout, sim_cli  # noqa: E402


@pytest.fixture(scope="session")
def sim():
    if os.geteuid() != 0:
        pytest.fail("the simulator needs root")
    sim_cli("down")  # start from nothing: a fleet left up by someone else may hold stale images
    sim_cli("up", "--pairs", str(PAIRS))
    yield layout.pairs(PAIRS)
    sim_cli("down", check=False)


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
        path = INVENTORY / "host_vars" / f"{rank.name}.yml"
        path.parent.mkdir(exist_ok=True)
        merged = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
        merged.update(data)
        path.write_text(yaml.safe_dump(merged))
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
    for item in items:
        for mark in item.iter_markers("fault"):
            reliability.claim(_MATRIX, item.nodeid, tuple(mark.args))


def pytest_runtest_logreport(report):
    outcome = reliability.outcome_of(report)
    if outcome is not None:
        reliability.record(_MATRIX, report.nodeid, outcome, report.duration)


def pytest_sessionfinish(session, exitstatus):
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
