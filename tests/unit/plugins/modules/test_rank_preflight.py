# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gb10.dspark.rank_preflight end to end: the simulator's fake GB10 tools and its small checkpoint, in one call."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.modules import rank_preflight
from tests.unit.plugins.modules.test_gpu_facts import FAKE_IBDEV2NETDEV, FAKE_NVIDIA_SMI, _fakehw

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "sim"))
from dspark_sim import checkpoint  # noqa: E402

RANK = "sim01-worker"
SHARD7 = "model-00007-of-00048.safetensors"


@pytest.fixture(name="rank")
def _rank(tmp_path, monkeypatch):
    """A simulated DGX Spark rank (one GB10, both RoCE ports Up) holding the simulator's checkpoint."""
    hw_dir = tmp_path / "hw"
    _fakehw(hw_dir, "init", "--hca", "rocep1s0f1", "--netdev", "enp1s0f1np1", "--state", "Up")
    monkeypatch.setenv("DSPARK_SIM_HW_DIR", str(hw_dir))
    return hw_dir, checkpoint.write(tmp_path / "model")


def args(model, **extra):
    return {"rank": RANK, "nvidia_smi_path": FAKE_NVIDIA_SMI, "ibdev2netdev_path": FAKE_IBDEV2NETDEV,
            "expected_netdevs": ["enp1s0f1np1"], "expected_hcas": ["rocep1s0f1"], "path": str(model),
            "expected_revision": checkpoint.MODEL_REVISION, "expected_config": dict(checkpoint.CONFIG), **extra}


def test_a_fit_rank_passes_and_returns_both_checks_facts(run_module, rank):
    _hw, model = rank
    res = run_module(rank_preflight, args(model))
    assert res["failed"] is False and res["changed"] is False and res["mismatches"] == []
    assert res["gpu_facts"]["gpus"][0]["compute_cap"] == "12.1" and res["ansible_facts"]["dspark_gpu"] == res["gpu_facts"]
    assert {link["state"] for link in res["gpu_facts"]["fabric"]} == {"Up"}
    assert res["checkpoint"]["revision"] == checkpoint.MODEL_REVISION and res["checkpoint"]["shard_count"] == 48
    assert run_module(rank_preflight, args(model), check_mode=True) == res  # read-only: check mode is the same run


def test_every_mismatch_of_the_gpu_the_fabric_and_the_checkpoint_is_listed_at_once(run_module, rank):
    hw_dir, model = rank
    _fakehw(hw_dir, "set-link", "rocep1s0f1", "Down")
    (model / SHARD7).unlink()
    res = run_module(rank_preflight, args(model, expected_compute_capability="9.0"))
    assert res["failed"] is True
    messages = [m["message"] for m in res["mismatches"]]
    assert messages[0] == f"rank {RANK}: GPU 0 compute capability is 12.1, expected 9.0", messages  # the GPU's first
    assert any("rocep1s0f1" in m and "Down" in m for m in messages), messages
    assert any(SHARD7 in m and "absent" in m for m in messages), messages
    assert all(m in res["msg"] for m in messages), res["msg"]  # every one of them in the failure


def test_a_missing_docker_sdk_fails_naming_the_rank_and_the_package(run_module, rank, monkeypatch):
    from ansible_collections.gb10.dspark.plugins.module_utils.engine import _docker_engine
    _hw, model = rank
    monkeypatch.setattr(_docker_engine, "missing_sdk", lambda: ["python3-docker"])
    res = run_module(rank_preflight, args(model))
    assert res["failed"] is True
    assert res["msg"] == ("rank sim01-worker: Python module docker (for the docker SDK, the collection's Docker "
                          "client) is missing, expected importable (install python3-docker on the rank)")


def test_a_missing_nvidia_smi_fails_at_once_naming_the_rank(run_module, rank, tmp_path):
    _hw, model = rank
    res = run_module(rank_preflight, args(model, nvidia_smi_path=str(tmp_path / "no-such-tool")))
    assert res["failed"] is True and res["msg"].startswith(f"rank {RANK}: nvidia-smi not found"), res["msg"]
