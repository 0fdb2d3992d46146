"""Unit tests for the fake GB10 hardware (sim/fakehw).

The fake tools are run as subprocesses through their bin/ wrappers with a
temporary state directory; outputs are checked against the H200 captures in
shared/fixtures/nvidia-smi-h200 (H200 profile) and against the GB10 values.
"""

import csv
import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from fakehw import ibdev2netdev, nvidia_smi, sysfs
from fakehw import state as hw

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SIM = os.path.join(REPO, "sim")
BIN = os.path.join(SIM, "fakehw", "bin")
NVSMI = os.path.join(BIN, "nvidia-smi")
IBDEV = os.path.join(BIN, "ibdev2netdev")

TIMESTAMP_RE = r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 1-3][0-9] \d\d:\d\d:\d\d \d{4}"
FIXTURE_QUERY_FIELDS = ("index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total,"
                        "memory.used,temperature.gpu,power.draw,persistence_mode,mig.mode.current")
NOHEADER_FIELDS = "index,name,compute_cap,driver_version,memory.total"


# Real nvidia-smi output of an H200, kept in the repository (tests/fixtures/README.md).
FIXTURES = os.path.join(REPO, "tests", "fixtures", "nvidia-smi-h200")


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as fh:
        return fh.read()


def _env(hw_dir, **extra):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["DSPARK_SIM_HW_DIR"] = str(hw_dir)
    env.update(extra)
    return env


def run(tool, args, hw_dir, **kw):
    return subprocess.run([tool] + list(args), env=_env(hw_dir), capture_output=True,
                          text=True, timeout=30, **kw, check=False)


def smi(hw_dir, *args):
    return run(NVSMI, args, hw_dir)


def ibdev(hw_dir, *args):
    return run(IBDEV, args, hw_dir)


def cli(hw_dir, *args, **extra_env):
    env = _env(hw_dir, PYTHONPATH=SIM, **extra_env)
    return subprocess.run([sys.executable, "-m", "fakehw"] + list(args), env=env,
                          capture_output=True, text=True, timeout=30, check=False)


def assert_clean_failure(proc):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert proc.stderr.strip()


@pytest.fixture
def gb10(tmp_path):
    hw.write_gpu_state(str(tmp_path), hw.default_gb10_gpu_state(1))
    return tmp_path


@pytest.fixture
def h200(tmp_path):
    hw.write_gpu_state(str(tmp_path), hw.h200_state())
    return tmp_path


def parse_csv(text):
    return list(csv.reader(io.StringIO(text), skipinitialspace=True))


# ---------------------------------------------------------------------------
# nvidia-smi: table and -L
# ---------------------------------------------------------------------------

def test_table_gb10_layout(gb10):
    p = smi(gb10)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert re.fullmatch(TIMESTAMP_RE + " {7}", lines[0])
    assert lines[2] == ("| NVIDIA-SMI 580.126.09             Driver Version: 580.126.09"
                        "     CUDA Version: 13.0     |")
    assert lines[8] == "|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |"
    assert re.fullmatch(r"\| N/A   \d\dC    P8 +\d{1,2}W /  N/A  \| Not Supported {10}\|"
                        r"      0%      Default \|", lines[9]), lines[9]
    assert lines[10].endswith("|                  N/A |")
    assert all(len(line) == 91 for line in lines[1:] if line), "all frame lines are 91 wide"
    assert "No running processes found" in p.stdout


def test_table_h200_profile_matches_fixture(h200):
    p = smi(h200)
    assert p.returncode == 0
    got, exp = p.stdout.splitlines(), fixture("nvidia-smi.txt").splitlines()
    assert re.fullmatch(TIMESTAMP_RE + " {7}", got[0])
    assert got[1:] == exp[1:]


def test_list_gb10(gb10):
    p = smi(gb10, "-L")
    uuid = hw.default_gb10_gpu_state(1)["gpus"][0]["uuid"]
    assert p.returncode == 0
    assert p.stdout == "GPU 0: NVIDIA GB10 (UUID: %s)\n" % uuid


def test_list_h200_matches_fixture(h200):
    assert smi(h200, "--list-gpus").stdout == fixture("nvidia-smi-L.txt")


# ---------------------------------------------------------------------------
# nvidia-smi: --query-gpu
# ---------------------------------------------------------------------------

def test_query_gpu_gb10_csv(gb10):
    fields = FIXTURE_QUERY_FIELDS + ",memory.free"
    p = smi(gb10, "--query-gpu=" + fields, "--format=csv")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == (
        "index, name, uuid, pci.bus_id, compute_cap, driver_version, memory.total [MiB], "
        "memory.used [MiB], temperature.gpu, power.draw [W], persistence_mode, mig.mode.current, "
        "memory.free [MiB]")
    rows = parse_csv(p.stdout)
    assert len(rows) == 2
    row = dict(zip(fields.split(","), rows[1]))
    gpu = hw.default_gb10_gpu_state(1)["gpus"][0]
    assert row["index"] == "0"
    assert row["name"] == "NVIDIA GB10"
    assert row["uuid"] == gpu["uuid"]
    assert row["pci.bus_id"] == "0000000F:01:00.0"
    assert row["compute_cap"] == "12.1"
    assert row["driver_version"].startswith("580.")
    assert row["memory.total"] == row["memory.used"] == row["memory.free"] == "[N/A]"
    assert row["temperature.gpu"] == str(gpu["temperature"])
    assert re.fullmatch(r"\d+\.\d\d W", row["power.draw"])
    assert row["persistence_mode"] == "Enabled"
    assert row["mig.mode.current"] == "[N/A]"


@pytest.mark.parametrize("fields,fmt,name", [
    (FIXTURE_QUERY_FIELDS, "csv", "nvidia-smi-query.csv"),
    (NOHEADER_FIELDS, "csv,noheader,nounits", "nvidia-smi-query-noheader.csv"),
])
def test_query_gpu_h200_matches_fixture(h200, fields, fmt, name):
    p = smi(h200, "--query-gpu=" + fields, "--format=" + fmt)
    assert p.returncode == 0, p.stderr
    assert p.stdout == fixture(name)


def test_query_gpu_nounits_and_noheader(h200):
    p = smi(h200, "--query-gpu", "memory.total,power.draw", "--format", "csv,nounits")
    assert p.stdout == "memory.total [MiB], power.draw [W]\n143771, 127.52\n"
    p = smi(h200, "--query-gpu=memory.total,power.draw", "--format=csv,noheader")
    assert p.stdout == "143771 MiB, 127.52 W\n"


def test_query_gpu_unknown_field_is_rejected(gb10):
    p = smi(gb10, "--query-gpu=index,bogus", "--format=csv")
    assert p.returncode == 2
    assert 'Field "bogus" is not a valid field to query.' in p.stderr
    assert p.stdout == ""


def test_query_gpu_without_format_is_rejected(gb10):
    p = smi(gb10, "--query-gpu=index")
    assert p.returncode == 2
    assert p.stdout == ""


def test_unknown_option_is_rejected(gb10):
    p = smi(gb10, "--frobnicate")
    assert p.returncode == 2
    assert "Invalid combination of input arguments" in p.stderr


# ---------------------------------------------------------------------------
# nvidia-smi: -q -x and -q
# ---------------------------------------------------------------------------

def _paths(elem, prefix=""):
    out = []
    for child in elem:
        path = prefix + "/" + child.tag
        out.append(path)
        out += _paths(child, path)
    seen, unique = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            unique.append(p)
    return unique


@pytest.mark.parametrize("args", [("-q", "-x"), ("-x", "-q"), ("--query", "--xml-format")])
def test_xml_gb10(gb10, args):
    p = smi(gb10, *args)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n')
    root = ET.fromstring(p.stdout)
    assert root.tag == "nvidia_smi_log"
    assert re.fullmatch(TIMESTAMP_RE, root.findtext("timestamp"))
    assert root.findtext("driver_version").startswith("580.")
    assert root.findtext("cuda_version") == "13.0"
    assert root.findtext("attached_gpus") == "1"
    gpus = root.findall("gpu")
    assert len(gpus) == 1
    g = gpus[0]
    assert g.get("id") == "0000000F:01:00.0"
    assert g.findtext("product_name") == "NVIDIA GB10"
    assert g.findtext("product_architecture") == "Blackwell"
    assert g.findtext("uuid") == hw.default_gb10_gpu_state(1)["gpus"][0]["uuid"]
    assert g.findtext("pci/pci_bus_id") == "0000000F:01:00.0"
    for tag in ("total", "reserved", "used", "free"):
        assert g.findtext("fb_memory_usage/" + tag) == "N/A"
    assert g.findtext("mig_mode/current_mig") == "N/A"


def test_xml_gb10_has_fixture_element_structure(gb10):
    got = ET.fromstring(smi(gb10, "-q", "-x").stdout)
    exp = ET.fromstring(fixture("nvidia-smi-q.xml"))
    assert _paths(got) == _paths(exp)
    # The fixture has no compute-capability element (nvidia-smi XML reports the
    # architecture only); compute capability is only in --query-gpu=compute_cap.
    assert "/gpu/product_architecture" in _paths(exp)
    assert not [p for p in _paths(exp) if "compute_cap" in p]


def test_xml_h200_profile_matches_fixture(h200):
    got = smi(h200, "-q", "-x").stdout.splitlines()
    exp = fixture("nvidia-smi-q.xml").splitlines()
    assert re.fullmatch(r"\t<timestamp>%s</timestamp>" % TIMESTAMP_RE, got[3])
    assert got[:3] + got[4:] == exp[:3] + exp[4:]


def test_text_query_report(gb10):
    p = smi(gb10, "-q")
    assert p.returncode == 0
    assert "==============NVSMI LOG==============" in p.stdout
    assert re.search(r"^    Product Name {26}: NVIDIA GB10$", p.stdout, re.M)
    assert re.search(r"^    Product Architecture +: Blackwell$", p.stdout, re.M)
    assert re.search(r"^        Total +: N/A$", p.stdout, re.M)


# ---------------------------------------------------------------------------
# nvidia-smi: -i, topo, no devices, broken state
# ---------------------------------------------------------------------------

def test_select_gpu_by_index_and_uuid(gb10):
    uuid = hw.default_gb10_gpu_state(1)["gpus"][0]["uuid"]
    assert smi(gb10, "-i", "0", "-L").stdout.startswith("GPU 0: NVIDIA GB10")
    p = smi(gb10, "--query-gpu=uuid", "--format=csv,noheader", "-i", uuid)
    assert p.stdout == uuid + "\n"
    p = smi(gb10, "-i", "1", "-L")
    assert p.returncode == 6
    assert p.stdout == "No devices were found\n"


def test_topo_gb10(gb10):
    p = smi(gb10, "topo", "-m")
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert lines[0] == "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"
    assert lines[1] == "GPU0\t X \t0-19\t0\t\tN/A"
    assert "Legend:" in lines


def test_topo_h200_matches_fixture(h200):
    assert smi(h200, "topo", "-m").stdout == fixture("nvidia-smi-topo.txt")


@pytest.mark.parametrize("args", [(), ("-L",), ("--query-gpu=name", "--format=csv"), ("-q", "-x")])
def test_zero_gpus_means_no_devices(tmp_path, args):
    st = hw.default_gb10_gpu_state(0)
    st["gpus"] = []
    hw.write_gpu_state(str(tmp_path), st)
    p = smi(tmp_path, *args)
    assert p.returncode == 6
    assert p.stdout == "No devices were found\n"


def test_missing_state_is_a_driver_failure(tmp_path):
    p = smi(tmp_path / "nowhere")
    assert p.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in p.stderr
    assert_clean_failure(p)
    assert p.stdout == ""


def _gb10_with(**changes):
    st = hw.default_gb10_gpu_state(0)
    st["gpus"][0].update(changes)
    return json.dumps(st)


@pytest.mark.parametrize("content,needle", [
    ("{", "invalid JSON"),
    ("[]", "top level"),
    ('{"driver_version": "580.126.09", "cuda_version": "13.0"}', "gpus"),
    ('{"cuda_version": "13.0", "gpus": []}', "driver_version"),
    (_gb10_with(compute_cap=12.1), "compute_cap"),
    (_gb10_with(uuid="not-a-uuid"), "uuid"),
    (_gb10_with(persistence_mode="yes"), "persistence_mode"),
    (_gb10_with(memory_total_mib="128GB"), "memory_total_mib"),
    (json.dumps({"driver_version": "580.1", "cuda_version": "13.0",
                 "gpus": [{"index": 0, "name": "NVIDIA GB10"}]}), "missing required key"),
])
def test_malformed_gpu_state_fails_cleanly(tmp_path, content, needle):
    (tmp_path / "gpu.json").write_text(content)
    for args in [(), ("-L",), ("--query-gpu=name", "--format=csv")]:
        p = smi(tmp_path, *args)
        assert p.returncode == 9
        assert_clean_failure(p)
        assert needle in p.stderr
        assert "gpu.json" in p.stderr
        assert p.stdout == ""


def test_non_utf8_gpu_state_fails_cleanly(tmp_path):
    (tmp_path / "gpu.json").write_bytes(b"\xff\xfe\x00garbage")
    assert_clean_failure(smi(tmp_path))


# ---------------------------------------------------------------------------
# state module
# ---------------------------------------------------------------------------

def test_gb10_defaults_are_deterministic_and_distinct_per_seed():
    a1, a2, b = (hw.default_gb10_gpu_state(s) for s in (1, 1, 2))
    assert a1 == a2
    assert a1["gpus"][0]["uuid"] != b["gpus"][0]["uuid"]
    assert a1["gpus"][0]["serial"] != b["gpus"][0]["serial"]
    g = hw.validate_gpu_state(a1)["gpus"][0]
    assert (g["name"], g["architecture"], g["compute_cap"]) == ("NVIDIA GB10", "Blackwell", "12.1")
    assert g["memory_total_mib"] is None
    assert len(a1["gpus"]) == 1
    assert a1["driver_version"].startswith("580.") and a1["cuda_version"] == "13.0"


def test_write_is_atomic_and_validated(tmp_path):
    d = str(tmp_path)
    hw.write_gpu_state(d, hw.default_gb10_gpu_state(0))
    before = (tmp_path / "gpu.json").read_text()
    bad = hw.default_gb10_gpu_state(0)
    bad["gpus"][0]["compute_cap"] = "twelve"
    with pytest.raises(hw.StateError):
        hw.write_gpu_state(d, bad)
    assert (tmp_path / "gpu.json").read_text() == before
    assert sorted(os.listdir(d)) == ["gpu.json"]
    assert hw.load_gpu_state(d)["gpus"][0]["uuid"] == hw.default_gb10_gpu_state(0)["gpus"][0]["uuid"]


def test_ib_state_validation():
    with pytest.raises(hw.StateError):
        hw.validate_ib_state({"devices": [{"hca": "rocep1s0f1", "port": 1, "netdev": "x", "state": "up"}]})
    with pytest.raises(hw.StateError):
        hw.validate_ib_state({"devices": [{"hca": "a/b", "port": 1, "netdev": "x", "state": "Up"}]})
    with pytest.raises(hw.StateError):
        hw.validate_ib_state({"devices": [{"hca": "rocep1s0f1", "port": 0, "netdev": "x", "state": "Up"}]})
    st = hw.default_ib_state("rocep1s0f0", "enp1s0f0np0", "roceP2p1s0f0", "enP2p1s0f0np0")
    assert [(d["hca"], d["netdev"], d["state"]) for d in st["devices"]] == [
        ("rocep1s0f0", "enp1s0f0np0", "auto"), ("roceP2p1s0f0", "enP2p1s0f0np0", "auto")]
    assert hw.twin_names("rocep1s0f1", "enp1s0f1np1") == ("roceP2p1s0f1", "enP2p1s0f1np1")
    assert hw.twin_names("mlx5_0", "eth0") is None


# ---------------------------------------------------------------------------
# ibdev2netdev
# ---------------------------------------------------------------------------

def _write_ib(tmp_path, devices):
    hw.write_ib_state(str(tmp_path), {"devices": devices})


def test_ibdev2netdev_explicit_states(tmp_path):
    _write_ib(tmp_path, [
        {"hca": "rocep1s0f1", "port": 1, "netdev": "enp1s0f1np1", "state": "Up"},
        {"hca": "roceP2p1s0f1", "port": 1, "netdev": "enP2p1s0f1np1", "state": "Down"},
    ])
    p = ibdev(tmp_path)
    assert p.returncode == 0
    assert p.stdout == ("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n"
                        "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)\n")


def test_ibdev2netdev_auto_uses_the_netns(tmp_path):
    _write_ib(tmp_path, [
        {"hca": "rocep1s0f0", "port": 1, "netdev": "lo", "state": "auto"},
        {"hca": "rocep1s0f1", "port": 1, "netdev": "dsparknx9q7z", "state": "auto"},
    ])
    p = ibdev(tmp_path)
    assert p.returncode == 0
    assert p.stdout == ("rocep1s0f0 port 1 ==> lo (Up)\n"
                        "rocep1s0f1 port 1 ==> dsparknx9q7z (Down)\n")


def test_ibdev2netdev_verbose(tmp_path):
    _write_ib(tmp_path, [{"hca": "roceP2p1s0f1", "port": 1, "netdev": "enP2p1s0f1np1", "state": "Up"}])
    p = ibdev(tmp_path, "-v")
    assert re.fullmatch(r"0002:01:00\.1 roceP2p1s0f1 \(MT\d+ - \S+\) .* fw [\d.]+ port 1 \(ACTIVE\) "
                        r"==> enP2p1s0f1np1 \(Up\)\n", p.stdout), p.stdout


@pytest.mark.parametrize("content", [
    "not json",
    '{"devices": {}}',
    '{"devices": [{"hca": "rocep1s0f1", "port": 1, "netdev": "enp1s0f1np1", "state": "maybe"}]}',
    '{"devices": [{"hca": "rocep1s0f1", "netdev": "enp1s0f1np1", "state": "Up"}]}',
])
def test_ibdev2netdev_malformed_state(tmp_path, content):
    (tmp_path / "ib.json").write_text(content)
    p = ibdev(tmp_path)
    assert_clean_failure(p)
    assert "ib.json" in p.stderr
    assert p.stdout == ""


def test_ibdev2netdev_without_devices_prints_nothing(tmp_path):
    p = ibdev(tmp_path)
    assert p.returncode == 0
    assert p.stdout == ""


@pytest.mark.parametrize("obj,up", [
    ([{"ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "operstate": "UNKNOWN"}], True),
    ([{"ifname": "v0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "operstate": "UP"}], True),
    ([{"ifname": "v0", "flags": ["NO-CARRIER", "BROADCAST", "MULTICAST", "UP"],
       "operstate": "LOWERLAYERDOWN"}], False),
    ([{"ifname": "v0", "flags": ["BROADCAST", "MULTICAST"], "operstate": "DOWN"}], False),
    ([], False),
])
def test_link_up_from_ip_json(obj, up):
    assert ibdev2netdev.link_up_from_ip_json(obj) is up


# ---------------------------------------------------------------------------
# sysfs
# ---------------------------------------------------------------------------

def _read(root, *parts):
    with open(os.path.join(sysfs.infiniband_dir(str(root)), *parts)) as fh:
        return fh.read().strip()


def test_sysfs_tree_matches_link_states(tmp_path):
    devices = [
        {"hca": "rocep1s0f1", "port": 1, "netdev": "enp1s0f1np1", "state": "Up"},
        {"hca": "roceP2p1s0f1", "port": 1, "netdev": "enP2p1s0f1np1", "state": "Down"},
        {"hca": "rocep1s0f0", "port": 1, "netdev": "dsparknx9q7z", "state": "auto"},
    ]
    written = sysfs.materialise(str(tmp_path), devices)
    assert written == {("rocep1s0f1", 1): "Up", ("roceP2p1s0f1", 1): "Down", ("rocep1s0f0", 1): "Down"}
    assert _read(tmp_path, "rocep1s0f1", "ports", "1", "state") == "4: ACTIVE"
    assert _read(tmp_path, "rocep1s0f1", "ports", "1", "phys_state") == "5: LinkUp"
    assert _read(tmp_path, "rocep1s0f1", "ports", "1", "link_layer") == "Ethernet"
    assert os.path.isdir(os.path.join(sysfs.infiniband_dir(str(tmp_path)), "rocep1s0f1", "device", "net", "enp1s0f1np1"))
    assert _read(tmp_path, "roceP2p1s0f1", "ports", "1", "state") == "1: DOWN"
    assert _read(tmp_path, "roceP2p1s0f1", "ports", "1", "phys_state") == "3: Disabled"
    assert _read(tmp_path, "rocep1s0f0", "ports", "1", "state") == "1: DOWN"

    # regenerate after a state change: flipped link, removed device, renamed netdev
    devices = [
        {"hca": "rocep1s0f1", "port": 1, "netdev": "enp1s0f1np9", "state": "Down"},
        {"hca": "roceP2p1s0f1", "port": 1, "netdev": "enP2p1s0f1np1", "state": "Up"},
    ]
    sysfs.materialise(str(tmp_path), {"devices": devices})
    ib = sysfs.infiniband_dir(str(tmp_path))
    assert sorted(os.listdir(ib)) == ["roceP2p1s0f1", "rocep1s0f1"]
    assert _read(tmp_path, "rocep1s0f1", "ports", "1", "state") == "1: DOWN"
    assert _read(tmp_path, "roceP2p1s0f1", "ports", "1", "phys_state") == "5: LinkUp"
    assert os.listdir(os.path.join(ib, "rocep1s0f1", "device", "net")) == ["enp1s0f1np9"]


# ---------------------------------------------------------------------------
# CLI (python3 -m fakehw)
# ---------------------------------------------------------------------------

def test_cli_init_and_set_link(tmp_path):
    root = tmp_path / "root"
    p = cli(tmp_path, "--sysfs-root", str(root), "init", "--hca", "rocep1s0f1",
            "--netdev", "enp1s0f1np1", "--seed", "7", "--state", "Up")
    assert p.returncode == 0, p.stderr
    assert ibdev(tmp_path).stdout == ("rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n"
                                      "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)\n")
    assert smi(tmp_path, "-L").stdout == "GPU 0: NVIDIA GB10 (UUID: %s)\n" % (
        hw.default_gb10_gpu_state(7)["gpus"][0]["uuid"])
    assert _read(root, "roceP2p1s0f1", "ports", "1", "state") == "4: ACTIVE"

    assert cli(tmp_path, "set-link", "roceP2p1s0f1", "down", "--sysfs-root", str(root)).returncode == 0
    assert ibdev(tmp_path).stdout.splitlines()[1] == "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)"
    assert _read(root, "roceP2p1s0f1", "ports", "1", "state") == "1: DOWN"

    p = cli(tmp_path, "set-link", "mlx5_9", "Up")
    assert p.returncode == 1
    assert "mlx5_9" in p.stderr and "Traceback" not in p.stderr


def test_cli_init_explicit_twin_and_auto(tmp_path):
    p = cli(tmp_path, "init", "--hca", "rocep1s0f0", "--netdev", "lo",
            "--twin-hca", "roceP2p1s0f0", "--twin-netdev", "dsparknx9q7z", "--seed", "0")
    assert p.returncode == 0, p.stderr
    assert ibdev(tmp_path).stdout == ("rocep1s0f0 port 1 ==> lo (Up)\n"
                                      "roceP2p1s0f0 port 1 ==> dsparknx9q7z (Down)\n")


def test_cli_set_gpu_profiles_and_fields(tmp_path):
    assert cli(tmp_path, "init", "--hca", "rocep1s0f1", "--netdev", "enp1s0f1np1",
               "--seed", "3").returncode == 0
    q = ("--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader")
    assert smi(tmp_path, *q).stdout == "NVIDIA GB10, 12.1, [N/A]\n"

    assert cli(tmp_path, "set-gpu", "--profile", "h200").returncode == 0
    assert smi(tmp_path, *q).stdout == "NVIDIA H200, 9.0, 143771 MiB\n"

    assert cli(tmp_path, "set-gpu", "--profile", "gb10").returncode == 0
    uuid = smi(tmp_path, "--query-gpu=uuid", "--format=csv,noheader").stdout.strip()
    assert uuid == hw.default_gb10_gpu_state(3)["gpus"][0]["uuid"], "gb10 identity restored from seed"

    assert cli(tmp_path, "set-gpu", "--field", "compute_cap=9.0").returncode == 0
    assert smi(tmp_path, *q).stdout == "NVIDIA GB10, 9.0, [N/A]\n"

    p = cli(tmp_path, "set-gpu", "--field", "compute_cap=nine")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    p = cli(tmp_path, "set-gpu", "--field", "no_such_field=1")
    assert p.returncode == 1 and "no_such_field" in p.stderr

    assert cli(tmp_path, "set-gpu", "--count", "0").returncode == 0
    assert smi(tmp_path).returncode == 6


def test_cli_uses_env_hw_dir(tmp_path):
    env_dir = tmp_path / "from-env"
    p = cli(env_dir, "init", "--hca", "rocep1s0f1", "--netdev", "enp1s0f1np1", "--seed", "1")
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(env_dir)) == ["gpu.json", "ib.json"]


# ---------------------------------------------------------------------------
# wrappers
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("tool", [NVSMI, IBDEV])
def test_wrapper_is_executable_with_system_python(tool):
    with open(tool) as fh:
        assert fh.readline() == "#!/usr/bin/python3\n"
    assert os.access(tool, os.X_OK)


def test_wrapper_works_through_symlink_from_elsewhere(tmp_path, gb10):
    link_dir = tmp_path / "usr-local-bin"
    link_dir.mkdir()
    os.symlink(NVSMI, str(link_dir / "nvidia-smi"))
    os.symlink(IBDEV, str(link_dir / "ibdev2netdev"))
    p = subprocess.run([str(link_dir / "nvidia-smi"), "-L"], cwd="/", env=_env(gb10),
                       capture_output=True, text=True, timeout=30, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("GPU 0: NVIDIA GB10")
    p = subprocess.run([str(link_dir / "ibdev2netdev")], cwd="/", env=_env(gb10),
                       capture_output=True, text=True, timeout=30, check=False)
    assert p.returncode == 0, p.stderr


def test_render_functions_in_process():
    top = hw.validate_gpu_state(hw.default_gb10_gpu_state(5))
    ctx = nvidia_smi.Context(top, top["gpus"], now=0)
    out = nvidia_smi.render_query_gpu(ctx, ["count", "name", "power.limit"], header=False)
    assert out == "1, NVIDIA GB10, [N/A]\n"
