"""Per-rank fake hardware state: schema, defaults, validation, atomic writes.

Two files live in the rank's hardware directory (see :func:`hw_dir`):

``gpu.json``::

    {
      "driver_version": "580.126.09",
      "cuda_version": "13.0",
      "sim_profile": "gb10",          # informational: gb10 | h200 | custom
      "sim_seed": 0,                  # seed the gb10 identity was derived from
      "gpus": [ {<gpu>}, ... ]        # [] = "No devices were found"
    }

  where each ``<gpu>`` has the keys of :data:`GPU_FIELDS` (required ones must be
  present; optional ones get their default when loaded).  ``null`` means "not
  available" (``[N/A]`` in CSV, ``N/A`` in XML); GB10 memory is unified, so its
  ``memory_*_mib`` are null and the table says ``Not Supported``.

``ib.json``::

    {"devices": [{"hca": "rocep1s0f1", "port": 1,
                  "netdev": "enp1s0f1np1", "state": "auto"}, ...]}

  ``state`` is ``Up``, ``Down`` or ``auto`` (Up iff the netdev exists and is
  operationally up in the caller's network namespace).

Loading raises :class:`StateMissing` if the file does not exist and
:class:`StateError` if it is unreadable or invalid; writing validates first and
replaces the file atomically (temp file + ``os.replace``).
"""

import copy
import hashlib
import json
import os
import re
import tempfile

ENV_HW_DIR = "DSPARK_SIM_HW_DIR"
DEFAULT_HW_DIR = "/var/lib/dspark-sim/hw"
GPU_FILE = "gpu.json"
IB_FILE = "ib.json"

LINK_STATES = ("auto", "Up", "Down")

GB10_DRIVER_VERSION = "580.126.09"
GB10_CUDA_VERSION = "13.0"


class StateError(Exception):
    """The state is unreadable or does not match the schema."""


class StateMissing(StateError):
    """The state file does not exist."""


def hw_dir(explicit=None, environ=None):
    """The hardware state directory: *explicit*, else $DSPARK_SIM_HW_DIR, else the default."""
    if explicit:
        return str(explicit)
    env = os.environ if environ is None else environ
    return env.get(ENV_HW_DIR) or DEFAULT_HW_DIR


# ---------------------------------------------------------------------------
# GPU schema
# ---------------------------------------------------------------------------

_REQUIRED = object()

# key -> (type, nullable, default).  type is one of int, float, str, bool,
# "clocks" (list of {"mem_mhz": int|null, "graphics_mhz": [int]}) or
# "overrides" (dict of XML path -> str).
GPU_FIELDS = {
    "index": (int, False, _REQUIRED),
    "name": (str, False, _REQUIRED),
    "uuid": (str, False, _REQUIRED),
    "pci_bus_id": (str, False, _REQUIRED),
    "compute_cap": (str, False, _REQUIRED),
    "architecture": (str, False, _REQUIRED),
    "memory_total_mib": (int, True, _REQUIRED),
    "temperature": (int, False, _REQUIRED),
    "power_draw": (float, False, _REQUIRED),
    "power_limit": (float, True, _REQUIRED),
    "persistence_mode": (bool, False, _REQUIRED),
    "mig_mode": (bool, True, _REQUIRED),
    "brand": (str, False, "NVIDIA"),
    "memory_used_mib": (int, True, None),
    "memory_reserved_mib": (int, True, None),
    "memory_free_mib": (int, True, None),  # null: total - reserved - used
    "memory_temperature": (int, True, None),
    "ecc_mode": (bool, True, None),
    "pstate": (str, False, "P8"),
    "fan_speed": (int, True, None),
    "utilization_gpu": (int, False, 0),
    "utilization_memory": (int, True, None),
    "compute_mode": (str, False, "Default"),
    "display_active": (bool, False, False),
    "addressing_mode": (str, False, "None"),
    "serial": (str, True, None),
    "vbios_version": (str, True, None),
    "minor_number": (int, False, 0),
    "pci_device_id": (str, True, None),
    "pci_sub_system_id": (str, True, None),
    "pcie_link_gen": (int, True, None),
    "pcie_link_width": (int, True, None),
    "graphics_clock_mhz": (int, True, None),
    "sm_clock_mhz": (int, True, None),
    "mem_clock_mhz": (int, True, None),
    "video_clock_mhz": (int, True, None),
    "max_graphics_clock_mhz": (int, True, None),
    "max_sm_clock_mhz": (int, True, None),
    "max_mem_clock_mhz": (int, True, None),
    "max_video_clock_mhz": (int, True, None),
    "supported_clocks": ("clocks", False, []),
    "cpu_affinity": (str, False, "N/A"),
    "numa_affinity": (str, False, "N/A"),
    "gpu_numa_id": (str, False, "N/A"),
    "xml_overrides": ("overrides", False, {}),
}

TOP_FIELDS = {
    "driver_version": (str, False, _REQUIRED),
    "cuda_version": (str, False, _REQUIRED),
    "sim_profile": (str, False, "custom"),
    "sim_seed": ("seed", True, None),
}

_UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_BUS_ID_RE = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
_CC_RE = re.compile(r"^[0-9]+\.[0-9]+$")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*$")
_HCA_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_NETDEV_RE = re.compile(r"^[^/\s:]{1,15}$")


def _type_ok(value, kind):
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if kind == "seed":
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    if kind == "clocks":
        if not isinstance(value, list):
            return False
        for entry in value:
            if not isinstance(entry, dict):
                return False
            mem = entry.get("mem_mhz")
            if mem is not None and not _type_ok(mem, int):
                return False
            gfx = entry.get("graphics_mhz", [])
            if not isinstance(gfx, list) or not all(_type_ok(g, int) for g in gfx):
                return False
        return True
    if kind == "overrides":
        return isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    raise AssertionError(kind)


def _type_name(kind, nullable):
    name = {bool: "boolean", int: "integer", float: "number", str: "string",
            "seed": "integer or string", "clocks": "list of clock tables",
            "overrides": "object of strings"}[kind]
    return name + (" or null" if nullable else "")


def _check_fields(obj, spec, where):
    out = dict(obj)
    for key, (kind, nullable, default) in spec.items():
        if key not in obj:
            if default is _REQUIRED:
                raise StateError("%s: missing required key %r" % (where, key))
            out[key] = copy.deepcopy(default)
            continue
        value = obj[key]
        if value is None:
            if not nullable:
                raise StateError("%s.%s: must not be null" % (where, key))
            continue
        if not _type_ok(value, kind):
            raise StateError("%s.%s: expected %s, got %s" % (
                where, key, _type_name(kind, nullable), json.dumps(value)))
    return out


def validate_gpu_state(state):
    """Check *state* (a parsed gpu.json) and return a normalised deep copy.

    Optional keys are filled with their defaults.  Raises StateError.
    """
    if not isinstance(state, dict):
        raise StateError("gpu state: top level must be an object")
    out = _check_fields(state, TOP_FIELDS, "gpu state")
    if not _VERSION_RE.match(out["driver_version"]):
        raise StateError("gpu state.driver_version: not a version: %r" % out["driver_version"])
    if not _VERSION_RE.match(out["cuda_version"]):
        raise StateError("gpu state.cuda_version: not a version: %r" % out["cuda_version"])
    gpus = state.get("gpus")
    if not isinstance(gpus, list):
        raise StateError("gpu state: 'gpus' must be a list")
    seen_index, seen_uuid = set(), set()
    norm = []
    for i, gpu in enumerate(gpus):
        where = "gpus[%d]" % i
        if not isinstance(gpu, dict):
            raise StateError("%s: must be an object" % where)
        g = _check_fields(gpu, GPU_FIELDS, where)
        if g["index"] < 0 or g["index"] in seen_index:
            raise StateError("%s.index: negative or duplicate index %d" % (where, g["index"]))
        seen_index.add(g["index"])
        if not _UUID_RE.match(g["uuid"]):
            raise StateError("%s.uuid: expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got %r"
                             % (where, g["uuid"]))
        if g["uuid"] in seen_uuid:
            raise StateError("%s.uuid: duplicate %s" % (where, g["uuid"]))
        seen_uuid.add(g["uuid"])
        if not _BUS_ID_RE.match(g["pci_bus_id"]):
            raise StateError("%s.pci_bus_id: expected DDDDDDDD:BB:DD.F (upper-case hex), got %r"
                             % (where, g["pci_bus_id"]))
        if not _CC_RE.match(g["compute_cap"]):
            raise StateError("%s.compute_cap: expected MAJOR.MINOR, got %r" % (where, g["compute_cap"]))
        if not g["name"].strip():
            raise StateError("%s.name: empty" % where)
        if not re.match(r"^P([0-9]|1[0-5])$", g["pstate"]):
            raise StateError("%s.pstate: expected P0..P15, got %r" % (where, g["pstate"]))
        for key in ("memory_total_mib", "memory_used_mib", "memory_reserved_mib", "memory_free_mib"):
            if g[key] is not None and g[key] < 0:
                raise StateError("%s.%s: negative" % (where, key))
        norm.append(g)
    out["gpus"] = sorted(norm, key=lambda g: g["index"])
    return out


def validate_ib_state(state):
    """Check *state* (a parsed ib.json) and return a normalised copy. Raises StateError."""
    if not isinstance(state, dict):
        raise StateError("ib state: top level must be an object")
    devices = state.get("devices")
    if not isinstance(devices, list):
        raise StateError("ib state: 'devices' must be a list")
    out = dict(state)
    norm, seen = [], set()
    for i, dev in enumerate(devices):
        where = "devices[%d]" % i
        if not isinstance(dev, dict):
            raise StateError("%s: must be an object" % where)
        for key in ("hca", "port", "netdev", "state"):
            if key not in dev:
                raise StateError("%s: missing required key %r" % (where, key))
        d = dict(dev)
        if not isinstance(d["hca"], str) or not _HCA_RE.match(d["hca"]):
            raise StateError("%s.hca: invalid device name %r" % (where, d["hca"]))
        if not _type_ok(d["port"], int) or d["port"] < 1:
            raise StateError("%s.port: expected a port number >= 1, got %r" % (where, d["port"]))
        if not isinstance(d["netdev"], str) or not _NETDEV_RE.match(d["netdev"]):
            raise StateError("%s.netdev: invalid interface name %r" % (where, d["netdev"]))
        if d["state"] not in LINK_STATES:
            raise StateError("%s.state: expected one of %s, got %r"
                             % (where, "/".join(LINK_STATES), d["state"]))
        for key in ("pci", "fw_ver", "board_id", "part_number", "description"):
            if key in d and not isinstance(d[key], str):
                raise StateError("%s.%s: expected string" % (where, key))
        if (d["hca"], d["port"]) in seen:
            raise StateError("%s: duplicate %s port %d" % (where, d["hca"], d["port"]))
        seen.add((d["hca"], d["port"]))
        norm.append(d)
    out["devices"] = norm
    return out


# ---------------------------------------------------------------------------
# Defaults
# ---------------------------------------------------------------------------

def _clock_range(top, bottom, step=15):
    return list(range(top, bottom - 1, -step))


def gb10_identity(seed):
    """Deterministic per-seed identity values for a GB10 (uuid, serial, ...)."""
    digest = hashlib.sha256(("dspark-sim/gb10/%s" % (seed,)).encode()).hexdigest()
    uuid = "GPU-%s-%s-%s-%s-%s" % (digest[0:8], digest[8:12], digest[12:16],
                                   digest[16:20], digest[20:32])
    n = int(digest[32:48], 16)
    return {
        "uuid": uuid,
        "serial": "1%012d" % (n % 10 ** 12),
        "temperature": 34 + (n >> 40) % 9,
        "power_draw": round(3.0 + ((n >> 20) % 900) / 100.0, 2),
    }


def default_gb10_gpu_state(seed=0):
    """A gpu.json for one DGX Spark: one NVIDIA GB10, unified memory.

    Values that differ between real machines (UUID, serial, idle temperature and
    power) are derived deterministically from *seed* (use the rank number).
    """
    ident = gb10_identity(seed)
    gpu = {
        "index": 0,
        "name": "NVIDIA GB10",
        "brand": "NVIDIA",
        "architecture": "Blackwell",
        "uuid": ident["uuid"],
        "serial": ident["serial"],
        "pci_bus_id": "0000000F:01:00.0",
        "pci_device_id": "2E1210DE",
        "pci_sub_system_id": "000010DE",
        "compute_cap": "12.1",
        "memory_total_mib": None,
        "memory_used_mib": None,
        "memory_reserved_mib": None,
        "memory_free_mib": None,
        "temperature": ident["temperature"],
        "memory_temperature": None,
        "power_draw": ident["power_draw"],
        "power_limit": None,
        "persistence_mode": True,
        "mig_mode": None,
        "ecc_mode": None,
        "pstate": "P8",
        "fan_speed": None,
        "utilization_gpu": 0,
        "utilization_memory": None,
        "compute_mode": "Default",
        "display_active": False,
        "addressing_mode": "ATS",
        "vbios_version": None,
        "minor_number": 0,
        "pcie_link_gen": 1,
        "pcie_link_width": 1,
        "graphics_clock_mhz": 208,
        "sm_clock_mhz": 208,
        "mem_clock_mhz": None,
        "video_clock_mhz": 495,
        "max_graphics_clock_mhz": 2418,
        "max_sm_clock_mhz": 2418,
        "max_mem_clock_mhz": None,
        "max_video_clock_mhz": 1905,
        "supported_clocks": [{"mem_mhz": None, "graphics_mhz": _clock_range(2418, 208)}],
        "cpu_affinity": "0-19",
        "numa_affinity": "0",
        "gpu_numa_id": "N/A",
        "xml_overrides": {},
    }
    return {
        "driver_version": GB10_DRIVER_VERSION,
        "cuda_version": GB10_CUDA_VERSION,
        "sim_profile": "gb10",
        "sim_seed": seed,
        "gpus": [gpu],
    }


def h200_state():
    """A gpu.json mirroring the captured H200 (shared/fixtures/nvidia-smi-h200)."""
    overrides = {
        "display_attached": "Yes",
        "pdi": "0xe874e04ceb34ea60",
        "board_part_number": "692-2G520-0282-001",
        "gpu_part_number": "2335-895-A1",
        "platformInfo/module_id": "5",
        "inforom_version/img_version": "G520.0282.02.02",
        "inforom_version/oem_object": "2.1",
        "inforom_version/ecc_object": "7.16",
        "c2c_mode": "Disabled",
        "gpu_virtualization_mode/virtualization_mode": "Pass-Through",
        "pci/replay_counter": "2",
        "pci/tx_util": "1712 KB/s",
        "pci/rx_util": "441 KB/s",
        "bar1_memory_usage/total": "262144 MiB",
        "bar1_memory_usage/used": "1 MiB",
        "bar1_memory_usage/free": "262143 MiB",
        "remapped_rows/row_remapper_histogram/row_remapper_histogram_max": "3072 bank(s)",
        "temperature/gpu_temp_tlimit": "50 C",
        "temperature/gpu_temp_max_tlimit_threshold": "-8 C",
        "temperature/gpu_temp_slow_tlimit_threshold": "-2 C",
        "temperature/gpu_temp_max_gpu_tlimit_threshold": "0 C",
        "temperature/gpu_temp_max_mem_tlimit_threshold": "0 C",
        "gpu_power_readings/average_power_draw": "127.54 W",
        "gpu_power_readings/instant_power_draw": "127.89 W",
        "gpu_power_readings/min_power_limit": "200.00 W",
        "gpu_power_readings/max_power_limit": "700.00 W",
        "gpu_memory_power_readings/average_power_draw": "41.07 W",
    }
    gpu = {
        "index": 0,
        "name": "NVIDIA H200",
        "brand": "NVIDIA",
        "architecture": "Hopper",
        "uuid": "GPU-6402d0ac-737c-5e9b-43f4-f40a3f72316e",
        "serial": "1654024030426",
        "pci_bus_id": "00000000:00:06.0",
        "pci_device_id": "233510DE",
        "pci_sub_system_id": "18BF10DE",
        "compute_cap": "9.0",
        "memory_total_mib": 143771,
        "memory_used_mib": 0,
        "memory_reserved_mib": 616,
        "memory_free_mib": 143156,
        "temperature": 38,
        "memory_temperature": 38,
        "power_draw": 127.52,
        "power_limit": 700.0,
        "persistence_mode": True,
        "mig_mode": False,
        "ecc_mode": True,
        "pstate": "P0",
        "fan_speed": None,
        "utilization_gpu": 0,
        "utilization_memory": 0,
        "compute_mode": "Default",
        "display_active": False,
        "addressing_mode": "None",
        "vbios_version": "96.00.A5.00.1A",
        "minor_number": 0,
        "pcie_link_gen": 5,
        "pcie_link_width": 16,
        "graphics_clock_mhz": 1980,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 3201,
        "video_clock_mhz": 1545,
        "max_graphics_clock_mhz": 1980,
        "max_sm_clock_mhz": 1980,
        "max_mem_clock_mhz": 3201,
        "max_video_clock_mhz": 1545,
        "supported_clocks": [
            {"mem_mhz": 3201, "graphics_mhz": _clock_range(1980, 345)},
            {"mem_mhz": 2201, "graphics_mhz": _clock_range(1980, 345)},
        ],
        "cpu_affinity": "0-15",
        "numa_affinity": "0",
        "gpu_numa_id": "N/A",
        "xml_overrides": overrides,
    }
    return {
        "driver_version": "580.159.04",
        "cuda_version": "13.0",
        "sim_profile": "h200",
        "sim_seed": None,
        "gpus": [gpu],
    }


_TWIN_HCA_RE = re.compile(r"^roce(p[0-9]+s[0-9]+f[0-9]+)$")
_TWIN_NETDEV_RE = re.compile(r"^en(p[0-9]+s[0-9]+f[0-9]+np[0-9]+)$")


def twin_names(hca, netdev):
    """The second logical port's names of a CX-7 port on a Spark, or None.

    ``rocep1s0f1``/``enp1s0f1np1`` -> ``roceP2p1s0f1``/``enP2p1s0f1np1``.
    """
    mh, mn = _TWIN_HCA_RE.match(hca), _TWIN_NETDEV_RE.match(netdev)
    if not (mh and mn):
        return None
    return "roceP2" + mh.group(1), "enP2" + mn.group(1)


def default_ib_state(hca, netdev, twin_hca=None, twin_netdev=None, port=1, state="auto"):
    """An ib.json with the given RoCE device and, if given, its twin logical port."""
    devices = [{"hca": hca, "port": port, "netdev": netdev, "state": state}]
    if (twin_hca is None) != (twin_netdev is None):
        raise StateError("twin_hca and twin_netdev must be given together")
    if twin_hca is not None:
        devices.append({"hca": twin_hca, "port": port, "netdev": twin_netdev, "state": state})
    return validate_ib_state({"devices": devices})


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------

def _load_json(path):
    try:
        with open(path, "r", encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise StateMissing("%s: no such file" % path) from None
    except OSError as exc:
        raise StateError("%s: cannot read: %s" % (path, exc.strerror or exc)) from None
    except UnicodeDecodeError:
        raise StateError("%s: not UTF-8 text" % path) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StateError("%s: invalid JSON: %s" % (path, exc)) from None


def atomic_write_text(path, text, mode=0o644):
    """Write *text* to *path* atomically: temp file in the same dir, fsync, chmod, rename."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_json(path, obj):
    """Write *obj* as JSON to *path* atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def gpu_path(directory=None):
    return os.path.join(hw_dir(directory), GPU_FILE)


def ib_path(directory=None):
    return os.path.join(hw_dir(directory), IB_FILE)


def load_gpu_state(directory=None):
    path = gpu_path(directory)
    obj = _load_json(path)
    try:
        return validate_gpu_state(obj)
    except StateMissing:
        raise
    except StateError as exc:
        raise StateError("%s: %s" % (path, exc)) from None


def load_ib_state(directory=None):
    path = ib_path(directory)
    obj = _load_json(path)
    try:
        return validate_ib_state(obj)
    except StateError as exc:
        raise StateError("%s: %s" % (path, exc)) from None


def write_gpu_state(directory, state):
    """Validate and atomically write gpu.json; returns the normalised state."""
    norm = validate_gpu_state(state)
    atomic_write_json(gpu_path(directory), norm)
    return norm


def write_ib_state(directory, state):
    """Validate and atomically write ib.json; returns the normalised state."""
    norm = validate_ib_state(state)
    atomic_write_json(ib_path(directory), norm)
    return norm


# ---------------------------------------------------------------------------
# Edits used by the CLI
# ---------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on", "enabled"}
_FALSE = {"0", "false", "no", "off", "disabled"}
_NULL = {"null", "none", "n/a", "[n/a]"}


def coerce_field(key, text):
    """Parse the string *text* for GPU field or top-level key *key*."""
    spec = GPU_FIELDS.get(key) or TOP_FIELDS.get(key)
    if spec is None:
        raise StateError("unknown GPU field %r (known: %s)" % (
            key, ", ".join(sorted(set(GPU_FIELDS) | set(TOP_FIELDS)))))
    kind, nullable, _unused = spec
    low = text.strip().lower()
    if nullable and low in _NULL:
        return None
    try:
        if kind is bool:
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(text)
        if kind is int:
            return int(text, 0)
        if kind is float:
            return float(text)
        if kind is str:
            return text
        if kind == "seed":
            return int(text) if re.match(r"^-?[0-9]+$", text) else text
    except ValueError:
        raise StateError("field %s: cannot parse %r as %s" % (key, text, _type_name(kind, nullable))) from None
    raise StateError("field %s cannot be set from the command line" % key)


def set_gpu_field(state, key, value, index=0):
    """Return a copy of *state* with *key* set (top-level keys ignore *index*)."""
    new = copy.deepcopy(state)
    if key in TOP_FIELDS:
        new[key] = value
    else:
        matches = [g for g in new["gpus"] if g["index"] == index]
        if not matches:
            raise StateError("no GPU with index %d" % index)
        matches[0][key] = value
        if new.get("sim_profile") in ("gb10", "h200"):
            new["sim_profile"] = "custom"
    return validate_gpu_state(new)


def set_link_state(state, hca, link_state, port=None):
    """Return a copy of ib *state* with *hca* (optionally one *port*) set to *link_state*."""
    canon = {s.lower(): s for s in LINK_STATES}.get(str(link_state).lower())
    if canon is None:
        raise StateError("link state must be one of %s, got %r" % ("/".join(LINK_STATES), link_state))
    new = copy.deepcopy(state)
    hit = False
    for dev in new["devices"]:
        if dev["hca"] == hca and (port is None or dev["port"] == port):
            dev["state"] = canon
            hit = True
    if not hit:
        raise StateError("no InfiniBand device %s%s in state (have: %s)" % (
            hca, "" if port is None else " port %d" % port,
            ", ".join("%s/%d" % (d["hca"], d["port"]) for d in new["devices"]) or "none"))
    return validate_ib_state(new)
