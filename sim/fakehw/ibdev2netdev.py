"""A fake ``ibdev2netdev`` answering from the rank's ib.json.

Prints ``<hca> port <p> ==> <netdev> (Up|Down)`` per device, in file order.
A device whose state is ``auto`` is Up exactly when its netdev exists and is
operationally up in the *current* network namespace (``ip -j link show``):
operstate ``UP``, or flags containing both ``UP`` and ``LOWER_UP`` (``lo`` and
some virtual links report operstate ``UNKNOWN``).  A veth whose peer is down
(operstate ``LOWERLAYERDOWN``, no ``LOWER_UP``) is Down, as is a missing one.
"""

import json
import os
import re
import shutil
import subprocess
import sys

from ._tool import run_tool
from . import state as hwstate

DEFAULT_FW = "28.45.1200"
DEFAULT_BOARD = "MT4129"
DEFAULT_PART = "MCX713106AC-VEA"
DEFAULT_DESC = "ConnectX-7"

_IP_CANDIDATES = ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip")
_IFF_UP = 0x1


def link_up_from_ip_json(obj):
    """Decide Up/Down from the parsed output of ``ip -j link show dev NAME``."""
    if isinstance(obj, list):
        if not obj:
            return False
        obj = obj[0]
    if not isinstance(obj, dict):
        return False
    operstate = str(obj.get("operstate", "")).upper()
    flags = obj.get("flags") or []
    if operstate == "UP":
        return True
    return "UP" in flags and "LOWER_UP" in flags


def _ip_binary():
    found = shutil.which("ip")
    if found:
        return found
    for cand in _IP_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    return None


def _probe_sysfs(netdev):
    base = os.path.join("/sys/class/net", netdev)
    try:
        with open(os.path.join(base, "operstate")) as fh:
            operstate = fh.read().strip().lower()
    except OSError:
        return False
    if operstate == "up":
        return True
    try:
        with open(os.path.join(base, "flags")) as fh:
            flags = int(fh.read().strip(), 16)
        with open(os.path.join(base, "carrier")) as fh:
            carrier = fh.read().strip() == "1"
    except (OSError, ValueError):
        return False
    return bool(flags & _IFF_UP) and carrier


def probe_netdev(netdev):
    """True if *netdev* exists and is operationally up in this network namespace."""
    ip = _ip_binary()
    if ip is None:
        return _probe_sysfs(netdev)
    try:
        proc = subprocess.run([ip, "-j", "link", "show", "dev", netdev],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return _probe_sysfs(netdev)
    if proc.returncode != 0:
        return False
    try:
        return link_up_from_ip_json(json.loads(proc.stdout.decode("utf-8", "replace") or "[]"))
    except ValueError:
        return False


def resolve_state(device, probe=probe_netdev):
    """'Up' or 'Down' for an ib.json device entry (resolving ``auto``)."""
    st = device["state"]
    if st == "auto":
        return "Up" if probe(device["netdev"]) else "Down"
    return st


def pci_address(device):
    """PCI address of an HCA: explicit ``pci`` key, else decoded from a
    systemd-style name (``rocep1s0f1`` -> 0000:01:00.1, ``roceP2p1s0f1`` -> 0002:01:00.1)."""
    if device.get("pci"):
        return device["pci"]
    m = re.match(r"^[a-z]+(?:P([0-9]+))?p([0-9]+)s([0-9]+)f([0-9]+)", device["hca"])
    if not m:
        return "0000:00:00.0"
    dom, bus, slot, fn = (int(x) if x else 0 for x in m.groups())
    return "%04x:%02x:%02x.%x" % (dom, bus, slot, fn)


def format_line(device, link, verbose=False):
    if not verbose:
        return "%s port %d ==> %s (%s)" % (device["hca"], device["port"], device["netdev"], link)
    return "%s %s (%s - %s) %s fw %s port %d (%s) ==> %s (%s)" % (
        pci_address(device), device["hca"], device.get("board_id", DEFAULT_BOARD),
        device.get("part_number", DEFAULT_PART), device.get("description", DEFAULT_DESC),
        device.get("fw_ver", DEFAULT_FW), device["port"],
        "ACTIVE" if link == "Up" else "DOWN", device["netdev"], link)


USAGE = "Usage: ibdev2netdev [-v] [-h]\n"


def _run(argv, out, err, environ=None, probe=probe_netdev):
    verbose = False
    for a in argv:
        if a == "-v":
            verbose = True
        elif a in ("-h", "--help"):
            out.write(USAGE)
            return 0
        else:
            err.write("ibdev2netdev: unknown option %s\n%s" % (a, USAGE))
            return 2
    directory = hwstate.hw_dir(environ=environ)
    try:
        ib = hwstate.load_ib_state(directory)
    except hwstate.StateMissing:
        err.write("ibdev2netdev: no InfiniBand devices (dspark simulator: no %s in %s)\n"
                  % (hwstate.IB_FILE, directory))
        return 0
    except hwstate.StateError as exc:
        err.write("ibdev2netdev: cannot read device state (dspark simulator: %s)\n" % exc)
        return 1
    for dev in ib["devices"]:
        out.write(format_line(dev, resolve_state(dev, probe), verbose) + "\n")
    return 0


def _internal_error(exc):
    sys.stderr.write("ibdev2netdev: internal error (dspark simulator: %s: %s)\n" % (type(exc).__name__, exc))
    return 1


def main(argv=None):
    return run_tool(_run, argv, _internal_error)


if __name__ == "__main__":
    sys.exit(main())
