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
