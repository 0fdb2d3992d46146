"""A fake ``nvidia-smi`` answering from the rank's gpu.json.

Output layouts follow the real tool (driver 580): the default table, ``-L``,
``--query-gpu=... --format=csv[,noheader][,nounits]``, ``-q`` (text) and
``-q -x`` (XML, nvsmi_device_v13 element structure) and ``topo -m``.
Unavailable values print as ``[N/A]`` (CSV) / ``N/A`` (XML, text); a GPU
without its own framebuffer (GB10 unified memory) shows ``Not Supported`` in
the table's Memory-Usage column.

Exit codes mirror nvidia-smi: 0 ok, 2 invalid argument or field, 6 no devices
found, 9 driver unreachable (missing or malformed state), 255 unknown error.
"""

import hashlib
import sys
import time

from ._tool import run_tool
from . import state as hwstate

EXIT_OK = 0
EXIT_INVALID_ARG = 2
EXIT_NOT_FOUND = 6
EXIT_NO_DRIVER = 9
EXIT_UNKNOWN = 255

NO_DEVICES = "No devices were found"
DRIVER_FAILURE = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                  "Make sure that the latest NVIDIA driver is installed and running.")
INVALID_COMBINATION = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


class UsageError(Exception):
    def __init__(self, message, code=EXIT_INVALID_ARG):
        Exception.__init__(self, message)
        self.code = code


class Context(object):
    """What every renderer needs: the state, the selected GPUs and 'now'."""

    def __init__(self, top, gpus, now=None):
        self.top = top
        self.all_gpus = top["gpus"]
        self.gpus = gpus
        self.now = time.time() if now is None else now

    @property
    def timestamp(self):
        t = time.localtime(self.now)
        return "%s %s %2d %02d:%02d:%02d %d" % (
            _DAYS[t.tm_wday], _MONTHS[t.tm_mon - 1], t.tm_mday,
            t.tm_hour, t.tm_min, t.tm_sec, t.tm_year)

    @property
    def timestamp_csv(self):
        t = time.localtime(self.now)
        ms = int((self.now - int(self.now)) * 1000)
        return "%04d/%02d/%02d %02d:%02d:%02d.%03d" % (
            t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ms)


# ---------------------------------------------------------------------------
# Derived values
# ---------------------------------------------------------------------------

def _na(value, fmt="%s"):
    return "N/A" if value is None else fmt % value


def _ed(flag):
    return "N/A" if flag is None else ("Enabled" if flag else "Disabled")


def memory_values(g):
    """(total, reserved, used, free) in MiB; all None for unified memory."""
    total = g["memory_total_mib"]
    if total is None:
        return None, None, None, None
    reserved = g.get("memory_reserved_mib") or 0
    used = g.get("memory_used_mib") or 0
    free = g.get("memory_free_mib")
    if free is None:
        free = max(total - reserved - used, 0)
    return total, reserved, used, free


def _bus_parts(g):
    dom, bus, devfn = g["pci_bus_id"].split(":")
    dev, fn = devfn.split(".")
    return dom, bus, dev, fn


def _pdi(g):
    return "0x" + hashlib.sha256(("pdi/" + g["uuid"]).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------
# Default table
# ---------------------------------------------------------------------------

_SEP_FULL = "+" + "-" * 89 + "+"
_SEP_GPU = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
_TABLE_HEAD = [
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                        |               MIG M. |",
    "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
]
_PROCESSES = [
    _SEP_FULL,
    "| Processes:" + " " * 78 + "|",
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|" + "=" * 89 + "|",
    "|  No running processes found" + " " * 61 + "|",
    _SEP_FULL,
]


def _short_name(name, width=28):
    return name if len(name) <= width else name[:width - 3] + "..."


def _gpu_rows(g):
    pm = "On" if g["persistence_mode"] else "Off"
    disp = "On" if g["display_active"] else "Off"
    if g["ecc_mode"] is None:
        ecc = "N/A"
    elif g["ecc_mode"]:
        ecc = "0"
    else:
        ecc = "Off"
    row1 = "|%4d  %-29s%4s  |%19s %3s |%21s |" % (
        g["index"], _short_name(g["name"]), pm, g["pci_bus_id"], disp, ecc)

    fan = "N/A" if g["fan_speed"] is None else "%d%%" % g["fan_speed"]
    cap = "N/A " if g["power_limit"] is None else "%dW" % int(g["power_limit"])
    seg1 = " %3s%6s%6s%16s / %5s " % (fan, "%dC" % g["temperature"], g["pstate"],
                                      "%dW" % int(g["power_draw"]), cap)
    total, _unused, used, _unused = memory_values(g)
    if total is None:
        seg2 = " %-23s" % "Not Supported"
    else:
        seg2 = "%8dMiB / %6dMiB " % (used, total)
    seg3 = "%8s%13s " % ("%d%%" % g["utilization_gpu"], g["compute_mode"])
    row2 = "|%s|%s|%s|" % (seg1, seg2, seg3)

    row3 = "|%s|%s|%21s |" % (" " * 41, " " * 24, _ed(g["mig_mode"]))
    return [row1, row2, row3]


def render_table(ctx):
    ver = ctx.top["driver_version"]
    lines = [ctx.timestamp + "       ", _SEP_FULL,
             "| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|"
             % (ver, ver, ctx.top["cuda_version"]),
             _SEP_GPU]
    lines += _TABLE_HEAD
    for g in ctx.gpus:
        lines += _gpu_rows(g)
        lines.append(_SEP_GPU)
    lines.append("")
    lines += _PROCESSES
    return "\n".join(lines) + "\n"


def render_list(ctx):
    return "".join("GPU %d: %s (UUID: %s)\n" % (g["index"], g["name"], g["uuid"]) for g in ctx.gpus)


# ---------------------------------------------------------------------------
# --query-gpu
# ---------------------------------------------------------------------------

def _hexfield(value, width):
    return None if value is None else "0x%0*X" % (width, int(value, 16))


def _power(value):
    return None if value is None else "%.2f" % value


# (names, unit, getter(ctx, gpu)) -- a getter returning None prints [N/A].
_GPU_FIELDS = [
    (("timestamp",), None, lambda c, g: c.timestamp_csv),
    (("driver_version",), None, lambda c, g: c.top["driver_version"]),
    (("count",), None, lambda c, g: len(c.all_gpus)),
    (("name", "gpu_name"), None, lambda c, g: g["name"]),
    (("serial", "gpu_serial"), None, lambda c, g: g["serial"]),
    (("uuid", "gpu_uuid"), None, lambda c, g: g["uuid"]),
    (("pci.bus_id", "gpu_bus_id"), None, lambda c, g: g["pci_bus_id"]),
    (("pci.domain",), None, lambda c, g: _hexfield(_bus_parts(g)[0], 4)),
    (("pci.bus",), None, lambda c, g: _hexfield(_bus_parts(g)[1], 2)),
    (("pci.device",), None, lambda c, g: _hexfield(_bus_parts(g)[2], 2)),
    (("pci.device_id",), None, lambda c, g: _hexfield(g["pci_device_id"], 8)),
    (("pci.sub_device_id",), None, lambda c, g: _hexfield(g["pci_sub_system_id"], 8)),
    (("pcie.link.gen.current", "pcie.link.gen.gpucurrent"), None, lambda c, g: g["pcie_link_gen"]),
    (("pcie.link.gen.max", "pcie.link.gen.gpumax"), None, lambda c, g: g["pcie_link_gen"]),
    (("pcie.link.width.current",), None, lambda c, g: g["pcie_link_width"]),
    (("pcie.link.width.max",), None, lambda c, g: g["pcie_link_width"]),
    (("index",), None, lambda c, g: g["index"]),
    (("display_active",), None, lambda c, g: _ed(g["display_active"])),
    (("persistence_mode",), None, lambda c, g: _ed(g["persistence_mode"])),
    (("addressing_mode",), None, lambda c, g: g["addressing_mode"]),
    (("vbios_version",), None, lambda c, g: g["vbios_version"]),
    (("compute_cap",), None, lambda c, g: g["compute_cap"]),
    (("compute_mode",), None, lambda c, g: g["compute_mode"]),
    (("pstate",), None, lambda c, g: g["pstate"]),
    (("fan.speed",), "%", lambda c, g: g["fan_speed"]),
    (("memory.total",), "MiB", lambda c, g: memory_values(g)[0]),
    (("memory.reserved",), "MiB", lambda c, g: memory_values(g)[1]),
    (("memory.used",), "MiB", lambda c, g: memory_values(g)[2]),
    (("memory.free",), "MiB", lambda c, g: memory_values(g)[3]),
    (("utilization.gpu",), "%", lambda c, g: g["utilization_gpu"]),
    (("utilization.memory",), "%", lambda c, g: g["utilization_memory"]),
    (("temperature.gpu",), None, lambda c, g: g["temperature"]),
    (("temperature.memory",), None, lambda c, g: g["memory_temperature"]),
    (("power.draw",), "W", lambda c, g: _power(g["power_draw"])),
    (("power.draw.average",), "W", lambda c, g: _power(g["power_draw"])),
    (("power.draw.instant",), "W", lambda c, g: _power(g["power_draw"])),
    (("power.limit",), "W", lambda c, g: _power(g["power_limit"])),
    (("enforced.power.limit",), "W", lambda c, g: _power(g["power_limit"])),
    (("power.default_limit",), "W", lambda c, g: _power(g["power_limit"])),
    (("clocks.current.graphics", "clocks.gr"), "MHz", lambda c, g: g["graphics_clock_mhz"]),
    (("clocks.current.sm", "clocks.sm"), "MHz", lambda c, g: g["sm_clock_mhz"]),
    (("clocks.current.memory", "clocks.mem"), "MHz", lambda c, g: g["mem_clock_mhz"]),
    (("clocks.current.video", "clocks.video"), "MHz", lambda c, g: g["video_clock_mhz"]),
    (("clocks.max.graphics", "clocks.max.gr"), "MHz", lambda c, g: g["max_graphics_clock_mhz"]),
    (("clocks.max.sm",), "MHz", lambda c, g: g["max_sm_clock_mhz"]),
    (("clocks.max.memory", "clocks.max.mem"), "MHz", lambda c, g: g["max_mem_clock_mhz"]),
    (("mig.mode.current",), None, lambda c, g: _ed(g["mig_mode"])),
    (("mig.mode.pending",), None, lambda c, g: _ed(g["mig_mode"])),
    (("ecc.mode.current",), None, lambda c, g: _ed(g["ecc_mode"])),
    (("ecc.mode.pending",), None, lambda c, g: _ed(g["ecc_mode"])),
]
GPU_QUERY_FIELDS = {name: (unit, getter) for names, unit, getter in _GPU_FIELDS for name in names}

_APP_FIELDS = {
    "timestamp": None, "gpu_name": None, "gpu_bus_id": None, "gpu_serial": None,
    "gpu_uuid": None, "pid": None, "process_name": None, "name": None,
    "used_gpu_memory": "MiB", "used_memory": "MiB",
}


def _split_fields(spec):
    return [f.strip() for f in spec.split(",")]


def _check_fields(fields, known):
    for f in fields:
        if f not in known:
            raise UsageError('Field "%s" is not a valid field to query.\n' % f)


def parse_format(spec):
    opts = [o.strip() for o in spec.split(",") if o.strip()]
    if "csv" not in opts:
        raise UsageError('"--format=" switch is missing "csv" option.')
    for o in opts:
        if o not in ("csv", "noheader", "nounits"):
            raise UsageError('Invalid value "%s" for "--format=" switch.' % o)
    return "noheader" not in opts, "nounits" not in opts


def _header(fields, units):
    return ", ".join(f if units.get(f) is None else "%s [%s]" % (f, units[f]) for f in fields)


def render_query_gpu(ctx, fields, header=True, with_units=True):
    lines = []
    if header:
        lines.append(_header(fields, {f: GPU_QUERY_FIELDS[f][0] for f in fields}))
    for g in ctx.gpus:
        cells = []
        for f in fields:
            unit, getter = GPU_QUERY_FIELDS[f]
            value = getter(ctx, g)
            if value is None or value == "N/A":
                cells.append("[N/A]")
            elif unit and with_units:
                cells.append("%s %s" % (value, unit))
            else:
                cells.append(str(value))
        lines.append(", ".join(cells))
    return "".join(line + "\n" for line in lines)


def render_query_apps(ctx, fields, header=True):
    # The simulator runs no CUDA processes: header only.
    return _header(fields, _APP_FIELDS) + "\n" if header else ""


# ---------------------------------------------------------------------------
# -q -x (XML) and -q (text): one element tree, two renderers
# ---------------------------------------------------------------------------

class Block(object):
    """Element whose text sits on its own line (``<mig_devices>\\n None\\n</...>``)."""

    def __init__(self, text):
        self.text = text


def _gpu_tree(top, g):
    def mib(v):
        return _na(v, "%d MiB")

    def mhz(v):
        return _na(v, "%d MHz")

    def watts(v):
        return _na(v, "%.2f W")

    def na(n):
        return [(tag, "N/A") for tag in n]

    unified = g["memory_total_mib"] is None
    total, reserved, used, free = memory_values(g)
    dom, bus, dev, _fn = _bus_parts(g)
    ecc_on = g["ecc_mode"] is True
    ecc_n = "0" if ecc_on else "N/A"
    ecc_no = "No" if ecc_on else "N/A"
    rows_n = "N/A" if unified else "0"
    rows_no = "N/A" if unified else "No"
    rows_b = "N/A" if unified else "0 bank(s)"
    gen = _na(g["pcie_link_gen"], "%d")
    width = _na(g["pcie_link_width"], "%dx")
    idle = "Active" if g["utilization_gpu"] == 0 else "Not Active"
    reasons = ["applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
               "hw_power_brake_slowdown", "sync_boost", "sw_thermal_slowdown", "display_clocks_setting"]
    counters = ["sw_power_cap", "sync_boost", "sw_therm_slowdown", "hw_therm_slowdown", "hw_power_brake"]
    sram = ["sram_correctable", "sram_uncorrectable_parity", "sram_uncorrectable_secded",
            "dram_correctable", "dram_uncorrectable"]
    supported = [
        ("supported_mem_clock",
         [("value", mhz(entry.get("mem_mhz")))]
         + [("supported_graphics_clock", mhz(f)) for f in entry.get("graphics_mhz", [])])
        for entry in g["supported_clocks"]]
    return [
        ("product_name", g["name"]),
        ("product_brand", g["brand"]),
        ("product_architecture", g["architecture"]),
        ("display_mode", "Requested functionality has been deprecated"),
        ("display_attached", "Yes" if g["display_active"] else "No"),
        ("display_active", _ed(g["display_active"])),
        ("persistence_mode", _ed(g["persistence_mode"])),
        ("addressing_mode", g["addressing_mode"]),
        ("mig_mode", [("current_mig", _ed(g["mig_mode"])), ("pending_mig", _ed(g["mig_mode"]))]),
        ("mig_devices", Block("None")),
        ("accounting_mode", "Disabled"),
        ("accounting_mode_buffer_size", "4000"),
        ("driver_model", na(["current_dm", "pending_dm"])),
        ("serial", _na(g["serial"])),
        ("uuid", g["uuid"]),
        ("pdi", _pdi(g)),
        ("minor_number", str(g["minor_number"])),
        ("vbios_version", _na(g["vbios_version"])),
        ("multigpu_board", "No"),
        ("board_id", "0x%x" % ((int(bus, 16) << 8) | int(dev, 16))),
        ("board_part_number", "N/A"),
        ("gpu_part_number", "N/A"),
        ("gpu_fru_part_number", "N/A"),
        ("platformInfo", na(["chassis_serial_number", "slot_number", "tray_index", "host_id",
                             "peer_type"]) + [("module_id", "1"), ("gpu_fabric_guid", "N/A")]),
        ("inforom_version", na(["img_version", "oem_object", "ecc_object", "pwr_object"])),
        ("inforom_bbx_flush", na(["latest_timestamp", "latest_duration"])),
        ("gpu_operation_mode", na(["current_gom", "pending_gom"])),
        ("c2c_mode", "N/A"),
        ("gpu_virtualization_mode", [("virtualization_mode", "None"), ("host_vgpu_mode", "N/A"),
                                     ("vgpu_heterogeneous_mode", "N/A")]),
        ("gpu_recovery_action", "None"),
        ("gsp_firmware_version", top["driver_version"]),
        ("ibmnpu", [("relaxed_ordering_mode", "N/A")]),
        ("pci", [
            ("pci_bus", bus),
            ("pci_device", dev),
            ("pci_domain", dom[-4:]),
            ("pci_base_class", "3"),
            ("pci_sub_class", "2"),
            ("pci_device_id", _na(g["pci_device_id"])),
            ("pci_bus_id", g["pci_bus_id"]),
            ("pci_sub_system_id", _na(g["pci_sub_system_id"])),
            ("pci_gpu_link_info", [
                ("pcie_gen", [("max_link_gen", gen), ("current_link_gen", gen),
                              ("device_current_link_gen", gen), ("max_device_link_gen", gen),
                              ("max_host_link_gen", "N/A")]),
                ("link_widths", [("max_link_width", width), ("current_link_width", width)]),
            ]),
            ("pci_bridge_chip", na(["bridge_chip_type", "bridge_chip_fw"])),
            ("replay_counter", "0"),
            ("replay_rollover_counter", "0"),
            ("tx_util", "0 KB/s"),
            ("rx_util", "0 KB/s"),
            ("atomic_caps_outbound", "N/A"),
            ("atomic_caps_inbound", "N/A"),
        ]),
        ("fan_speed", _na(g["fan_speed"], "%d %%")),
        ("performance_state", g["pstate"]),
        ("clocks_event_reasons", [("clocks_event_reason_gpu_idle", idle)]
         + [("clocks_event_reason_" + r, "Not Active") for r in reasons]),
        ("clocks_event_reasons_counters",
         [("clocks_event_reasons_counters_" + c, "0 us") for c in counters]),
        ("sparse_operation_mode", "Disabled"),
        ("fb_memory_usage", [("total", mib(total)), ("reserved", mib(reserved)),
                             ("used", mib(used)), ("free", mib(free))]),
        ("bar1_memory_usage", na(["total", "used", "free"])),
        ("cc_protected_memory_usage", [(t, "N/A" if unified else "0 MiB")
                                       for t in ("total", "used", "free")]),
        ("compute_mode", g["compute_mode"]),
        ("utilization", [("gpu_util", "%d %%" % g["utilization_gpu"]),
                         ("memory_util", _na(g["utilization_memory"], "%d %%"))]
         + [(t, "0 %") for t in ("encoder_util", "decoder_util", "jpeg_util", "ofa_util")]),
        ("encoder_stats", [(t, "0") for t in ("session_count", "average_fps", "average_latency")]),
        ("fbc_stats", [(t, "0") for t in ("session_count", "average_fps", "average_latency")]),
        ("dram_encryption_mode", na(["current_dram_encryption", "pending_dram_encryption"])),
        ("ecc_mode", [("current_ecc", _ed(g["ecc_mode"])), ("pending_ecc", _ed(g["ecc_mode"]))]),
        ("ecc_errors", [
            ("volatile", [(t, ecc_n) for t in sram]),
            ("aggregate", [(t, ecc_n) for t in sram] + [("sram_threshold_exceeded", ecc_no)]),
            ("aggregate_uncorrectable_sram_sources",
             [(t, ecc_n) for t in ("sram_l2", "sram_sm", "sram_microcontroller", "sram_pcie",
                                   "sram_other")]),
            ("channel_repair_pending", ecc_no),
            ("tpc_repair_pending", ecc_no),
            ("unrepairable_memory", ecc_no),
        ]),
        ("retired_pages", [
            ("multiple_single_bit_retirement", na(["retired_count", "retired_pagelist"])),
            ("double_bit_retirement", na(["retired_count", "retired_pagelist"])),
            ("pending_blacklist", "N/A"),
            ("pending_retirement", "N/A"),
        ]),
        ("remapped_rows", [
            ("remapped_row_corr", rows_n), ("remapped_row_corr_inactive", rows_n),
            ("remapped_row_unc", rows_n), ("remapped_row_unc_inactive", rows_n),
            ("remapped_row_pending", rows_no), ("remapped_row_failure", rows_no),
            ("row_remapper_histogram", [("row_remapper_histogram_" + t, rows_b)
                                        for t in ("max", "high", "partial", "low", "none")]),
        ]),
        ("temperature", [
            ("gpu_temp", "%d C" % g["temperature"]),
            ("gpu_temp_tlimit", "N/A"),
            ("gpu_temp_max_tlimit_threshold", "N/A"),
            ("gpu_temp_slow_tlimit_threshold", "N/A"),
            ("gpu_temp_max_gpu_tlimit_threshold", "N/A"),
            ("gpu_target_temperature", "N/A"),
            ("memory_temp", _na(g["memory_temperature"], "%d C")),
            ("gpu_temp_max_mem_tlimit_threshold", "N/A"),
        ]),
        ("supported_gpu_target_temp", na(["gpu_target_temp_min", "gpu_target_temp_max"])),
        ("gpu_power_readings", [
            ("power_state", g["pstate"]),
            ("average_power_draw", watts(g["power_draw"])),
            ("instant_power_draw", watts(g["power_draw"])),
            ("current_power_limit", watts(g["power_limit"])),
            ("requested_power_limit", watts(g["power_limit"])),
            ("default_power_limit", watts(g["power_limit"])),
            ("min_power_limit", "N/A"),
            ("max_power_limit", watts(g["power_limit"])),
        ]),
        ("gpu_memory_power_readings", na(["average_power_draw", "instant_power_draw"])),
        ("module_power_readings", [("power_state", g["pstate"])] + na([
            "average_power_draw", "instant_power_draw", "current_power_limit",
            "requested_power_limit", "default_power_limit", "min_power_limit", "max_power_limit"])),
        ("power_smoothing", "N/A"),
        ("power_profiles", na(["power_profile_requested_profiles", "power_profile_enforced_profiles"])),
        ("clocks", [("graphics_clock", mhz(g["graphics_clock_mhz"])), ("sm_clock", mhz(g["sm_clock_mhz"])),
                    ("mem_clock", mhz(g["mem_clock_mhz"])), ("video_clock", mhz(g["video_clock_mhz"]))]),
        ("applications_clocks", [("graphics_clock", mhz(g["max_graphics_clock_mhz"])),
                                 ("mem_clock", mhz(g["max_mem_clock_mhz"]))]),
        ("default_applications_clocks", [("graphics_clock", mhz(g["max_graphics_clock_mhz"])),
                                         ("mem_clock", mhz(g["max_mem_clock_mhz"]))]),
        ("deferred_clocks", [("mem_clock", "N/A")]),
        ("max_clocks", [("graphics_clock", mhz(g["max_graphics_clock_mhz"])),
                        ("sm_clock", mhz(g["max_sm_clock_mhz"])),
                        ("mem_clock", mhz(g["max_mem_clock_mhz"])),
                        ("video_clock", mhz(g["max_video_clock_mhz"]))]),
        ("max_customer_boost_clocks", [("graphics_clock", mhz(g["max_graphics_clock_mhz"]))]),
        ("clock_policy", na(["auto_boost", "auto_boost_default"])),
        ("fabric", na(["state", "status", "cliqueId", "clusterUuid"]) + [
            ("health", na(["summary", "bandwidth", "route_recovery_in_progress", "route_unhealthy",
                           "access_timeout_recovery", "incorrect_configuration",
                           "partition_assigned"]))]),
        ("supported_clocks", supported if supported else "N/A"),
        ("processes", []),
        ("accounted_processes", []),
        ("capabilities", [("egm", "disabled")]),
    ]


def _apply_overrides(nodes, overrides, prefix=""):
    out = []
    for tag, value in nodes:
        path = prefix + tag
        if isinstance(value, list):
            value = _apply_overrides(value, overrides, path + "/")
        elif path in overrides:
            value = overrides[path]
        out.append((tag, value))
    return out


def gpu_tree(top, g):
    """The ``<gpu>`` children as (tag, str | Block | [children]) tuples."""
    return _apply_overrides(_gpu_tree(top, g), g.get("xml_overrides") or {})


def _esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _emit_xml(lines, nodes, depth):
    ind = "\t" * depth
    for tag, value in nodes:
        if isinstance(value, list):
            lines.append("%s<%s>" % (ind, tag))
            _emit_xml(lines, value, depth + 1)
            lines.append("%s</%s>" % (ind, tag))
        elif isinstance(value, Block):
            lines += ["%s<%s>" % (ind, tag), ind + "\t" + _esc(value.text), "%s</%s>" % (ind, tag)]
        else:
            lines.append("%s<%s>%s</%s>" % (ind, tag, _esc(value), tag))


def render_xml(ctx):
    lines = [
        '<?xml version="1.0" ?>',
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
        "<nvidia_smi_log>",
        "\t<timestamp>%s</timestamp>" % ctx.timestamp,
        "\t<driver_version>%s</driver_version>" % _esc(ctx.top["driver_version"]),
        "\t<cuda_version>%s</cuda_version>" % _esc(ctx.top["cuda_version"]),
        "\t<attached_gpus>%d</attached_gpus>" % len(ctx.all_gpus),
    ]
    for g in ctx.gpus:
        lines.append('\t<gpu id="%s">' % g["pci_bus_id"])
        _emit_xml(lines, gpu_tree(ctx.top, g), 2)
        lines.append("\t</gpu>")
        lines.append("")
    lines.append("</nvidia_smi_log>")
    return "\n".join(lines) + "\n"


_LABELS = {
    "mig_mode": "MIG Mode", "mig_devices": "MIG Device", "current_mig": "Current",
    "pending_mig": "Pending", "current_dm": "Current", "pending_dm": "Pending",
    "current_gom": "Current", "pending_gom": "Pending", "current_ecc": "Current",
    "pending_ecc": "Pending", "serial": "Serial Number", "uuid": "GPU UUID", "pdi": "GPU PDI",
    "vbios_version": "VBIOS Version", "multigpu_board": "MultiGPU Board", "board_id": "Board ID",
    "gpu_part_number": "GPU Part Number", "gpu_fru_part_number": "FRU Part Number",
    "platformInfo": "Platform Info", "inforom_version": "Inforom Version",
    "img_version": "Image Version", "oem_object": "OEM Object", "ecc_object": "ECC Object",
    "pwr_object": "Power Management Object", "gpu_operation_mode": "GPU Operation Mode",
    "c2c_mode": "GPU C2C Mode", "gpu_virtualization_mode": "GPU Virtualization Mode",
    "gsp_firmware_version": "GSP Firmware Version", "ibmnpu": "IBMNPU", "pci": "PCI",
    "pci_bus": "Bus", "pci_device": "Device", "pci_domain": "Domain",
    "pci_base_class": "Base Classcode", "pci_sub_class": "Sub Classcode",
    "pci_device_id": "Device Id", "pci_bus_id": "Bus Id", "pci_sub_system_id": "Sub System Id",
    "pci_gpu_link_info": "GPU Link Info", "pcie_gen": "PCIe Generation",
    "max_link_gen": "Max", "current_link_gen": "Current", "device_current_link_gen": "Device Current",
    "max_device_link_gen": "Device Max", "max_host_link_gen": "Host Max",
    "max_link_width": "Max", "current_link_width": "Current", "tx_util": "Tx Throughput",
    "rx_util": "Rx Throughput", "fb_memory_usage": "FB Memory Usage",
    "bar1_memory_usage": "BAR1 Memory Usage",
    "cc_protected_memory_usage": "Conf Compute Protected Memory Usage",
    "gpu_util": "GPU", "memory_util": "Memory", "encoder_util": "Encoder",
    "decoder_util": "Decoder", "jpeg_util": "JPEG", "ofa_util": "OFA", "ecc_mode": "ECC Mode",
    "ecc_errors": "ECC Errors", "gpu_temp": "GPU Current Temp",
    "gpu_temp_tlimit": "GPU T.Limit Temp", "memory_temp": "Memory Current Temp",
    "gpu_power_readings": "GPU Power Readings", "average_power_draw": "Average Power Draw",
    "instant_power_draw": "Instantaneous Power Draw", "current_power_limit": "Current Power Limit",
    "requested_power_limit": "Requested Power Limit", "default_power_limit": "Default Power Limit",
    "min_power_limit": "Min Power Limit", "max_power_limit": "Max Power Limit",
    "graphics_clock": "Graphics", "sm_clock": "SM", "mem_clock": "Memory", "video_clock": "Video",
    "fan_speed": "Fan Speed", "performance_state": "Performance State",
    "supported_mem_clock": "Memory", "supported_graphics_clock": "Graphics",
}


def _label(tag):
    if tag in _LABELS:
        return _LABELS[tag]
    return " ".join(w[:1].upper() + w[1:] for w in tag.split("_"))


def _emit_text(lines, nodes, depth):
    ind = "    " * depth
    for tag, value in nodes:
        label = ind + _label(tag)
        if isinstance(value, list):
            lines.append(label)
            _emit_text(lines, value, depth + 1)
        else:
            text = value.text if isinstance(value, Block) else value
            lines.append("%-42s: %s" % (label, text))


def render_text(ctx):
    lines = ["", "==============NVSMI LOG==============", "",
             "%-42s: %s" % ("Timestamp", ctx.timestamp),
             "%-42s: %s" % ("Driver Version", ctx.top["driver_version"]),
             "%-42s: %s" % ("CUDA Version", ctx.top["cuda_version"]),
             "",
             "%-42s: %d" % ("Attached GPUs", len(ctx.all_gpus))]
    for g in ctx.gpus:
        lines.append("GPU %s" % g["pci_bus_id"])
        _emit_text(lines, gpu_tree(ctx.top, g), 1)
        lines.append("")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# topo -m
# ---------------------------------------------------------------------------

_TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def render_topo(ctx):
    names = ["GPU%d" % g["index"] for g in ctx.gpus]
    out = ["\t\x1b[4m" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"]
    for g, name in zip(ctx.gpus, names):
        cells = [" X " if other is g else "SYS" for other in ctx.gpus]
        out.append("%s\t%s\t%s\t%s\t\t%s" % (name, "\t".join(cells), g["cpu_affinity"],
                                             g["numa_affinity"], g["gpu_numa_id"]))
    return "\n".join(out) + "\n" + _TOPO_LEGEND


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

HELP = """NVIDIA System Management Interface -- v{ver} (dspark simulator)

Usage: nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -i,   --id=                 Target a specific GPU (index, UUID or PCI bus id).
    -q,   --query               Display GPU or Unit info.
    -x,   --xml-format          Produce XML output (with -q).
    -d,   --display=            Accepted and ignored.
    --query-gpu=                Information about GPU (comma separated fields).
    --query-compute-apps=       List of currently active compute processes.
    --format=                   csv[,noheader][,nounits]
    topo -m                     Display the GPU topology matrix.

State: $DSPARK_SIM_HW_DIR/gpu.json (default {default}).
"""


def _take(argv, i, opt):
    if i + 1 >= len(argv):
        raise UsageError(INVALID_COMBINATION)
    return argv[i + 1], i + 2


def parse_args(argv):
    opts = {"mode": "table", "query": False, "xml": False, "ids": None, "query_gpu": None,
            "query_apps": None, "format": None}
    i = 0
    while i < len(argv):
        a = argv[i]
        val = None
        if "=" in a and a.startswith("--"):
            a, val = a.split("=", 1)
        if a in ("-h", "--help"):
            opts["mode"] = "help"
            i += 1
        elif a == "--version":
            opts["mode"] = "version"
            i += 1
        elif a in ("-L", "--list-gpus"):
            opts["mode"] = "list"
            i += 1
        elif a in ("-q", "--query"):
            opts["query"] = True
            i += 1
        elif a in ("-x", "--xml-format"):
            opts["xml"] = True
            i += 1
        elif a in ("-qx", "-xq"):
            opts["query"] = opts["xml"] = True
            i += 1
        elif a in ("-i", "--id"):
            if val is None:
                val, i = _take(argv, i, a)
            else:
                i += 1
            opts["ids"] = val
        elif a.startswith("-i") and len(a) > 2 and not a.startswith("--"):
            opts["ids"] = a[2:]
            i += 1
        elif a in ("-d", "--display"):
            if val is None:
                _unused, i = _take(argv, i, a)
            else:
                i += 1
        elif a in ("--query-gpu", "--query-compute-apps", "--format"):
            if val is None:
                val, i = _take(argv, i, a)
            else:
                i += 1
            key = {"--query-gpu": "query_gpu", "--query-compute-apps": "query_apps",
                   "--format": "format"}[a]
            opts[key] = val
        elif a == "topo" and i == 0:
            rest = argv[1:]
            if not rest or rest[0] not in ("-m", "--matrix") or len(rest) > 1:
                raise UsageError(INVALID_COMBINATION)
            opts["mode"] = "topo"
            break
        else:
            raise UsageError(INVALID_COMBINATION)
    if opts["xml"] and not opts["query"]:
        raise UsageError(INVALID_COMBINATION)
    selected = [m for m in ("query_gpu", "query_apps") if opts[m] is not None]
    if len(selected) > 1 or (selected and (opts["query"] or opts["mode"] not in ("table",))):
        raise UsageError(INVALID_COMBINATION)
    if selected:
        if opts["format"] is None:
            raise UsageError('"--format=" switch must be specified with "--%s".'
                             % selected[0].replace("_", "-"))
        opts["mode"] = selected[0]
    elif opts["format"] is not None:
        raise UsageError(INVALID_COMBINATION)
    if opts["query"] and opts["mode"] != "table":
        raise UsageError(INVALID_COMBINATION)
    if opts["query"]:
        opts["mode"] = "xml" if opts["xml"] else "text"
    return opts


def select_gpus(gpus, ids):
    if ids is None:
        return list(gpus)
    chosen = []
    for token in ids.split(","):
        token = token.strip()
        match = None
        for g in gpus:
            bus = g["pci_bus_id"].upper()
            if token.isdigit() and int(token) == g["index"]:
                match = g
            elif token.upper().startswith("GPU-") and g["uuid"].lower().startswith(token.lower()) \
                    and len(token) > 4:
                match = g
            elif ":" in token and (bus == token.upper() or bus.endswith(":" + token.upper())
                                   or bus[4:] == token.upper()):
                match = g
            if match is not None:
                break
        if match is None:
            return []
        if match not in chosen:
            chosen.append(match)
    return chosen


def _run(argv, out, err, environ=None):
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        err.write(str(exc).rstrip("\n") + "\n")
        return exc.code
    if opts["mode"] == "help":
        out.write(HELP.format(ver="580", default=hwstate.DEFAULT_HW_DIR))
        return EXIT_OK
    directory = hwstate.hw_dir(environ=environ)
    try:
        top = hwstate.load_gpu_state(directory)
    except hwstate.StateMissing as exc:
        err.write(DRIVER_FAILURE + "\n")
        err.write("(dspark simulator: no GPU state: %s)\n" % exc)
        return EXIT_NO_DRIVER
    except hwstate.StateError as exc:
        err.write(DRIVER_FAILURE + "\n")
        err.write("(dspark simulator: malformed GPU state: %s)\n" % exc)
        return EXIT_NO_DRIVER
    if opts["mode"] == "version":
        ver = top["driver_version"]
        out.write("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\n"
                  "CUDA Version        : %s\n" % (ver, ".".join(ver.split(".")[:2]), ver,
                                                  top["cuda_version"]))
        return EXIT_OK
    try:
        if opts["mode"] == "query_gpu":
            fields = _split_fields(opts["query_gpu"])
            _check_fields(fields, GPU_QUERY_FIELDS)
            header, units = parse_format(opts["format"])
        elif opts["mode"] == "query_apps":
            fields = _split_fields(opts["query_apps"])
            _check_fields(fields, _APP_FIELDS)
            header, units = parse_format(opts["format"])
    except UsageError as exc:
        err.write(str(exc).rstrip("\n") + "\n")
        return exc.code
    if not top["gpus"]:
        out.write(NO_DEVICES + "\n")
        return EXIT_NOT_FOUND
    gpus = select_gpus(top["gpus"], opts["ids"])
    if not gpus:
        out.write(NO_DEVICES + "\n")
        return EXIT_NOT_FOUND
    ctx = Context(top, gpus)
    mode = opts["mode"]
    if mode == "table":
        out.write(render_table(ctx))
    elif mode == "list":
        out.write(render_list(ctx))
    elif mode == "query_gpu":
        out.write(render_query_gpu(ctx, fields, header=header, with_units=units))
    elif mode == "query_apps":
        out.write(render_query_apps(ctx, fields, header=header))
    elif mode == "xml":
        out.write(render_xml(ctx))
    elif mode == "text":
        out.write(render_text(ctx))
    elif mode == "topo":
        out.write(render_topo(ctx))
    return EXIT_OK


def _internal_error(exc):
    sys.stderr.write("Unknown Error (dspark simulator: %s: %s)\n" % (type(exc).__name__, exc))
    return EXIT_UNKNOWN


def main(argv=None):
    return run_tool(_run, argv, _internal_error)


if __name__ == "__main__":
    sys.exit(main())
