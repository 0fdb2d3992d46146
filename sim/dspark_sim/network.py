"""The simulator's network: a management bridge for SSH, and a direct 'QSFP cable' per pair.

- Management: bridge ``dsim-mgmt`` in the root namespace holds the control node's address;
  every rank has a veth whose inside end is named like the GB10's 10G port (``enP7s7``).
- Fabric: the two ranks of a pair are joined by veth pairs named like the ConnectX-7 logical
  ports (``enp1s0f0np0`` on the head, ``enp1s0f1np1`` on the worker, plus the ``enP2p…`` twins),
  so NCCL_SOCKET_IFNAME and ibdev2netdev name real links that can go down.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

from . import layout
from .proc import ok, run, say

IPT_COMMENT = f"{layout.PREFIX}-bridge"


def bridge_up() -> None:
    if not ok(["ip", "link", "show", layout.BRIDGE]):
        run(["ip", "link", "add", layout.BRIDGE, "type", "bridge"])
    cidr = f"{layout.CONTROL_IP}/{layout.MGMT_NET.prefixlen}"
    addrs = run(["ip", "-j", "addr", "show", "dev", layout.BRIDGE]).stdout
    if str(layout.CONTROL_IP) not in addrs:
        run(["ip", "addr", "add", cidr, "dev", layout.BRIDGE])
    run(["ip", "link", "set", layout.BRIDGE, "up"])
    _allow_bridge_forwarding()


def _allow_bridge_forwarding() -> None:
    """A host dockerd with iptables sets FORWARD to DROP; with bridge-nf that silently drops
    rank-to-rank traffic on our bridge. Allow our own bridge only, tagged for removal."""
    if not ok(["iptables", "-w", "-S", "FORWARD"]):
        return
    rule = ["FORWARD", "-i", layout.BRIDGE, "-o", layout.BRIDGE, "-m", "comment", "--comment", IPT_COMMENT, "-j", "ACCEPT"]
    if not ok(["iptables", "-w", "-C", *rule]):
        run(["iptables", "-w", "-I", *rule])


def remove_iptables_rules() -> int:
    if not ok(["iptables", "-w", "-S", "FORWARD"]):
        return 0
    removed = 0
    for line in run(["iptables", "-w", "-S", "FORWARD"]).stdout.splitlines():
        if IPT_COMMENT in line and line.startswith("-A "):
            spec = line.split()[1:]
            spec = [s.strip('"') for s in spec]
            run(["iptables", "-w", "-D", *spec])
            removed += 1
    return removed


def netns_exists(name: str) -> bool:
    return name in list_netns()


def list_netns(prefix: str = layout.PREFIX) -> list[str]:
    out = run(["ip", "-j", "netns", "list"], check=False).stdout.strip()
    names = [n["name"] for n in json.loads(out)] if out else []
    return [n for n in names if n.startswith(prefix + "-")]


def list_links(prefix: str = layout.PREFIX) -> list[str]:
    out = run(["ip", "-j", "link", "show"]).stdout
    return [l["ifname"] for l in json.loads(out) if l["ifname"].startswith(prefix)]


def rank_net_up(rank: layout.Rank) -> None:
    ns = rank.netns
    if not netns_exists(ns):
        run(["ip", "netns", "add", ns])
    nsip = ["ip", "-n", ns]
    if not ok([*nsip, "link", "show", layout.MGMT_IF]):
        run(["ip", "link", "add", rank.host_veth, "type", "veth", "peer", "name", rank.host_veth + "i"])
        run(["ip", "link", "set", rank.host_veth + "i", "netns", ns])
        run([*nsip, "link", "set", rank.host_veth + "i", "name", layout.MGMT_IF])
        run(["ip", "link", "set", rank.host_veth, "master", layout.BRIDGE])
        run(["ip", "link", "set", rank.host_veth, "up"])
        run([*nsip, "addr", "add", f"{rank.mgmt_ip}/{layout.MGMT_NET.prefixlen}", "dev", layout.MGMT_IF])
    run([*nsip, "link", "set", "lo", "up"])
    run([*nsip, "link", "set", layout.MGMT_IF, "up"])


def pair_fabric_up(pair: layout.Pair) -> None:
    head, worker = pair.head, pair.worker
    for tmp_a, tmp_b, head_if, worker_if, kind in pair.fabric_links():
        if not ok(["ip", "-n", head.netns, "link", "show", head_if]):
            run(["ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b])
            run(["ip", "link", "set", tmp_a, "netns", head.netns])
            run(["ip", "link", "set", tmp_b, "netns", worker.netns])
            run(["ip", "-n", head.netns, "link", "set", tmp_a, "name", head_if])
            run(["ip", "-n", worker.netns, "link", "set", tmp_b, "name", worker_if])
            for r, ifname in ((head, head_if), (worker, worker_if)):
                ip = r.fabric_ip if kind == "primary" else r.twin_ip
                run(["ip", "-n", r.netns, "addr", "add", f"{ip}/24", "dev", ifname])
                run(["ip", "-n", r.netns, "link", "set", ifname, "mtu", "9000"])
        for r, ifname in ((head, head_if), (worker, worker_if)):
            run(["ip", "-n", r.netns, "link", "set", ifname, "up"])


def control_sent_bytes() -> int:
    """Bytes the control node has sent into the management bridge, towards the ranks (the bridge's
    own transmit counter: what leaves the control node's side, whatever the protocol)."""
    return int(Path(f"/sys/class/net/{layout.BRIDGE}/statistics/tx_bytes").read_text())


def pair_received_bytes(pair: layout.Pair) -> int:
    """Bytes the management bridge has sent towards the pair's ranks (the transmit counters of their veths'
    bridge ends): what the control node, or anything else on the bridge, sent to this pair alone. Another
    pair's traffic at the same time is not in it, where it is in :func:`control_sent_bytes`."""
    return sum(int(Path(f"/sys/class/net/{r.host_veth}/statistics/tx_bytes").read_text()) for r in pair.ranks)


@contextmanager
def uplink_cap(rate_mbit: float):
    """Cap the control node's uplink (its side of the management bridge) at ``rate_mbit`` Mbit/s
    with a token bucket for the duration of the block; the cap is removed whatever happens."""
    if rate_mbit <= 0:
        raise ValueError(f"the uplink cap must be positive, got {rate_mbit!r} Mbit/s")
    run(["tc", "qdisc", "replace", "dev", layout.BRIDGE, "root", "tbf", "rate", f"{rate_mbit:g}mbit",
         "burst", "256kb", "latency", "500ms"])
    try:
        yield
    finally:
        run(["tc", "qdisc", "del", "dev", layout.BRIDGE, "root"], check=False)


def netns_pids(name: str) -> list[int]:
    out = run(["ip", "netns", "pids", name], check=False).stdout
    return [int(p) for p in out.split()]


def teardown_net() -> list[str]:
    """Delete every simulator netns, link and iptables rule. Returns what was removed."""
    removed = []
    for ns in list_netns():
        run(["ip", "netns", "del", ns], check=False)
        removed.append(f"netns {ns}")
    for link in list_links():
        if ok(["ip", "link", "show", link]):  # a veth may have died with its netns
            run(["ip", "link", "del", link], check=False)
            removed.append(f"link {link}")
    n = remove_iptables_rules()
    if n:
        removed.append(f"{n} iptables rule(s)")
    if removed:
        say("removed " + ", ".join(removed))
    return removed
