# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gb10.dspark.gpu_facts end to end: the simulator's fake GB10 tools and real H200 output."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.common import warnings as ansible_warnings

from ansible_collections.gb10.dspark.plugins.modules import gpu_facts

REPO = Path(__file__).resolve().parents[4]
H200 = REPO / "tests" / "fixtures" / "nvidia-smi-h200"
SIM = REPO / "sim"
FAKE_NVIDIA_SMI = str(SIM / "fakehw" / "bin" / "nvidia-smi")
FAKE_IBDEV2NETDEV = str(SIM / "fakehw" / "bin" / "ibdev2netdev")


def _fakehw(hw_dir: Path, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(SIM))
    subprocess.run([sys.executable, "-m", "fakehw", "--hw-dir", str(hw_dir), *args], env=env, check=True,
                   capture_output=True, text=True)


@pytest.fixture(name="gb10")
def _gb10(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A simulated DGX Spark rank with both RoCE ports Up; the fake tools read it via $DSPARK_SIM_HW_DIR."""
    hw_dir = tmp_path / "hw"
    _fakehw(hw_dir, "init", "--hca", "rocep1s0f1", "--netdev", "enp1s0f1np1", "--state", "Up")
    monkeypatch.setenv("DSPARK_SIM_HW_DIR", str(hw_dir))
    return hw_dir


def _gb10_args(**extra) -> dict:
    args = {"rank": "sim01-worker", "nvidia_smi_path": FAKE_NVIDIA_SMI, "ibdev2netdev_path": FAKE_IBDEV2NETDEV}
    args.update(extra)
    return args


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture(name="h200_smi")
def _h200_smi(tmp_path: Path) -> str:
    """An nvidia-smi that answers with the real H200 captures (CSV with header and units, or the XML)."""
    return _script(tmp_path / "nvidia-smi", f"""
for a in "$@"; do
  if [ "$a" = "-x" ]; then cat '{H200 / "nvidia-smi-q.xml"}'; exit 0; fi
done
cat '{H200 / "nvidia-smi-query.csv"}'
""")


# ---------------------------------------------------------------------------
# GB10 (simulator)
# ---------------------------------------------------------------------------

def test_gb10_passes_every_check(gb10, run_module):
    result = run_module(gpu_facts, _gb10_args(
        expected_gpu_name="NVIDIA GB10",
        expected_netdevs=["enp1s0f1np1", "enP2p1s0f1np1"],
        expected_hcas=["rocep1s0f1", "roceP2p1s0f1"],
    ))
    assert result["failed"] is False, result.get("msg")
    assert result["changed"] is False
    assert result["mismatches"] == []
    facts = result["gpu_facts"]
    assert facts["gpu_count"] == 1
    assert facts["gpus"][0]["compute_cap"] == "12.1"
    assert facts["gpus"][0]["memory_total_mib"] is None
    assert facts["cuda_version"] is None
    assert {link["netdev"]: link["state"] for link in facts["fabric"]} == {"enp1s0f1np1": "Up", "enP2p1s0f1np1": "Up"}
    assert result["ansible_facts"] == {"dspark_gpu": facts}


def test_gb10_xml_source_adds_cuda_version(gb10, run_module):
    result = run_module(gpu_facts, _gb10_args(source="xml"))
    assert result["failed"] is False, result.get("msg")
    assert result["gpu_facts"]["cuda_version"] == "13.0"
    assert result["gpu_facts"]["gpus"][0]["compute_cap"] == "12.1"


def test_gb10_link_down_fails_naming_the_rank(gb10, run_module):
    _fakehw(gb10, "set-link", "rocep1s0f1", "Down")
    result = run_module(gpu_facts, _gb10_args(expected_hcas=["rocep1s0f1", "roceP2p1s0f1"]))
    assert result["failed"] is True
    assert result["msg"] == "rank sim01-worker: HCA rocep1s0f1 link is Down, expected Up"
    assert result["mismatches"][0]["actual"] == "Down"
    assert result["changed"] is False


def test_gb10_absent_netdev_and_wrong_capability_are_all_reported(gb10, run_module):
    _fakehw(gb10, "set-gpu", "--field", "compute_cap=9.0")
    result = run_module(gpu_facts, _gb10_args(rank="x", expected_netdevs=["enp1s0f1np1", "enp9s0f0np0"]))
    assert result["failed"] is True
    assert result["msg"].splitlines() == [
        "2 identity mismatches:",
        "rank x: GPU 0 compute capability is 9.0, expected 12.1",
        "rank x: netdev enp9s0f0np0 is absent, expected Up",
    ]
    assert len(result["mismatches"]) == 2
    assert result["gpu_facts"]["gpus"][0]["compute_cap"] == "9.0"


def test_gb10_driver_not_loaded_fails_closed(tmp_path, monkeypatch, run_module):
    monkeypatch.setenv("DSPARK_SIM_HW_DIR", str(tmp_path / "no-state"))
    result = run_module(gpu_facts, _gb10_args(rank="sim01-head"))
    assert result["failed"] is True
    assert result["msg"].startswith("rank sim01-head: nvidia-smi failed (exit 9, NVIDIA driver not loaded")
    assert "NVIDIA-SMI has failed" in result["msg"]
    assert "gpu_facts" not in result


def test_gb10_no_devices_fails_closed(gb10, run_module):
    _fakehw(gb10, "set-gpu", "--count", "0")
    result = run_module(gpu_facts, _gb10_args())
    assert result["failed"] is True
    assert result["msg"] == "rank sim01-worker: nvidia-smi failed (exit 6, no NVIDIA GPU found): No devices were found"


def test_fail_on_mismatch_false_returns_the_mismatches(gb10, run_module):
    _fakehw(gb10, "set-link", "roceP2p1s0f1", "Down")
    result = run_module(gpu_facts, _gb10_args(expected_hcas=["roceP2p1s0f1"], expected_gpu_count=2,
                                              fail_on_mismatch=False))
    assert result["failed"] is False
    assert [m["message"] for m in result["mismatches"]] == [
        "rank sim01-worker: GPU count is 1, expected 2",
        "rank sim01-worker: HCA roceP2p1s0f1 link is Down, expected Up",
    ]
    assert result["ansible_facts"]["dspark_gpu"]["gpu_count"] == 1


def test_check_mode_and_diff_behave_like_a_normal_run(gb10, run_module):
    args = _gb10_args(expected_netdevs=["enp1s0f1np1"])
    normal = run_module(gpu_facts, args)
    checked = run_module(gpu_facts, args, check_mode=True, diff=True)
    assert checked == normal
    assert checked["changed"] is False
    assert "diff" not in checked


def test_check_mode_fails_like_a_normal_run(gb10, run_module):
    _fakehw(gb10, "set-link", "rocep1s0f1", "Down")
    result = run_module(gpu_facts, _gb10_args(expected_netdevs=["enp1s0f1np1"]), check_mode=True, diff=True)
    assert result["failed"] is True
    assert result["msg"] == "rank sim01-worker: netdev enp1s0f1np1 link is Down, expected Up"


# ---------------------------------------------------------------------------
# H200 (real nvidia-smi output)
# ---------------------------------------------------------------------------

def test_h200_fails_the_default_gb10_check(h200_smi, run_module):
    result = run_module(gpu_facts, {"rank": "sim01-head", "nvidia_smi_path": h200_smi, "gather_fabric": False})
    assert result["failed"] is True
    assert result["msg"] == "rank sim01-head: GPU 0 compute capability is 9.0, expected 12.1"
    assert result["mismatches"][0]["expected"] == "12.1"
    assert result["mismatches"][0]["actual"] == "9.0"


@pytest.mark.parametrize("source", ["csv", "xml"])
def test_h200_passes_when_an_h200_is_expected(h200_smi, run_module, source):
    result = run_module(gpu_facts, {
        "rank": "h200", "nvidia_smi_path": h200_smi, "gather_fabric": False, "source": source,
        "expected_compute_capability": "9.0", "expected_gpu_name": "NVIDIA H200",
    })
    assert result["failed"] is False, result.get("msg")
    gpu = result["gpu_facts"]["gpus"][0]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["memory_total_mib"] == 143771
    assert result["gpu_facts"]["fabric"] is None
    assert result["gpu_facts"]["cuda_version"] == ("13.0" if source == "xml" else None)


def test_h200_wrong_name_is_reported(h200_smi, run_module):
    result = run_module(gpu_facts, {"rank": "r", "nvidia_smi_path": h200_smi, "gather_fabric": False,
                                    "expected_compute_capability": "9.0", "expected_gpu_name": "NVIDIA GB10"})
    assert result["failed"] is True
    assert result["msg"] == "rank r: GPU 0 name is NVIDIA H200, expected NVIDIA GB10"


# ---------------------------------------------------------------------------
# Missing tools
# ---------------------------------------------------------------------------

def test_missing_nvidia_smi_fails_closed(tmp_path, run_module):
    result = run_module(gpu_facts, {"rank": "r", "nvidia_smi_path": str(tmp_path / "nope"), "gather_fabric": False})
    assert result["failed"] is True
    assert result["msg"].startswith("rank r: nvidia-smi not found")


def test_missing_ibdev2netdev_warns_when_nothing_is_expected(h200_smi, tmp_path, run_module):
    ansible_warnings._global_warnings.clear()
    result = run_module(gpu_facts, {"rank": "r", "nvidia_smi_path": h200_smi, "expected_compute_capability": "9.0",
                                    "ibdev2netdev_path": str(tmp_path / "nope")})
    assert result["failed"] is False, result.get("msg")
    assert result["gpu_facts"]["fabric"] is None
    assert any("ibdev2netdev not found" in w for w in ansible_warnings.get_warning_messages())


def test_missing_ibdev2netdev_fails_when_hcas_are_expected(h200_smi, tmp_path, run_module):
    result = run_module(gpu_facts, {"rank": "r", "nvidia_smi_path": h200_smi, "expected_compute_capability": "9.0",
                                    "ibdev2netdev_path": str(tmp_path / "nope"), "expected_hcas": ["rocep1s0f1"],
                                    "gather_fabric": False})
    assert result["failed"] is True
    assert result["msg"].startswith("rank r: ibdev2netdev not found")


def test_gather_fabric_false_does_not_run_ibdev2netdev(h200_smi, tmp_path, run_module):
    marker = tmp_path / "ran"
    ibdev = _script(tmp_path / "ibdev2netdev", f"touch '{marker}'\nexit 1\n")
    result = run_module(gpu_facts, {"rank": "r", "nvidia_smi_path": h200_smi, "expected_compute_capability": "9.0",
                                    "ibdev2netdev_path": ibdev, "gather_fabric": False})
    assert result["failed"] is False, result.get("msg")
    assert not marker.exists()


def test_malformed_expected_compute_capability_fails(h200_smi, run_module):
    result = run_module(gpu_facts, {"rank": "r", "nvidia_smi_path": h200_smi, "expected_compute_capability": "sm_121"})
    assert result["failed"] is True
    assert "expected_compute_capability must look like 12.1" in result["msg"]
