"""Bring one simulated rank up (folders, keys, fake hardware, dockerd, sshd) and down."""
from __future__ import annotations

import functools
import json
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import layout, network
from .proc import SimError, run, say

INIT = layout.REPO_ROOT / "sim" / "rank" / "init.sh"
FAKEHW = layout.REPO_ROOT / "sim" / "fakehw"
PYCACHE = layout.REPO_ROOT / "sim" / "rank" / "dspark_sim_pycache.py"


def ensure_key(path: Path, comment: str) -> Path:
    """An ed25519 key pair without passphrase at ``path`` (kept when it exists)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path


def control_key() -> Path:
    return ensure_key(layout.STATE_DIR / "ssh" / "id_ed25519", "gb10-dspark-sim-control")


def ensure_operator() -> pwd.struct_passwd:
    """The unprivileged account the control node logs in as (``layout.OPERATOR``), made once and
    recorded so that sim-down removes it again. Its password field is ``*``: no password login, but
    not locked (sshd refuses a locked account even a key)."""
    try:
        return pwd.getpwnam(layout.OPERATOR)
    except KeyError:
        pass
    layout.STATE_DIR.mkdir(parents=True, exist_ok=True)
    run(["useradd", "--system", "--user-group", "--shell", "/bin/bash", "--home-dir", layout.OPERATOR_HOME,
         "--no-create-home", "--password", "*", layout.OPERATOR])
    layout.CREATED_OPERATOR.write_text(layout.OPERATOR + "\n")
    return pwd.getpwnam(layout.OPERATOR)


def remove_operator() -> None:
    """Remove the operator account if the simulator made it (its homes are the ranks' folders)."""
    if layout.CREATED_OPERATOR.exists():
        run(["userdel", layout.OPERATOR], check=False)
        layout.CREATED_OPERATOR.unlink()


def prepare(rank: layout.Rank, model_src: Path) -> None:
    """Lay out the rank's private folders. Safe to call on a running rank (changes nothing then)."""
    for sub in (*layout.RANK_MOUNTS, "run", "log", "ssh", "tools"):
        rank.sub(sub).mkdir(parents=True, exist_ok=True)
    rank.sub("tmp").chmod(0o1777)
    (rank.sub("home") / ".ssh").mkdir(mode=0o700, exist_ok=True)
    rank.sub("home").chmod(0o700)
    # The operator's home (Ansible's remote temporary files) and its sudo rule, this rank's own.
    operator = ensure_operator()
    os.chown(rank.sub("operator-home"), operator.pw_uid, operator.pw_gid)
    rank.sub("operator-home").chmod(0o700)
    rank.sub("sudoers").chmod(0o750)
    rule = rank.sub("sudoers") / layout.OPERATOR
    rule.write_text(f"{layout.OPERATOR} ALL=(ALL:ALL) NOPASSWD: ALL\n")
    rule.chmod(0o440)
    _install_pycache(rank, operator)
    (rank.dir / "mounts").write_text("".join(f"{rank.sub(s)} {t}\n" for s, t in layout.RANK_MOUNTS.items()))
    daemon = {
        "data-root": "/var/lib/docker",
        "exec-root": "/run/docker",
        "pidfile": "/run/docker.pid",
        "hosts": ["unix:///run/docker.sock"],
        "iptables": False,
        "ip-masq": False,
        "bridge": "none",
        "cgroup-parent": f"{layout.PREFIX}-{rank.name}",
        "log-driver": "json-file",
        "log-opts": {"max-size": "50m", "max-file": "2"},
    }
    (rank.sub("etc-docker") / "daemon.json").write_text(json.dumps(daemon, indent=2) + "\n")
    ensure_key(rank.sub("ssh") / "ssh_host_ed25519_key", rank.name)
    # The fake tools are copied into the rank: inside it, the checkout may be hidden (e.g. under /tmp).
    tools = rank.sub("tools") / "fakehw"
    shutil.copytree(FAKEHW, tools, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    for tool in ("nvidia-smi", "ibdev2netdev"):
        link = rank.sub("fakebin") / tool
        if not link.is_symlink():
            link.symlink_to(tools / "bin" / tool)
    if not (rank.sub("hw") / "gpu.json").exists():
        _fakehw_init(rank)
    dest = rank.sub("models") / model_src.name
    if not dest.exists():
        shutil.copytree(model_src, dest, symlinks=False)


@functools.lru_cache(maxsize=None)
def _rank_python_version() -> str:
    """X.Y of the ranks' /usr/bin/python3 (asked once per process: the same interpreter for every rank)."""
    return subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _install_pycache(rank: layout.Rank, operator: pwd.struct_passwd) -> None:
    """The bytecode cache of Ansible's module payloads (sim/rank/dspark_sim_pycache.py says why) in the user site
    folder of each home of the rank (root's, which ``become`` runs as, and the operator's), with the ``.pth`` line
    that loads it: only the rank's ``python3`` finds them, never the host's."""
    for home, owner in (("home", None), ("operator-home", operator)):
        site = rank.sub(home) / ".local" / "lib" / f"python{_rank_python_version()}" / "site-packages"
        site.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PYCACHE, site / PYCACHE.name)
        (site / "dspark-sim-pycache.pth").write_text(f"import {PYCACHE.stem}\n")
        if owner is not None:
            for path in (rank.sub(home) / ".local", *(rank.sub(home) / ".local").rglob("*")):
                os.chown(path, owner.pw_uid, owner.pw_gid)


def authorise_control(pair: layout.Pair) -> None:
    """Each rank of the pair accepts the control node's key for the operator account (root may not
    log in at all, see init.sh), and nothing else: the ranks hold no
    keys of their own and trust no other rank (the collection reaches every rank through Ansible
    only). A head key left by an older simulator is removed."""
    control_pub = Path(str(control_key()) + ".pub").read_text()
    for rank_ in pair.ranks:
        (rank_.sub("ssh") / "authorized_keys").write_text(control_pub)
        for leftover in ("id_ed25519", "id_ed25519.pub", "known_hosts"):
            (rank_.sub("home") / ".ssh" / leftover).unlink(missing_ok=True)


def _fakehw_init(rank: layout.Rank) -> None:
    port = rank.port
    env = dict(os.environ, PYTHONPATH=str(layout.REPO_ROOT / "sim"))
    # Inside the rank's netns, so the InfiniBand tree sees the rank's own links.
    subprocess.run(["nsenter", f"--net=/var/run/netns/{rank.netns}",
                    sys.executable, "-m", "fakehw", "--hw-dir", str(rank.sub("hw")),
                    "--sysfs-root", str(rank.sub("hw")), "init",
                    "--hca", port["hca"], "--netdev", port["netdev"],
                    "--twin-hca", port["twin_hca"], "--twin-netdev", port["twin_netdev"],
                    "--seed", str(rank.pair * 2 + rank.rank)], check=True, env=env, timeout=30)


def _pid_alive(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def init_pid(rank: layout.Rank) -> int | None:
    """The PID of the rank's init (which becomes its sshd): the process that holds the rank's namespaces;
    None when the rank is not running."""
    return _pid_alive(rank.sub("run") / "init.pid")


def ensure_mountpoints() -> None:
    for target in layout.RANK_MOUNTS.values():
        missing = []
        p = Path(target)
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            d.mkdir()
            with layout.CREATED_MOUNTPOINTS.open("a") as f:
                f.write(f"{d}\n")


def remove_created_mountpoints() -> None:
    try:
        created = layout.CREATED_MOUNTPOINTS.read_text().split()
    except OSError:
        return
    for d in reversed(created):
        try:
            Path(d).rmdir()
        except OSError:
            pass
    layout.CREATED_MOUNTPOINTS.unlink(missing_ok=True)


def start(rank: layout.Rank) -> None:
    if init_pid(rank):
        return
    ensure_mountpoints()
    log = open(rank.sub("log") / "init.log", "ab")
    subprocess.Popen(
        ["nsenter", f"--net=/var/run/netns/{rank.netns}", "unshare", "--mount", "--uts", "--propagation", "private",
         str(INIT), str(rank.dir), rank.mgmt_ip, rank.name],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True)


def wait_ready(rank: layout.Rank, timeout: float = 90) -> None:
    """Ready = sshd answers on the management address and the rank's dockerd answers over SSH."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((rank.mgmt_ip, 22), timeout=2):
                break
        except OSError:
            if not init_pid(rank) and time.monotonic() > deadline - timeout + 5:
                tail = (rank.sub("log") / "init.log").read_text(errors="replace")[-600:]
                raise SimError(f"rank {rank.name}: its init exited during start-up:\n{tail}") from None
            time.sleep(0.3)
    else:
        raise SimError(f"rank {rank.name}: sshd not reachable on {rank.mgmt_ip}:22 after {timeout}s "
                       f"(see {rank.sub('log')}/init.log, sshd.log)")
    while time.monotonic() < deadline:
        if ssh(rank, ["docker", "info", "--format", "{{.ID}}"], check=False).returncode == 0:
            return
        time.sleep(0.5)
    raise SimError(f"rank {rank.name}: dockerd did not answer within {timeout}s (see {rank.sub('log')}/dockerd.log)")


def ssh_login(rank: layout.Rank, user: str) -> list[str]:
    """ssh to the rank as ``user`` with the control key and the simulator's known hosts (no command yet)."""
    return ["ssh", "-i", str(control_key()), "-o", f"UserKnownHostsFile={layout.STATE_DIR / 'ssh' / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            f"{user}@{rank.mgmt_ip}"]


def ssh_argv(rank: layout.Rank) -> list[str]:
    """ssh to the rank as the operator, ending in ``sudo -n --``: the command appended runs as root."""
    return [*ssh_login(rank, layout.OPERATOR), "--", "sudo", "-n", "--"]


def ssh(rank: layout.Rank, argv: list[str], check: bool = True, timeout: float = 60):
    return run([*ssh_argv(rank), shlex.join(argv)], check=check, timeout=timeout)


def host_key_line(rank: layout.Rank) -> str:
    pub = (rank.sub("ssh") / "ssh_host_ed25519_key.pub").read_text().split()
    return f"{rank.mgmt_ip} {pub[0]} {pub[1]}\n"


def kill_netns_processes(namespaces: list[str], grace: float = 10) -> dict[str, list[int]]:
    """Stop every process living in the ranks' network namespaces: sshd, dockerd, containerd, shims and
    engine containers (host networking puts them all there). TERM to all of them at once, then KILL what is
    left after ``grace`` seconds: the ranks stop side by side, so a fleet stops in one rank's time, not the sum.
    Returns the namespaces whose processes outlived the KILL, with their PIDs (empty when all are gone)."""
    pids = {ns: network.netns_pids(ns) for ns in namespaces}
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        for pid in (p for ns_pids in pids.values() for p in ns_pids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while True:
            pids = {ns: left for ns in pids if (left := network.netns_pids(ns))}
            if not pids:
                return {}
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
    for ns, left in pids.items():
        say(f"processes still alive in {ns}: {left}")
    return pids
