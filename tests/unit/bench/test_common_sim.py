"""bench/_common.py's wrappers over dspark_sim.drive: the same calls as before, failures as BenchError,
Ansible's colour off for the output parsers. subprocess.run is replaced; no simulator runs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import _common as common
from dspark_sim import rank as sim_rank

RANK = SimpleNamespace(name="sim01-head", mgmt_ip="10.231.0.11")


class FakeRun:
    def __init__(self, returncode: int = 0):
        self.returncode = returncode
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, argv, **kwargs):
        self.calls.append((list(argv), kwargs))
        return subprocess.CompletedProcess(argv, self.returncode, "the stdout", " the stderr \n")


@pytest.fixture
def fake_run(monkeypatch):
    fake = FakeRun()
    monkeypatch.setattr(subprocess, "run", fake)
    monkeypatch.setattr(sim_rank, "init_pid", lambda r: 4242)
    return fake


def test_sim_cli_returns_stdout_and_raises_bench_error(fake_run):
    assert common.sim_cli("status", timeout=300) == "the stdout"
    argv, kw = fake_run.calls[-1]
    assert argv == [sys.executable, "-m", "dspark_sim", "status"] and kw["timeout"] == 300
    assert kw["env"]["PYTHONPATH"] == str(common.ROOT / "sim")
    common.sim_cli("up")
    assert fake_run.calls[-1][1]["timeout"] == 1800  # its default
    fake_run.returncode = 1
    with pytest.raises(common.BenchError, match="dspark_sim up --pairs 2 exited 1"):
        common.sim_cli("up", "--pairs", "2")


def test_on_rank_runs_in_the_ranks_namespaces_and_raises_bench_error(fake_run):
    res = common.on_rank(RANK, ["docker", "image", "rm", "a b"], timeout=600)
    argv, kw = fake_run.calls[-1]
    assert argv[:2] == ["nsenter", "--target=4242"] and argv[-4:] == ["docker", "image", "rm", "a b"]
    assert kw["timeout"] == 600
    assert kw.get("input") is None and res.stdout == "the stdout"
    fake_run.returncode = 125
    assert common.on_rank(RANK, ["false"], check=False).returncode == 125
    assert fake_run.calls[-1][1]["timeout"] == 120  # its default
    with pytest.raises(common.BenchError, match=r"sim01-head: `docker load -i /x` exited 125: the stderr$"):
        common.on_rank(RANK, ["docker", "load", "-i", "/x"])


def test_ansible_env_turns_colour_off_for_the_parsers():
    env = common.ansible_env(JUNIT_OUTPUT_DIR="/tmp/j")
    assert env["ANSIBLE_CONFIG"] == str(common.ROOT / "ansible.cfg")
    assert (env["ANSIBLE_FORCE_COLOR"], env["ANSIBLE_NOCOLOR"], env["JUNIT_OUTPUT_DIR"]) == ("0", "1", "/tmp/j")
    assert common.tool("ansible") == str(Path(sys.executable).with_name("ansible"))


def test_adhoc_runs_the_venvs_ansible_on_the_sim_inventory(fake_run):
    common.adhoc("sim01-head", "ping", {}, forks=3, env={"X_EXTRA": "1"})
    argv, kw = fake_run.calls[-1]
    assert argv == [common.tool("ansible"), "-i", str(common.INVENTORY), "sim01-head", "--become", "-o", "-m", "ping", "-a", "{}",
                    "-f", "3"]
    assert kw["env"]["ANSIBLE_NOCOLOR"] == "1" and kw["env"]["X_EXTRA"] == "1" and kw["cwd"] == common.ROOT
