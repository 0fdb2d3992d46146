"""Driving the simulator from outside it, as the benchmarks (bench/_common.py) and the integration
tests (tests/integration/simhelpers.py) do: its command line, a command on a rank, and the environment
and executables of an Ansible run against its inventory.

A command on a rank runs inside the rank's namespaces (network, mount, UTS: the view its sshd gives a
login), as root with the environment sudo gives a login there: how a console on the machine would look
at it. The collection reaches a rank over SSH only (Ansible, with the simulator's inventory); the tests'
and benchmarks' own looks at a rank are not the collection's path, and over SSH each cost a key
exchange on both sides (about 0.1 s of CPU: a run of the suite makes some 900 of them).

Nothing here raises on a non-zero exit: each caller checks the returned process and raises its own
error (BenchError, AssertionError). A timeout still raises ``subprocess.TimeoutExpired``.
"""
from __future__ import annotations

import os
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


# What sudo leaves a login's command on a rank (Debian's env_reset and secure_path), and nothing else
RANK_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "USER=root",
            "LOGNAME=root", "SHELL=/bin/bash", "LANG=C.UTF-8")
NOT_RUNNING = 255  # the exit status of a command on a rank that is not running (ssh's, for a host it cannot reach)


def rank_argv(pid: int, argv: list[str]) -> list[str]:
    """The local argv that runs ``argv`` (its words as they are: no shell) as root in the namespaces of the
    rank's process ``pid``, from /, with :data:`RANK_ENV` only."""
    return ["nsenter", f"--target={pid}", "--net", "--mount", "--uts", "--wd=/", "--",
            "env", "-i", *RANK_ENV, *argv]


def run_on(rank: layout.Rank, argv: list[str], timeout: float,
           input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` as root on ``rank`` (``input_text`` on its standard input); output captured. A rank that is
    not running answers with :data:`NOT_RUNNING` and says so on stderr."""
    pid = sim_rank.init_pid(rank)
    if pid is None:
        return subprocess.CompletedProcess(argv, NOT_RUNNING, "", f"{rank.name}: the rank is not running "
                                                                  f"(no live process in {rank.sub('run')}/init.pid)")
    return subprocess.run(rank_argv(pid, argv), text=True, capture_output=True, timeout=timeout, check=False,
                          input=input_text)


def tool(name: str) -> str:
    """An executable of the virtualenv running this interpreter (ansible, ansible-playbook)."""
    return str(Path(sys.executable).with_name(name))


def ansible_env(**extra: str) -> dict:
    """This process's environment with the checkout's ansible.cfg and colour forcing off, plus ``extra``
    (a key that repeats ANSIBLE_CONFIG or ANSIBLE_FORCE_COLOR is a TypeError, as in ``dict(..., **extra)``)."""
    return dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_CFG), ANSIBLE_FORCE_COLOR="0", **extra)
