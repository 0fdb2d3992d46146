"""Names, addresses and folders of a simulated fleet, derived from one pair count.

Everything the simulator creates is named from this module, so ``sim-down``
can find every piece again even when the state file is gone (a crashed run).
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "dsim"  # every netns, link and iptables comment starts with this
BRIDGE = f"{PREFIX}-mgmt"
MGMT_NET = ipaddress.ip_network(os.environ.get("DSPARK_SIM_MGMT_NET", "10.231.0.0/24"))
FABRIC_BASE = ipaddress.ip_network(os.environ.get("DSPARK_SIM_FABRIC_NET", "10.232.0.0/16"))
CONTROL_IP = MGMT_NET.network_address + 254
MAX_PAIRS = 40

STATE_DIR = Path(os.environ.get("DSPARK_SIM_STATE", "/var/lib/gb10-dspark-sim"))
CACHE_DIR = Path(os.environ.get("DSPARK_SIM_CACHE", "/var/cache/gb10-dspark-sim"))
REPO_ROOT = Path(__file__).resolve().parents[2]
INVENTORY_DIR = REPO_ROOT / "inventories" / "sim"
# Where the simulated fleet's site file sends the evidence packs.
EVIDENCE_DIR = REPO_ROOT / "artifacts" / "evidence"
# A second, independent fleet (``up --fleet2 N``): the N pairs after the first fleet's, in their own inventory with
# their own evidence folder, so that runs over one whole fleet never reach the other's pairs.
FLEET2_INVENTORY_DIR = REPO_ROOT / "inventories" / "sim-fleet2"
FLEET2_EVIDENCE_DIR = REPO_ROOT / "artifacts" / "evidence-fleet2"
# The next release's file (its pin and archive), beside the inventory and not in it: Ansible reads every YAML
# file under an inventory folder as inventory.
RELEASES_DIR = REPO_ROOT / "inventories" / "sim-releases"

# The account the control node logs in as: unprivileged, with sudo to root (the ranks refuse root
# logins, as many sites do). It is a host account, since the ranks share the host's /etc/passwd;
# its home and its sudoers entry are each rank's own.
OPERATOR = "dspark-ops"
OPERATOR_HOME = f"/home/{OPERATOR}"
CREATED_OPERATOR = STATE_DIR / "created-operator"

# Paths inside a rank (its private mount namespace binds these to per-rank folders).
RANK_MOUNTS = {
    "docker": "/var/lib/docker",
    "etc-docker": "/etc/docker",
    "etc-dspark": "/etc/dspark",
    "var-dspark": "/var/lib/dspark",
    "models": "/srv/dspark/models",
    "hw": "/var/lib/dspark-sim/hw",
    "fakebin": "/usr/local/sbin",
    "tmp": "/tmp",
    "home": "/root",
    "operator-home": OPERATOR_HOME,
    "sudoers": "/etc/sudoers.d",
}
# Mount points the simulator creates on the host when missing; it records them there and
# sim-down removes exactly those again (when empty).
CREATED_MOUNTPOINTS = STATE_DIR / "created-mountpoints"

# Cabling of a real dual-Spark pair as the v026 launcher defaults have it: asymmetric ports.
HEAD_PORT = {"netdev": "enp1s0f0np0", "hca": "rocep1s0f0", "twin_netdev": "enP2p1s0f0np0", "twin_hca": "roceP2p1s0f0"}
WORKER_PORT = {"netdev": "enp1s0f1np1", "hca": "rocep1s0f1", "twin_netdev": "enP2p1s0f1np1", "twin_hca": "roceP2p1s0f1"}
MGMT_IF = "enP7s7"  # the GB10's 10G management port


@dataclass(frozen=True)
class Rank:
    pair: int
    rank: int  # 0 = head, 1 = worker

    @property
    def role(self) -> str:
        return "head" if self.rank == 0 else "worker"

    @property
    def name(self) -> str:
        """Inventory hostname, e.g. ``sim01-head``."""
        return f"sim{self.pair:02d}-{self.role}"

    @property
    def netns(self) -> str:
        return f"{PREFIX}-p{self.pair:02d}r{self.rank}"

    @property
    def host_veth(self) -> str:
        return f"{PREFIX}p{self.pair:02d}r{self.rank}"

    @property
    def mgmt_ip(self) -> str:
        return str(MGMT_NET.network_address + 10 + 2 * (self.pair - 1) + self.rank + 1)

    @property
    def fabric_ip(self) -> str:
        return str(FABRIC_BASE.network_address + self.pair * 256 + self.rank + 1)

    @property
    def twin_ip(self) -> str:
        # The twin logical port gets its own subnet, never the same as the primary.
        return str(FABRIC_BASE.network_address + (128 + self.pair) * 256 + self.rank + 1)

    @property
    def port(self) -> dict[str, str]:
        return HEAD_PORT if self.rank == 0 else WORKER_PORT

    @property
    def dir(self) -> Path:
        return STATE_DIR / "ranks" / self.name

    def sub(self, name: str) -> Path:
        return self.dir / name


@dataclass(frozen=True)
class Pair:
    index: int
    ranks: tuple[Rank, Rank] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranks", (Rank(self.index, 0), Rank(self.index, 1)))

    @property
    def name(self) -> str:
        """The pair's name, as the inventory's dspark_pair gives it (sim01)."""
        return f"sim{self.index:02d}"

    @property
    def group(self) -> str:
        return f"pair_{self.name}"

    @property
    def head(self) -> Rank:
        return self.ranks[0]

    @property
    def worker(self) -> Rank:
        return self.ranks[1]

    def fabric_links(self) -> list[tuple[str, str, str, str, str]]:
        """(temp name A, temp name B, head netdev, worker netdev, kind) for the cable and its twin."""
        p = f"{PREFIX}p{self.index:02d}"
        return [
            (f"{p}fa", f"{p}fb", HEAD_PORT["netdev"], WORKER_PORT["netdev"], "primary"),
            (f"{p}ta", f"{p}tb", HEAD_PORT["twin_netdev"], WORKER_PORT["twin_netdev"], "twin"),
        ]


def pairs(count: int, first: int = 1) -> list[Pair]:
    """``count`` pairs numbered from ``first`` (sim01, sim02, ... by default)."""
    if count < 1 or first < 1 or first + count - 1 > MAX_PAIRS:
        raise ValueError(f"PAIRS must be between 1 and {MAX_PAIRS}, got {count} from pair {first}")
    return [Pair(i) for i in range(first, first + count)]


def all_ranks(count: int) -> list[Rank]:
    return [r for p in pairs(count) for r in p.ranks]
