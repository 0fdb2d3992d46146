"""gb10.dspark.model_checkpoint end to end, on the simulator's small checkpoint."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.modules import model_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "sim"))
from dspark_sim import checkpoint  # noqa: E402

RANK = "sim01-worker"
SHARD7 = "model-00007-of-00048.safetensors"


@pytest.fixture(name="model")
def _model(tmp_path):
    return checkpoint.write(tmp_path)


def args(model, **extra):
    base = {"rank": RANK, "path": str(model), "expected_revision": checkpoint.MODEL_REVISION,
            "expected_config": dict(checkpoint.CONFIG)}
    base.update(extra)
    return base


def test_good_checkpoint(run_module, model):
    total = json.loads((model / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
    result = run_module(model_checkpoint, args(model, expected_total_size=total))
    assert result["failed"] is False and result["changed"] is False
    assert result["mismatches"] == []
    cp = result["checkpoint"]
    assert cp["revision"] == checkpoint.MODEL_REVISION and cp["shard_count"] == 48
    assert cp["total_size"] == total and cp["config"] == checkpoint.CONFIG and cp["deep"] is False
    assert cp["bytes_on_disk"] == sum(p.stat().st_size for p in model.glob("*.safetensors"))


def test_check_mode_and_diff_give_the_same_result(run_module, model):
    (model / SHARD7).unlink()
    normal = run_module(model_checkpoint, args(model, fail_on_mismatch=False))
    checked = run_module(model_checkpoint, args(model, fail_on_mismatch=False), check_mode=True, diff=True)
    assert checked == normal
    assert "diff" not in checked and checked["changed"] is False


def test_missing_shard_fails_naming_rank_shard_and_pin(run_module, model):
    (model / SHARD7).unlink()
    result = run_module(model_checkpoint, args(model))
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == f"rank {RANK}: shard {SHARD7} is absent, pinned present and non-empty"
    assert result["mismatches"][0]["item"] == f"shard {SHARD7}"
    assert result["checkpoint"]["bytes_on_disk"] == sum(p.stat().st_size for p in model.glob("*.safetensors"))


def test_two_faults_are_both_reported(run_module, model):
    (model / checkpoint.REVISION_MARKER).write_text("a" * 40)
    (model / "model-00002-of-00048.safetensors").write_bytes(b"")
    result = run_module(model_checkpoint, args(model))
    assert result["failed"] is True
    assert result["msg"].startswith("2 identity mismatches:\n")
    assert f"rank {RANK}: model revision is {'a' * 40}, pinned {checkpoint.MODEL_REVISION}" in result["msg"]
    assert f"rank {RANK}: shard model-00002-of-00048.safetensors is empty (0 bytes)" in result["msg"]
    assert [m["item"] for m in result["mismatches"]] == ["model revision", "shard model-00002-of-00048.safetensors"]


def test_fail_on_mismatch_false_returns_the_mismatches(run_module, model):
    (model / "config.json").write_text(json.dumps(dict(checkpoint.CONFIG, num_hidden_layers=42)))
    result = run_module(model_checkpoint, args(model, fail_on_mismatch=False))
    assert result["failed"] is False
    assert [m["message"] for m in result["mismatches"]] == [
        f"rank {RANK}: config.json num_hidden_layers is 42, pinned 43"]
    assert result["checkpoint"]["config"]["num_hidden_layers"] == 42


def test_deep_mode_with_progress(run_module, model, tmp_path):
    progress = tmp_path / "progress.json"
    hashes = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in model.glob("*.safetensors")}
    result = run_module(model_checkpoint, args(model, deep=True, expected_shard_sha256=hashes,
                                               progress_path=str(progress)))
    assert result["failed"] is False and result["checkpoint"]["shard_sha256"] == hashes
    assert json.loads(progress.read_text())["shards_done"] == 48
    hashes[SHARD7] = "0" * 64
    bad = run_module(model_checkpoint, args(model, deep=True, expected_shard_sha256=hashes))
    assert bad["failed"] is True and bad["msg"].startswith(f"rank {RANK}: shard {SHARD7} sha256 is ")
    assert bad["msg"].endswith(f"pinned {'0' * 64}")


def test_progress_path_is_ignored_without_deep(run_module, model, tmp_path):
    progress = tmp_path / "progress.json"
    result = run_module(model_checkpoint, args(model, progress_path=str(progress)))
    assert result["failed"] is False and not progress.exists()


def test_malformed_revision_fails_closed_even_without_fail_on_mismatch(run_module, model):
    result = run_module(model_checkpoint, args(model, expected_revision="main", fail_on_mismatch=False))
    assert result["failed"] is True
    assert result["msg"] == f"rank {RANK}: expected_revision 'main' is not a 40-hex git revision"


def test_path_that_is_not_a_directory(run_module, tmp_path):
    path = tmp_path / "model.tar"
    path.write_bytes(b"x")
    result = run_module(model_checkpoint, args(path))
    assert result["failed"] is True
    assert result["msg"] == (f"rank {RANK}: checkpoint directory {path} is not a directory (a regular file), "
                             "expected a readable directory")
