"""dspark CLI: Ansible's options passed on to ansible-playbook, -e items through private files, passwords,
the commands that need --limit or --all, --json, and the help of every command (stand-in ansible_runner.run)."""
from __future__ import annotations

import io
import json
import os
import re
import shlex
import stat
import sys
from pathlib import Path

import ansible_runner
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "cli"))

from dspark_cli import main as cli  # noqa: E402

SECRET = "sk-passthrough-9e41"
SUMMARY_KEYS = {"command", "playbook", "inventory", "limit", "check", "status", "rc", "exit_code", "run_folder",
                "stdout_artifact", "hosts", "failing_pairs", "audit", "pairs", "error"}


class FakeRunner:
    def __init__(self, status="successful", rc=0, stats=None, canceled=False):
        self.status, self.rc, self.stats, self.canceled = status, rc, stats, canceled


def ok(kw, files):
    return FakeRunner("successful", 0, {"processed": {"h1": 1}, "ok": {"h1": 2}, "failures": {}})


class Harness:
    """ansible_runner.run replaced: records its kwargs, the cmdline as argv, and the -e files read during the run."""

    def __init__(self, tmp_path, monkeypatch, behaviour=ok, mapping=None):
        (tmp_path / "hosts.yml").write_text("all: {}\n")
        self.tmp_path = tmp_path
        self.behaviour = behaviour
        self.calls = []
        monkeypatch.setattr(ansible_runner, "run", self._run)
        monkeypatch.setattr(cli, "load_pair_map", lambda *a, **k: dict(mapping or {}))

    def _run(self, **kwargs):
        argv = shlex.split(kwargs["cmdline"]) if kwargs.get("cmdline") else []
        files = []
        for i, arg in enumerate(argv[:-1]):
            if arg == "-e":
                path = argv[i + 1][1:]
                files.append({"path": path, "text": Path(path).read_text(errors="replace"),
                              "mode": stat.S_IMODE(os.stat(path).st_mode)})
        own = json.loads(Path(kwargs["extravars"]).read_text()) if kwargs.get("extravars") else None
        self.calls.append({"kwargs": kwargs, "argv": argv, "files": files, "own": own})
        return self.behaviour(kwargs, files)

    def run(self, *argv, environ=None):
        out, err = io.StringIO(), io.StringIO()
        env = {"PATH": os.environ.get("PATH", ""), "DSPARK_INVENTORY": "hosts.yml"} if environ is None else environ
        code = cli.run([*argv, "--artifacts", "runs"], environ=env, cwd=str(self.tmp_path), out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    @property
    def call(self):
        (call,) = self.calls
        return call

    def run_dirs(self):
        base = self.tmp_path / "runs"
        return sorted(p for p in base.iterdir() if p.is_dir()) if base.exists() else []


@pytest.fixture()
def harness(tmp_path, monkeypatch):
    return Harness(tmp_path, monkeypatch)


# ---- ansible-playbook's options ------------------------------------------------------------------------

def test_every_option_is_passed_on_as_one_argv_element_each(harness):
    code, _out, err = harness.run(
        "guard", "--limit", "pair_sim01", "-vv", "--check", "--diff", "-t", "gate,engine", "--tags", "two words",
        "--skip-tags", "slow", "--skip-tags", "niah", "-f", "7", "-u", "ops user", "--private-key", "keys/id_ed25519",
        "-b", "--become-user", "svc", "--vault-id", "dev@secrets/dev.pw", "--vault-id", "prod@/abs/prod.pw",
        "--vault-password-file", "pw.txt", "--vault-pass-file", "/abs/pw2.txt")
    assert code == 0, err
    kw = harness.call["kwargs"]
    tmp = harness.tmp_path
    assert harness.call["argv"] == [
        "--check", "--diff", "--tags", "gate,engine", "--tags", "two words", "--skip-tags", "slow",
        "--skip-tags", "niah", "--forks", "7", "--user", "ops user", "--private-key", str(tmp / "keys" / "id_ed25519"),
        "--become", "--become-user", "svc", "--vault-id", f"dev@{tmp / 'secrets' / 'dev.pw'}",
        "--vault-id", "prod@/abs/prod.pw", "--vault-password-file", str(tmp / "pw.txt"),
        "--vault-password-file", "/abs/pw2.txt"]
    assert shlex.split(kw["cmdline"]) == harness.call["argv"]  # what ansible-runner does with it
    assert (kw["limit"], kw["verbosity"], kw["passwords"]) == ("pair_sim01", 2, None)


@pytest.mark.parametrize("argv, expected", [
    (["-C"], ["--check"]),
    (["-D"], ["--diff"]),
    (["--key-file", "/k"], ["--private-key", "/k"]),
    (["--vault-id", "dev@"], ["--vault-id", "dev@"]),
    (["--vault-id", "pw.txt"], ["--vault-id", "{tmp}/pw.txt"]),
    (["-e", ""], []),
    ([], []),
])
def test_option_aliases(harness, argv, expected):
    code, _out, err = harness.run("evidence", *argv)
    assert code == 0, err
    assert harness.call["argv"] == [a.replace("{tmp}", str(harness.tmp_path)) for a in expected]
    assert (harness.call["kwargs"]["cmdline"] is None) == (expected == [])


def test_no_option_no_cmdline(harness):
    assert harness.run("preflight")[0] == 0
    assert harness.call["kwargs"]["cmdline"] is None and harness.call["kwargs"]["extravars"] is None


# ---- -e ------------------------------------------------------------------------------------------------

def test_extravars_keep_their_order_and_ansibles_types(harness):
    (harness.tmp_path / "vars.yml").write_text("from_file: 1\n")
    code, out, err = harness.run("provision", "-e", "n=3", "-e", '{"n": 3, "typed": [true]}', "-e", "@vars.yml",
                                 "--extra-vars", "a=1 b='x y'", "-e", "n=last")
    assert code == 0, err
    call = harness.call
    argv = call["argv"]
    assert argv[::2] == ["-e"] * 5 and all(item.startswith("@/") for item in argv[1::2])
    files = call["files"]
    assert files[2]["path"] == str(harness.tmp_path / "vars.yml")  # an @FILE goes on as is, by absolute path
    assert json.loads(files[0]["text"]) == {"n": "3"}  # KEY=VALUE: a string, as in ansible
    assert files[1]["text"] == '{"n": 3, "typed": [true]}'  # an inline mapping: verbatim
    assert yaml.safe_load(files[1]["text"])["n"] == 3
    assert json.loads(files[3]["text"]) == {"a": "1", "b": "x y"}  # several pairs in one item, as parse_kv splits
    assert json.loads(files[4]["text"]) == {"n": "last"}
    for item in (files[0], files[1], files[3], files[4]):
        assert item["mode"] == 0o600
        assert os.path.dirname(item["path"]) != str(harness.tmp_path)
        assert not item["path"].startswith(str(harness.tmp_path / "runs"))
        assert not os.path.exists(item["path"])  # removed after the run
    assert call["own"] is None
    assert "last" not in out + err


def test_secrets_reach_neither_argv_nor_the_run_folder(harness):
    code, out, err = harness.run("provision", "-e", f"dspark_api_key={SECRET}", "-e", f'{{"hf_token": "{SECRET}x"}}',
                                 "--json")
    assert code == 0, err
    kw = harness.call["kwargs"]
    assert SECRET not in kw["cmdline"] and SECRET not in json.dumps(kw["envvars"])
    assert SECRET in harness.call["files"][0]["text"]  # the private file has it, for ansible-playbook to read
    assert SECRET not in out + err
    (run_dir,) = harness.run_dirs()
    for path in run_dir.rglob("*"):
        assert not path.is_file() or SECRET not in path.read_text(errors="replace")


def test_a_vaulted_file_is_handed_on_unread(harness):
    (harness.tmp_path / "vault.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n6162636465\n")
    code, _out, err = harness.run("provision", "-e", "@vault.yml", "--vault-password-file", "pw")
    assert code == 0, err  # no more refusal (rc 64) of vaulted files
    assert harness.call["argv"] == ["--vault-password-file", str(harness.tmp_path / "pw"),
                                    "-e", f"@{harness.tmp_path / 'vault.yml'}"]


def test_a_vaulted_report_dir_counts_as_not_given(harness):
    (harness.tmp_path / "vault.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n6162636465\n")
    code, _out, _err = harness.run("audit", "-e", "@vault.yml")
    (run_dir,) = harness.run_dirs()
    assert harness.call["own"] == {"dspark_audit_report_dir": str(run_dir / "audit")}
    assert code == 0


def test_a_vault_tagged_report_dir_is_given_but_not_read(harness):
    (harness.tmp_path / "vars.yml").write_text("dspark_audit_report_dir: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  61\n")
    code, out, _err = harness.run("audit", "-e", "@vars.yml")
    assert code == 0 and harness.call["own"] is None  # given: dspark adds nothing and prints no report
    assert "no audit report" not in out


def test_a_missing_vars_file_is_a_usage_error(harness):
    code, _out, err = harness.run("provision", "-e", "@nosuch.yml")
    assert code == 64 and "nosuch.yml" in err
    assert harness.calls == [] and harness.run_dirs() == []


def test_errors_outside_any_task_are_shown(tmp_path, monkeypatch):
    def behaviour(kw, files):
        Path(kw["private_data_dir"], "stdout").write_text("[ERROR]: Attempting to decrypt but no vault secrets found\n")
        return FakeRunner("failed", 1, {})

    harness = Harness(tmp_path, monkeypatch, behaviour)
    (tmp_path / "vault.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n6162636465\n")
    code, out, _err = harness.run("provision", "-e", "@vault.yml")
    assert code == 1
    assert "[ERROR]: Attempting to decrypt but no vault secrets found" in out


# ---- passwords -----------------------------------------------------------------------------------------

def test_ask_vault_and_become_passwords(harness, monkeypatch):
    asked = []

    def fake_getpass(prompt=""):
        asked.append(prompt)
        return {"Vault password: ": "vpw-1", "BECOME password: ": "bpw-2", "Vault password (dev): ": "dev-3"}[prompt]

    monkeypatch.setattr(cli.getpass, "getpass", fake_getpass)
    code, out, err = harness.run("provision", "-J", "-K", "--vault-id", "dev@prompt", "--json")
    assert code == 0, err
    assert asked == ["Vault password (dev): ", "Vault password: ", "BECOME password: "]
    kw = harness.call["kwargs"]
    assert kw["passwords"] == {cli.VAULT_PROMPT: "vpw-1", cli.BECOME_PROMPT: "bpw-2",
                               r"Vault password \(dev\):\s*?$": "dev-3"}
    assert harness.call["argv"] == ["--ask-become-pass", "--vault-id", "dev@prompt", "--ask-vault-pass"]
    for secret in ("vpw-1", "bpw-2", "dev-3"):
        assert secret not in kw["cmdline"] and secret not in json.dumps(kw["envvars"]) and secret not in out + err
    (run_dir,) = harness.run_dirs()
    assert not any(p.is_file() and "vpw-1" in p.read_text(errors="replace") for p in run_dir.rglob("*"))


def test_prompt_patterns_match_ansibles_prompts():
    assert re.search(cli.VAULT_PROMPT, "Vault password: ", re.M)
    assert not re.search(cli.VAULT_PROMPT, "Vault password (dev): ", re.M)
    assert re.search(cli.BECOME_PROMPT, "\nBECOME password: ", re.M)
    assert re.search(cli.ANY_VAULT_ID_PROMPT, "Vault password (default): ", re.M)


def test_ask_vault_pass_long_forms(harness, monkeypatch):
    monkeypatch.setattr(cli.getpass, "getpass", lambda prompt="": "pw")
    for flag in ("--ask-vault-pass", "--ask-vault-password"):
        harness.calls.clear()
        assert harness.run("evidence", flag)[0] == 0
        assert harness.call["argv"] == ["--ask-vault-pass"] and harness.call["kwargs"]["passwords"] == {
            cli.VAULT_PROMPT: "pw"}


def test_no_password_read_is_a_usage_error(harness, monkeypatch):
    def closed(prompt=""):
        raise EOFError

    monkeypatch.setattr(cli.getpass, "getpass", closed)
    code, _out, err = harness.run("provision", "--ask-become-pass")
    assert code == 64 and "BECOME password" in err
    assert harness.calls == [] and harness.run_dirs() == []


# ---- --limit or --all ------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["teardown"], ["rollback"], ["rollback", "--forward"], ["status"],
                                  ["teardown", "--limit", ""]])
def test_commands_on_every_pair_need_limit_or_all(harness, argv):
    code, out, err = harness.run(*argv)
    assert code == 64
    assert "--limit" in err and "--all" in err
    assert harness.calls == [] and harness.run_dirs() == [] and out == ""


@pytest.mark.parametrize("argv, playbook", [(["teardown", "--all"], "gb10.dspark.teardown"),
                                            (["rollback", "--all"], "gb10.dspark.rollback"),
                                            (["rollback", "--forward", "--limit", "pair_x"], "gb10.dspark.rollforward"),
                                            (["audit"], "gb10.dspark.audit"),
                                            (["systems"], "gb10.dspark.systems"),
                                            (["pubsuite", "-l", "pair_x"], "gb10.dspark.pubsuite")])
def test_commands_with_a_target_run(harness, argv, playbook):
    code, _out, err = harness.run(*argv)
    assert code == 0, err
    assert harness.call["kwargs"]["playbook"] == playbook
    assert harness.call["kwargs"]["limit"] == (argv[-1] if "--all" not in argv and len(argv) > 1 else None)


def test_all_with_limit_is_a_usage_error(harness):
    code, _out, err = harness.run("teardown", "--all", "--limit", "pair_sim01")
    assert code == 64 and "--all" in err and harness.calls == []


def audit_writer(exit_code, not_ok):
    def behaviour(kw, files):
        own = json.loads(Path(kw["extravars"]).read_text())
        report = Path(own["dspark_audit_report_dir"])
        (report / "audit.txt").write_text("pair   verdict\nsim01  DRIFT\n")
        (report / "audit.json").write_text(json.dumps({"exit_code": exit_code, "not_ok": not_ok}))
        return FakeRunner("failed" if exit_code else "successful", exit_code,
                          {"processed": {"sim01-head": 1, "localhost": 1}, "ok": {"sim01-head": 3, "localhost": 2},
                           "failures": {"localhost": 1} if exit_code else {}})
    return behaviour


def test_status_is_the_audit_of_the_pairs_named(tmp_path, monkeypatch):
    harness = Harness(tmp_path, monkeypatch, audit_writer(2, ["sim01"]), mapping={"sim01-head": "sim01"})
    code, out, _err = harness.run("status", "--limit", "pair_sim01")
    assert code == 2
    assert harness.call["kwargs"]["playbook"] == "gb10.dspark.audit"
    assert harness.call["kwargs"]["limit"] == "pair_sim01"
    (run_dir,) = harness.run_dirs()
    assert run_dir.name.startswith("status-")
    assert "sim01  DRIFT" in out and "failing pairs: sim01" in out


# ---- --json ----------------------------------------------------------------------------------------------

def test_json_summary_of_a_failed_run(tmp_path, monkeypatch):
    def behaviour(kw, files):
        kw["event_handler"]({"event": "runner_on_failed", "event_data": {
            "host": "sim01-worker", "task": "Engine | Start", "res": {"msg": "boom"}}})
        return FakeRunner("failed", 2, {"processed": {"sim01-head": 1, "sim01-worker": 1},
                                        "ok": {"sim01-head": 4, "sim01-worker": 1}, "changed": {"sim01-head": 1},
                                        "failures": {"sim01-worker": 1}, "skipped": {"sim01-head": 2}, "dark": {}})

    harness = Harness(tmp_path, monkeypatch, behaviour, mapping={"sim01-head": "sim01", "sim01-worker": "sim01"})
    code, out, err = harness.run("provision", "--limit", "pair_sim01", "--check", "-e", f"dspark_api_key={SECRET}",
                                 "--json")
    assert code == 2
    doc = json.loads(out)  # exactly one JSON document on stdout
    (run_dir,) = harness.run_dirs()
    assert set(doc) == SUMMARY_KEYS
    assert doc["command"] == "provision" and doc["playbook"] == "gb10.dspark.provision"
    assert doc["inventory"] == str(tmp_path / "hosts.yml")
    assert (doc["limit"], doc["check"], doc["status"], doc["rc"], doc["exit_code"]) == ("pair_sim01", True, "failed",
                                                                                        2, 2)
    assert doc["run_folder"] == str(run_dir) and doc["stdout_artifact"] == str(run_dir / "stdout")
    assert doc["hosts"] == {
        "sim01-head": {"pair": "sim01", "ok": 4, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 2},
        "sim01-worker": {"pair": "sim01", "ok": 1, "changed": 0, "failed": 1, "unreachable": 0, "skipped": 0}}
    assert doc["failing_pairs"] == ["sim01"] and doc["audit"] is None and doc["error"] is None
    assert "[sim01] sim01-worker FAILED Engine | Start -- boom" in err  # progress went to stderr
    assert "failing pairs: sim01" in err and f"run folder: {run_dir}" in err
    assert SECRET not in out + err


def test_json_summary_of_status_holds_the_audit(tmp_path, monkeypatch):
    harness = Harness(tmp_path, monkeypatch, audit_writer(2, ["sim01"]), mapping={"sim01-head": "sim01"})
    code, out, err = harness.run("status", "--all", "--json")
    assert code == 2
    doc = json.loads(out)
    assert doc["command"] == "status" and doc["playbook"] == "gb10.dspark.audit" and doc["limit"] is None
    assert doc["audit"] == {"exit_code": 2, "not_ok": ["sim01"]} and doc["failing_pairs"] == ["sim01"]
    assert doc["hosts"]["sim01-head"]["pair"] == "sim01" and doc["hosts"]["localhost"]["pair"] == "control"
    assert "sim01  DRIFT" in err and "sim01  DRIFT" not in out  # the drift table goes to stderr


def test_json_summary_of_a_successful_run(harness):
    code, out, _err = harness.run("guard", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["exit_code"] == 0 and doc["status"] == "successful" and doc["failing_pairs"] == []
    assert doc["hosts"] == {"h1": {"pair": "h1", "ok": 2, "changed": 0, "failed": 0, "unreachable": 0, "skipped": 0}}


def test_json_summary_of_a_refused_run(harness):
    code, out, err = harness.run("teardown", "--json")
    assert code == 64
    doc = json.loads(out)
    assert set(doc) == SUMMARY_KEYS and doc["exit_code"] == 64 and doc["run_folder"] is None
    assert "--all" in doc["error"] and "--all" in err


def test_json_summary_of_an_interrupted_run(harness, monkeypatch):
    import signal

    def behaviour(kw, files):
        signal.raise_signal(signal.SIGINT)
        kw["cancel_callback"]()
        return FakeRunner("canceled", 254, None, canceled=True)

    harness.behaviour = behaviour
    monkeypatch.setattr(cli, "_child_pids", lambda parent: [])
    code, out, err = harness.run("niah", "--json")
    doc = json.loads(out)
    assert code == 130 and doc["exit_code"] == 130 and doc["status"] == "canceled" and doc["hosts"] == {}
    assert "interrupted" in err


def test_render_keeps_its_own_json(harness):
    args = cli.build_parser().parse_args(["render", "--profile", "production", "--json"])
    assert args.json is True  # render's --json prints the render as JSON, not a run summary


# ---- help ------------------------------------------------------------------------------------------------

def test_every_command_has_its_help_and_playbook(capsys):
    assert set(cli.HELP) == set(cli.PLAYBOOKS) - {"rollforward", "release_rollback"}  # rollback --forward, --to previous
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    top = capsys.readouterr().out
    for name, text in cli.HELP.items():
        assert name in top and len(text) > 40
        with pytest.raises(SystemExit) as exc:
            cli.build_parser().parse_args([name, "--help"])
        assert exc.value.code == 0
        page = " ".join(capsys.readouterr().out.split())
        assert cli.PLAYBOOKS[name] in page
        for option in ("--all", "--extra-vars", "--vault-id", "--ask-become-pass", "--json", "--diff", "--forks"):
            assert option in page, (name, option)
    assert "needs --limit or --all" in cli.HELP["teardown"] and "needs --limit or --all" in cli.HELP["rollback"]
    assert "--limit" in cli.HELP["status"]


def test_one_prompt_for_the_same_vault_prompt(harness, monkeypatch):
    asked = []
    monkeypatch.setattr(cli.getpass, "getpass", lambda prompt="": asked.append(prompt) or "pw")
    assert harness.run("evidence", "-J", "--vault-id", "prompt_ask_vault_pass", "--vault-id", "prompt")[0] == 0
    assert asked == ["Vault password: ", "Vault password (default vault id): "]
    assert list(harness.call["kwargs"]["passwords"]) == [cli.VAULT_PROMPT, cli.ANY_VAULT_ID_PROMPT]


def test_json_holds_the_pair_summary_the_callback_wrote_and_the_table_is_shown(tmp_path, monkeypatch):
    """dspark enables gb10.dspark.pair_summary beside what is enabled already and tells it to write the run folder's
    pairs.json; with --json the document holds those rows, and the table goes to stderr."""
    rows = [{"pair": "sim01", "ranks": ["sim01-head", "sim01-worker"], "verdict": "PASS", "phase": "Evidence",
             "rank": None, "reason": ""},
            {"pair": "sim02", "ranks": ["sim02-head", "sim02-worker"], "verdict": "FAILED", "phase": "Engine",
             "rank": "sim02-worker", "reason": "rank sim02-worker: the pair's engine exited on worker"}]

    def behaviour(kw, files):
        assert kw["envvars"]["ANSIBLE_CALLBACKS_ENABLED"].split(",") == ["mine", "gb10.dspark.pair_summary"]
        Path(kw["envvars"]["DSPARK_PAIR_SUMMARY_FILE"]).write_text(json.dumps({"playbook": "provision.yml", "pairs": rows}))
        return FakeRunner("failed", 2, {"processed": {}, "failures": {"sim02-worker": 1}, "dark": {}})

    harness = Harness(tmp_path, monkeypatch, behaviour)
    env = {"PATH": os.environ.get("PATH", ""), "DSPARK_INVENTORY": "hosts.yml", "ANSIBLE_CALLBACKS_ENABLED": "mine"}
    code, out, err = harness.run("provision", "--all", "--json", environ=env)
    doc = json.loads(out)
    assert code == 2 and doc["pairs"] == rows
    assert "PAIR SUMMARY provision.yml: 1 of 2 pairs PASS" in err
    assert "sim02  FAILED       phase Engine; rank sim02-worker: the pair's engine exited on worker" in err


def test_callbacks_enabled_keeps_what_the_configuration_enables(tmp_path):
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\ncallbacks_enabled = gb10.dspark.progress, timer\n")
    assert cli.callbacks_enabled({}, str(cfg)) == "gb10.dspark.progress,timer,gb10.dspark.pair_summary"
    cfg.write_text("[defaults]\ncallbacks_enabled = gb10.dspark.pair_summary\n")
    assert cli.callbacks_enabled({}, str(cfg)) == "gb10.dspark.pair_summary"
    assert cli.callbacks_enabled({"ANSIBLE_CALLBACKS_ENABLED": ""}, str(cfg)) == "gb10.dspark.pair_summary"


def test_the_preflight_help_names_only_checks_the_preflight_play_runs():
    """Each rank check `dspark preflight --help` names is the name of a task that preflight.yml runs (it once
    promised a head-to-worker SSH trust check that was gone)."""
    import yaml

    root = Path(cli.__file__).resolve().parents[2]
    names = []
    for tasks in ("roles/preflight/tasks/main.yml", "roles/engine/tasks/foreign.yml"):
        names += [t["name"].lower() for t in yaml.safe_load((root / tasks).read_text()) if "name" in t]
    ranks = cli.HELP["preflight"].split("on every rank ", 1)[1].split(" (changes nothing)")[0]
    checks = [re.sub(r"^(the|what holds the) ", "", c.strip()) for c in re.split(r",| and |then ", ranks) if c.strip()]
    assert checks == ["GPU", "fabric links", "model checkpoint", "engine's name", "master port"]
    assert all(any(check.lower() in n for n in names) for check in checks), (checks, names)
