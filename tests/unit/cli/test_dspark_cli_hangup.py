"""dspark as a process, with ansible-runner and ansible-playbook for real: a dropped SSH session (SIGHUP, the
terminal gone) or SIGQUIT stops the run the way SIGTERM does. The private ``-e`` files (the API key) are removed,
the ``command`` artifact is scrubbed, and dspark exits 128 + the signal's number."""
from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

CLI = Path(__file__).resolve().parents[3] / "cli"
sys.path.insert(0, str(CLI))

from dspark_cli import main as cli  # noqa: E402

KEY = "sk-hangup-5d7c19"
TOKEN = "tok-hangup-env-2b8e"

DRIVER = """\
import sys
sys.path.insert(0, sys.argv[1])
from dspark_cli import main as cli
cli.PLAYBOOKS["provision"] = sys.argv[2]
sys.exit(cli.main(sys.argv[3:]))
"""


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM])
def test_hangup_and_quit_stop_the_run_like_sigterm(tmp_path, signum):
    work = tmp_path / "work"
    work.mkdir()
    private_tmp = tmp_path / "tmp"  # dspark's private folder for the -e files goes here
    private_tmp.mkdir()
    marker = tmp_path / "task.pid"
    (work / "ansible.cfg").write_text("[defaults]\ngathering = explicit\nretry_files_enabled = False\n")
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (work / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"pair_p1": {
        "vars": {"dspark_pair": "p1"}, "hosts": {"h1": host}}}}}))
    playbook = work / "slow.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Slow play", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "slow task",
                   "ansible.builtin.shell": f"echo $$ > {marker}.tmp && mv {marker}.tmp {marker} && exec sleep 90"}],
    }], sort_keys=False))
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items()
           if k not in ("DSPARK_INVENTORY", "DSPARK_ARTIFACTS", "ANSIBLE_CONFIG", "ANSIBLE_VAULT_PASSWORD_FILE")}
    env.update(TMPDIR=str(private_tmp), MYSITE_TOKEN=TOKEN)
    # The terminal is a pty whose far end goes away before the signal, as an SSH session's does.
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(driver), str(CLI), str(playbook), "provision", "-i", "hosts.yml",
                             "-e", f"dspark_api_key={KEY}", "--artifacts", "runs"],
                            cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    task_pid = None
    try:
        _wait_for(marker.exists, 120, "the slow task to start")
        task_pid = int(marker.read_text())
        (run_dir,) = sorted(p for p in (work / "runs").iterdir() if p.is_dir())
        command = json.loads((run_dir / "command").read_text())
        files = [arg[1:] for arg in command["command"] if arg.startswith("@")]
        assert files and all(os.path.exists(path) for path in files)  # the private -e files, during the run
        assert any(KEY in Path(path).read_text() for path in files)
        if signum == signal.SIGHUP:
            os.close(master)  # the session drops: the terminal hangs up
            master = None
        os.kill(proc.pid, signum)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if master is not None:
            os.close(master)
    try:
        assert code == 128 + signum
        assert not any(os.path.exists(path) for path in files), files  # the private -e files are gone
        assert list(private_tmp.glob("dspark-*")) == []  # and their folder
        command = json.loads((run_dir / "command").read_text())
        assert command["env"]["MYSITE_TOKEN"] == "(not recorded)"
        for path in list(run_dir.rglob("*")) + list(private_tmp.rglob("*")):
            if path.is_file():
                content = path.read_bytes()
                assert KEY.encode() not in content and TOKEN.encode() not in content, path
        # ansible-playbook stopped its worker and the module it ran (SIGTERM reached them).
        _wait_for(lambda: not _alive(task_pid), 30, f"the slow task (pid {task_pid}) to end")
    finally:
        if task_pid is not None and _alive(task_pid):
            os.kill(task_pid, signal.SIGKILL)


def test_hangup_forwards_sigterm_and_a_second_hangup_does_not_kill_the_run(monkeypatch):
    """ansible-playbook stops its workers on SIGTERM only (SIGHUP would kill it and leave them running);
    a hang-up reaches dspark twice (from the terminal and from the shell), which is no second signal."""
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_DFL); "
                              "signal.signal(signal.SIGHUP, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    child.stdout.close()
    monkeypatch.setattr(cli, "_child_pids", lambda parent: [child.pid] if parent == os.getpid() else [])
    before = signal.getsignal(signal.SIGHUP)
    try:
        with cli._Cancel() as cancel:
            assert cancel.is_set() is False
            signal.raise_signal(signal.SIGHUP)
            assert cancel.is_set() is False  # forwarded, not yet canceled
            assert child.wait(timeout=30) == -signal.SIGTERM
            signal.raise_signal(signal.SIGHUP)
            assert cancel.is_set() is False  # still within the grace
            signal.raise_signal(signal.SIGQUIT)
            assert cancel.is_set() is True  # a second signal of another kind: canceled for good
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert cancel.exit_code == 129
    assert signal.getsignal(signal.SIGHUP) is before
