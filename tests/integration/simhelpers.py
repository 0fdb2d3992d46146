"""Helpers for the integration tests: the simulator CLI, Ansible, a command on a rank, HTTP polling."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sim"))

from dspark_sim import drive, layout, network  # noqa: E402  (drive: the simulator's CLI, a rank's commands, Ansible env)

INVENTORY = ROOT / "inventories" / "sim"
PAIRS = 2  # one per lane of the one-pair tests (tests/support/lanes.py)
# The second fleet (`dspark_sim up --fleet2`): the pairs after those, in their own inventory with their own evidence
# folder: the whole-fleet tests of lane c (test_80, test_82) run on it beside the one-pair lanes, never reaching them.
FLEET2_PAIRS = 4
FLEET2_INVENTORY = layout.FLEET2_INVENTORY_DIR
UP_ARGS = ("up", "--pairs", str(PAIRS), "--fleet2", str(FLEET2_PAIRS))  # the session's simulator, both fleets


def fleet2() -> list[layout.Pair]:
    """The second fleet's pairs (sim03 to sim06)."""
    return layout.pairs(FLEET2_PAIRS, PAIRS + 1)


def inventory_of(rank: layout.Rank) -> Path:
    """The inventory folder that holds ``rank``: the first fleet's or the second's."""
    return INVENTORY if rank.pair <= PAIRS else FLEET2_INVENTORY


# The ops account docs/operator-guide.md §1.1 makes on a rank: test_85 makes it on pair_c's worker the guide's way,
# logs in with it and removes it again (the rank's sshd log keeps that login).
GUIDE_OPS_USER = "gb10-ops"


def site(inventory: Path = INVENTORY) -> dict:
    """The simulator inventory's site variables (group_vars/all/site.yml)."""
    import yaml

    return yaml.safe_load((inventory / "group_vars" / "all" / "site.yml").read_text())


def sim_cli(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    res = drive.cli(*args, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"dspark_sim {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res


def ansible(*args: str, tool: str = "ansible", check: bool = True, timeout: float = 900,
            env: dict | None = None, inventory: Path = INVENTORY) -> subprocess.CompletedProcess:
    res = subprocess.run([drive.tool(tool), "-i", str(inventory), *args], cwd=ROOT, env=drive.ansible_env(**(env or {})),
                         text=True, capture_output=True, timeout=timeout, check=False)
    if check and res.returncode != 0:
        raise AssertionError(f"{tool} {' '.join(args)} exited {res.returncode}:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}")
    return res


def on_rank(rank: layout.Rank, argv: list[str], check: bool = True, timeout: float = 60,
            input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run argv as root on a rank, in its namespaces (``input_text`` on its standard input; sim/dspark_sim/drive.py:
    the collection's own path to a rank, which the tests exercise, is Ansible over SSH)."""
    res = drive.run_on(rank, argv, timeout=timeout, input_text=input_text)
    if check and res.returncode != 0:
        raise AssertionError(f"{rank.name}: {argv} exited {res.returncode}: {res.stderr}")
    return res


def module_calls_on(rank: layout.Rank) -> list[str]:
    """The command lines of the module calls Ansible has running on ``rank``: the processes of the rank's network
    namespace whose command line names Ansible's become marker (its wrapper lives as long as the module does). A
    control node that dies leaves them to end on their own (as on a real rank): a test that looks at a rank after
    killing a run waits for them first."""
    calls = []
    for pid in network.netns_pids(rank.netns):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"BECOME-SUCCESS-" in cmdline:
            calls.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return calls


def control_node_dies(proc: subprocess.Popen, pair: layout.Pair, timeout: float = 120,
                      look: Callable[[dict], dict] = lambda snap: snap) -> None:
    """The control node running ``proc`` (started with ``start_new_session``) dies: the run is killed with every
    process it started, and every SSH connection of this machine to the pair's ranks drops with it (Ansible's
    persistent masters live outside the run's process group). What it had started on the ranks then ends on its
    own, as on a real rank, and so may what such a call had asked of a rank's dockerd (a container start lands
    after the call that sent it has gone): this returns once the ranks have settled - no module call of Ansible
    (:func:`module_calls_on`) and the same snapshot at three looks a second apart - so that what a test looks
    at next is what the dead run left. ``look`` is what of a rank's snapshot must hold still (all of it unless
    something the test leaves running writes there)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for r in pair.ranks:
        out = subprocess.run(["ss", "-Htnp", "state", "established", "dst", f"{r.mgmt_ip}:22"], text=True,
                             capture_output=True, timeout=30, check=True).stdout
        for pid in {int(p) for p in re.findall(r"pid=(\d+)", out)}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    looks: list = []

    def settled() -> bool:
        calls = any(module_calls_on(r) for r in pair.ranks)
        looks[:] = [*looks[-2:], None if calls else {r.name: look(snapshot(r)) for r in pair.ranks}]
        return len(looks) == 3 and looks[0] is not None and looks[0] == looks[1] == looks[2]

    wait_for(settled, timeout, interval=1.0, what=f"the ranks of {pair.group} to settle after the dead run")


def http_get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_for(pred, timeout: float, interval: float = 0.5, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def container_inspect(rank: layout.Rank, name: str = "dspark_vllm") -> dict:
    return json.loads(on_rank(rank, ["docker", "container", "inspect", name]).stdout)[0]


def container_state(rank: layout.Rank, name: str = "dspark_vllm") -> dict:
    return container_inspect(rank, name)["State"]


def playbook(name: str, tree: Path, *extra: str, check: bool = True, timeout: float = 1800,
             env: dict | None = None, inventory: Path = INVENTORY) -> subprocess.CompletedProcess:
    """Run playbooks/<name> deploying from the clean checkout ``tree``."""
    return ansible(f"playbooks/{name}", "-e", f"dspark_preflight_wrapper_path={tree}", *extra,
                   tool="ansible-playbook", check=check, timeout=timeout, env=env, inventory=inventory)


def pair_playbook(name: str, pair: layout.Pair, tree: Path, *extra: str, **options) -> subprocess.CompletedProcess:
    """playbooks/<name> on ``pair`` alone (``--limit``), from the inventory that holds it (either fleet's)."""
    return playbook(name, tree, "--limit", pair.group, *extra, inventory=inventory_of(pair.head), **options)


def site_of(pair: layout.Pair) -> dict:
    """The site variables of the inventory that holds ``pair``."""
    return site(inventory_of(pair.head))


def unconverge(pair: layout.Pair) -> None:
    """Back to an unconverged pair: no container, no image, no archive copy on either rank."""
    for r in pair.ranks:
        on_rank(r, ["sh", "-c", "docker rm -f $(docker ps -aq) >/dev/null 2>&1; "
                                "docker image rm -f $(docker image ls -aq) >/dev/null 2>&1; "
                                "rm -rf /var/lib/dspark/images; true"])
        assert snapshot(r)["images"] == []


SNAPSHOT_SCRIPT = (
    "docker image ls --all --no-trunc --format '{{.ID}} {{.Repository}}:{{.Tag}}' || exit 1; echo '#containers'; "
    "ids=$(docker ps -aq --no-trunc) || exit 1; [ -z \"$ids\" ] || docker inspect --format "
    "'{{.Id}} {{.Name}} {{.State.Status}} {{.State.StartedAt}} {{.RestartCount}}' $ids || exit 1; echo '#files'; "
    "find /var/lib/dspark /etc/dspark /srv/dspark/models -printf '%p %s %T@\\n'")


def snapshot(rank: layout.Rank) -> dict:
    """Everything on a rank that a run could change: images, containers (ID, name, state, start time,
    restart count) and the files under the collection's folders and the model directory (one command on the rank)."""
    out = on_rank(rank, ["sh", "-c", SNAPSHOT_SCRIPT]).stdout
    images, rest = out.split("#containers\n", 1)
    containers, files = rest.split("#files\n", 1)
    return {"images": sorted(images.splitlines()), "containers": sorted(containers.splitlines()),
            "files": sorted(files.splitlines())}


def snapshot_changes(before: dict, after: dict) -> dict:
    """What differs between two {rank name: snapshot} maps, per rank and part: the lines only before (-) and only
    after (+). The message of an assertion that the two are equal, naming the change."""
    changes = {}
    for name in sorted(set(before) | set(after)):
        was_rank, now_rank = before.get(name, {}), after.get(name, {})
        for part in sorted(set(was_rank) | set(now_rank)):
            was, now = set(was_rank.get(part, [])), set(now_rank.get(part, []))
            if was != now:
                changes[f"{name} {part}"] = {"-": sorted(was - now), "+": sorted(now - was)}
    return changes


def stop_dockerd(rank: layout.Rank) -> None:
    """Stop the rank's dockerd as `systemctl stop docker` does: SIGTERM (the daemon stops its containers
    and its containerd; no live-restore). A SIGKILL would leave the daemon's containerd behind, which a
    new dockerd cannot take over."""
    pid = int((rank.dir / "run" / "dockerd.pid").read_text().strip())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: _exited(pid), 120, what="dockerd to exit")


def _exited(pid: int) -> bool:
    """The process has exited. A dockerd that :func:`start_dockerd` started is this process's child:
    it is reaped here, else it would stay a zombie (its /proc entry with it) for the rest of the run."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not ours (the rank's init started it), or reaped already
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def start_dockerd(rank: layout.Rank) -> None:
    """Start the rank's dockerd again in the rank's namespaces, and wait until it answers."""
    init_pid = (rank.dir / "run" / "init.pid").read_text().strip()
    with open(rank.dir / "log" / "dockerd.log", "ab") as log:
        new = subprocess.Popen(["nsenter", "-t", init_pid, "--mount", "--net", "--uts",
                                "dockerd", "--config-file", "/etc/docker/daemon.json"],
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    (rank.dir / "run" / "dockerd.pid").write_text(f"{new.pid}\n")
    wait_for(lambda: on_rank(rank, ["docker", "version"], check=False).returncode == 0, 60, what="dockerd back")


def engine_pids(rank: layout.Rank, name: str = "dspark_vllm") -> list[int]:
    """The processes of the rank's engine container (the ranks share this machine's PID namespace)."""
    out = on_rank(rank, ["docker", "top", name, "-eo", "pid"]).stdout.split()
    return [int(p) for p in out if p.isdigit()]


def freeze(rank: layout.Rank, name: str = "dspark_vllm") -> list[int]:
    """Stop every process of the rank's engine (kill -STOP): a wedged rank whose container still runs."""
    pids = engine_pids(rank, name)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    return pids


def thaw(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def evidence_of(pair: layout.Pair) -> Path:
    """The pair's evidence folder on the control node (its inventory's site says where: each fleet has its own)."""
    return Path(site_of(pair)["dspark_evidence_dir"]) / pair.name


def runs(pair: layout.Pair) -> list[Path]:
    """The pair's evidence packs on the control node, oldest first (their names are UTC times)."""
    root = evidence_of(pair) / "runs"
    return sorted(root.iterdir()) if root.exists() else []


def texts_under(root: Path):
    """(path, text) of every file under ``root``, for a scan of what the runs wrote. The evidence folder is the
    whole control node's: the other lanes' runs write into it meanwhile (a pack is made in a hidden ``.partial``
    folder and renamed), so an entry that vanishes between the listing and the read is another run's, passed
    over, not an error (``Path.rglob`` raises on a folder renamed under it)."""
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            try:
                yield path, path.read_text(errors="replace")
            except FileNotFoundError:
                continue


def newest_pack(pair: layout.Pair, before: list[Path]) -> Path:
    """The one pack a run made, given the packs there were before it."""
    new = [p for p in runs(pair) if p not in before]
    assert len(new) == 1, new
    return new[0]
