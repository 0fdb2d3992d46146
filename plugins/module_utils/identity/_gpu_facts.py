# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU and RoCE fabric facts of one rank, and the checks a DGX Spark rank must pass.

Two tools are read:

* ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` (or ``nvidia-smi -q -x``),
  parsed into one dict per GPU;
* ``ibdev2netdev``, parsed into one dict per HCA port (``rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)``).

The checks collect every :class:`Mismatch` instead of stopping at the first one.
A tool that is missing, exits non-zero or prints something unparseable is a
:class:`CheckError`: the rank cannot be vouched for, so the run fails closed.

Pure standard library; external commands go through a ``run(argv) -> (rc, stdout, stderr)``
callable so tests can feed recorded outputs.
"""
from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, Mismatch

Runner = Callable[[list[str]], tuple[int, str, str]]

#: The columns asked of ``nvidia-smi --query-gpu``, in this order.
QUERY_FIELDS: tuple[str, ...] = (
    "index", "name", "uuid", "pci.bus_id", "compute_cap", "driver_version", "memory.total", "memory.used",
)
QUERY_ARGS: tuple[str, ...] = ("--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits")
XML_ARGS: tuple[str, ...] = ("-q", "-x")

#: nvidia-smi exit codes worth explaining in a failure message.
NVIDIA_SMI_EXIT_CODES: dict[int, str] = {
    2: "invalid argument or field",
    3: "operation not available on this device",
    4: "insufficient permissions",
    6: "no NVIDIA GPU found",
    8: "power cable not attached",
    9: "NVIDIA driver not loaded or not reachable",
    10: "NVIDIA kernel detected an interrupt issue",
    12: "NVML shared library not found",
    14: "infoROM corrupted",
    15: "GPU has fallen off the bus",
    255: "unknown error",
}

#: Cell values nvidia-smi prints when a value is not available.
_UNAVAILABLE = {"n/a", "not supported", "unknown", ""}
_HEADER_CELL = re.compile(r"^([a-z][a-z0-9_.]*)(?: \[([^\]]+)\])?$")
_MIB = re.compile(r"^(\d+)(?:\s*MiB)?$")
_CC = re.compile(r"^\d+\.\d+$")
_IBDEV_LINE = re.compile(r"^(?P<hca>\S+) port (?P<port>\d+) ==> (?P<netdev>\S+) \((?P<state>[^)]+)\)$")


# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------

def clean(value: str | None) -> str | None:
    """A cell or element text, stripped; ``None`` for nvidia-smi's "not available" markers
    (``[N/A]``, ``[Not Supported]``, ``N/A``, any other ``[...]``)."""
    if value is None:
        return None
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        return None
    if text.lower() in _UNAVAILABLE:
        return None
    return text


def mib(value: str | None) -> int | None:
    """``"143771"`` or ``"143771 MiB"`` as an int; ``None`` when not available.

    Raises ValueError for anything else, so a changed output format is noticed."""
    text = clean(value)
    if text is None:
        return None
    match = _MIB.match(text)
    if not match:
        raise ValueError(f"not a MiB value: {value!r}")
    return int(match.group(1))


def _index(value: str | None) -> int:
    text = clean(value)
    if text is None or not text.isdigit():
        raise ValueError(f"not a GPU index: {value!r}")
    return int(text)


def _gpu(index: int, name: str | None, uuid: str | None, pci_bus_id: str | None, compute_cap: str | None,
         driver_version: str | None, memory_total: str | None, memory_used: str | None) -> dict:
    return {
        "index": index,
        "name": name,
        "uuid": uuid,
        "pci_bus_id": pci_bus_id,
        "compute_cap": compute_cap,
        "driver_version": driver_version,
        "memory_total_mib": mib(memory_total),
        "memory_used_mib": mib(memory_used),
    }


# ---------------------------------------------------------------------------
# nvidia-smi --query-gpu (CSV)
# ---------------------------------------------------------------------------

def _header_fields(cells: list[str]) -> list[str] | None:
    """Field names if *cells* is a header row (``memory.total [MiB]`` -> ``memory.total``), else None."""
    names = []
    for cell in cells:
        match = _HEADER_CELL.match(cell.strip())
        if not match:
            return None
        names.append(match.group(1))
    return names


def parse_query_csv(text: str, fields: Sequence[str] = QUERY_FIELDS, header: bool | None = None) -> list[dict]:
    """Parse ``nvidia-smi --query-gpu`` CSV into one fact dict per GPU.

    ``fields`` names the columns of a file without header. ``header`` says whether the
    first line is a header (``index, name, ..., memory.total [MiB]``); ``None`` detects it.
    With a header, the columns are taken from it (extra columns are ignored, missing ones
    are ``None``) and units such as ``143771 MiB`` are understood.
    Raises ValueError on rows of the wrong width or values of the wrong shape."""
    rows = [row for row in csv.reader(io.StringIO(text), skipinitialspace=True) if any(c.strip() for c in row)]
    if not rows:
        return []
    columns = list(fields)
    detected = _header_fields(rows[0])
    if header is None:
        header = detected is not None
    if header:
        if detected is None:
            raise ValueError(f"not an nvidia-smi CSV header: {', '.join(rows[0])!r}")
        columns = detected
        rows = rows[1:]
    gpus = []
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"nvidia-smi CSV row has {len(row)} columns, expected {len(columns)}: {', '.join(row)!r}")
        cells = {name: clean(value) for name, value in zip(columns, row)}
        if cells.get("index") is None:
            raise ValueError(f"nvidia-smi CSV row without a GPU index: {', '.join(row)!r}")
        gpus.append(_gpu(
            _index(cells["index"]), cells.get("name"), cells.get("uuid"), cells.get("pci.bus_id"),
            cells.get("compute_cap"), cells.get("driver_version"), cells.get("memory.total"), cells.get("memory.used"),
        ))
    return gpus


# ---------------------------------------------------------------------------
# nvidia-smi -q -x (XML)
# ---------------------------------------------------------------------------

def _text(element: ET.Element, path: str) -> str | None:
    found = element.find(path)
    return None if found is None else clean(found.text)


def parse_query_xml(text: str) -> tuple[dict, list[dict]]:
    """Parse ``nvidia-smi -q -x`` into ``({driver_version, cuda_version}, [gpu, ...])``.

    The XML has no compute capability (nor a GPU index: GPUs are numbered in document order,
    as nvidia-smi numbers them), so ``compute_cap`` is ``None`` here; :func:`gather_gpus` fills
    it in from the CSV query. Unified memory (GB10) shows ``N/A`` and becomes ``None``.
    Raises ValueError if the text is not an ``nvidia_smi_log`` document."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"nvidia-smi XML does not parse: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"nvidia-smi XML root is <{root.tag}>, expected <nvidia_smi_log>")
    top = {"driver_version": _text(root, "driver_version"), "cuda_version": _text(root, "cuda_version")}
    gpus = []
    for position, element in enumerate(root.findall("gpu")):
        gpus.append(_gpu(
            position,
            _text(element, "product_name"),
            _text(element, "uuid"),
            _text(element, "pci/pci_bus_id") or clean(element.get("id")),
            _text(element, "compute_cap"),
            top["driver_version"],
            _text(element, "fb_memory_usage/total"),
            _text(element, "fb_memory_usage/used"),
        ))
    return top, gpus


def merge_compute_caps(xml_gpus: list[dict], csv_gpus: list[dict]) -> list[dict]:
    """The XML GPUs with ``index`` and ``compute_cap`` taken from the CSV row of the same UUID
    (else the same PCI bus id). Raises ValueError if the two outputs do not list the same GPUs."""
    if len(xml_gpus) != len(csv_gpus):
        raise ValueError(f"nvidia-smi -q -x lists {len(xml_gpus)} GPU(s) but --query-gpu lists {len(csv_gpus)}")
    merged = []
    for gpu in xml_gpus:
        match = next((c for c in csv_gpus if gpu["uuid"] and c["uuid"] == gpu["uuid"]), None)
        if match is None:
            match = next((c for c in csv_gpus if gpu["pci_bus_id"] and c["pci_bus_id"] == gpu["pci_bus_id"]), None)
        if match is None:
            raise ValueError(f"GPU {gpu['uuid'] or gpu['pci_bus_id']} of nvidia-smi -q -x is missing from --query-gpu")
        merged.append(dict(gpu, index=match["index"], compute_cap=gpu["compute_cap"] or match["compute_cap"]))
    return merged


# ---------------------------------------------------------------------------
# ibdev2netdev
# ---------------------------------------------------------------------------

def parse_ibdev2netdev(text: str) -> list[dict]:
    """``rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)`` lines as ``{hca, port, netdev, state}`` dicts.

    Raises ValueError on any other non-empty line (``ibdev2netdev -v`` output included)."""
    links = []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _IBDEV_LINE.match(line.strip())
        if not match:
            raise ValueError(f"unexpected ibdev2netdev line: {line.strip()!r}")
        links.append({"hca": match["hca"], "port": int(match["port"]), "netdev": match["netdev"],
                      "state": match["state"]})
    return links


# ---------------------------------------------------------------------------
# Running the tools
# ---------------------------------------------------------------------------

def _first_line(*texts: str) -> str:
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def run_tool(run: Runner, rank: str, tool: str, argv: list[str], codes: dict[int, str] | None = None) -> str:
    """stdout of *argv*; a CheckError naming *rank*, *tool* and its first line of output when it
    cannot be started or exits non-zero."""
    try:
        rc, out, err = run(argv)
    except OSError as exc:
        raise CheckError(rank, f"{tool} could not be run: {exc}") from None
    if rc != 0:
        meaning = (codes or {}).get(rc)
        detail = f"exit {rc}" + (f", {meaning}" if meaning else "")
        raise CheckError(rank, f"{tool} failed ({detail}): {_first_line(err, out)}")
    return out


def gather_gpus(run: Runner, rank: str, nvidia_smi: str, source: str = "csv") -> dict:
    """``{gpu_count, driver_version, cuda_version, gpus}`` read from nvidia-smi at path *nvidia_smi*."""
    if source not in ("csv", "xml"):
        raise CheckError(rank, f"unknown nvidia-smi source {source!r}, expected csv or xml")
    csv_out = run_tool(run, rank, "nvidia-smi", [nvidia_smi, *QUERY_ARGS], NVIDIA_SMI_EXIT_CODES)
    try:
        gpus = parse_query_csv(csv_out)
    except ValueError as exc:
        raise CheckError(rank, f"cannot parse nvidia-smi --query-gpu output: {exc}") from None
    top = {"driver_version": next((g["driver_version"] for g in gpus if g["driver_version"]), None),
           "cuda_version": None}
    if source == "xml":
        xml_out = run_tool(run, rank, "nvidia-smi", [nvidia_smi, *XML_ARGS], NVIDIA_SMI_EXIT_CODES)
        try:
            top, xml_gpus = parse_query_xml(xml_out)
            gpus = merge_compute_caps(xml_gpus, gpus)
        except ValueError as exc:
            raise CheckError(rank, f"cannot use nvidia-smi -q -x output: {exc}") from None
    return {"gpu_count": len(gpus), "driver_version": top["driver_version"], "cuda_version": top["cuda_version"],
            "gpus": gpus}


def gather_fabric(run: Runner, rank: str, ibdev2netdev: str) -> list[dict]:
    out = run_tool(run, rank, "ibdev2netdev", [ibdev2netdev])
    try:
        return parse_ibdev2netdev(out)
    except ValueError as exc:
        raise CheckError(rank, f"cannot parse ibdev2netdev output: {exc}") from None


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------

def _mismatch(rank: str, item: str, expected: object, actual: object) -> Mismatch:
    return Mismatch(rank=rank, item=item, expected=expected, actual=actual, expected_word="expected")


def check_gpus(rank: str, facts: dict, compute_capability: str | None, gpu_count: int | None,
               gpu_name: str | None) -> list[Mismatch]:
    """Every difference between the GPUs in *facts* and the expectations (``None`` skips one)."""
    found: list[Mismatch] = []
    if gpu_count is not None and facts["gpu_count"] != gpu_count:
        found.append(_mismatch(rank, "GPU count", gpu_count, facts["gpu_count"]))
    for gpu in facts["gpus"]:
        if compute_capability is not None and gpu["compute_cap"] != compute_capability:
            found.append(_mismatch(rank, f"GPU {gpu['index']} compute capability", compute_capability,
                                   gpu["compute_cap"]))
        if gpu_name is not None and gpu["name"] != gpu_name:
            found.append(_mismatch(rank, f"GPU {gpu['index']} name", gpu_name, gpu["name"]))
    return found


def _check_links(rank: str, kind: str, name: str, links: list[dict]) -> list[Mismatch]:
    if not links:
        return [_mismatch(rank, f"{kind} {name}", "Up", None)]
    found = []
    for link in links:
        if link["state"] != "Up":
            where = f"{kind} {name} port {link['port']}" if len(links) > 1 else f"{kind} {name}"
            found.append(_mismatch(rank, f"{where} link", "Up", link["state"]))
    return found


def check_fabric(rank: str, fabric: list[dict], netdevs: Sequence[str], hcas: Sequence[str]) -> list[Mismatch]:
    """Each expected netdev and HCA must be listed by ibdev2netdev with every port Up."""
    found: list[Mismatch] = []
    for netdev in netdevs:
        found += _check_links(rank, "netdev", netdev, [link for link in fabric if link["netdev"] == netdev])
    for hca in hcas:
        found += _check_links(rank, "HCA", hca, [link for link in fabric if link["hca"] == hca])
    return found


# ---------------------------------------------------------------------------
# Everything together
# ---------------------------------------------------------------------------

@dataclass
class Expectations:
    compute_capability: str | None = "12.1"
    gpu_count: int | None = 1
    gpu_name: str | None = None
    netdevs: list[str] = field(default_factory=list)
    hcas: list[str] = field(default_factory=list)

    def validate(self, rank: str) -> None:
        """The compute capability and the GPU count are always checked (fail closed): they
        cannot be switched off with ``None``."""
        if self.compute_capability is None or not _CC.match(str(self.compute_capability)):
            raise CheckError(rank, f"expected_compute_capability must look like 12.1, got {self.compute_capability!r}")
        if self.gpu_count is None or self.gpu_count < 0:
            raise CheckError(rank, f"expected_gpu_count must be a number of GPUs, got {self.gpu_count!r}")


@dataclass
class Report:
    facts: dict
    mismatches: list[Mismatch]
    warnings: list[str]


def gather(run: Runner, rank: str, expect: Expectations, nvidia_smi: str | None, ibdev2netdev: str | None,
           source: str = "csv", fabric: bool = True, nvidia_smi_name: str = "nvidia-smi",
           ibdev2netdev_name: str = "ibdev2netdev") -> Report:
    """Gather and check the rank's GPU and fabric facts.

    *nvidia_smi* / *ibdev2netdev* are the resolved tool paths, ``None`` when not found
    (*..._name* is what was looked for). A missing nvidia-smi always fails; a missing
    ibdev2netdev fails only when netdevs or HCAs are expected, else fabric is ``None`` with a
    warning. ibdev2netdev is not run at all when nothing is expected of it and *fabric* is false."""
    expect.validate(rank)
    if nvidia_smi is None:
        raise CheckError(rank, f"nvidia-smi not found (looked for {nvidia_smi_name!r})")
    facts = gather_gpus(run, rank, nvidia_smi, source)
    warnings: list[str] = []
    links: list[dict] | None = None
    wants_fabric = bool(expect.netdevs or expect.hcas)
    if wants_fabric or fabric:
        if ibdev2netdev is None:
            if wants_fabric:
                raise CheckError(rank, f"ibdev2netdev not found (looked for {ibdev2netdev_name!r}), "
                                       "but netdevs or HCAs are expected")
            warnings.append(f"rank {rank}: ibdev2netdev not found (looked for {ibdev2netdev_name!r}); "
                            "fabric facts are not available")
        else:
            links = gather_fabric(run, rank, ibdev2netdev)
    facts["fabric"] = links
    mismatches = check_gpus(rank, facts, expect.compute_capability, expect.gpu_count, expect.gpu_name)
    if links is not None:
        mismatches += check_fabric(rank, links, expect.netdevs, expect.hcas)
    return Report(facts=facts, mismatches=mismatches, warnings=warnings)


# The expectations and tools of a rank's GPU check: options of gb10.dspark.gpu_facts and gb10.dspark.rank_preflight
# (documented once, in doc_fragments/_gpu_check.py), turned into :class:`Expectations` and a :func:`gather` by
# :func:`check_module`.
GPU_OPTIONS = {
    "expected_compute_capability": {"type": "str", "default": "12.1"},
    "expected_gpu_count": {"type": "int", "default": 1},
    "expected_gpu_name": {"type": "str"},
    "expected_netdevs": {"type": "list", "elements": "str", "default": []},
    "expected_hcas": {"type": "list", "elements": "str", "default": []},
    "nvidia_smi_path": {"type": "str", "default": "nvidia-smi"},
    "ibdev2netdev_path": {"type": "str", "default": "ibdev2netdev"},
}


def check_module(module, params: dict, rank: str, source: str = "csv", fabric: bool = True) -> Report:
    """:func:`gather` on the rank ``module`` (an ``AnsibleModule``) runs on, with the options of
    :data:`GPU_OPTIONS` in ``params``: the tools found on the rank's PATH, run as argv lists."""
    expect = Expectations(
        compute_capability=params["expected_compute_capability"],
        gpu_count=params["expected_gpu_count"],
        gpu_name=params["expected_gpu_name"],
        netdevs=params["expected_netdevs"] or [],
        hcas=params["expected_hcas"] or [],
    )
    return gather(
        lambda argv: module.run_command(argv, handle_exceptions=False),
        rank,
        expect,
        nvidia_smi=module.get_bin_path(params["nvidia_smi_path"], required=False),
        ibdev2netdev=module.get_bin_path(params["ibdev2netdev_path"], required=False),
        source=source,
        fabric=fabric,
        nvidia_smi_name=params["nvidia_smi_path"],
        ibdev2netdev_name=params["ibdev2netdev_path"],
    )
