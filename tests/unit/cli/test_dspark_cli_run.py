"""dspark CLI: run() with a stand-in ansible_runner.run (what it is handed, audit, Ctrl-C), and one real run."""
from __future__ import annotations

import io
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path

import ansible_runner
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "cli"))

from dspark_cli import main as cli  # noqa: E402


class FakeRunner:
    def __init__(self, status, rc, stats=None, canceled=False):
        self.status, self.rc, self.stats, self.canceled = status, rc, stats, canceled


def e_files(argv):
    """The files of the ``-e @FILE`` items of an argv, in order."""
    return [argv[i + 1][1:] for i, arg in enumerate(argv[:-1]) if arg == "-e" and argv[i + 1].startswith("@")]


def fake_runner_run(calls, behaviour):
    """A stand-in for ansible_runner.run that reads, during the run, what ansible-playbook would read:
    the cmdline's ``-e @FILE`` files in order, then dspark's own file (``extravars``), the last one winning."""
    def run(**kwargs):
        argv = shlex.split(kwargs["cmdline"]) if kwargs.get("cmdline") else []
        files = []
        for path in e_files(argv):
            files.append({"path": path, "text": Path(path).read_text(),
                          "mode": stat.S_IMODE(os.stat(path).st_mode)})
        own = json.loads(Path(kwargs["extravars"]).read_text()) if kwargs.get("extravars") else None
        merged = {}
        for item in files:
            data = yaml.safe_load(item["text"])
            if isinstance(data, dict):
                merged.update(data)
        merged.update(own or {})
        calls.append({"kwargs": kwargs, "argv": argv, "files": files, "own": own, "extravars": merged})
        return behaviour(kwargs, merged)
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
    assert (kw["limit"], kw["verbosity"]) == ("pair_sim01", 2)
    assert call["argv"][0] == "--check" and call["argv"].count("-e") == 2
    assert call["extravars"] == {"dspark_engine_force_replace": "true", "dspark_api_key": "sk-secret"}  # strings
    assert kw["extravars"] is None and call["own"] is None  # rollforward adds no variable of its own
    assert kw["passwords"] is None
    assert "sk-secret" not in kw["cmdline"]
    for item in call["files"]:
        assert not item["path"].startswith(str(tmp_path)) and item["mode"] == 0o600
        assert not os.path.exists(item["path"])  # removed after the run
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
    assert calls[0]["own"] == {"dspark_audit_report_dir": str(run_dir / "audit")} and calls[0]["argv"] == []
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
    # the user's item goes on as given; as ansible-playbook runs in the run folder, dspark re-states the
    # relative path as an absolute one, after it
    assert json.loads(calls[0]["files"][0]["text"]) == {"dspark_audit_report_dir": "reports/fleet"}
    assert calls[0]["own"] == {"dspark_audit_report_dir": str(tmp_path / "reports" / "fleet")}
    assert "failing pairs" not in out


def test_audit_leaves_an_absolute_report_dir_alone(tmp_path, monkeypatch):
    report = tmp_path / "abs-reports"

    def behaviour(kw, extravars):
        Path(extravars["dspark_audit_report_dir"]).mkdir()
        (report / "audit.txt").write_text("pair verdict\nsim01 OK\n")
        (report / "audit.json").write_text(json.dumps({"exit_code": 0, "not_ok": []}))
        return FakeRunner("successful", 0, {})

    calls = setup(tmp_path, monkeypatch, behaviour)
    code, out, _unused = run_cli(tmp_path, "audit", "-e", f"dspark_audit_report_dir={report}", "--artifacts", "runs")
    assert code == 0
    assert calls[0]["own"] is None and calls[0]["kwargs"]["extravars"] is None  # given: dspark adds nothing
    assert "sim01 OK" in out


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
    """ansible-runner and ansible-playbook for real: a local pair p1 of two hosts, h2 fails a task. The -e
    items reach ansible-playbook with its own semantics (KEY=VALUE: a string; an inline mapping: YAML types;
    a vaulted file: decrypted with the password dspark asked for and ansible-runner answered)."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    (work / "ansible.cfg").write_text("[defaults]\ngathering = explicit\nretry_files_enabled = False\n")
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (work / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"pair_p1": {
        "vars": {"dspark_pair": "p1"}, "hosts": {"h1": host, "h2": host}}}}}))
    vault_password = "vault-pw-5c1e"
    vaulted = VaultLib([("default", VaultSecret(vault_password.encode()))]).encrypt("from_vault: opened-3d9a\n")
    (work / "vaulted.yml").write_bytes(vaulted)
    monkeypatch.setattr(cli.getpass, "getpass", lambda prompt="": vault_password)
    playbook = work / "tiny.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Tiny pair play", "hosts": "all", "gather_facts": False,
        "tasks": [
            {"name": "config and extra vars arrive",
             "ansible.builtin.assert": {"that": ["lookup('ansible.builtin.config', 'DEFAULT_GATHERING') == 'explicit'",
                                                 "flag is string and flag == 'true'", "n is string and n == '3'",
                                                 "typed.n is number and typed.n == 3", "later == 'second'",
                                                 "from_vault == 'opened-3d9a'"]}},
            {"name": "h2 breaks", "ansible.builtin.fail": {"msg": "boom on {{ inventory_hostname }}"},
             "when": "inventory_hostname == 'h2'"},
            {"name": "quiet secret", "ansible.builtin.debug": {"msg": "hush-{{ dspark_api_key }}"}, "no_log": True},
        ],
    }], sort_keys=False))
    out, err = io.StringIO(), io.StringIO()
    env = {k: v for k, v in os.environ.items() if k not in ("DSPARK_INVENTORY", "DSPARK_ARTIFACTS")}
    code = cli.run(["provision", "-i", "hosts.yml", "-e", "flag=true n=3", "-e", '{"typed": {"n": 3}}',
                    "-e", "later=first", "-e", "@vaulted.yml", "-e", "later=second", "-e", "dspark_api_key=sk-real-77e0",
                    "--ask-vault-pass", "--artifacts", "runs"],
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
    argv = command["command"]
    assert argv[-1] == str(playbook) and "--ask-vault-pass" in argv
    files = e_files(argv)
    assert len(files) == 6 and files[3] == str(work / "vaulted.yml")  # the vaulted file as is, by absolute path
    assert all(not os.path.exists(path) for i, path in enumerate(files) if i != 3)  # private files removed
    assert not (run_dir / "env").exists()  # extra vars were not written into the run folder
    for path in run_dir.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert b"sk-real-77e0" not in content and vault_password.encode() not in content, path


def test_rollout_passes_the_release_file_first_so_a_later_e_wins(tmp_path, monkeypatch):
    calls = setup(tmp_path, monkeypatch, lambda kw, ev: FakeRunner("successful", 0, {"failures": {}}))
    (tmp_path / "release.yml").write_text("dspark_pin: {image_id: 'sha256:new'}\ndspark_image_archive: /srv/new.tar\n"
                                          "dspark_rollout_wave_pairs: 4\n")
    code, _out, _err = run_cli(tmp_path, "rollout", "--release", "release.yml", "-e", "dspark_rollout_wave_pairs=2",
                               "--artifacts", "runs")
    assert code == 0
    (call,) = calls
    assert call["kwargs"]["playbook"] == "gb10.dspark.rollout"
    assert call["files"][0]["path"] == str(tmp_path / "release.yml")  # the release as -e @FILE, first
    assert call["extravars"] == {"dspark_pin": {"image_id": "sha256:new"}, "dspark_image_archive": "/srv/new.tar",
                                 "dspark_rollout_wave_pairs": "2"}
    assert run_dirs(tmp_path / "runs")[0].name.startswith("rollout-")


def test_rollout_needs_a_release_file_that_exists(tmp_path, monkeypatch):
    calls = setup(tmp_path, monkeypatch, lambda kw, ev: FakeRunner("successful", 0, {"failures": {}}))
    with pytest.raises(SystemExit) as exc:
        run_cli(tmp_path, "rollout")
    assert exc.value.code == cli.EX_USAGE
    code, _out, err = run_cli(tmp_path, "rollout", "--release", "nope.yml")
    assert code == cli.EX_USAGE and "-e @nope.yml: no such file" in err
    assert calls == []


def finished_run(kwargs, rc=0):
    """What ansible-runner leaves in a run folder when its run ends (``rc``, ``status``)."""
    folder = Path(kwargs["private_data_dir"])
    (folder / "rc").write_text(str(rc))
    (folder / "status").write_text("successful" if rc == 0 else "failed")
    return FakeRunner("successful" if rc == 0 else "failed", rc, {"failures": {}})


def old_run(base: Path, name: str, finished: bool = True) -> Path:
    path = base / name
    path.mkdir(parents=True)
    if finished:
        (path / "rc").write_text("0")
    return path


def test_old_finished_run_folders_beyond_keep_runs_are_removed_and_nothing_else(tmp_path, monkeypatch):
    setup(tmp_path, monkeypatch, lambda kw, ev: finished_run(kw))
    base = tmp_path / "runs"
    oldest = [old_run(base, f"audit-2026120{day}T000000Z-abc12{day}") for day in range(1, 5)]
    running = old_run(base, "provision-20261130T000000Z-0ddba1", finished=False)  # another dspark, still going
    foreign = old_run(base, "notes")  # not a dspark run folder
    (base / "README").write_text("the operator's own file\n")
    code, out, _err = run_cli(tmp_path, "audit", "--artifacts", "runs", "--keep-runs", "2")
    assert code == 0
    left = {p.name for p in base.iterdir()}
    # the newest two finished folders before this run are kept, and this run's
    assert {oldest[2].name, oldest[3].name, running.name, foreign.name, "README"} <= left
    assert not {oldest[0].name, oldest[1].name} & left
    assert len(left) == 6 and "removed 2 older run folder(s) beyond the newest 2 (--keep-runs)" in out


def test_keep_runs_comes_from_the_environment_and_0_keeps_everything(tmp_path, monkeypatch):
    setup(tmp_path, monkeypatch, lambda kw, ev: finished_run(kw))
    base = tmp_path / "runs"
    for day in range(1, 4):
        old_run(base, f"audit-2026120{day}T000000Z-abc12{day}")
    env = {"PATH": os.environ.get("PATH", ""), "DSPARK_INVENTORY": "hosts.yml", "DSPARK_KEEP_RUNS": "0"}
    assert run_cli(tmp_path, "audit", "--artifacts", "runs", environ=env)[0] == 0
    assert len(run_dirs(base)) == 4
    env["DSPARK_KEEP_RUNS"] = "1"
    code, out, _err = run_cli(tmp_path, "audit", "--artifacts", "runs", environ=env)
    assert code == 0 and len(run_dirs(base)) == 2 and "removed 3 older" in out  # the previous run's and this one
    env["DSPARK_KEEP_RUNS"] = "many"
    code, _out, err = run_cli(tmp_path, "audit", "--artifacts", "runs", environ=env)
    assert code == cli.EX_USAGE and "DSPARK_KEEP_RUNS" in err
    assert len(run_dirs(base)) == 2  # a usage error makes no run folder and removes none


def test_the_default_keeps_many_runs(tmp_path):
    assert cli.keep_runs(None, {}) == cli.KEEP_RUNS >= 96  # a day of audits every 15 minutes
    assert cli.keep_runs(5, {"DSPARK_KEEP_RUNS": "9"}) == 5
