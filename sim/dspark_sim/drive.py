"""Driving the simulator from outside it, as the benchmarks (bench/_common.py) and the integration
tests (tests/integration/simhelpers.py) do: its command line, a command on a rank over its SSH, and
the environment and executables of an Ansible run against its inventory.

Nothing here raises on a non-zero exit: each caller checks the returned process and raises its own
error (BenchError, AssertionError). A timeout still raises ``subprocess.TimeoutExpired``.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from . import layout
from . import rank as sim_rank

SIM_DIR = layout.REPO_ROOT / "sim"
ANSIBLE_CFG = layout.REPO_ROOT / "ansible.cfg"


def cli(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python -m dspark_sim <args>`` with this interpreter and sim/ as PYTHONPATH; output captured."""
    env = dict(os.environ, PYTHONPATH=str(SIM_DIR))
    return subprocess.run([sys.executable, "-m", "dspark_sim", *args], env=env, text=True, capture_output=True,
                          timeout=timeout, check=False)


def rank_argv(rank: layout.Rank, argv: list[str]) -> list[str]:
    """The local argv that runs ``argv`` on ``rank`` over the simulator's SSH (one quoted remote command)."""
    return [*sim_rank.ssh_argv(rank), shlex.join(argv)]


def run_on(rank: layout.Rank, argv: list[str], timeout: float,
           input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` on ``rank`` over the simulator's SSH (``input_text`` on its standard input); output captured."""
    return subprocess.run(rank_argv(rank, argv), text=True, capture_output=True, timeout=timeout, check=False,
                          input=input_text)


def tool(name: str) -> str:
    """An executable of the virtualenv running this interpreter (ansible, ansible-playbook)."""
    return str(Path(sys.executable).with_name(name))


def ansible_env(**extra: str) -> dict:
    """This process's environment with the checkout's ansible.cfg and colour forcing off, plus ``extra``
    (a key that repeats ANSIBLE_CONFIG or ANSIBLE_FORCE_COLOR is a TypeError, as in ``dict(..., **extra)``)."""
    return dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_CFG), ANSIBLE_FORCE_COLOR="0", **extra)
