"""dspark CLI: argument parsing, -e values, inventory and artifacts defaults, the runner's environment."""
from __future__ import annotations

import datetime
import io
import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "cli"))

from dspark_cli import main as cli  # noqa: E402


def parse(*argv):
    return cli.build_parser().parse_args(list(argv))


@pytest.mark.parametrize("command, fqcn", [
    ("preflight", "gb10.dspark.preflight"),
    ("provision", "gb10.dspark.provision"),
    ("rollback", "gb10.dspark.rollback"),
    ("audit", "gb10.dspark.audit"),
    ("guard", "gb10.dspark.guard"),
    ("niah", "gb10.dspark.niah"),
    ("evidence", "gb10.dspark.evidence"),
    ("teardown", "gb10.dspark.teardown"),
])
def test_command_runs_its_playbook_by_fqcn(command, fqcn):
    args = parse(command)
    assert cli.playbook_for(args) == fqcn
    assert cli.playbook_name(args) == command


def test_rollback_forward_runs_rollforward():
    args = parse("rollback", "--forward")
    assert cli.playbook_for(args) == "gb10.dspark.rollforward"
    assert cli.playbook_name(args) == "rollforward"


def test_options_are_parsed():
    args = parse("provision", "-i", "inv", "--limit", "pair_sim01", "-e", "a=1", "-e", "@f.yml", "--check",
                 "--artifacts", "out", "-vvv")
    assert (args.inventory, args.limit, args.check, args.artifacts, args.verbose) == ("inv", "pair_sim01", True,
                                                                                      "out", 3)
    assert args.extra_vars == ["a=1", "@f.yml"]
    plain = parse("guard")
    assert (plain.inventory, plain.limit, plain.check, plain.verbose, plain.extra_vars) == (None, None, False, 0, [])


@pytest.mark.parametrize("argv", [[], ["nosuch"], ["provision", "--forward"], ["audit", "--bogus"]])
def test_usage_errors_exit_64(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == cli.EX_USAGE
    assert "usage: dspark" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["audit", "--help"], ["rollback", "-h"]])
def test_help_works(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 0
    assert "usage: dspark" in capsys.readouterr().out


def test_extravars_values_are_yaml(tmp_path):
    got = cli.parse_extravars(["dspark_engine_force_replace=true", "n=3", "f=1.5", "s=hello", "l=[1, two]",
                               "m={a: 1}", "empty=", "yes_word=yes", "off_word=Off", "when=2024-01-01",
                               "eq=a=b", "nul=null", " spaced =x"], str(tmp_path))
    assert got["dspark_engine_force_replace"] is True
    assert got["n"] == 3 and got["f"] == 1.5 and got["s"] == "hello"
    assert got["l"] == [1, "two"] and got["m"] == {"a": 1}
    assert got["empty"] == "" and got["yes_word"] == "yes" and got["off_word"] == "Off"
    assert got["when"] == "2024-01-01"  # YAML dates stay text (they must reach Ansible as JSON)
    assert got["eq"] == "a=b" and got["nul"] is None and got["spaced"] == "x"
    json.dumps(got)


def test_extravars_files_and_order(tmp_path):
    (tmp_path / "vars.yml").write_text("a: 1\nb: from-file\nflag: true\n")
    (tmp_path / "empty.yml").write_text("")
    got = cli.parse_extravars(["b=first", "@vars.yml", "a=9", "@empty.yml", '{"c": [1]}'], str(tmp_path))
    assert got == {"a": 9, "b": "from-file", "flag": True, "c": [1]}


@pytest.mark.parametrize("item, content, words", [
    ("novalue", None, "KEY=VALUE"),
    ("=x", None, "KEY=VALUE"),
    ("@missing.yml", None, "missing.yml"),
    ("@list.yml", "- 1\n- 2\n", "mapping"),
    ("@vault.yml", "$ANSIBLE_VAULT;1.1;AES256\n6162\n", "mapping"),
    ("@bad.yml", "a: [\n", "not valid YAML"),
    ("@date.yml", "when: 2024-01-01\n", "not plain YAML data"),
])
def test_extravars_errors(tmp_path, item, content, words):
    if content is not None:
        (tmp_path / item[1:]).write_text(content)
    with pytest.raises(cli.UsageError) as exc:
        cli.parse_extravars([item], str(tmp_path))
    assert words in str(exc.value)


def test_inventory_from_option_is_made_absolute(tmp_path):
    (tmp_path / "inv").mkdir()
    assert cli.resolve_inventory("inv", {}, str(tmp_path)) == str(tmp_path / "inv")
    assert cli.resolve_inventory("inv", {"DSPARK_INVENTORY": "/elsewhere"}, str(tmp_path)) == str(tmp_path / "inv")


def test_inventory_defaults_to_env(tmp_path):
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    assert cli.resolve_inventory(None, {"DSPARK_INVENTORY": "hosts.yml"}, str(tmp_path)) == str(tmp_path / "hosts.yml")


def test_inventory_missing_or_absent(tmp_path):
    with pytest.raises(cli.UsageError, match="DSPARK_INVENTORY"):
        cli.resolve_inventory(None, {}, str(tmp_path))
    with pytest.raises(cli.UsageError, match="does not exist"):
        cli.resolve_inventory("nope", {}, str(tmp_path))


def test_run_without_inventory_exits_64_before_running(tmp_path):
    err = io.StringIO()
    code = cli.run(["provision", "--artifacts", str(tmp_path / "runs")], environ={}, cwd=str(tmp_path),
                   out=io.StringIO(), err=err)
    assert code == 64
    assert "--inventory" in err.getvalue() and "DSPARK_INVENTORY" in err.getvalue()
    assert not (tmp_path / "runs").exists()


def test_run_with_bad_extravar_exits_64(tmp_path):
    (tmp_path / "hosts").write_text("h1\n")
    err = io.StringIO()
    code = cli.run(["audit", "-i", "hosts", "-e", "oops"], environ={}, cwd=str(tmp_path), out=io.StringIO(), err=err)
    assert code == 64 and "KEY=VALUE" in err.getvalue()


def test_artifacts_base(tmp_path):
    cwd = str(tmp_path)
    assert cli.artifacts_base(None, {}, cwd) == str(tmp_path / "artifacts" / "runs")
    assert cli.artifacts_base(None, {"DSPARK_ARTIFACTS": "a/b"}, cwd) == str(tmp_path / "a" / "b")
    assert cli.artifacts_base("x", {"DSPARK_ARTIFACTS": "a/b"}, cwd) == str(tmp_path / "x")


def test_new_run_dir_name_and_mode(tmp_path):
    when = datetime.datetime(2026, 8, 5, 12, 3, 4, tzinfo=datetime.timezone.utc)
    path = cli.new_run_dir(str(tmp_path / "runs"), "audit", now=when, token="ab12cd")
    assert path == str(tmp_path / "runs" / "audit-20260805T120304Z-ab12cd")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    other = cli.new_run_dir(str(tmp_path / "runs"), "provision")
    assert re.fullmatch(r"provision-\d{8}T\d{6}Z-[0-9a-f]{6}", os.path.basename(other))
    assert other != path


def test_envvars_path_and_config_from_cwd(tmp_path):
    (tmp_path / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    env = cli.runner_envvars({"PATH": "/usr/bin:/bin"}, str(tmp_path), executable="/venv/bin/python")
    assert env["PATH"] == "/venv/bin:/usr/bin:/bin"
    assert env["ANSIBLE_CONFIG"] == str(tmp_path / "ansible.cfg")
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "False"  # what the config says, not ansible-runner's default


def test_envvars_keep_a_set_config_and_path(tmp_path):
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "my.cfg").write_text("[defaults]\nhost_key_checking = True\n")
    environ = {"PATH": "/venv/bin:/bin", "ANSIBLE_CONFIG": "conf/my.cfg", "ANSIBLE_HOST_KEY_CHECKING": "no"}
    env = cli.runner_envvars(environ, str(tmp_path), executable="/venv/bin/python")
    assert env["PATH"] == "/venv/bin:/bin"
    assert env["ANSIBLE_CONFIG"] == str(tmp_path / "conf" / "my.cfg")
    assert "ANSIBLE_HOST_KEY_CHECKING" not in env  # already in the environment: left alone


def test_envvars_without_any_config(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ansible.cfg
    env = cli.runner_envvars({"PATH": "/bin"}, str(tmp_path), executable="/venv/bin/python")
    assert "ANSIBLE_CONFIG" not in env
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"


def test_command_artifact_is_scrubbed(tmp_path):
    doc = {"command": ["ansible-playbook", "x"], "cwd": "/w",
           "env": {"PATH": "/bin", "ANSIBLE_CONFIG": "/w/ansible.cfg", "HF_TOKEN": "tok-123", "OTHER": "v-456",
                   "ANSIBLE_VAULT_PASSWORD": "pw-789"}}
    (tmp_path / "command").write_text(json.dumps(doc))
    cli.scrub_command_artifact(str(tmp_path))
    text = (tmp_path / "command").read_text()
    for secret in ("tok-123", "v-456", "pw-789"):
        assert secret not in text
    got = json.loads(text)
    assert got["command"] == doc["command"]
    assert got["env"]["PATH"] == "/bin" and got["env"]["ANSIBLE_CONFIG"] == "/w/ansible.cfg"
    assert got["env"]["HF_TOKEN"] == cli.NOT_RECORDED
    assert stat.S_IMODE(os.stat(tmp_path / "command").st_mode) == 0o600
