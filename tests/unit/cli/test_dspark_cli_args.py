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
    ("status", "gb10.dspark.audit"),
    ("guard", "gb10.dspark.guard"),
    ("niah", "gb10.dspark.niah"),
    ("systems", "gb10.dspark.systems"),
    ("pubsuite", "gb10.dspark.pubsuite"),
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
                 "--artifacts", "out", "-vvv", "--json")
    assert (args.inventory, args.limit, args.check, args.artifacts, args.verbose) == ("inv", "pair_sim01", True,
                                                                                      "out", 3)
    assert args.extra_vars == ["a=1", "@f.yml"] and args.json is True and args.all is False
    plain = parse("guard")
    assert (plain.inventory, plain.limit, plain.check, plain.verbose, plain.extra_vars) == (None, None, False, 0, [])
    assert (plain.json, plain.all, plain.tags, plain.vault_ids, plain.forks) == (False, False, [], [], None)


@pytest.mark.parametrize("argv", [[], ["nosuch"], ["provision", "--forward"], ["audit", "--bogus"],
                                  ["guard", "--forks", "0"], ["guard", "-f", "many"], ["status", "--profile", "x"]])
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


def test_extravars_key_value_items_are_strings_as_in_ansible(tmp_path):
    plan = cli.parse_extravars(["dspark_engine_force_replace=true", "n=3 f=1.5 s='two words'", "empty=",
                                "eq=a=b", "nul=null", "l='[1, two]'"], str(tmp_path))
    assert [var.kind for var in plan] == ["kv"] * 6
    got = cli.known_vars(plan)
    assert got == {"dspark_engine_force_replace": "true", "n": "3", "f": "1.5", "s": "two words", "empty": "",
                   "eq": "a=b", "nul": "null", "l": "[1, two]"}
    assert all(isinstance(value, str) for value in got.values())


def test_extravars_files_inline_and_order(tmp_path):
    (tmp_path / "vars.yml").write_text("a: 1\nb: from-file\nflag: true\n")
    (tmp_path / "empty.yml").write_text("")
    plan = cli.parse_extravars(["b=first", "@vars.yml", "a=9", "@empty.yml", '{"c": [1]}', ""], str(tmp_path))
    assert [var.kind for var in plan] == ["kv", "file", "kv", "file", "inline"]  # the empty item is skipped
    assert plan[1].value == str(tmp_path / "vars.yml") and plan[4].value == '{"c": [1]}'
    assert cli.known_vars(plan) == {"a": "9", "b": "from-file", "flag": True, "c": [1]}


def test_extravars_vaulted_file_is_handed_on_unread(tmp_path):
    (tmp_path / "vault.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n6162\n")
    (tmp_path / "tagged.yml").write_text("dspark_api_key: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\nplain: x\n")
    plan = cli.parse_extravars(["@vault.yml", "@tagged.yml"], str(tmp_path))
    assert [(var.kind, var.data) for var in plan][0] == ("file", None)  # a vaulted whole file: not read
    known = cli.known_vars(plan)
    assert isinstance(known["dspark_api_key"], cli.Opaque) and known["plain"] == "x"
    assert "6162" not in repr(known["dspark_api_key"])


@pytest.mark.parametrize("item, content, words", [
    ("novalue", None, "KEY=VALUE"),
    ("=x", None, "KEY=VALUE"),
    ("a=1 stray", None, "KEY=VALUE"),
    ("a='unbalanced", None, "ansible can split"),
    ("@missing.yml", None, "missing.yml"),
    ("./vars.yml", None, "@FILE"),
    ("[1, 2]", None, "mapping"),
    ("{a: [", None, "not a valid inline"),
])
def test_extravars_errors(tmp_path, item, content, words):
    if content is not None:
        (tmp_path / item[1:]).write_text(content)
    with pytest.raises(cli.UsageError) as exc:
        cli.parse_extravars([item], str(tmp_path))
    assert words in str(exc.value)


def test_extravars_errors_do_not_echo_values(tmp_path):
    with pytest.raises(cli.UsageError) as exc:
        cli.parse_extravars(["dspark_api_key sk-typo-1234"], str(tmp_path))
    assert "sk-typo-1234" not in str(exc.value)


def test_unreadable_files_count_as_not_given(tmp_path):
    (tmp_path / "list.yml").write_text("- 1\n")
    (tmp_path / "bad.yml").write_text("a: [\n")
    (tmp_path / "bin.yml").write_bytes(b"\xff\xfe\x00")
    plan = cli.parse_extravars(["@list.yml", "@bad.yml", "@bin.yml"], str(tmp_path))
    assert [var.data for var in plan] == [None, None, None] and cli.known_vars(plan) == {}


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


REPO = Path(__file__).resolve().parents[3]
SECRETS_SOURCE = (REPO / "plugins" / "module_utils" / "common" / "_secrets.py").resolve()


@pytest.fixture
def fresh_rule():
    """collection_secrets() found anew, before and after the test."""
    cli.collection_secrets.cache_clear()
    yield
    cli.collection_secrets.cache_clear()


def test_command_artifact_judges_names_by_the_collections_one_rule(tmp_path, fresh_rule):
    rule = cli.collection_secrets()
    assert rule is not None and Path(rule.__file__).resolve() == SECRETS_SOURCE  # the collection's own file
    env = {"ANSIBLE_HTTPAPI_SESSION_KEY": "sess-0a1", "ANSIBLE_GALAXY_SERVER_X_TOKEN": "tok-0b2",
           "ANSIBLE_BECOME_PASS": "pw-0c3", "ANSIBLE_GALAXY_TOKEN_PATH": "/home/op/.ansible/galaxy_token",
           "ANSIBLE_FORKS": "5", "PATH": "/bin", "MTP_NUM_TOKENS": "2"}
    (tmp_path / "command").write_text(json.dumps({"command": ["ansible-playbook"], "env": env}))
    cli.scrub_command_artifact(str(tmp_path))
    got = json.loads((tmp_path / "command").read_text())["env"]
    for name in ("ANSIBLE_HTTPAPI_SESSION_KEY", "ANSIBLE_GALAXY_SERVER_X_TOKEN", "ANSIBLE_BECOME_PASS"):
        assert rule.is_secret_name(name) and got[name] == cli.NOT_RECORDED, name
    # a path and a count are not secrets by the one rule (the CLI's former substring rule hid the path)
    assert got["ANSIBLE_GALAXY_TOKEN_PATH"] == "/home/op/.ansible/galaxy_token" and got["ANSIBLE_FORKS"] == "5"
    assert got["PATH"] == "/bin" and got["MTP_NUM_TOKENS"] == cli.NOT_RECORDED  # not one dspark keeps


def test_the_rule_is_found_where_ansible_playbook_finds_the_collection(tmp_path, monkeypatch, fresh_rule):
    for found in ([str(tmp_path), str(REPO / "collections")], [str(REPO / "collections" / "ansible_collections")]):
        cli.collection_secrets.cache_clear()
        monkeypatch.setattr(cli, "collection_search_paths", lambda found=found: found)
        assert Path(cli.collection_secrets().__file__).resolve() == SECRETS_SOURCE


def test_command_artifact_without_the_collection_records_no_value(tmp_path, monkeypatch, fresh_rule):
    monkeypatch.setattr(cli, "collection_search_paths", lambda: [str(tmp_path / "no-collections")])
    assert cli.collection_secrets() is None
    env = {"PATH": "/bin", "ANSIBLE_CONFIG": "/w/ansible.cfg", "HF_TOKEN": "tok-123"}
    (tmp_path / "command").write_text(json.dumps({"command": ["ansible-playbook"], "env": env}))
    cli.scrub_command_artifact(str(tmp_path))
    assert json.loads((tmp_path / "command").read_text())["env"] == dict.fromkeys(env, cli.NOT_RECORDED)


def test_rollback_to_previous_runs_the_release_rollback_and_the_old_invocation_is_unchanged():
    to_previous = parse("rollback", "--to", "previous", "--limit", "pair_sim01")
    assert cli.playbook_for(to_previous) == "gb10.dspark.release_rollback"
    assert cli.playbook_name(to_previous) == "release_rollback"
    for argv in (["rollback"], ["rollback", "--to", "breakable-ab"]):
        assert cli.playbook_for(parse(*argv)) == "gb10.dspark.rollback"
    assert cli.playbook_for(parse("rollback", "--to", "breakable-ab", "--forward")) == "gb10.dspark.rollforward"
    with pytest.raises(cli.UsageError, match="--forward and --to previous exclude each other"):
        cli.check_target(parse("rollback", "--to", "previous", "--forward", "--limit", "p"))
    with pytest.raises(cli.UsageError, match="rollback refuses to act on every pair"):
        cli.check_target(parse("rollback", "--to", "previous"))


def test_rollback_help_names_the_release_rollback_apart_from_the_ab_profile(capsys):
    with pytest.raises(SystemExit):
        parse("rollback", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "--to {breakable-ab,previous}" in text
    assert "previous (gb10.dspark.release_rollback): the release the pair ran before" in text
    assert "breakable-ab (default, gb10.dspark.rollback)" in text
