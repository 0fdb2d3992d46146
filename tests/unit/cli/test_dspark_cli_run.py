"""dspark CLI: run() with a stand-in ansible_runner.run (what it is handed, audit, Ctrl-C), and one real run."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import ansible_runner
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "cli"))

from dspark_cli import main as cli  # noqa: E402


class FakeRunner:
    def __init__(self, status, rc, stats=None, canceled=False):
        self.status, self.rc, self.stats, self.canceled = status, rc, stats, canceled


def fake_runner_run(calls, behaviour):
    def run(**kwargs):
        extravars = None
        if kwargs.get("extravars"):
            extravars = json.loads(Path(kwargs["extravars"]).read_text())
        calls.append({"kwargs": kwargs, "extravars": extravars})
        return behaviour(kwargs, extravars)
    return run


def setup(tmp_path, monkeypatch, behaviour, mapping=None):
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    calls = []
    monkeypatch.setattr(ansible_runner, "run", fake_runner_run(calls, behaviour))
    monkeypatch.setattr(cli, "load_pair_map", lambda *a, **k: dict(mapping or {}))
    return calls


def run_cli(tmp_path, *argv, environ=None):
    out, err = io.StringIO(), io.StringIO()
    env = {"PATH": os.environ.get("PATH", ""), "DSPARK_INVENTORY": "hosts.yml"} if environ is None else environ
    code = cli.run(list(argv), environ=env, cwd=str(tmp_path), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def run_dirs(base):
    return sorted(p for p in Path(base).iterdir() if p.is_dir())


def test_runner_is_handed_the_run(tmp_path, monkeypatch):
    calls = setup(tmp_path, monkeypatch, lambda kw, ev: FakeRunner("successful", 0, {"failures": {}}))
    code, out, _unused = run_cli(tmp_path, "rollback", "--forward", "--limit", "pair_sim01", "--check", "-vv",
                                 "-e", "dspark_engine_force_replace=true", "-e", "dspark_api_key=sk-secret",
                                 "--artifacts", "runs")
    assert code == 0
    (call,) = calls
    kw = call["kwargs"]
    (run_dir,) = run_dirs(tmp_path / "runs")
    assert run_dir.name.startswith("rollforward-")
    assert kw["playbook"] == "gb10.dspark.rollforward"
    assert kw["private_data_dir"] == str(run_dir)
    assert os.path.join(kw["artifact_dir"], kw["ident"]) == str(run_dir)  # runner artifacts land in the folder
    assert kw["inventory"] == str(tmp_path / "hosts.yml")
    assert (kw["limit"], kw["cmdline"], kw["verbosity"]) == ("pair_sim01", "--check", 2)
    assert call["extravars"] == {"dspark_engine_force_replace": True, "dspark_api_key": "sk-secret"}
    assert not kw["extravars"].startswith(str(tmp_path)) and not os.path.exists(kw["extravars"])  # gone after
    assert kw["suppress_env_files"] is True
    assert kw["envvars"]["ANSIBLE_CONFIG"] == str(tmp_path / "ansible.cfg")
    assert kw["envvars"]["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert callable(kw["cancel_callback"]) and kw["cancel_callback"]() is False
    assert out.count(f"run folder: {run_dir}") == 2
    assert "sk-secret" not in out


def test_audit_report_dir_and_drift_exit(tmp_path, monkeypatch):
    def behaviour(kw, extravars):
        report = Path(extravars["dspark_audit_report_dir"])
        (report / "audit.txt").write_text("pair   verdict\nsim01  OK\nsim02  DRIFT\n")
        (report / "audit.html").write_text("<html></html>")
        (report / "audit.json").write_text(json.dumps({"exit_code": 2, "not_ok": ["sim02"]}))
        return FakeRunner("failed", 2, {"failures": {"localhost": 1}})

    calls = setup(tmp_path, monkeypatch, behaviour)
    code, out, _unused = run_cli(tmp_path, "audit", "--artifacts", "runs")
    (run_dir,) = run_dirs(tmp_path / "runs")
    assert calls[0]["extravars"] == {"dspark_audit_report_dir": str(run_dir / "audit")}
    assert calls[0]["kwargs"]["playbook"] == "gb10.dspark.audit"
    assert code == 2
    assert "pair   verdict\nsim01  OK\nsim02  DRIFT\n" in out
    assert f"audit html: {run_dir / 'audit' / 'audit.html'}" in out
    assert "failing pairs: sim02\n" in out and "control" not in out


def test_audit_keeps_a_given_report_dir(tmp_path, monkeypatch):
    def behaviour(kw, extravars):
        report = Path(extravars["dspark_audit_report_dir"])
        report.mkdir(parents=True)
        (report / "audit.json").write_text(json.dumps({"exit_code": 0, "not_ok": []}))
        return FakeRunner("successful", 0, {})

    calls = setup(tmp_path, monkeypatch, behaviour)
    code, out, _unused = run_cli(tmp_path, "audit", "-e", "dspark_audit_report_dir=reports/fleet", "--artifacts", "runs")
    assert code == 0
    assert calls[0]["extravars"] == {"dspark_audit_report_dir": str(tmp_path / "reports" / "fleet")}
    assert "failing pairs" not in out


def test_audit_run_failing_without_report_exits_with_rc(tmp_path, monkeypatch):
    setup(tmp_path, monkeypatch, lambda kw, ev: FakeRunner("failed", 4, None))
    code, out, _unused = run_cli(tmp_path, "audit", "--artifacts", "runs")
    assert code == 4
    assert "no audit report in" in out and "failing pairs: none in the play recap" in out


def test_ctrl_c_stops_ansible_playbook_then_cancels(tmp_path, monkeypatch):
    """First Ctrl-C: forwarded to ansible-playbook (here a stand-in child), not yet canceled; second: cancel."""
    # A stand-in for ansible-playbook that dies on SIGINT, as ansible-playbook does, whatever SIGINT
    # disposition this test inherits (a job started with `&` by a non-interactive shell ignores it).
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                              "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"  # its SIGINT handler is in place
    child.stdout.close()
    seen = {}

    def behaviour(kw, extravars):
        cancel = kw["cancel_callback"]
        assert cancel() is False
        signal.raise_signal(signal.SIGINT)  # Ctrl-C while ansible-runner polls
        seen["first"] = cancel()
        seen["child_rc"] = child.wait(timeout=30)
        seen["still_waiting"] = cancel()
        signal.raise_signal(signal.SIGINT)
        seen["second"] = cancel()
        return FakeRunner("canceled", 254, None, canceled=True)

    setup(tmp_path, monkeypatch, behaviour)
    monkeypatch.setattr(cli, "_child_pids", lambda parent: [child.pid] if parent == os.getpid() else [])
    before = signal.getsignal(signal.SIGINT)
    try:
        code, out, _unused = run_cli(tmp_path, "provision", "--artifacts", "runs")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert seen == {"first": False, "child_rc": -signal.SIGINT, "still_waiting": False, "second": True}
    assert code == 130
    assert "interrupted" in out and "failing pairs" not in out
    assert signal.getsignal(signal.SIGINT) is before


def test_interrupted_run_that_stopped_itself_exits_130(tmp_path, monkeypatch):
    def behaviour(kw, extravars):
        signal.raise_signal(signal.SIGINT)
        assert kw["cancel_callback"]() is True  # no ansible-playbook child left to stop: cancel at once
        return FakeRunner("failed", 99, {"failures": {}})  # ansible-playbook's "User interrupted execution"

    setup(tmp_path, monkeypatch, behaviour)
    monkeypatch.setattr(cli, "_child_pids", lambda parent: [])
    code, out, _unused = run_cli(tmp_path, "guard", "--artifacts", "runs")
    assert code == 130 and "interrupted" in out


def test_child_pids_finds_own_children():
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid in cli._child_pids(os.getpid())
        assert child.pid not in cli._child_pids(child.pid)
    finally:
        child.kill()
        child.wait()


def test_real_run_with_one_failing_host(tmp_path, monkeypatch):
    """ansible-runner and ansible-playbook for real: a local pair p1 of two hosts, h2 fails a task."""
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    (work / "ansible.cfg").write_text("[defaults]\ngathering = explicit\nretry_files_enabled = False\n")
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (work / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"pair_p1": {
        "vars": {"dspark_pair": "p1"}, "hosts": {"h1": host, "h2": host}}}}}))
    playbook = work / "tiny.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Tiny pair play", "hosts": "all", "gather_facts": False,
        "tasks": [
            {"name": "config and extra vars arrive",
             "ansible.builtin.assert": {"that": ["lookup('ansible.builtin.config', 'DEFAULT_GATHERING') == 'explicit'",
                                                 "flag is sameas true"]}},
            {"name": "h2 breaks", "ansible.builtin.fail": {"msg": "boom on {{ inventory_hostname }}"},
             "when": "inventory_hostname == 'h2'"},
            {"name": "quiet secret", "ansible.builtin.debug": {"msg": "hush-{{ flag }}"}, "no_log": True},
        ],
    }], sort_keys=False))
    out, err = io.StringIO(), io.StringIO()
    env = {k: v for k, v in os.environ.items() if k not in ("DSPARK_INVENTORY", "DSPARK_ARTIFACTS")}
    code = cli.run(["provision", "-i", "hosts.yml", "-e", "flag=true", "--artifacts", "runs"],
                   playbook=str(playbook), environ=env, cwd=str(work), out=out, err=err)
    text = out.getvalue()
    assert code == 2, text + err.getvalue()
    assert "== Tiny pair play" in text
    assert "[p1] h1 ok config and extra vars arrive" in text
    assert "[p1] h2 ok config and extra vars arrive" in text
    assert "[p1] h2 FAILED h2 breaks -- boom on h2" in text
    assert "[p1] h1 ok quiet secret" in text
    assert "skipped" not in text and "hush" not in text and "h1 FAILED" not in text
    assert "failing pairs: p1 (h2: failed)" in text
    (run_dir,) = run_dirs(work / "runs")
    assert run_dir.name.startswith("provision-")
    assert (run_dir / "status").read_text() == "failed"
    assert (run_dir / "rc").read_text() == "2"
    assert "boom on h2" in (run_dir / "stdout").read_text()
    assert any((run_dir / "job_events").iterdir())
    command = json.loads((run_dir / "command").read_text())
    assert command["command"][-1] == str(playbook)
    assert not (run_dir / "env").exists()  # extra vars were not written into the run folder
