"""dspark_sim.drive (the simulator's CLI, a command on a rank, the Ansible environment) and
the integration tests' thin wrappers over it (tests/integration/simhelpers.py), without a simulator:
subprocess.run is replaced and the argv, environment and input it receives are checked."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dspark_sim import drive, layout
from dspark_sim import rank as sim_rank

REPO = Path(__file__).resolve().parents[3]
INTEGRATION = REPO / "tests" / "integration"


class FakeRun:
    """Stands in for subprocess.run: records each call and answers with the given exit status."""

    def __init__(self, returncode: int = 0, stdout: str = "out", stderr: str = "err"):
        self.calls: list[tuple[list[str], dict]] = []
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __call__(self, argv, **kwargs):
        self.calls.append((list(argv), kwargs))
        return subprocess.CompletedProcess(argv, self.returncode, self.stdout, self.stderr)

    @property
    def only(self) -> tuple[list[str], dict]:
        assert len(self.calls) == 1, self.calls
        return self.calls[0]


@pytest.fixture
def fake_run(monkeypatch):
    fake = FakeRun()
    monkeypatch.setattr(subprocess, "run", fake)
    return fake


@pytest.fixture
def running(monkeypatch):
    """The rank's init is process 4242 (rank.init_pid without a simulator)."""
    monkeypatch.setattr(sim_rank, "init_pid", lambda r: 4242)


RANK = SimpleNamespace(name="sim07-worker", mgmt_ip="10.231.0.24")


# ---- cli -------------------------------------------------------------------------------------
def test_cli_runs_the_package_with_this_interpreter_and_sim_as_its_only_pythonpath(fake_run, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.setenv("DSPARK_TEST_MARKER", "kept")
    res = drive.cli("up", "--pairs", "3", timeout=42)
    argv, kw = fake_run.only
    assert argv == [sys.executable, "-m", "dspark_sim", "up", "--pairs", "3"]
    assert kw["env"]["PYTHONPATH"] == str(REPO / "sim")
    assert kw["env"]["DSPARK_TEST_MARKER"] == "kept"
    assert kw["timeout"] == 42 and kw["check"] is False and kw["text"] is True and kw["capture_output"] is True
    assert (res.returncode, res.stdout, res.stderr) == (0, "out", "err")


def test_cli_returns_a_failure_instead_of_raising(monkeypatch):
    monkeypatch.setattr(subprocess, "run", FakeRun(returncode=2, stdout="", stderr="must run as root"))
    res = drive.cli("status", timeout=5)
    assert res.returncode == 2 and res.stderr == "must run as root"


def test_cli_really_finds_the_package():
    """Not faked: the PYTHONPATH it sets is enough for ``-m dspark_sim`` (``--help`` exits before the root check)."""
    res = drive.cli("--help", timeout=60)
    assert res.returncode == 0, res.stderr
    assert "leftovers" in res.stdout


def test_cli_timeout_is_required():
    with pytest.raises(TypeError):
        drive.cli("status")  # type: ignore[call-arg]


# ---- run_on ----------------------------------------------------------------------------------
def test_run_on_runs_the_argv_as_it_is_in_the_ranks_namespaces_with_a_logins_environment(fake_run, running):
    argv = ["sh", "-c", "echo \"$HOME\" > '/tmp/a b'; true"]
    drive.run_on(RANK, argv, timeout=7)
    local, kw = fake_run.only
    assert local[:7] == ["nsenter", "--target=4242", "--net", "--mount", "--uts", "--wd=/", "--"]
    # no shell between: the words reach the rank as they are, with sudo's environment and nothing of this one
    assert local[7:9] == ["env", "-i"] and local[9:9 + len(drive.RANK_ENV)] == list(drive.RANK_ENV)
    assert local[9 + len(drive.RANK_ENV):] == argv
    assert "HOME=/root" in drive.RANK_ENV and any(e.startswith("PATH=/usr/local/sbin:") for e in drive.RANK_ENV)
    assert kw["timeout"] == 7 and kw["check"] is False and kw["text"] is True and kw["capture_output"] is True
    assert kw["input"] is None
    assert "env" not in kw


def test_run_on_passes_its_input_text_on_stdin(fake_run, running):
    drive.run_on(RANK, ["docker", "load"], timeout=3, input_text="payload\n")
    assert fake_run.only[1]["input"] == "payload\n"


def test_run_on_returns_a_failure_instead_of_raising(monkeypatch, running):
    monkeypatch.setattr(subprocess, "run", FakeRun(returncode=1, stdout="", stderr="no such file"))
    assert drive.run_on(RANK, ["test", "-e", "/x"], timeout=3).returncode == 1


def test_a_rank_that_is_not_running_answers_255_naming_it_and_runs_nothing(fake_run, monkeypatch, tmp_path):
    monkeypatch.setattr(layout, "STATE_DIR", tmp_path)
    rank = layout.Rank(2, 1)
    res = drive.run_on(rank, ["true"], timeout=3)  # no init.pid at all
    assert res.returncode == drive.NOT_RUNNING == 255 and rank.name in res.stderr and "not running" in res.stderr
    assert fake_run.calls == []


def test_init_pid_is_the_live_process_the_ranks_pid_file_names(monkeypatch, tmp_path):
    monkeypatch.setattr(layout, "STATE_DIR", tmp_path)
    rank = layout.Rank(2, 1)
    rank.sub("run").mkdir(parents=True)
    (rank.sub("run") / "init.pid").write_text(f"{os.getpid()}\n")
    assert sim_rank.init_pid(rank) == os.getpid()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (rank.sub("run") / "init.pid").write_text(f"{dead.pid}\n")
    assert sim_rank.init_pid(rank) is None


# ---- Ansible ---------------------------------------------------------------------------------
def test_tool_is_beside_the_running_interpreter(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/opt/venv/bin/python3.12")
    assert drive.tool("ansible-playbook") == "/opt/venv/bin/ansible-playbook"


def test_ansible_env_points_at_the_checkouts_config_and_keeps_the_environment(monkeypatch):
    monkeypatch.setenv("DSPARK_TEST_MARKER", "kept")
    monkeypatch.delenv("ANSIBLE_NOCOLOR", raising=False)
    env = drive.ansible_env(JUNIT_OUTPUT_DIR="/tmp/j")
    assert env["ANSIBLE_CONFIG"] == str(REPO / "ansible.cfg") and Path(env["ANSIBLE_CONFIG"]).is_file()
    assert env["ANSIBLE_FORCE_COLOR"] == "0"
    assert env["JUNIT_OUTPUT_DIR"] == "/tmp/j" and env["DSPARK_TEST_MARKER"] == "kept"
    assert "ANSIBLE_NOCOLOR" not in env  # only the benchmarks add it
    assert env is not os.environ and "JUNIT_OUTPUT_DIR" not in os.environ


def test_ansible_env_refuses_to_override_its_own_keys():
    with pytest.raises(TypeError):
        drive.ansible_env(ANSIBLE_FORCE_COLOR="1")


# ---- tests/integration/simhelpers.py: the same calls, failures as AssertionError --------------
@pytest.fixture
def simhelpers(monkeypatch):
    monkeypatch.syspath_prepend(str(INTEGRATION))
    import simhelpers

    return simhelpers


def test_simhelpers_on_rank_passes_timeout_and_input_and_raises_assertion(simhelpers, fake_run, running):
    simhelpers.on_rank(RANK, ["cat"], input_text="x", timeout=9)
    local, kw = fake_run.only
    assert local == drive.rank_argv(4242, ["cat"]) and kw["input"] == "x" and kw["timeout"] == 9
    fake_run.returncode = 3
    assert simhelpers.on_rank(RANK, ["false"], check=False).returncode == 3
    with pytest.raises(AssertionError, match=r"sim07-worker: \['false'\] exited 3: err"):
        simhelpers.on_rank(RANK, ["false"])
    assert fake_run.calls[-1][1]["timeout"] == 60  # its default


def test_simhelpers_sim_cli_and_ansible(simhelpers, fake_run, monkeypatch):
    monkeypatch.delenv("ANSIBLE_NOCOLOR", raising=False)
    assert simhelpers.sim_cli("status").stdout == "out"
    argv, kw = fake_run.calls[-1]
    assert argv[1:] == ["-m", "dspark_sim", "status"] and kw["timeout"] == 600
    simhelpers.ansible("all", "-m", "ping", env={"X_EXTRA": "1"})
    argv, kw = fake_run.calls[-1]
    assert argv == [drive.tool("ansible"), "-i", str(simhelpers.INVENTORY), "all", "-m", "ping"]
    assert kw["cwd"] == simhelpers.ROOT and kw["env"]["X_EXTRA"] == "1"
    assert kw["env"]["ANSIBLE_CONFIG"] == str(REPO / "ansible.cfg") and "ANSIBLE_NOCOLOR" not in kw["env"]
    fake_run.returncode = 4
    with pytest.raises(AssertionError, match="dspark_sim down exited 4"):
        simhelpers.sim_cli("down")
    with pytest.raises(AssertionError, match="ansible-playbook playbooks/x.yml exited 4"):
        simhelpers.ansible("playbooks/x.yml", tool="ansible-playbook")
