"""Integration tests run against the real pair simulator: namespaces, dockerds, sshds, SSH."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simhelpers import PAIRS, layout, sim_cli  # noqa: E402


@pytest.fixture(scope="session")
def sim():
    if os.geteuid() != 0:
        pytest.fail("the simulator needs root")
    sim_cli("down")  # start from nothing: a fleet left up by someone else may hold stale images
    sim_cli("up", "--pairs", str(PAIRS))
    yield layout.pairs(PAIRS)
    sim_cli("down", check=False)
