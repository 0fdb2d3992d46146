"""Fleet-level verbs: up, down, status."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from . import checkpoint, image, inventory, layout, network, rank
from .proc import SimError, ok, run, say

STATE_FILE = layout.STATE_DIR / "sim.json"


def _state() -> dict:
    try:
        return json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return {}


def up(count: int, fleet2: int = 0) -> dict:
    """Bring ``count`` pairs up (inventories/sim), and ``fleet2`` more after them as a second fleet with its own
    inventory (inventories/sim-fleet2). Re-running with the same counts on a healthy simulator changes nothing; a
    larger total adds the missing pairs and leaves the others as they are; a smaller one starts again from nothing."""
    if fleet2 < 0:
        raise SimError(f"--fleet2 must be 0 or more, got {fleet2}")
    first_fleet = count
    count += fleet2
    wanted = layout.pairs(count)
    for var, path in (("DSPARK_SIM_STATE", layout.STATE_DIR), ("DSPARK_SIM_CACHE", layout.CACHE_DIR)):
        for target in map(Path, layout.RANK_MOUNTS.values()):
            if path == target or target in path.parents:
                raise SimError(f"{var}={path} lies under {target}, which every rank mounts over")
    current = _state()
    if current and current.get("pairs", 0) > count:
        say(f"simulator has {current.get('pairs')} pair(s); bringing it down to start again with {count}")
        down()
    elif current and current.get("pairs") != count:
        # Growing: the pairs that are up stay as they are (their engines too); only the new ones are added.
        say(f"simulator has {current.get('pairs')} pair(s); adding pairs up to {count}")
    layout.STATE_DIR.mkdir(parents=True, exist_ok=True)
    meta = image.build(checkpoint.MODEL_REVISION)
    next_meta = image.build(checkpoint.MODEL_REVISION, image.NEXT_RELEASE)
    model_src = layout.CACHE_DIR / "model"
    if not (model_src / checkpoint.MODEL_DIRNAME / checkpoint.REVISION_MARKER).exists():
        checkpoint.write(model_src)
    model_src = model_src / checkpoint.MODEL_DIRNAME
    network.bridge_up()
    for pair in wanted:
        for r in pair.ranks:
            network.rank_net_up(r)
        network.pair_fabric_up(pair)
    ranks = [r for p in wanted for r in p.ranks]
    for r in ranks:
        rank.prepare(r, model_src)
    for pair in wanted:
        rank.authorise_control(pair)
    for r in ranks:
        rank.start(r)
    (layout.STATE_DIR / "ssh" / "known_hosts").write_text("".join(rank.host_key_line(r) for r in ranks))
    for r in ranks:
        rank.wait_ready(r)
    inv = inventory.write(first_fleet, meta, next_meta, fleet2)
    up_since = current.get("up_since") if current.get("pairs") == count else None
    state = {"pairs": count, "ranks": [r.name for r in ranks], "image": meta, "inventory": str(inv),
             "up_since": up_since or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    STATE_FILE.write_text(json.dumps(state, indent=2) + "\n")
    return state


def _remove_cgroups() -> int:
    removed = 0
    root = Path("/sys/fs/cgroup")
    for parent in root.glob(f"*/{layout.PREFIX}-*"):
        for d in sorted((p for p in parent.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                d.rmdir()
            except OSError:
                pass
        try:
            parent.rmdir()
            removed += 1
        except OSError:
            pass
    return removed


def down() -> None:
    """Tear everything down, from the state file or, after a crash, from the names alone."""
    left = rank.kill_netns_processes(network.list_netns())
    if left:
        raise SimError("could not stop " + ", ".join(f"{len(pids)} process(es) in {ns}" for ns, pids in left.items())
                       + "; nothing else removed")
    network.teardown_net()
    _remove_cgroups()
    rank.remove_operator()
    if (layout.STATE_DIR / "ranks").exists():
        shutil.rmtree(layout.STATE_DIR / "ranks")
    STATE_FILE.unlink(missing_ok=True)
    for written in (layout.INVENTORY_DIR, layout.FLEET2_INVENTORY_DIR, layout.RELEASES_DIR):
        if written.exists():
            shutil.rmtree(written)
    rank.remove_created_mountpoints()


def leftovers() -> list[str]:
    """Everything of the simulator still present on the host (empty after a clean sim-down)."""
    found = [f"netns {n}" for n in network.list_netns()]
    found += [f"link {l}" for l in network.list_links()]
    if ok(["iptables", "-w", "-S", "FORWARD"]):
        found += [f"iptables {l}" for l in run(["iptables", "-w", "-S", "FORWARD"]).stdout.splitlines()
                  if network.IPT_COMMENT in l]
    found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob(f"*/{layout.PREFIX}-*")]
    if layout.CREATED_OPERATOR.exists():
        found.append(f"account {layout.OPERATOR}")
    mounts = Path("/proc/self/mountinfo").read_text()
    found += [f"mount {l.split()[4]}" for l in mounts.splitlines() if str(layout.STATE_DIR) in l or "/run/netns/dsim" in l]
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(layout.STATE_DIR / "ranks") in cmd:
            found.append(f"process {pid_dir.name}: {cmd[:120]}")
    if layout.CREATED_MOUNTPOINTS.exists():
        found += [f"mount point {d}" for d in layout.CREATED_MOUNTPOINTS.read_text().split() if Path(d).exists()]
    return found


def status() -> dict:
    st = _state()
    out = {"up": bool(st), "pairs": st.get("pairs", 0), "inventory": st.get("inventory"), "ranks": []}
    for r in layout.all_ranks(st["pairs"]) if st else []:
        alive = bool(rank.init_pid(r))
        docker = alive and rank.ssh(r, ["docker", "info", "--format", "{{.ID}}"], check=False, timeout=15)
        engine_up = bool(docker and docker.returncode == 0)
        serving = engine_up and rank.ssh(r, ["docker", "ps", "--all", "--filter", "label=io.gb10.dspark.rank",
                                             "--format", "{{.Names}} {{.State}}"], check=False, timeout=15)
        out["ranks"].append({
            "name": r.name, "rank": r.rank, "netns": r.netns, "mgmt_ip": r.mgmt_ip, "fabric_ip": r.fabric_ip,
            "sshd": alive, "dockerd": engine_up,
            "engine_id": docker.stdout.strip() if engine_up else None,
            "containers": serving.stdout.split("\n")[:-1] if serving and serving.returncode == 0 else [],
        })
    if st:
        out["image"] = {k: st["image"][k] for k in ("image_tag", "image_id", "image_archive")}
    return out
