"""dspark_sim.drive (the simulator's CLI, a command on a rank over SSH, the Ansible environment) and
the integration tests' thin wrappers over it (tests/integration/simhelpers.py), without a simulator:
subprocess.run is replaced and the argv, environment and input it receives are checked."""
from __future__ import annotations

import os
import shlex
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
def fake_ssh(monkeypatch):
    """rank.ssh_argv without the control key: a recognisable prefix naming the rank's address."""
    monkeypatch.setattr(sim_rank, "ssh_argv", lambda r: ["ssh", "-x", f"root@{r.mgmt_ip}", "--"])


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
def test_run_on_sends_the_argv_as_one_quoted_remote_command(fake_run, fake_ssh):
    argv = ["sh", "-c", "echo \"$HOME\" > '/tmp/a b'; true"]
    drive.run_on(RANK, argv, timeout=7)
    local, kw = fake_run.only
    assert local[:4] == ["ssh", "-x", "root@10.231.0.24", "--"]
    assert len(local) == 5 and local[4] == shlex.join(argv)
    assert shlex.split(local[4]) == argv  # the remote shell gets back exactly these words
    assert kw["timeout"] == 7 and kw["check"] is False and kw["text"] is True and kw["capture_output"] is True
    assert kw["input"] is None
    assert "env" not in kw  # the rank runs with sshd's environment, not a changed local one


def test_run_on_passes_its_input_text_on_stdin(fake_run, fake_ssh):
    drive.run_on(RANK, ["docker", "load"], timeout=3, input_text="payload\n")
    assert fake_run.only[1]["input"] == "payload\n"


def test_run_on_returns_a_failure_instead_of_raising(monkeypatch, fake_ssh):
    monkeypatch.setattr(subprocess, "run", FakeRun(returncode=1, stdout="", stderr="no such file"))
    assert drive.run_on(RANK, ["test", "-e", "/x"], timeout=3).returncode == 1


def test_rank_argv_uses_the_simulators_control_key_and_known_hosts(monkeypatch, tmp_path):
    """The real rank.ssh_argv, with the state folder moved and a key already there (no ssh-keygen)."""
    monkeypatch.setattr(layout, "STATE_DIR", tmp_path)
    key = tmp_path / "ssh" / "id_ed25519"
    key.parent.mkdir()
    key.write_text("not a real key")
    rank = layout.Rank(2, 1)
    argv = drive.rank_argv(rank, ["hostname"])
    assert argv[:3] == ["ssh", "-i", str(key)]
    assert f"UserKnownHostsFile={tmp_path / 'ssh' / 'known_hosts'}" in argv
    assert "BatchMode=yes" in argv and "StrictHostKeyChecking=yes" in argv
    # As the unprivileged operator (root may not log in), the command run through sudo.
    assert argv[-6:] == [f"{layout.OPERATOR}@{rank.mgmt_ip}", "--", "sudo", "-n", "--", "hostname"]


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


def test_simhelpers_on_rank_passes_timeout_and_input_and_raises_assertion(simhelpers, fake_run, fake_ssh):
    simhelpers.on_rank(RANK, ["cat"], input_text="x", timeout=9)
    local, kw = fake_run.only
    assert local == ["ssh", "-x", "root@10.231.0.24", "--", "cat"] and kw["input"] == "x" and kw["timeout"] == 9
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
