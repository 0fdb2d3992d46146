# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gb10.dspark.evidence_pack end to end: real files under tmp_path, the module's main() in-process."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from ansible.module_utils.common import warnings as ansible_warnings

from ansible_collections.gb10.dspark.plugins.modules import evidence_pack

MANIFEST = "f6777b31e8c8977361d629ca99c37a199d3b52b9abc134f1de624eb202f083a9"
API_KEY = "sk-live-Zr8wQ3nB5tY1"


@pytest.fixture(autouse=True)
def _no_stale_warnings():
    ansible_warnings._global_warnings.clear()


@pytest.fixture(name="run_dir")
def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "evidence" / "sim01"
    run.mkdir(parents=True)
    (run / "runtime-gate.json").write_text(json.dumps({"schema_version": 3, "status": "PASS", "errors": [],
                                                       "evidence": {"output": str(run / "runtime-gate.json")}}))
    (run / "inspect-worker.json").write_text(json.dumps([{
        "Id": "feed", "Args": ["serve", "--headless", "--api-key", API_KEY],
        "Config": {"Env": [f"VLLM_API_KEY={API_KEY}", "NODE_RANK=1"]}}]))
    return run


def args(tmp_path: Path, run_dir: Path, **changes) -> dict:
    base = {
        "dest": str(run_dir / "runs" / "r1"),
        "pair": "sim01",
        "run_id": "r1",
        "playbook": "provision",
        "artifacts": [
            {"name": "runtime-gate.json", "src": str(run_dir / "runtime-gate.json"), "kind": "gate", "required": True},
            {"name": "inspect/worker.json", "src": str(run_dir / "inspect-worker.json"), "kind": "inspect",
             "required": True},
            {"name": "readiness.json", "src": str(run_dir / "readiness.json"), "kind": "readiness"},
            {"name": "pin.json", "content": {"image_id": "sha256:" + "2d" * 32}, "kind": "pin"},
        ],
        "facts": {
            "pin": {"image_id": "sha256:" + "2d" * 32, "model_revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
                    "runtime_manifest_sha256": MANIFEST},
            "manifest_sha256": MANIFEST,
            "profile": {"name": "production", "sha256": "b9" * 32, "experimental": False, "departures": [],
                        "cudagraph_implementation": "regular"},
            "tree": {"dirty": False, "allow_dirty": False, "commit": "4d9a358"},
            "row_kinds": ["regular"],
        },
        "secrets": [API_KEY],
        "redact_prefixes": [{"prefix": str(tmp_path / "evidence"), "placeholder": "<evidence>"}],
    }
    base.update(changes)
    return base


def test_pack_is_written(tmp_path, run_dir, run_module):
    result = run_module(evidence_pack, args(tmp_path, run_dir), diff=True)
    assert result["failed"] is False, result.get("msg")
    assert result["changed"] is True
    dest = Path(result["dest"])
    assert dest == run_dir / "runs" / "r1"
    assert result["invalid_for_publish"] is False and result["reasons"] == []
    assert ansible_warnings.get_warning_messages() == ()
    written = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert written == result["files"] == ["SHA256SUMS", "index.json", "index.md", "inspect/worker.json", "pin.json",
                                          "runtime-gate.json"]
    assert result["diff"] == {"before": {}, "after": {"path": str(dest), "files": written}}
    states = {a["name"]: a["state"] for a in result["artifacts"]}
    assert states == {"runtime-gate.json": "present", "inspect/worker.json": "present", "pin.json": "present",
                      "readiness.json": "absent"}
    for artifact in result["artifacts"]:
        if artifact["state"] == "present":
            assert artifact["sha256"] == hashlib.sha256((dest / artifact["name"]).read_bytes()).hexdigest()
    assert json.loads((dest / "index.json").read_text()) == result["index"]
    sums = dict(reversed(line.split("  ", 1)) for line in (dest / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == set(written) - {"SHA256SUMS"}
    assert all(hashlib.sha256((dest / n).read_bytes()).hexdigest() == h for n, h in sums.items())
    worker = (dest / "inspect/worker.json").read_text()
    assert API_KEY not in worker and "VLLM_API_KEY=<redacted>" in worker
    assert json.loads((dest / "runtime-gate.json").read_text())["evidence"]["output"] == \
        "<evidence>/sim01/runtime-gate.json"
    assert str(tmp_path) not in json.dumps(result["index"])


def test_second_run_into_the_same_dest_fails_and_changes_nothing(tmp_path, run_dir, run_module):
    first = run_module(evidence_pack, args(tmp_path, run_dir))
    dest = Path(first["dest"])
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    result = run_module(evidence_pack, args(tmp_path, run_dir, pair="sim01", run_id="r1"))
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == (f"rank control node: evidence pack {dest} is a non-empty folder (6 entries), "
                             "expected absent or an empty folder (packs are never overwritten)")
    assert result["mismatches"][0]["rank"] == "control node"
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before


def test_check_mode_plans_and_writes_nothing(tmp_path, run_dir, run_module):
    result = run_module(evidence_pack, args(tmp_path, run_dir), check_mode=True, diff=True)
    assert result["failed"] is False, result.get("msg")
    assert result["changed"] is True  # it would write a pack
    assert not (run_dir / "runs").exists()
    assert result["diff"]["before"] == {}
    assert result["diff"]["after"]["files"] == result["files"] and "index.md" in result["files"]
    gate = next(a for a in result["artifacts"] if a["name"] == "runtime-gate.json")
    assert gate["source_sha256"] == hashlib.sha256((run_dir / "runtime-gate.json").read_bytes()).hexdigest()
    assert gate["redacted"] is True and gate["sha256"] != gate["source_sha256"]
    real = run_module(evidence_pack, args(tmp_path, run_dir))  # the plan is what a real run writes
    assert [a["sha256"] for a in real["artifacts"]] == [a["sha256"] for a in result["artifacts"]]


def test_dirty_tree_and_experimental_profile_make_it_invalid_with_a_warning(tmp_path, run_dir, run_module):
    a = args(tmp_path, run_dir)
    a["facts"]["tree"] = {"dirty": True, "allow_dirty": True, "commit": "4d9a358"}
    a["facts"]["profile"]["experimental"] = True
    result = run_module(evidence_pack, a)
    assert result["failed"] is False and result["invalid_for_publish"] is True
    assert result["reasons"] == ["wrapper tree at 4d9a358 is dirty (allowed by allow_dirty)",
                                 "profile production is experimental"]
    warnings = ansible_warnings.get_warning_messages()
    assert len(warnings) == 1 and "not valid for publication" in warnings[0] and "experimental" in warnings[0]
    assert "`invalid_for_publish: true`" in (Path(result["dest"]) / "index.md").read_text()


def test_secret_in_an_artifact_fails_and_leaves_nothing(tmp_path, run_dir, run_module):
    a = args(tmp_path, run_dir)
    a["artifacts"].append({"name": "notes.txt", "content": f"curl -H 'Authorization: Bearer {API_KEY}'\n"})
    result = run_module(evidence_pack, a)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == ("rank control node: pack file notes.txt is carrying secret #1 (value withheld), "
                             "expected free of secrets")
    assert API_KEY not in json.dumps(result)
    assert not (run_dir / "runs").exists()


def test_dot_dot_name_is_refused(tmp_path, run_dir, run_module):
    a = args(tmp_path, run_dir)
    a["artifacts"].append({"name": "../../outside.json", "content": {}})
    result = run_module(evidence_pack, a)
    assert result["failed"] is True
    assert "artifact name '../../outside.json' is a path with an empty, '.' or '..' component" in result["msg"]
    assert not (run_dir / "runs").exists() and not (tmp_path / "outside.json").exists()


def test_src_and_content_together_are_refused_by_the_argument_spec(tmp_path, run_dir, run_module):
    a = args(tmp_path, run_dir)
    a["artifacts"][0]["content"] = {"status": "PASS"}
    result = run_module(evidence_pack, a)
    assert result["failed"] is True and "mutually exclusive" in result["msg"]
    assert not (run_dir / "runs").exists()


def test_a_mix_of_client_kinds_makes_the_pack_invalid(tmp_path, run_dir, run_module):
    a = args(tmp_path, run_dir)
    a["artifacts"].append({"name": "systems.json", "kind": "systems", "content": {
        "status": "PASS", "rows": [{"lane": "latency", "level": None, "status": "PASS", "client_kind": "openai_portable"}]}})
    a["facts"]["client_kinds"] = {"vllm-bench": ["vllm-bench/serve.json"]}
    result = run_module(evidence_pack, a)
    assert result["failed"] is False and result["invalid_for_publish"] is True
    assert result["reasons"] == ["result rows mix client kinds: openai_portable (systems.json rows latency) and "
                                 "vllm-bench (vllm-bench/serve.json); vllm-bench and openai_portable rows are never "
                                 "published together"]
    assert result["index"]["results"]["client_kinds"] == ["openai_portable", "vllm-bench"]


def test_one_client_kind_keeps_the_pack_publishable(tmp_path, run_dir, run_module):
    a = args(tmp_path, run_dir)
    a["facts"]["client_kinds"] = {"openai_portable": ["serving-guard.json"]}
    result = run_module(evidence_pack, a)
    assert result["failed"] is False and result["invalid_for_publish"] is False, result["reasons"]


def _recorded(name: str, src: Path, kind: str) -> dict:
    return {"name": name, "src": str(src), "kind": kind, "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}


def test_a_run_file_rewritten_after_it_was_recorded_is_stale_and_makes_the_pack_invalid(tmp_path, run_dir, run_module):
    (run_dir / "readiness.json").write_text(json.dumps({"profile": "production", "experimental": False}))
    (run_dir / "wrapper-tree.json").write_text(json.dumps({"dirty": False, "allowed_dirty": False,
                                                           "revision": "4d9a358"}))
    guard = run_dir / "serving-guard.json"
    guard.write_text(json.dumps({"status": "FAIL", "infra_failures": 0, "contract_failures": 3}))
    run_files = [_recorded("runtime-gate.json", run_dir / "runtime-gate.json", "gate"),
                 _recorded("readiness.json", run_dir / "readiness.json", "readiness"),
                 _recorded("serving-guard.json", guard, "guard"),
                 _recorded("wrapper-tree.json", run_dir / "wrapper-tree.json", "tree")]
    recorded = run_files[2]["sha256"]
    guard.write_text(json.dumps({"status": "PASS", "infra_failures": 0, "contract_failures": 0}))  # a later run
    found = hashlib.sha256(guard.read_bytes()).hexdigest()
    a = args(tmp_path, run_dir, run_files=run_files)
    a["artifacts"] = [x for x in a["artifacts"] if x["kind"] not in ("gate", "readiness")]  # the run list has them
    result = run_module(evidence_pack, a)
    assert result["failed"] is False, result.get("msg")
    states = {x["name"]: x["state"] for x in result["artifacts"]}
    assert states == {"inspect/worker.json": "present", "pin.json": "present", "readiness.json": "present",
                      "runtime-gate.json": "present", "serving-guard.json": "stale", "wrapper-tree.json": "present"}
    stale = next(x for x in result["artifacts"] if x["name"] == "serving-guard.json")
    assert (stale["recorded_sha256"], stale["source_sha256"], stale["sha256"]) == (recorded, found, None)
    assert result["invalid_for_publish"] is True
    assert result["reasons"] == [f"artifact serving-guard.json (guard) was rewritten after this run recorded it "
                                 f"(sha256 {recorded} recorded, {found} found); left out"]
    assert "serving-guard.json" not in result["files"]
    assert not (Path(result["dest"]) / "serving-guard.json").exists()
    assert "not valid for publication" in ansible_warnings.get_warning_messages()[0]
