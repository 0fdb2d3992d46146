# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.modules import runtime_manifest

SIM_MANIFEST = Path(__file__).resolve().parents[4] / "sim" / "engine" / "runtime-manifest.vllm-sim.3.json"
IDENTITY = ("vllm_version", "integrated_vllm_commit", "model_id", "model_revision", "kv_cache_dtype",
            "speculative_method")
RANK = "sim01-head"


@pytest.fixture(name="sim")
def _sim(tmp_path) -> dict:
    """A placed copy of the sim manifest and the arguments a role passes for it."""
    data = SIM_MANIFEST.read_bytes()
    doc = json.loads(data)
    placed = tmp_path / "runtime-manifest.json"
    placed.write_bytes(data)
    args = {
        "rank": RANK,
        "path": str(placed),
        "expected_sha256": "sha256:" + hashlib.sha256(data).hexdigest(),
        "expected": {key: doc[key] for key in IDENTITY},
        "profile_section": "production_profile",
        "profile": {"max_model_len": doc["production_profile"]["max_model_len"],
                    "max_num_seqs": doc["production_profile"]["max_num_seqs"],
                    "gpu_memory_utilization": doc["production_profile"]["gpu_memory_utilization"]},
    }
    return {"doc": doc, "data": data, "path": placed, "args": args}


def _tamper(sim: dict) -> None:
    doc = json.loads(sim["data"])
    doc["kv_cache_dtype"] = "fp8"
    doc["production_profile"]["max_num_seqs"] = 8
    sim["path"].write_text(json.dumps(doc, indent=2))


@pytest.mark.parametrize("check_mode", [False, True])
def test_sim_manifest_passes(run_module, sim, check_mode):
    result = run_module(runtime_manifest, sim["args"], check_mode=check_mode, diff=True)
    assert result["failed"] is False
    assert result["changed"] is False
    assert "diff" not in result
    assert result["mismatches"] == []
    assert result["sha256"] == hashlib.sha256(sim["data"]).hexdigest()
    assert result["manifest"]["vllm_version"] == sim["doc"]["vllm_version"]
    assert result["manifest"]["production_profile"] == sim["doc"]["production_profile"]
    assert sim["path"].read_bytes() == sim["data"]


def test_check_mode_returns_the_same_result(run_module, sim):
    _tamper(sim)
    args = dict(sim["args"], fail_on_mismatch=False)
    assert run_module(runtime_manifest, args) == run_module(runtime_manifest, args, check_mode=True, diff=True)


def test_tampered_manifest_fails_with_every_mismatch(run_module, sim):
    _tamper(sim)
    result = run_module(runtime_manifest, sim["args"])
    assert result["failed"] is True and result["changed"] is False
    lines = result["msg"].splitlines()
    assert lines[0] == "3 identity mismatches:"
    actual_sha = hashlib.sha256(sim["path"].read_bytes()).hexdigest()
    pinned_sha = hashlib.sha256(sim["data"]).hexdigest()
    assert lines[1].startswith(f"rank {RANK}: runtime manifest sha256 is {actual_sha}, pinned {pinned_sha}")
    assert lines[2] == f"rank {RANK}: runtime manifest kv_cache_dtype is fp8, pinned {sim['doc']['kv_cache_dtype']}"
    assert lines[3] == (f"rank {RANK}: runtime manifest production_profile.max_num_seqs is 8, "
                        f"expected {sim['doc']['production_profile']['max_num_seqs']}")
    assert [m["item"] for m in result["mismatches"]] == [
        "runtime manifest sha256", "runtime manifest kv_cache_dtype", "runtime manifest production_profile.max_num_seqs"]
    assert [m["message"] for m in result["mismatches"]] == lines[1:]
    assert result["sha256"] == actual_sha


def test_fail_on_mismatch_false_returns_the_mismatches(run_module, sim):
    _tamper(sim)
    result = run_module(runtime_manifest, dict(sim["args"], fail_on_mismatch=False))
    assert result["failed"] is False and result["changed"] is False
    assert len(result["mismatches"]) == 3
    assert result["manifest"]["kv_cache_dtype"] == "fp8"


def test_profile_value_of_the_wrong_type_fails(run_module, sim):
    args = dict(sim["args"], profile={"max_num_seqs": str(sim["doc"]["production_profile"]["max_num_seqs"])})
    result = run_module(runtime_manifest, args)
    assert result["failed"] is True
    assert result["msg"].endswith("(number in the manifest, string expected)")


def test_missing_file_fails_naming_rank_and_path(run_module, sim):
    sim["path"].unlink()
    result = run_module(runtime_manifest, sim["args"])
    assert result["failed"] is True
    assert result["msg"].startswith(f"rank {RANK}: runtime manifest sha256 is absent")
    assert str(sim["path"]) in result["msg"]
    assert result["sha256"] is None


def test_duplicate_key_fails(run_module, sim):
    sim["path"].write_bytes(sim["data"].replace(b'"model_id":', b'"model_id": "other/model", "model_id":', 1))
    result = run_module(runtime_manifest, sim["args"])
    assert result["failed"] is True
    assert 'duplicate key "model_id" at $.model_id' in result["msg"]


def test_malformed_pin_fails_before_reading(run_module, sim):
    result = run_module(runtime_manifest, dict(sim["args"], expected_sha256="f6777b31"))
    assert result["failed"] is True
    assert result["msg"] == f"rank {RANK}: expected_sha256 'f6777b31' is not a sha256 digest (64 hex characters)"
    assert result["mismatches"] == []


def test_profile_without_section_fails_even_when_not_failing_on_mismatch(run_module, sim):
    args = dict(sim["args"], fail_on_mismatch=False)
    del args["profile_section"]
    result = run_module(runtime_manifest, args)
    assert result["failed"] is True
    assert "profile_section" in result["msg"]


def test_rank_defaults_to_the_hostname(run_module, sim, monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "spark-a")
    args = dict(sim["args"])
    del args["rank"]
    args["expected"] = {"model_id": "someone/else"}
    result = run_module(runtime_manifest, args)
    assert result["msg"].startswith("rank spark-a: runtime manifest model_id is ")
