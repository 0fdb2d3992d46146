"""sim-down leaves nothing behind: after a clean run, after killed processes, after a killed sim-up."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from simhelpers import ROOT, sim_cli
from dspark_sim import fleet, layout


def test_down_leaves_nothing_behind(sim):
    res = sim_cli("down")
    assert "nothing left behind" in res.stdout
    assert fleet.leftovers() == []
    assert not (ROOT / "inventories" / "sim").exists()


def test_down_after_crashed_ranks_and_lost_state():
    sim_cli("up", "--pairs", "1")
    head = layout.pairs(1)[0].head
    # A crash: the rank's dockerd and sshd die hard, and the simulator's state file is lost.
    for pidfile in ("dockerd.pid", "init.pid"):
        os.kill(int((head.sub("run") / pidfile).read_text()), signal.SIGKILL)
    (layout.STATE_DIR / "sim.json").unlink()
    assert fleet.leftovers(), "the crash should leave something for sim-down to clean"
    sim_cli("down")
    assert fleet.leftovers() == []


def test_down_after_an_interrupted_sim_up():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "sim"))
    proc = subprocess.Popen([sys.executable, "-m", "dspark_sim", "up", "--pairs", "2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Kill it once the first rank is being started (namespaces exist, processes may be starting).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(p.exists() for p in layout.STATE_DIR.glob("ranks/*/run/init.pid")):
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    sim_cli("down")
    assert fleet.leftovers() == []
