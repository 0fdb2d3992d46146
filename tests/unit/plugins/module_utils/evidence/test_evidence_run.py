# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _evidence_run: the run's own result files, recorded, checked against what the run recorded,
and the facts they state."""
from __future__ import annotations

import json
from pathlib import Path
import pytest
from tests.unit.plugins.module_utils.evidence.test_evidence import (
    MANIFEST,
    NIAH_DIR,
    NIAH_KEY,
    TREE_REVISION,
    _put,
    _record,
    _sha,
    _systems_doc,
    pack_of_run,
    pair_folder,
)

from ansible_collections.gb10.dspark.plugins.module_utils.evidence import _evidence_run as ev_run
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import IdentityError


def test_the_run_list_gives_exactly_its_files_with_their_recorded_sha256_and_the_facts_they_state(tmp_path):
    pair, run_files = pair_folder(tmp_path)
    assert [f["name"] for f in run_files] == sorted(f["name"] for f in run_files)
    artifacts, facts = ev_run.from_run(run_files)
    names = {a["name"]: (a["kind"], a["required"]) for a in artifacts}
    assert names == {
        "readiness.json": ("readiness", True),
        "runtime-gate.json": ("gate", True),
        "serving-guard.json": ("guard", False),
        f"{NIAH_DIR}/context.json": ("other", False),
        f"{NIAH_DIR}/depth-262128.json": ("niah_row", False),
        f"{NIAH_DIR}/depth-524256.json": ("niah_row", False),
        f"{NIAH_DIR}/niah.json": ("niah", True),
        "wrapper-tree.json": ("tree", True),
    }
    for artifact in artifacts:
        assert not artifact.get("not_in_run")
        assert artifact["sha256"] == _sha(Path(artifact["src"])), artifact["name"]
    assert facts["profile"] == {"name": "long-1m", "sha256": "ab" * 32, "experimental": False, "departures": [],
                                "cudagraph_implementation": "regular",
                                "fabric_env": {"head": {"NCCL_IB_GID_INDEX": "1"},
                                               "worker": {"NCCL_IB_GID_INDEX": "3"}}}
    assert (facts["guard_infra_errors"], facts["guard_model_failures"]) == (2, 1)
    assert (facts["niah_infra_errors"], facts["niah_model_failures"]) == (1, 0)  # not the earlier run's 7 and 7
    assert facts["row_kinds"] == ["regular"]  # the earlier run's breakable context is not read
    assert facts["client_kinds"] == {"openai_portable": [f"{NIAH_DIR}/context.json"]}
    assert facts["tree"] == {"dirty": False, "allow_dirty": False, "commit": TREE_REVISION}
    assert facts["manifest_sha256"] == MANIFEST
    p = pack_of_run(tmp_path, run_files)
    assert not any("000000000000" in e.name or e.name.endswith(".lock") for e in p.entries)
    assert {e.name for e in p.entries} == set(names)


def test_breakable_guard_and_dirty_tree_of_the_run_are_publication_reasons(tmp_path):
    _pair, run_files = pair_folder(tmp_path, guard_impl="breakable", dirty=True)
    _artifacts, facts = ev_run.from_run(run_files)
    assert facts["row_kinds"] == ["breakable", "regular"]
    plan = pack_of_run(tmp_path, run_files, run_id="20260805T120003Z")
    text = " | ".join(plan.reasons)
    assert plan.invalid_for_publish
    assert "mix CUDA-graph implementations: breakable, regular" in text
    assert f"wrapper tree at {TREE_REVISION} is dirty (allowed by allow_dirty)" in text
    assert "serving guard counted 2 infra error(s)" in text and "NIAH counted 1 infra error(s)" in text
    assert "serving guard status is FAIL, expected PASS" in text and "NIAH status is ERROR, expected PASS" in text


def test_merge_facts_given_values_win_and_none_keeps_the_found(tmp_path):
    found = {"profile": {"name": "production", "experimental": False}, "row_kinds": ["regular"]}
    merged = ev_run.merge_facts(found, {"profile": {"name": None, "experimental": True}, "row_kinds": None,
                                    "gate_status": "PASS"})
    assert merged == {"profile": {"name": "production", "experimental": True}, "row_kinds": ["regular"],
                      "gate_status": "PASS"}
    assert found["profile"]["experimental"] is False  # the found facts are not changed in place


def test_a_file_left_in_the_pair_folder_but_not_recorded_never_enters_the_pack(tmp_path):
    pair, run_files = pair_folder(tmp_path, guard=False)  # an earlier run's FAIL guard is still in the folder
    _put(pair / "systems.json", {"status": "ERROR", "counts": {"ERROR": 3, "FAIL": 1},
                                 "context": {"cudagraph_implementation": "breakable"}})
    artifacts, facts = ev_run.from_run(run_files)
    assert not any(a["name"] in ("serving-guard.json", "systems.json") or "000000000000" in a["name"]
                   for a in artifacts)
    assert not any(k.startswith(("guard_", "systems_")) for k in facts)
    plan = pack_of_run(tmp_path, run_files)
    assert "serving-guard.json" not in {e.name for e in plan.entries} and "serving-guard.json" not in plan.files()
    assert not any("serving guard" in r or "systems" in r for r in plan.reasons), plan.reasons
    assert plan.index["results"]["guard"]["ran"] is False and plan.index["results"]["systems"]["ran"] is False
    # the same guard, recorded by this run, is judged
    recorded = _record(run_files, ("serving-guard.json", pair / "serving-guard.json", "guard"))
    judged = pack_of_run(tmp_path / "b", recorded)
    assert "serving guard status is FAIL, expected PASS" in judged.reasons
    assert "serving guard counted 2 infra error(s); publishable rows need 0" in judged.reasons


def test_a_stale_niah_summary_leaves_the_niah_result_missing(tmp_path):
    pair, run_files = pair_folder(tmp_path)
    _put(pair / "niah" / NIAH_KEY / "niah.json", {"status": "PASS", "infra_error_count": 0, "fail_count": 0})
    _artifacts, facts = ev_run.from_run(run_files)
    assert "niah_infra_errors" not in facts
    plan = pack_of_run(tmp_path, run_files)
    entry = next(e for e in plan.entries if e.name == f"{NIAH_DIR}/niah.json")
    assert entry.state == "stale" and entry.required
    assert "NIAH result is missing from the pack" in plan.reasons
    assert any(r.startswith(f"artifact {NIAH_DIR}/niah.json (niah) was rewritten after this run recorded it")
               for r in plan.reasons)


def test_systems_lanes_of_the_run_with_error_rows_are_a_reason(tmp_path):
    pair, run_files = pair_folder(tmp_path)
    _put(pair / "systems.json", {"status": "ERROR", "counts": {"PASS": 4, "ERROR": 2, "FAIL": 0, "NOT_IMPLEMENTED": 2},
                                 "context": {"cudagraph_implementation": "regular"}})
    (pair / "systems.md").write_text("| lane | status |\n")
    run_files = _record(run_files, ("systems.json", pair / "systems.json", "systems"),
                        ("systems.md", pair / "systems.md", "other"))
    artifacts, facts = ev_run.from_run(run_files)
    kinds = {a["name"]: a["kind"] for a in artifacts}
    assert kinds["systems.json"] == "systems" and kinds["systems.md"] == "other"
    assert (facts["systems_infra_errors"], facts["systems_model_failures"], facts["systems_not_implemented"]) == (2, 0, 2)
    plan = pack_of_run(tmp_path, run_files, run_id="r2")
    text = " | ".join(plan.reasons)
    assert "systems lanes status is ERROR, expected PASS" in text
    assert "systems lanes counted 2 infra error(s)" in text
    assert plan.index["results"]["systems"]["status"] == "ERROR"


def test_client_kinds_of_the_systems_rows_guard_and_niah_are_judged_together(tmp_path):
    pair, run_files = pair_folder(tmp_path)
    guard = json.loads((pair / "serving-guard.json").read_text())
    guard["context"]["client_kind"] = "vllm-bench"  # a guard that says who measured it
    _put(pair / "serving-guard.json", guard)
    doc = _systems_doc(("latency", None, "PASS", "openai_portable"), ("external", "qa", "NOT_IMPLEMENTED", None),
                       ("external", "gsm8k", "NOT_IMPLEMENTED", None))
    doc["counts"]["NOT_IMPLEMENTED"] = 2
    doc["context"] = {"cudagraph_implementation": "regular"}
    _put(pair / "systems.json", doc)
    run_files = _record(run_files, ("serving-guard.json", pair / "serving-guard.json", "guard"),  # recorded again
                        ("systems.json", pair / "systems.json", "systems"))
    _artifacts, facts = ev_run.from_run(run_files)
    assert facts["client_kinds"] == {"openai_portable": [f"{NIAH_DIR}/context.json"],
                                     "vllm-bench": ["serving-guard.json"]}
    assert facts["systems_not_implemented"] == 2
    plan = pack_of_run(tmp_path, run_files, run_id="r3")
    assert (f"result rows mix client kinds: openai_portable ({NIAH_DIR}/context.json; systems.json rows latency) "
            "and vllm-bench (serving-guard.json); vllm-bench and openai_portable rows are never published "
            "together") in plan.reasons
    assert not any("rewritten" in r for r in plan.reasons)  # the guard recorded again is not stale
    assert plan.index["results"]["systems"]["not_implemented"] == 2
    md = plan.generated[1].data.decode()
    assert "Systems rows NOT_IMPLEMENTED (not measured, no score, not failures): 2" in md


def test_systems_lanes_of_one_client_kind_add_no_reason(tmp_path):
    pair, run_files = pair_folder(tmp_path, niah_client=None)
    _put(pair / "systems.json", dict(_systems_doc(("canary", None, "PASS", "openai_portable")),
                                     context={"cudagraph_implementation": "regular"}))
    run_files = _record(run_files, ("systems.json", pair / "systems.json", "systems"))
    _artifacts, facts = ev_run.from_run(run_files)
    assert "client_kinds" not in facts  # neither the guard nor NIAH states one here
    plan = pack_of_run(tmp_path, run_files, run_id="r4")
    assert not any("client kinds" in r for r in plan.reasons)
    assert plan.index["results"]["client_kinds"] == ["openai_portable"]


def test_recording_a_name_again_keeps_the_later_file(tmp_path):
    first = _put(tmp_path / "gate-1" / "runtime-gate.json", {"status": "FAIL"})
    second = _put(tmp_path / "gate-2" / "runtime-gate.json", {"status": "PASS"})
    guard = _put(tmp_path / "serving-guard.json", {"status": "PASS"})
    run_files = _record([], ("runtime-gate.json", first, "gate"), ("serving-guard.json", guard, "guard"))
    new, recorded, missing = ev_run.record_run_files(run_files, [{"name": "runtime-gate.json", "src": str(second),
                                                              "kind": "gate"}])
    gate = {"name": "runtime-gate.json", "src": str(second), "kind": "gate", "sha256": _sha(second)}
    assert recorded == [gate] and missing == []
    assert new == [gate, {"name": "serving-guard.json", "src": str(guard), "kind": "guard", "sha256": _sha(guard)}]
    assert run_files[0]["src"] == str(first)  # the given list is not changed in place
    # twice in one call: the later one wins too
    new, recorded, _missing = ev_run.record_run_files([], [{"name": "g.json", "src": str(first), "kind": "gate"},
                                                       {"name": "g.json", "src": str(second), "kind": "gate"}])
    assert [f["src"] for f in new] == [str(second)]
    plan = pack_of_run(tmp_path, new)
    assert plan.index["results"]["gate"]["status"] == "PASS"


def test_a_missing_source_is_returned_and_not_recorded(tmp_path):
    guard = _put(tmp_path / "serving-guard.json", {"status": "PASS"})
    new, recorded, missing = ev_run.record_run_files(None, [
        {"name": "systems.json", "src": str(tmp_path / "nope" / "systems.json"), "kind": "systems"},
        {"name": "serving-guard.json", "src": str(guard), "kind": "guard"},
        {"name": "readiness.json", "src": str(tmp_path), "kind": "readiness"},  # a folder is no result file
    ])
    assert missing == ["systems.json", "readiness.json"]
    assert [r["name"] for r in recorded] == [f["name"] for f in new] == ["serving-guard.json"]
    assert new[0]["sha256"] == _sha(guard)


@pytest.mark.parametrize("item, message", [
    ({"name": "/etc/guard.json", "kind": "guard"},
     "run file name '/etc/guard.json' is an absolute path, expected a relative path inside the pack"),
    ({"name": "../guard.json", "kind": "guard"},
     "run file name '../guard.json' is a path with an empty, '.' or '..' component"),
    ({"name": "niah/../../guard.json", "kind": "guard"}, "run file name 'niah/../../guard.json' is a path with"),
    ({"name": "guard.json", "kind": "bogus"}, "run file guard.json kind is bogus, expected one of pin, manifest"),
    ({"name": "guard.json", "kind": None}, "run file guard.json kind is absent, expected one of"),
    ({"name": "guard.json", "kind": "guard", "src": "evidence/guard.json"},
     "run file guard.json src is 'evidence/guard.json', expected an absolute path on the control node"),
])
def test_a_bad_run_file_is_refused_naming_it(tmp_path, item, message):
    src = _put(tmp_path / "guard.json", {"status": "PASS"})
    good = {"name": "readiness.json", "src": str(src), "kind": "readiness"}
    with pytest.raises(IdentityError) as info:
        ev_run.record_run_files([], [good, {"src": str(src), **item}])
    assert message in str(info.value)
    assert len(info.value.mismatches) == 1
    with pytest.raises(IdentityError) as info:  # nor is it taken from a list given to the pack
        ev_run.from_run([dict({"src": str(src), **item}, sha256=_sha(src))])
    assert message in str(info.value)


def test_every_bad_entry_is_named_at_once_and_a_bad_list_entry_is_refused(tmp_path):
    src = _put(tmp_path / "guard.json", {"status": "PASS"})
    with pytest.raises(IdentityError) as info:
        ev_run.record_run_files([{"name": "g.json", "src": str(src), "kind": "guard", "sha256": "abc"}],
                            [{"name": "/abs.json", "src": str(src), "kind": "guard"},
                             {"name": "x.json", "src": "rel", "kind": "nope"}, "not a mapping"])
    text = str(info.value)
    assert "run file g.json sha256 is 'abc', expected 64 lowercase hex digits" in text
    assert "run file name '/abs.json' is an absolute path" in text
    assert "run file x.json kind is nope" in text and "run file x.json src is 'rel'" in text
    assert "run file is str, expected a mapping with name, src, kind and sha256" in text
    assert len(info.value.mismatches) == 5
    with pytest.raises(IdentityError, match="run folder 'niah/k'"):
        ev_run.record_run_files([], [{"name": "niah/k", "src": "niah/k", "kind": "niah_run"}])
    with pytest.raises(IdentityError, match="run folder '../k'"):
        ev_run.record_run_files([], [{"name": "../k", "src": str(tmp_path), "kind": "niah_run"}])


def test_a_niah_run_folder_is_recorded_file_by_file(tmp_path):
    run = tmp_path / "niah" / NIAH_KEY
    _put(run / "niah.json", {"status": "PASS", "infra_error_count": 0, "fail_count": 0})
    _put(run / "depth-25.json", {"status": "PASS"})
    _put(run / "context.json", {"cudagraph_implementation": "regular"})
    (run / "notes.txt").write_text("not JSON\n")
    (run / ".lock").write_text("")
    (run / "depth-25.json.tmp").write_text("{}")
    (run / "rows.json").mkdir()  # a folder is not a file of the run
    guard = _put(tmp_path / "serving-guard.json", {"status": "PASS"})
    new, recorded, missing = ev_run.record_run_files([], [{"name": NIAH_DIR, "src": str(run), "kind": "niah_run"},
                                                      {"name": "serving-guard.json", "src": str(guard),
                                                       "kind": "guard"}])
    assert missing == []
    assert [(r["name"], r["kind"]) for r in recorded] == [
        (f"{NIAH_DIR}/context.json", "other"), (f"{NIAH_DIR}/depth-25.json", "niah_row"),
        (f"{NIAH_DIR}/niah.json", "niah"), ("serving-guard.json", "guard")]
    for entry in new:
        assert entry["sha256"] == _sha(Path(entry["src"]))
    assert new[0]["src"] == str(run / "context.json")
    required = {a["name"]: a["required"] for a in ev_run.from_run(new)[0] if not a.get("not_in_run")}
    assert required == {f"{NIAH_DIR}/context.json": False, f"{NIAH_DIR}/depth-25.json": False,
                        f"{NIAH_DIR}/niah.json": True, "serving-guard.json": False}
    assert [ev_run.niah_kind(n) for n in ("niah.json", "depth-25.json", "context.json", "depth-x.json", "notes.txt")] == \
        ["niah", "niah_row", "other", "other", None]
