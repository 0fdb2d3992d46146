"""One run of the runtime gate suite (_gate_run.run): the config it writes, what it hands the suite in memory (the
config, the connection settings, the key), the verdict handed back (PASS, FAIL as a result, no verdict as a failure
with the suite's last words), and no secret in any of it. The suite is a stand-in in most tests; the last ones run
the real suite in this process (with a config it refuses, so that no rank is needed), and the simulator's
provision tests run it against real ranks."""
from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.gb10.dspark.plugins.module_utils.gate import _gate_run as G

KEY = "sk-gate-unit-0123456789"
HOSTS = {"sim01-head": {"ansible_host": "10.0.0.1", "ansible_user": "ops"},
         "sim01-worker": {"ansible_host": "10.0.0.2", "ansible_user": "ops"}}


def fake_suite(document: object | None, seen: dict, exit_code: int = 0, say: str = "", write: bool = True):
    """A runner standing in for the suite: it records what it was given, writes ``document`` to the config's
    output (the evidence file) and leaves it on the plugin object, as the suite's conftest does."""
    def runner(suite, given):
        seen.update(suite=suite, config=given.config, hosts=given.hosts, key=given.api_key)
        if document is not None:
            if write:
                Path(given.config["output"]).write_text(json.dumps(document))
            given.document = document
        return exit_code, say
    return runner


def run(tmp_path, runner, api_key=None, inventory=""):
    return G.run("sim01", str(tmp_path / "ev" / "sim01"), {"pair": "sim01", "head": "sim01-head"}, hosts=HOSTS,
                 inventory=inventory, suite="/suite", api_key=api_key, runner=runner)


def test_a_pass_is_the_result_and_the_config_is_the_evidence(tmp_path):
    seen = {}
    res = run(tmp_path, fake_suite({"schema_version": 3, "status": "PASS", "errors": []}, seen))
    folder = tmp_path / "ev" / "sim01"
    assert res["passed"] is True and res["failed"] is False and res["rc"] == 0
    assert res["msg"] == f"pair sim01: RUNTIME_GATE status=PASS errors=0 output={folder}/runtime-gate.json"
    config = {"pair": "sim01", "head": "sim01-head", "output": str(folder / "runtime-gate.json"), "inventory": ""}
    assert seen == {"suite": "/suite", "config": config, "hosts": HOSTS, "key": None}
    assert json.loads((folder / "runtime-gate-config.json").read_text()) == config
    assert sorted(p.name for p in folder.iterdir()) == ["runtime-gate-config.json", "runtime-gate.json"]  # no inventory


def test_the_verdict_is_the_suites_document_not_a_file_read_back(tmp_path):
    doc = {"schema_version": 3, "status": "PASS", "errors": []}
    res = run(tmp_path, fake_suite(doc, {}, write=False))
    assert res["passed"] is True and res["document"] == doc
    assert not (tmp_path / "ev" / "sim01" / "runtime-gate.json").exists()


def test_a_given_inventory_is_used_and_no_connection_settings_go_with_it(tmp_path):
    seen = {}
    run(tmp_path, fake_suite({"schema_version": 3, "status": "PASS", "errors": []}, seen), inventory="/inv/hosts.yml")
    assert seen["config"]["inventory"] == "/inv/hosts.yml" and seen["hosts"] == {}


def test_a_stale_pass_is_removed_and_no_verdict_is_a_failure_with_the_last_words(tmp_path):
    folder = tmp_path / "ev" / "sim01"
    folder.mkdir(parents=True)
    (folder / "runtime-gate.json").write_text(json.dumps({"schema_version": 3, "status": "PASS", "errors": []}))
    res = run(tmp_path, fake_suite(None, {}, exit_code=4, say="collected 0 items\nINTERNALERROR boom"))
    assert res["failed"] is True and res["passed"] is False
    assert res["msg"] == "pair sim01: the runtime gate suite gave no verdict (exit 4): collected 0 items | INTERNALERROR boom"
    assert not (folder / "runtime-gate.json").exists()


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


def test_the_key_reaches_the_suite_in_memory_only_and_is_redacted(tmp_path):
    seen = {}
    doc = {"schema_version": 3, "status": "FAIL", "errors": [f"the head answered 401 to Bearer {KEY}"]}
    res = run(tmp_path, fake_suite(doc, seen), api_key=KEY)
    assert seen["key"] == KEY and KEY not in json.dumps(seen["config"])
    assert KEY not in res["msg"] and "<redacted>" in res["msg"]
    assert KEY not in (tmp_path / "ev" / "sim01" / "runtime-gate-config.json").read_text()
    nothing = run(tmp_path, fake_suite(None, {}, exit_code=3, say=f"token {KEY} refused"), api_key=KEY)
    assert KEY not in nothing["msg"] and "<redacted>" in nothing["msg"]


def test_the_suite_finds_the_plugin_object_under_the_actions_name():
    """The suite's conftest asks pytest for the plugin by name before it has found the collection, so it spells
    the name itself: it must be the action's."""
    import importlib.util

    suite = Path(__file__).resolve().parents[5] / "roles" / "gate" / "files" / "runtime_gate" / "conftest.py"
    spec = importlib.util.spec_from_file_location("runtime_gate_suite_conftest_names", suite)
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert conftest.INPUT_PLUGIN == G.INPUT_PLUGIN


SUITE = Path(__file__).resolve().parents[5] / "roles" / "gate" / "files" / "runtime_gate"


def test_the_real_suite_runs_in_process_and_hands_its_document_back(tmp_path, capsys):
    """The real suite, run as the action runs it: a config it refuses (no ranks, no head needed) still gives a
    schema-3 FAIL document, handed back in memory and written as the evidence file; nothing reaches this
    process's stdout, and the key given in memory is in neither."""
    res = G.run("sim01", str(tmp_path / "ev" / "sim01"), {"pair": "sim01", "profile": "production"}, hosts=HOSTS,
                inventory="", suite=str(SUITE), api_key=KEY)
    assert res["failed"] is False and res["passed"] is False, res
    doc = res["document"]
    assert doc["schema_version"] == 3 and doc["status"] == "FAIL"
    assert any(e.startswith("gate config: ") for e in doc["errors"]), doc["errors"]
    written = json.loads((tmp_path / "ev" / "sim01" / "runtime-gate.json").read_text())
    assert written == doc
    assert res["rc"] != 0 and "RUNTIME_GATE status=FAIL" in res["msg"]
    assert capsys.readouterr().out == ""
    assert KEY not in json.dumps(res) and KEY not in json.dumps(written)


def test_a_run_by_hand_must_name_an_inventory_and_the_actions_run_needs_none(tmp_path):
    """The config may leave the inventory empty (the action hands the suite the play's connection settings);
    the same config run by hand, with nothing handed over, is refused naming the inventory."""
    import subprocess
    import sys

    res = G.run("sim01", str(tmp_path / "ev"), {"pair": "sim01"}, hosts=HOSTS, inventory="", suite=str(SUITE))
    assert not any("inventory" in e for e in res["document"]["errors"]), res["document"]["errors"]
    config = tmp_path / "ev" / "runtime-gate-config.json"
    full = {**_valid_config(), "output": str(tmp_path / "by-hand.json"), "inventory": ""}
    config.write_text(json.dumps(full))
    collections = Path(__file__).resolve().parents[5] / "collections"
    proc = subprocess.run([sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider",
                           "--gate-config", str(config)], capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_COLLECTIONS_PATH": str(collections)})
    doc = json.loads((tmp_path / "by-hand.json").read_text())
    assert doc["status"] == "FAIL" and doc["errors"] == [
        "gate config: inventory is empty (a run by hand names the inventory its rank calls use)"], proc.stdout[-2000:]


def _valid_config() -> dict:
    """A config the gate's checks accept (the unit tests' own, in test_runtime_gate.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gate_unit_config", Path(__file__).with_name("test_runtime_gate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.raw_config()
