# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers and checks of ``_gpu_facts`` on real H200 output and on the simulator's GB10 answers."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _gpu_facts as gf
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError

REPO = Path(__file__).resolve().parents[5]
H200 = REPO / "tests" / "fixtures" / "nvidia-smi-h200"
SIM = REPO / "sim"
FAKE_NVIDIA_SMI = SIM / "fakehw" / "bin" / "nvidia-smi"
FAKE_IBDEV2NETDEV = SIM / "fakehw" / "bin" / "ibdev2netdev"

H200_UUID = "GPU-6402d0ac-737c-5e9b-43f4-f40a3f72316e"


def _h200(name: str) -> str:
    return (H200 / name).read_text()


# ---------------------------------------------------------------------------
# The simulator's GB10 (sim/fakehw), run as a subprocess
# ---------------------------------------------------------------------------

def _fakehw(hw_dir: Path, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(SIM))
    subprocess.run([sys.executable, "-m", "fakehw", "--hw-dir", str(hw_dir), *args], env=env, check=True,
                   capture_output=True, text=True)


def _tool(hw_dir: Path, argv: list[str]) -> tuple[int, str, str]:
    env = dict(os.environ, DSPARK_SIM_HW_DIR=str(hw_dir))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(name="gb10_dir")
def _gb10_dir(tmp_path: Path) -> Path:
    hw_dir = tmp_path / "hw"
    _fakehw(hw_dir, "init", "--hca", "rocep1s0f1", "--netdev", "enp1s0f1np1", "--state", "Up")
    return hw_dir


def _sim_runner(hw_dir: Path, calls: list[list[str]] | None = None):
    def run(argv: list[str]) -> tuple[int, str, str]:
        if calls is not None:
            calls.append(list(argv))
        return _tool(hw_dir, argv)
    return run


# ---------------------------------------------------------------------------
# A runner answering with recorded outputs
# ---------------------------------------------------------------------------

class Recorded:
    """``run`` callable: answers by the first argument after the tool (or the tool itself)."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]):
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        tool = Path(argv[0]).name
        if tool == "nvidia-smi":
            key = "xml" if "-x" in argv else "csv"
            return self.answers[key]
        return self.answers[tool]


def _h200_runner(ibdev: tuple[int, str, str] | None = None) -> Recorded:
    answers = {"csv": (0, _h200("nvidia-smi-query.csv"), ""), "xml": (0, _h200("nvidia-smi-q.xml"), "")}
    if ibdev is not None:
        answers["ibdev2netdev"] = ibdev
    return Recorded(answers)


# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["[N/A]", "[Not Supported]", "N/A", " [N/A] ", "Not Supported", "[Unknown Error]"])
def test_clean_turns_unavailable_markers_into_none(text):
    assert gf.clean(text) is None


def test_clean_keeps_real_values():
    assert gf.clean(" 12.1 ") == "12.1"


@pytest.mark.parametrize("text, value", [("143771", 143771), ("143771 MiB", 143771), ("0 MiB", 0), ("[N/A]", None)])
def test_mib(text, value):
    assert gf.mib(text) == value


def test_mib_rejects_other_units():
    with pytest.raises(ValueError):
        gf.mib("140 GiB")


# ---------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------

def test_parse_real_h200_csv_with_header_and_units():
    gpus = gf.parse_query_csv(_h200("nvidia-smi-query.csv"))
    assert gpus == [{
        "index": 0, "name": "NVIDIA H200", "uuid": H200_UUID, "pci_bus_id": "00000000:00:06.0",
        "compute_cap": "9.0", "driver_version": "580.159.04", "memory_total_mib": 143771, "memory_used_mib": 0,
    }]


def test_parse_real_h200_csv_without_header_needs_its_field_list():
    fields = ("index", "name", "compute_cap", "driver_version", "memory.total")
    gpus = gf.parse_query_csv(_h200("nvidia-smi-query-noheader.csv"), fields=fields)
    assert len(gpus) == 1
    assert gpus[0]["compute_cap"] == "9.0"
    assert gpus[0]["memory_total_mib"] == 143771
    assert gpus[0]["uuid"] is None
    assert gpus[0]["memory_used_mib"] is None


def test_parse_noheader_csv_with_the_wrong_field_list_fails():
    with pytest.raises(ValueError, match="5 columns, expected 8"):
        gf.parse_query_csv(_h200("nvidia-smi-query-noheader.csv"))


def test_parse_csv_header_forced_on_data_fails():
    with pytest.raises(ValueError, match="not an nvidia-smi CSV header"):
        gf.parse_query_csv(_h200("nvidia-smi-query-noheader.csv"), header=True)


def test_parse_csv_unavailable_values_become_none():
    text = "0, NVIDIA GB10, GPU-x, 0000000F:01:00.0, 12.1, 580.126.09, [N/A], [Not Supported]\n" \
           "1, NVIDIA GB10, N/A, 0000000F:02:00.0, 12.1, 580.126.09, 1024, 0\n"
    gpus = gf.parse_query_csv(text)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["memory_total_mib"] is None and gpus[0]["memory_used_mib"] is None
    assert gpus[1]["uuid"] is None
    assert gpus[1]["memory_total_mib"] == 1024


def test_parse_csv_rejects_a_non_numeric_index():
    with pytest.raises(ValueError):
        gf.parse_query_csv("zero, NVIDIA GB10, GPU-x, 0000000F:01:00.0, 12.1, 580.126.09, 1, 1\n")


def test_parse_csv_empty_output_is_no_gpu():
    assert gf.parse_query_csv("\n") == []


def test_parse_simulated_gb10_csv(gb10_dir):
    rc, out, _unused = _tool(gb10_dir, [str(FAKE_NVIDIA_SMI), *gf.QUERY_ARGS])
    assert rc == 0
    gpus = gf.parse_query_csv(out)
    assert len(gpus) == 1
    gpu = gpus[0]
    assert gpu["name"] == "NVIDIA GB10"
    assert gpu["compute_cap"] == "12.1"
    assert gpu["memory_total_mib"] is None  # unified memory: [N/A]
    assert gpu["memory_used_mib"] is None
    assert gpu["uuid"].startswith("GPU-")


def test_parse_simulated_gb10_csv_with_header_and_units(gb10_dir):
    query = "--query-gpu=" + ",".join(gf.QUERY_FIELDS)
    _unused, plain, _unused = _tool(gb10_dir, [str(FAKE_NVIDIA_SMI), *gf.QUERY_ARGS])
    _unused, with_header, _unused = _tool(gb10_dir, [str(FAKE_NVIDIA_SMI), query, "--format=csv"])
    assert with_header.splitlines()[0].startswith("index, name")
    assert gf.parse_query_csv(with_header) == gf.parse_query_csv(plain)


# ---------------------------------------------------------------------------
# XML
# ---------------------------------------------------------------------------

def test_parse_real_h200_xml():
    top, gpus = gf.parse_query_xml(_h200("nvidia-smi-q.xml"))
    assert top == {"driver_version": "580.159.04", "cuda_version": "13.0"}
    assert len(gpus) == 1
    gpu = gpus[0]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["uuid"] == H200_UUID
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["memory_total_mib"] == 143771
    assert gpu["memory_used_mib"] == 0
    assert gpu["compute_cap"] is None  # the XML does not carry it


def test_parse_simulated_gb10_xml_has_unified_memory(gb10_dir):
    rc, out, _unused = _tool(gb10_dir, [str(FAKE_NVIDIA_SMI), *gf.XML_ARGS])
    assert rc == 0
    top, gpus = gf.parse_query_xml(out)
    assert top["cuda_version"] == "13.0"
    assert gpus[0]["name"] == "NVIDIA GB10"
    assert gpus[0]["memory_total_mib"] is None
    assert gpus[0]["memory_used_mib"] is None


@pytest.mark.parametrize("text", ["<nvidia_smi_log><gpu>", "<other/>"])
def test_parse_xml_rejects_what_is_not_nvidia_smi(text):
    with pytest.raises(ValueError):
        gf.parse_query_xml(text)


def test_merge_takes_compute_cap_from_csv_by_uuid():
    _unused, xml_gpus = gf.parse_query_xml(_h200("nvidia-smi-q.xml"))
    csv_gpus = gf.parse_query_csv(_h200("nvidia-smi-query.csv"))
    merged = gf.merge_compute_caps(xml_gpus, csv_gpus)
    assert merged[0]["compute_cap"] == "9.0"
    assert merged[0]["memory_total_mib"] == 143771


def test_merge_refuses_different_gpus():
    _unused, xml_gpus = gf.parse_query_xml(_h200("nvidia-smi-q.xml"))
    csv_gpus = gf.parse_query_csv(_h200("nvidia-smi-query.csv"))
    other = [dict(csv_gpus[0], uuid="GPU-other", pci_bus_id="00000000:00:07.0")]
    with pytest.raises(ValueError, match="missing from --query-gpu"):
        gf.merge_compute_caps(xml_gpus, other)
    with pytest.raises(ValueError, match="lists 1 GPU"):
        gf.merge_compute_caps(xml_gpus, [])


# ---------------------------------------------------------------------------
# ibdev2netdev
# ---------------------------------------------------------------------------

IBDEV = ("rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)\n"
         "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)\n"
         "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)\n")


def test_parse_ibdev2netdev():
    links = gf.parse_ibdev2netdev(IBDEV)
    assert links[1] == {"hca": "rocep1s0f1", "port": 1, "netdev": "enp1s0f1np1", "state": "Down"}
    assert [link["state"] for link in links] == ["Up", "Down", "Up"]


def test_parse_ibdev2netdev_rejects_unknown_lines():
    verbose = "0000:01:00.1 rocep1s0f1 (MT4129 - MCX713106AC-VEA) ConnectX-7 fw 28.45.1200 port 1 (ACTIVE) ==> enp1s0f1np1 (Up)"
    with pytest.raises(ValueError, match="unexpected ibdev2netdev line"):
        gf.parse_ibdev2netdev(verbose)


def test_parse_simulated_ibdev2netdev(gb10_dir):
    _fakehw(gb10_dir, "set-link", "roceP2p1s0f1", "Down")
    rc, out, _unused = _tool(gb10_dir, [str(FAKE_IBDEV2NETDEV)])
    assert rc == 0
    links = {link["hca"]: link for link in gf.parse_ibdev2netdev(out)}
    assert links["rocep1s0f1"]["netdev"] == "enp1s0f1np1"
    assert links["rocep1s0f1"]["state"] == "Up"
    assert links["roceP2p1s0f1"]["state"] == "Down"


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------

def _h200_facts() -> dict:
    gpus = gf.parse_query_csv(_h200("nvidia-smi-query.csv"))
    return {"gpu_count": len(gpus), "gpus": gpus}


def test_h200_fails_the_gb10_compute_capability():
    found = gf.check_gpus("sim01-head", _h200_facts(), "12.1", 1, None)
    assert [m.message for m in found] == ["rank sim01-head: GPU 0 compute capability is 9.0, expected 12.1"]
    assert found[0].as_dict()["expected"] == "12.1"
    assert found[0].as_dict()["actual"] == "9.0"


def test_h200_passes_when_an_h200_is_expected():
    assert gf.check_gpus("sim01-head", _h200_facts(), "9.0", 1, "NVIDIA H200") == []


def test_check_gpus_collects_every_mismatch():
    found = gf.check_gpus("r", _h200_facts(), "12.1", 2, "NVIDIA GB10")
    messages = [m.message for m in found]
    assert messages == [
        "rank r: GPU count is 1, expected 2",
        "rank r: GPU 0 compute capability is 9.0, expected 12.1",
        "rank r: GPU 0 name is NVIDIA H200, expected NVIDIA GB10",
    ]


def test_check_gpus_absent_compute_cap_is_a_mismatch():
    facts = {"gpu_count": 1, "gpus": [dict(_h200_facts()["gpus"][0], compute_cap=None)]}
    assert [m.message for m in gf.check_gpus("r", facts, "9.0", 1, None)] == \
        ["rank r: GPU 0 compute capability is absent, expected 9.0"]


def test_check_fabric_messages():
    links = gf.parse_ibdev2netdev(IBDEV)
    found = gf.check_fabric("sim01-worker", links, ["enp1s0f0np0", "enp1s0f1np1", "enp9s0f0np0"],
                            ["rocep1s0f1", "roceP2p1s0f1", "mlx5_9"])
    assert [m.message for m in found] == [
        "rank sim01-worker: netdev enp1s0f1np1 link is Down, expected Up",
        "rank sim01-worker: netdev enp9s0f0np0 is absent, expected Up",
        "rank sim01-worker: HCA rocep1s0f1 link is Down, expected Up",
        "rank sim01-worker: HCA mlx5_9 is absent, expected Up",
    ]


def test_check_fabric_names_the_port_of_a_multi_port_hca():
    links = gf.parse_ibdev2netdev("mlx5_0 port 1 ==> ib0 (Up)\nmlx5_0 port 2 ==> ib1 (Down)\n")
    assert [m.message for m in gf.check_fabric("r", links, [], ["mlx5_0"])] == \
        ["rank r: HCA mlx5_0 port 2 link is Down, expected Up"]


def test_check_fabric_all_up_passes():
    assert gf.check_fabric("r", gf.parse_ibdev2netdev(IBDEV), ["enp1s0f0np0"], ["roceP2p1s0f1"]) == []


# ---------------------------------------------------------------------------
# gather: running the tools, failing closed
# ---------------------------------------------------------------------------

def test_gather_h200_csv_source():
    run = _h200_runner((0, IBDEV, ""))
    report = gf.gather(run, "sim01-head", gf.Expectations(), "/usr/bin/nvidia-smi", "/usr/sbin/ibdev2netdev")
    assert report.facts["gpu_count"] == 1
    assert report.facts["driver_version"] == "580.159.04"
    assert report.facts["cuda_version"] is None
    assert len(report.facts["fabric"]) == 3
    assert [m.message for m in report.mismatches] == ["rank sim01-head: GPU 0 compute capability is 9.0, expected 12.1"]
    assert run.calls[0] == ["/usr/bin/nvidia-smi", *gf.QUERY_ARGS]
    assert run.calls[1] == ["/usr/sbin/ibdev2netdev"]


def test_gather_h200_xml_source_adds_cuda_version_and_keeps_compute_cap():
    run = _h200_runner()
    expect = gf.Expectations(compute_capability="9.0", gpu_name="NVIDIA H200")
    report = gf.gather(run, "h", expect, "/usr/bin/nvidia-smi", None, source="xml", fabric=False)
    assert report.mismatches == []
    assert report.facts["cuda_version"] == "13.0"
    assert report.facts["gpus"][0]["compute_cap"] == "9.0"
    assert ["/usr/bin/nvidia-smi", "-q", "-x"] in run.calls


def test_gather_simulated_gb10_passes_the_defaults(gb10_dir):
    expect = gf.Expectations(gpu_name="NVIDIA GB10", netdevs=["enp1s0f1np1"], hcas=["rocep1s0f1", "roceP2p1s0f1"])
    report = gf.gather(_sim_runner(gb10_dir), "sim01-head", expect, str(FAKE_NVIDIA_SMI), str(FAKE_IBDEV2NETDEV),
                       source="xml")
    assert report.mismatches == []
    assert report.facts["gpus"][0]["compute_cap"] == "12.1"
    assert report.facts["cuda_version"] == "13.0"
    assert {link["hca"] for link in report.facts["fabric"]} == {"rocep1s0f1", "roceP2p1s0f1"}


@pytest.mark.parametrize("rc, out, err, meaning, first", [
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\nMore.\n", "",
     "driver not loaded", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
    (6, "No devices were found\n", "", "no NVIDIA GPU found", "No devices were found"),
    (1, "ignored\n", "\nsomething broke\n", "exit 1)", "something broke"),
])
def test_gather_nvidia_smi_failure_is_a_check_error(rc, out, err, meaning, first):
    run = Recorded({"csv": (rc, out, err)})
    with pytest.raises(CheckError) as raised:
        gf.gather(run, "sim01-worker", gf.Expectations(), "/usr/bin/nvidia-smi", None, fabric=False)
    message = str(raised.value)
    assert message.startswith(f"rank sim01-worker: nvidia-smi failed (exit {rc}")
    assert meaning in message
    assert message.endswith(first)


def test_gather_simulated_driver_not_loaded(tmp_path):
    with pytest.raises(CheckError, match=r"^rank r: nvidia-smi failed \(exit 9, NVIDIA driver not loaded"):
        gf.gather(_sim_runner(tmp_path / "empty"), "r", gf.Expectations(), str(FAKE_NVIDIA_SMI), None, fabric=False)


def test_gather_unparseable_output_is_a_check_error():
    run = Recorded({"csv": (0, "garbage line\n", "")})
    with pytest.raises(CheckError, match="cannot parse nvidia-smi --query-gpu output"):
        gf.gather(run, "r", gf.Expectations(), "/usr/bin/nvidia-smi", None, fabric=False)


def test_gather_tool_that_cannot_start_is_a_check_error():
    def run(argv):
        raise PermissionError(13, "Permission denied")
    with pytest.raises(CheckError, match="^rank r: nvidia-smi could not be run"):
        gf.gather(run, "r", gf.Expectations(), "/usr/bin/nvidia-smi", None, fabric=False)


def test_gather_without_nvidia_smi_fails():
    run = Recorded({})
    with pytest.raises(CheckError, match="^rank r: nvidia-smi not found"):
        gf.gather(run, "r", gf.Expectations(), None, "/usr/sbin/ibdev2netdev")
    assert run.calls == []


def test_gather_without_ibdev2netdev_warns_when_nothing_is_expected():
    report = gf.gather(_h200_runner(), "r", gf.Expectations(compute_capability="9.0"), "/usr/bin/nvidia-smi", None)
    assert report.facts["fabric"] is None
    assert report.mismatches == []
    assert len(report.warnings) == 1 and "ibdev2netdev not found" in report.warnings[0]


def test_gather_without_ibdev2netdev_fails_when_netdevs_are_expected():
    expect = gf.Expectations(compute_capability="9.0", netdevs=["enp1s0f1np1"])
    with pytest.raises(CheckError, match="^rank r: ibdev2netdev not found"):
        gf.gather(_h200_runner(), "r", expect, "/usr/bin/nvidia-smi", None, fabric=False)


def test_gather_skips_ibdev2netdev_when_not_wanted():
    run = _h200_runner((1, "", "must not be called"))
    report = gf.gather(run, "r", gf.Expectations(compute_capability="9.0"), "/usr/bin/nvidia-smi",
                       "/usr/sbin/ibdev2netdev", fabric=False)
    assert report.facts["fabric"] is None
    assert [Path(c[0]).name for c in run.calls] == ["nvidia-smi"]


def test_gather_runs_ibdev2netdev_for_expectations_even_without_fabric():
    run = _h200_runner((0, IBDEV, ""))
    expect = gf.Expectations(compute_capability="9.0", hcas=["rocep1s0f1"])
    report = gf.gather(run, "w", expect, "/usr/bin/nvidia-smi", "/usr/sbin/ibdev2netdev", fabric=False)
    assert [m.message for m in report.mismatches] == ["rank w: HCA rocep1s0f1 link is Down, expected Up"]


def test_gather_ibdev2netdev_failure_is_a_check_error():
    run = _h200_runner((1, "", "ibdev2netdev: cannot read device state\n"))
    with pytest.raises(CheckError, match=r"ibdev2netdev failed \(exit 1\): ibdev2netdev: cannot read device state$"):
        gf.gather(run, "r", gf.Expectations(compute_capability="9.0"), "/usr/bin/nvidia-smi", "/usr/sbin/ibdev2netdev")


@pytest.mark.parametrize("expect", [
    gf.Expectations(compute_capability="12"),
    gf.Expectations(compute_capability=None),
    gf.Expectations(gpu_count=-1),
    gf.Expectations(gpu_count=None),
])
def test_expectations_cannot_be_malformed_or_switched_off(expect):
    run = _h200_runner()
    with pytest.raises(CheckError):
        gf.gather(run, "r", expect, "/usr/bin/nvidia-smi", None, fabric=False)
    assert run.calls == []
