"""One run of the runtime gate suite (_gate_run.run): the files it writes, the key's private file, the verdict
handed back (PASS, FAIL as a result, no result as a failure with the suite's last words), and no secret in any
of it. The suite is a stand-in process here; the real suite runs in the simulator's provision tests."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from ansible_collections.gb10.dspark.plugins.module_utils.gate import _gate_run as G

KEY = "sk-gate-unit-0123456789"
HOSTS = {"sim01-head": {"ansible_host": "10.0.0.1", "ansible_user": "ops"},
         "sim01-worker": {"ansible_host": "10.0.0.2", "ansible_user": "ops"}}


def fake_suite(document: object | None, seen: dict, exit_code: int = 0, say: str = ""):
    """A runner standing in for the suite: it records what it got (argv, env, the config and the key file)
    and writes ``document`` to the config's output, as the suite does."""
    def runner(argv, env, **kw):
        config = json.loads(Path(argv[argv.index("--gate-config") + 1]).read_text())
        key_file = env.get(G.KEY_FILE_ENV)
        seen.update(argv=argv, env=env, config=config, key_file=key_file, kw=kw)
        if key_file:
            seen["key_mode"] = stat.S_IMODE(os.stat(key_file).st_mode)
            seen["key"] = Path(key_file).read_text()
        if document is not None:
            Path(config["output"]).write_text(json.dumps(document))
        return subprocess.CompletedProcess(argv, exit_code, stdout=say, stderr="")
    return runner


def run(tmp_path, runner, api_key=None, inventory=""):
    return G.run("sim01", str(tmp_path / "ev" / "sim01"), {"pair": "sim01", "head": "sim01-head"}, hosts=HOSTS,
                 inventory=inventory, python=sys.executable, suite="/suite", env={"PATH": "/bin", G.KEY_FILE_ENV: "x"},
                 api_key=api_key, runner=runner)


def test_a_pass_is_the_result_and_the_files_are_the_evidence(tmp_path):
    seen = {}
    res = run(tmp_path, fake_suite({"schema_version": 3, "status": "PASS", "errors": []}, seen))
    folder = tmp_path / "ev" / "sim01"
    assert res["passed"] is True and res["failed"] is False and res["rc"] == 0
    assert res["msg"] == f"pair sim01: RUNTIME_GATE status=PASS errors=0 output={folder}/runtime-gate.json"
    assert seen["argv"] == [sys.executable, "-m", "pytest", "/suite", "-q", "-p", "no:cacheprovider",
                            "--gate-config", str(folder / "runtime-gate-config.json")]
    assert seen["config"] == {"pair": "sim01", "head": "sim01-head", "output": str(folder / "runtime-gate.json"),
                              "inventory": str(folder / "runtime-gate-inventory.yml")}
    assert json.loads((folder / "runtime-gate-inventory.yml").read_text()) == {"all": {"hosts": HOSTS}}
    assert seen["key_file"] is None and G.KEY_FILE_ENV not in seen["env"]  # no key: no file, and none inherited


def test_a_given_inventory_is_used_and_none_written(tmp_path):
    seen = {}
    run(tmp_path, fake_suite({"schema_version": 3, "status": "PASS", "errors": []}, seen), inventory="/inv/hosts.yml")
    assert seen["config"]["inventory"] == "/inv/hosts.yml"
    assert not (tmp_path / "ev" / "sim01" / "runtime-gate-inventory.yml").exists()


def test_a_stale_pass_is_never_read(tmp_path):
    folder = tmp_path / "ev" / "sim01"
    folder.mkdir(parents=True)
    (folder / "runtime-gate.json").write_text(json.dumps({"schema_version": 3, "status": "PASS", "errors": []}))
    res = run(tmp_path, fake_suite(None, {}, exit_code=4, say="INTERNALERROR boom"))
    assert res["failed"] is True and res["passed"] is False
    assert res["msg"] == (f"pair sim01: the runtime gate wrote no {folder}/runtime-gate.json (exit 4): "
                          "INTERNALERROR boom")


def test_a_fail_is_a_result_listing_each_error(tmp_path):
    doc = {"schema_version": 3, "status": "FAIL", "errors": ["head: image id mismatch", "worker: log marker missing"]}
    res = run(tmp_path, fake_suite(doc, {}, exit_code=1))
    assert res["failed"] is False and res["passed"] is False and res["document"] == doc
    assert res["msg"].splitlines() == [
        f"pair sim01: RUNTIME_GATE status=FAIL errors=2 output={tmp_path}/ev/sim01/runtime-gate.json",
        "pair sim01: runtime gate FAIL", "head: image id mismatch", "worker: log marker missing"]


def test_a_pass_of_another_schema_is_not_a_pass(tmp_path):
    res = run(tmp_path, fake_suite({"schema_version": 2, "status": "PASS", "errors": []}, {}))
    assert res["passed"] is False


def test_the_key_reaches_the_suite_in_a_private_file_that_is_gone_after(tmp_path):
    seen = {}
    doc = {"schema_version": 3, "status": "FAIL", "errors": [f"the head answered 401 to Bearer {KEY}"]}
    res = run(tmp_path, fake_suite(doc, seen, say=f"echo {KEY}"), api_key=KEY)
    assert seen["key"] == KEY + "\n" and seen["key_mode"] == 0o600
    assert Path(seen["key_file"]).parent.name.endswith(G.KEY_FOLDER_SUFFIX)
    assert not Path(seen["key_file"]).parent.exists()
    assert KEY not in " ".join(seen["argv"]) and KEY not in json.dumps(seen["config"])
    assert KEY not in res["msg"] and "<redacted>" in res["msg"]
    assert all(KEY not in p.read_text() for p in (tmp_path / "ev" / "sim01").iterdir() if p.name != "runtime-gate.json")


def test_the_key_file_is_removed_when_the_suite_cannot_start(tmp_path):
    seen = {}

    def broken(argv, env, **kw):
        seen["key_file"] = env[G.KEY_FILE_ENV]
        raise OSError("no such interpreter")

    try:
        run(tmp_path, broken, api_key=KEY)
    except OSError:
        pass
    else:
        raise AssertionError("the runner's error was swallowed")
    assert not Path(seen["key_file"]).parent.exists()


def test_the_suite_reads_the_key_where_the_action_puts_it():
    """The suite reads the key before it has found the collection, so it spells the variable and the folder
    suffix itself: they must be the action's."""
    import importlib.util

    suite = Path(__file__).resolve().parents[5] / "roles" / "gate" / "files" / "runtime_gate" / "conftest.py"
    spec = importlib.util.spec_from_file_location("runtime_gate_suite_conftest_keys", suite)
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert (conftest.API_KEY_FILE_ENV, conftest.KEY_FOLDER_SUFFIX) == (G.KEY_FILE_ENV, G.KEY_FOLDER_SUFFIX)
