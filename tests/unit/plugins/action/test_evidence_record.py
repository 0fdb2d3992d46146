"""The evidence_record action: the files a role just wrote on the control node, each with its sha256,
added to this run's list (a later record of the same name replaces the earlier), the files that are not
there named and left out, and a bad entry refused naming it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.gb10.dspark.plugins.action import evidence_record as action
from tests.unit.plugins.action._plugin import make_plugin

FACT = "dspark_evidence_run_files"


def run(args: dict, existing: object = None, check_mode: bool = False) -> dict:
    plugin = make_plugin(action.ActionModule, "gb10.dspark.evidence_record", args, check_mode)
    plugin._templar.template.side_effect = lambda value, *a, **kw: value
    task_vars = {"inventory_hostname": "sim01-head"}
    if existing is not None:
        task_vars[FACT] = existing
    return plugin.run(task_vars=task_vars)


def put(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def entry(name: str, src: Path, kind: str) -> dict:
    return {"name": name, "src": str(src), "kind": kind, "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}


def test_files_are_recorded_with_their_sha256(tmp_path):
    guard = put(tmp_path / "serving-guard.json", {"status": "PASS"})
    gate = put(tmp_path / "runtime-gate.json", {"status": "PASS"})
    res = run({"files": [{"name": "serving-guard.json", "src": str(guard), "kind": "guard"},
                         {"name": "runtime-gate.json", "src": str(gate), "kind": "gate"}]})
    assert not res.get("failed"), res
    assert res["changed"] is False
    want = [entry("runtime-gate.json", gate, "gate"), entry("serving-guard.json", guard, "guard")]
    assert res["ansible_facts"] == {FACT: want}  # sorted by name
    assert res["recorded"] == want[::-1] and res["missing"] == []
    assert res["msg"] == "recorded serving-guard.json, runtime-gate.json"


def test_check_mode_records_the_same(tmp_path):
    guard = put(tmp_path / "serving-guard.json", {"status": "PASS"})
    args = {"files": [{"name": "serving-guard.json", "src": str(guard), "kind": "guard"}]}
    assert run(args, check_mode=True)["ansible_facts"] == run(args)["ansible_facts"]


def test_the_run_list_in_task_vars_is_kept_and_the_same_name_replaced(tmp_path):
    first = put(tmp_path / "a" / "runtime-gate.json", {"status": "FAIL"})
    second = put(tmp_path / "b" / "runtime-gate.json", {"status": "PASS"})
    readiness = put(tmp_path / "readiness.json", {"profile": "production"})
    existing = [entry("readiness.json", readiness, "readiness"), entry("runtime-gate.json", first, "gate")]
    res = run({"files": [{"name": "runtime-gate.json", "src": str(second), "kind": "gate"}]}, existing=existing)
    assert not res.get("failed"), res
    assert res["ansible_facts"][FACT] == [existing[0], entry("runtime-gate.json", second, "gate")]
    assert res["recorded"] == [entry("runtime-gate.json", second, "gate")]


def test_a_niah_run_folder_is_recorded_file_by_file(tmp_path):
    folder = tmp_path / "niah" / "long-1m-1"
    put(folder / "niah.json", {"status": "PASS"})
    put(folder / "depth-25.json", {"status": "PASS"})
    (folder / ".lock").write_text("")
    res = run({"files": [{"name": "niah/long-1m-1", "src": str(folder), "kind": "niah_run"}]})
    assert [(f["name"], f["kind"]) for f in res["ansible_facts"][FACT]] == [
        ("niah/long-1m-1/depth-25.json", "niah_row"), ("niah/long-1m-1/niah.json", "niah")]


def test_a_file_that_is_not_there_is_reported_and_not_recorded(tmp_path):
    guard = put(tmp_path / "serving-guard.json", {"status": "PASS"})
    existing = [entry("serving-guard.json", guard, "guard")]
    res = run({"files": [{"name": "systems.json", "src": str(tmp_path / "systems.json"), "kind": "systems"}]},
              existing=existing)
    assert not res.get("failed"), res
    assert res["missing"] == ["systems.json"] and res["recorded"] == []
    assert res["ansible_facts"][FACT] == existing
    assert res["msg"] == "recorded nothing; not written by this run: systems.json"


@pytest.mark.parametrize("item, message", [
    ({"name": "guard.json", "kind": "bogus"}, "run file guard.json kind is bogus, expected one of"),
    ({"name": "../guard.json", "kind": "guard"}, "run file name '../guard.json' is a path with an empty, '.' or '..'"),
    ({"name": "/guard.json", "kind": "guard"}, "run file name '/guard.json' is an absolute path"),
])
def test_a_bad_entry_is_refused_naming_it(tmp_path, item, message):
    guard = put(tmp_path / "serving-guard.json", {"status": "PASS"})
    res = run({"files": [{"src": str(guard), **item}]})
    assert res["failed"] is True
    assert message in res["msg"]
    assert [m["rank"] for m in res["mismatches"]] == ["control node"]
    assert "ansible_facts" not in res


def test_a_bad_entry_in_the_run_list_is_refused(tmp_path):
    guard = put(tmp_path / "serving-guard.json", {"status": "PASS"})
    res = run({"files": []}, existing=[{"name": "serving-guard.json", "src": str(guard), "kind": "guard"}])
    assert res["failed"] is True
    assert "run file serving-guard.json sha256 is None, expected 64 lowercase hex digits" in res["msg"]


@pytest.mark.parametrize("files, kind", [({"name": "a.json"}, "dict"), ("a.json", "str")])
def test_files_that_are_not_a_list_are_refused(files, kind):
    res = run({"files": files})
    assert res["failed"] is True
    assert res["msg"] == f"files must be a list, got {kind}"
    assert "ansible_facts" not in res


def test_an_unknown_option_is_refused():
    with pytest.raises(AnsibleActionFail, match="Invalid options for gb10.dspark.evidence_record: colour"):
        run({"files": [], "colour": "blue"})


def test_content_is_written_with_its_folder_and_recorded(tmp_path):
    """One task writes a result the role made and records it (the folder, the file and the record were
    three tasks)."""
    dest = tmp_path / "evidence" / "sim01" / "readiness.json"
    res = run({"files": [{"name": "readiness.json", "src": str(dest), "kind": "readiness",
                          "content": {"pair": "sim01", "ready": True, "kv_cache_size_tokens": 4096}}]})
    assert not res.get("failed"), res
    assert json.loads(dest.read_text()) == {"pair": "sim01", "ready": True, "kv_cache_size_tokens": 4096}
    assert res["ansible_facts"] == {FACT: [entry("readiness.json", dest, "readiness")]}


def test_content_with_a_bad_entry_writes_nothing(tmp_path):
    dest = tmp_path / "evidence" / "readiness.json"
    res = run({"files": [{"name": "../readiness.json", "src": str(dest), "kind": "readiness", "content": {"a": 1}}]})
    assert res["failed"] and "run file name '../readiness.json'" in res["msg"], res
    assert not dest.parent.exists()
    res = run({"files": [{"name": "readiness.json", "src": "relative.json", "kind": "readiness", "content": {"a": 1}}]})
    assert res["failed"] and "an absolute path on the control node" in res["msg"], res
    assert not Path("relative.json").exists()


def test_check_mode_writes_no_content_and_records_only_what_is_there(tmp_path):
    """`--check` changes nothing on the control node: an entry with content (the preflight's wrapper-tree.json)
    is neither written (not even its folder) nor recorded; a file already there is recorded as always."""
    guard = put(tmp_path / "serving-guard.json", {"status": "PASS"})
    dest = tmp_path / "sim01" / "wrapper-tree.json"
    res = run({"files": [{"name": "wrapper-tree.json", "src": str(dest), "kind": "tree", "content": {"clean": True}},
                         {"name": "serving-guard.json", "src": str(guard), "kind": "guard"}]}, check_mode=True)
    assert not res.get("failed"), res
    assert not dest.parent.exists()
    assert res["ansible_facts"] == {FACT: [entry("serving-guard.json", guard, "guard")]}
    assert res["msg"] == "recorded serving-guard.json; check mode: not written: wrapper-tree.json"
