"""Materialise a fake ``/sys/class/infiniband`` tree from ib.json devices.

Layout written under *root*::

    sys/class/infiniband/<hca>/node_type              1: CA
    sys/class/infiniband/<hca>/fw_ver                 28.45.1200
    sys/class/infiniband/<hca>/hca_type               MT4129
    sys/class/infiniband/<hca>/ports/<p>/state        4: ACTIVE | 1: DOWN
    sys/class/infiniband/<hca>/ports/<p>/phys_state   5: LinkUp | 3: Disabled
    sys/class/infiniband/<hca>/ports/<p>/link_layer   Ethernet
    sys/class/infiniband/<hca>/ports/<p>/gid_attrs/ndevs/0   <netdev>
    sys/class/infiniband/<hca>/device/net/<netdev>/{operstate,dev_port,dev_id}

Link states are resolved exactly as ``ibdev2netdev`` does (``auto`` probes the
netdev in the caller's network namespace), so call :func:`materialise` from
inside the rank's namespace after every state change.  The tree is updated in
place (files replaced atomically, stale HCAs/ports/netdevs removed), so a bind
mount of ``sys/class/infiniband`` keeps working across regenerations.
"""

import os
import shutil

from . import ibdev2netdev
from . import state as hwstate

PORT_STATE = {"Up": "4: ACTIVE", "Down": "1: DOWN"}
PHYS_STATE = {"Up": "5: LinkUp", "Down": "3: Disabled"}


def infiniband_dir(root):
    return os.path.join(root, "sys", "class", "infiniband")


def _write(path, text):
    hwstate.atomic_write_text(path, text + "\n", mode=0o444)


def _prune(directory, keep):
    """Remove entries of *directory* not named in *keep*."""
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in entries:
        if name in keep:
            continue
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def materialise(root, devices, probe=ibdev2netdev.probe_netdev):
    """Write the fake tree for *devices* (ib.json dict or its device list) under *root*.

    Returns ``{(hca, port): "Up" | "Down"}`` as written.
    """
    if isinstance(devices, dict):
        devices = devices.get("devices", [])
    devices = hwstate.validate_ib_state({"devices": list(devices)})["devices"]
    ib = infiniband_dir(root)
    os.makedirs(ib, exist_ok=True)

    by_hca = {}
    for dev in devices:
        by_hca.setdefault(dev["hca"], []).append(dev)
    _prune(ib, set(by_hca))

    written = {}
    for hca, devs in by_hca.items():
        base = os.path.join(ib, hca)
        first = devs[0]
        _write(os.path.join(base, "node_type"), "1: CA")
        _write(os.path.join(base, "fw_ver"), first.get("fw_ver", ibdev2netdev.DEFAULT_FW))
        _write(os.path.join(base, "hca_type"), first.get("board_id", ibdev2netdev.DEFAULT_BOARD))
        ports_dir = os.path.join(base, "ports")
        net_dir = os.path.join(base, "device", "net")
        _prune(ports_dir, {str(d["port"]) for d in devs})
        _prune(net_dir, {d["netdev"] for d in devs})
        for dev in devs:
            link = ibdev2netdev.resolve_state(dev, probe)
            port_dir = os.path.join(ports_dir, str(dev["port"]))
            _write(os.path.join(port_dir, "state"), PORT_STATE[link])
            _write(os.path.join(port_dir, "phys_state"), PHYS_STATE[link])
            _write(os.path.join(port_dir, "link_layer"), "Ethernet")
            _write(os.path.join(port_dir, "gid_attrs", "ndevs", "0"), dev["netdev"])
            nd = os.path.join(net_dir, dev["netdev"])
            _write(os.path.join(nd, "operstate"), "up" if link == "Up" else "down")
            _write(os.path.join(nd, "dev_port"), str(dev["port"] - 1))
            _write(os.path.join(nd, "dev_id"), "0x0")
            written[(hca, dev["port"])] = link
    return written


def materialise_from_hw_dir(root, directory=None, probe=ibdev2netdev.probe_netdev):
    """Regenerate the tree from ``ib.json`` in *directory* (missing file = no devices)."""
    try:
        ib = hwstate.load_ib_state(directory)
    except hwstate.StateMissing:
        ib = {"devices": []}
    return materialise(root, ib, probe)
