"""Staging the image by relay on the simulator: a pair that lacks the image takes one copy from the
control node (or none, from a site mirror), to its head; the worker fetches it from the head over the
pair's own link. Bytes the control node sends are read from the management bridge's counters. A
corrupt relayed archive, a mirror with the wrong checksum, a fabric link that goes down during the
relay and a fetch that stalls mid-transfer each stop the run with a clear error and nothing loaded on
either rank; an idle connection on the relay port does not hold the relay, and its port is free after."""
from __future__ import annotations

import http.server
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from simhelpers import INVENTORY, ROOT, ansible, on_rank, site, snapshot, unconverge
from dspark_sim import layout, network

PLAYBOOK = "playbooks/identity.yml"  # preflight and the image role, under the pair's lock
FAST = ("-e", "dspark_image_relay_idle_timeout=15", "-e", "dspark_image_fetch_timeout=10")


def pin() -> dict:
    return yaml.safe_load((INVENTORY / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]


def archive() -> Path:
    return Path(site()["dspark_image_archive"])


def flat(res) -> str:
    return " ".join((res.stdout + res.stderr).split())


def run(pair, clean_tree, *extra: str, check: bool = True):
    return ansible(PLAYBOOK, "--limit", pair.group, "-e", f"dspark_preflight_wrapper_path={clean_tree}", *FAST,
                   *extra, tool="ansible-playbook", check=check)


def state(pair) -> dict:
    """Each rank's snapshot without the archive folder's own entry and its parent's (whose time
    that entry changes): a staging that fails may leave that (empty) folder made, and nothing else."""
    out = {}
    for rank_ in pair.ranks:
        snap = snapshot(rank_)
        snap["files"] = [f for f in snap["files"]
                         if not f.startswith(("/var/lib/dspark/images ", "/var/lib/dspark "))]
        out[rank_.name] = snap
    return out


def image_ids(rank) -> list[str]:
    return on_rank(rank, ["docker", "image", "ls", "--no-trunc", "--format", "{{.ID}}"]).stdout.split()


def archive_sha(rank) -> str:
    name = archive().name
    return on_rank(rank, ["sha256sum", f"/var/lib/dspark/images/{name}"]).stdout.split()[0]


@pytest.fixture
def pair2(pair_b):
    pair = pair_b
    unconverge(pair)
    return pair


@pytest.fixture
def mirror(tmp_path):
    """A site mirror on the control node's management address: serves whatever the test puts in ``root``."""
    root = tmp_path / "mirror"
    root.mkdir()

    served = [0]

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def copyfile(self, source, outputfile):
            before = source.tell()
            super().copyfile(source, outputfile)
            served[0] += source.tell() - before

        def log_message(self, *args):
            return None

    server = http.server.ThreadingHTTPServer((str(layout.CONTROL_IP), 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://{layout.CONTROL_IP}:{server.server_address[1]}", served
    server.shutdown()
    server.server_close()


def test_a_pair_lacking_the_image_takes_one_copy_from_the_control_node(pair2, clean_tree):
    p, size = pin(), archive().stat().st_size
    before = network.pair_received_bytes(pair2)
    res = run(pair2, clean_tree)
    sent = network.pair_received_bytes(pair2) - before
    out = flat(res)
    for rank_ in pair2.ranks:
        assert image_ids(rank_) == [p["image_id"]], rank_.name
        assert archive_sha(rank_) == p["image_archive_sha256"], rank_.name
    # one copy, to the head; the worker's came over the pair's link (2 x size when each rank was copied to)
    assert size <= sent < 1.25 * size, (sent, size)
    assert f"changed: [{pair2.worker.name}]" in out.split("Fetch the archive from the head over the pair's link")[1][:600]
    assert f"changed: [{pair2.worker.name}]" not in out.split("Copy the archive from the control node")[1][:600]
    # converged: nothing is sent again, neither from the control node nor over the pair's link
    before = network.pair_received_bytes(pair2)
    again = flat(run(pair2, clean_tree))
    assert network.pair_received_bytes(pair2) - before < size / 20
    assert "Serve the archive on the head's fabric address" not in again or "skipping" in again


@pytest.mark.fault("mirror-checksum")
def test_a_site_mirror_is_checked_against_the_pin_and_spares_the_control_node(pair2, clean_tree, mirror):
    root, base, served = mirror
    name = archive().name
    data = archive().read_bytes()
    (root / name).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one bit off
    before = state(pair2)
    bad = run(pair2, clean_tree, "-e", f"dspark_image_mirror_url={base}/{name}", check=False)
    assert bad.returncode != 0
    text = flat(bad)
    assert f"rank {pair2.head.name}: no pinned archive from the site mirror {base}/{name}" in text, text[-3000:]
    assert "did not match" in text and f"expected sha256 {pin()['image_archive_sha256']}" in text, text[-3000:]
    assert state(pair2) == before, "a refused mirror changed a rank"

    (root / name).write_bytes(data)
    sent_before, mirrored_before = network.pair_received_bytes(pair2), served[0]
    run(pair2, clean_tree, "-e", f"dspark_image_mirror_url={base}/{name}")
    mirrored = served[0] - mirrored_before
    # The mirror runs on this machine, so its bytes leave through the same bridge: subtract them.
    assert mirrored == len(data)  # one copy, to the head; the worker's came over the pair's link
    assert network.pair_received_bytes(pair2) - sent_before - mirrored < len(data) / 10
    for rank_ in pair2.ranks:
        assert image_ids(rank_) == [pin()["image_id"]], rank_.name


ROGUE = """
import http.server, sys
body = bytes(int(sys.argv[3]))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"""


@pytest.mark.fault("relay-corrupt")
def test_a_corrupt_archive_over_the_relay_is_refused_by_the_worker(pair2, clean_tree):
    """Another process already answers on the head's relay port with other bytes of the same length
    (the worker cannot tell who answers; it trusts only the sha256)."""
    head, worker = pair2.ranks
    size = archive().stat().st_size
    rogue = subprocess.Popen(["nsenter", f"--net=/var/run/netns/{head.netns}", sys.executable, "-c", ROGUE,
                              head.fabric_ip, "25101", str(size)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        res = run(pair2, clean_tree, check=False)
    finally:
        rogue.kill()
        rogue.wait()
    text = flat(res)
    assert res.returncode != 0
    assert (f"rank {worker.name}: no pinned archive from head {head.name} over the pair's link "
            f"({head.fabric_ip}:25101)") in text, text[-4000:]
    assert "did not match" in text and f"expected sha256 {pin()['image_archive_sha256']}" in text, text[-4000:]
    assert "cannot listen on" in text  # the head's own relay, in the report
    for rank_ in pair2.ranks:
        assert image_ids(rank_) == [], f"{rank_.name} loaded an image although the relay was refused"
    assert on_rank(worker, ["test", "-e", f"/var/lib/dspark/images/{archive().name}"], check=False).returncode == 1


@pytest.mark.fault("relay-fabric-down")
def test_a_fabric_link_that_goes_down_during_the_relay_stops_the_run(pair2, clean_tree):
    head, worker = pair2.ranks
    netdev = worker.port["netdev"]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1")
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(INVENTORY), PLAYBOOK,
            "--limit", pair2.group, "-e", f"dspark_preflight_wrapper_path={clean_tree}", *FAST]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    seen: list[str] = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "Serve the archive on the head's fabric address" in line:
                on_rank(worker, ["ip", "link", "set", netdev, "down"])  # the cable is pulled as the relay starts
                break
        seen += proc.stdout.readlines()
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        on_rank(worker, ["ip", "link", "set", netdev, "up"])
    text = " ".join("".join(seen).split())
    assert proc.returncode != 0, text[-4000:]
    assert f"rank {worker.name}: no pinned archive from head {head.name} over the pair's link ({head.fabric_ip}:25101)" in text, \
        text[-4000:]
    assert "the head's relay" in text
    for rank_ in pair2.ranks:
        assert image_ids(rank_) == [], f"{rank_.name} loaded an image although the relay failed"
    assert on_rank(worker, ["test", "-e", f"/var/lib/dspark/images/{archive().name}"], check=False).returncode == 1


HOLDER = """
import socket, sys, time
end = time.monotonic() + float(sys.argv[3])
while True:  # until the head's relay listens
    try:
        sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)
        break
    except OSError:
        if time.monotonic() > end:
            print("never connected", flush=True)
            sys.exit(1)
        time.sleep(0.05)
print("held", flush=True)
start = time.monotonic()
sock.settimeout(None)
try:
    sock.recv(1)  # sends nothing, waits for the relay to let go
except OSError:
    pass
print(f"dropped after {time.monotonic() - start:.1f} s", flush=True)
"""


def relay_port_free(head) -> bool:
    """Nothing listens on the head's relay port, and a new listener can bind it."""
    probe = ("import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
             "s.bind((sys.argv[1], 25101)); s.listen(); s.close()")
    listening = on_rank(head, ["ss", "-Hltn", "sport = :25101"]).stdout.strip()
    return not listening and on_rank(head, ["python3", "-c", probe, head.fabric_ip], check=False).returncode == 0


def wait_until(condition, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"not within {timeout:g} s: {what}"
        time.sleep(0.5)


@pytest.mark.fault("relay-idle-connection")
def test_an_idle_connection_on_the_relay_port_does_not_hold_the_relay(pair2, clean_tree):
    """A local user on the worker (nobody, no privilege) connects to the head's relay port as soon as it
    listens and sends nothing: the worker's fetch is served all the same, the idle connection is dropped,
    and the port is free when the run ends."""
    head, worker = pair2.ranks
    holder = subprocess.Popen(["nsenter", f"--net=/var/run/netns/{worker.netns}", "setpriv", "--reuid=65534",
                               "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", HOLDER, head.fabric_ip,
                               "25101", "600"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        res = run(pair2, clean_tree, check=False)
        text = flat(res)
        assert res.returncode == 0, text[-4000:]
        held = holder.communicate(timeout=60)[0]  # it ends once the relay lets go of its connection
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert held.startswith("held") and "dropped after" in held, held  # it held a connection; the relay let go
    for rank_ in pair2.ranks:
        assert image_ids(rank_) == [pin()["image_id"]], rank_.name
    assert archive_sha(worker) == pin()["image_archive_sha256"]
    assert relay_port_free(head), "the head's relay port is still held after the run"


def sending(head) -> bool:
    """The head's relay has bytes queued to a reader (its Send-Q): a transfer under way."""
    out = on_rank(head, ["ss", "-Htn", "state", "established", "sport = :25101"]).stdout.split("\n")
    return any(len(f) >= 2 and f[1].isdigit() and int(f[1]) > 0 for f in (line.split() for line in out))


def fetching_pids(worker) -> list[int]:
    """The worker's processes holding a connection to the head's relay port: its get_url fetch (the ranks
    share this machine's PID namespace)."""
    out = on_rank(worker, ["ss", "-Htnp", "state", "established", "dport = :25101"]).stdout
    return sorted({int(pid) for pid in re.findall(r"pid=(\d+)", out)})


@pytest.mark.fault("relay-stalled-reader")
def test_a_worker_fetch_that_stalls_mid_transfer_is_cut_and_frees_the_relay(pair2, clean_tree):
    """The worker's fetch stops reading mid-transfer (its process frozen with kill -STOP; the head's link is
    slowed so the transfer lasts): the head's relay cuts it at its idle limit, stops and frees the port while
    the reader is still frozen; thawed, the fetch fails short of the pin's sha256 and the run stops."""
    head, worker = pair2.ranks
    netdev = head.port["netdev"]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1")
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(INVENTORY), PLAYBOOK,
            "--limit", pair2.group, "-e", f"dspark_preflight_wrapper_path={clean_tree}", *FAST]
    on_rank(head, ["tc", "qdisc", "add", "dev", netdev, "root", "tbf", "rate", "80mbit", "burst", "256kb",
                   "latency", "400ms"])
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    seen: list[str] = []
    frozen: list[int] = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "Fetch the archive from the head over the pair's link" in line:
                break
        wait_until(lambda: sending(head), 60, "the head's relay sending to the worker's fetch")
        pids = fetching_pids(worker)
        assert pids, "no process of the worker holds a connection to the relay"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        frozen = pids
        stalled_at = time.monotonic()
        # fetch timeout 10 s (the relay's connection limit), relay idle timeout 15 s (FAST)
        wait_until(lambda: relay_port_free(head), 60, "the head's relay let go of the frozen reader and its port")
        freed_after = time.monotonic() - stalled_at
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        frozen = []
        seen += proc.stdout.readlines()
        proc.wait(timeout=300)
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        on_rank(head, ["tc", "qdisc", "del", "dev", netdev, "root"], check=False)
    text = " ".join("".join(seen).split())
    assert freed_after < 40, freed_after
    assert proc.returncode != 0, text[-4000:]
    assert f"rank {worker.name}: no pinned archive from head {head.name} over the pair's link ({head.fabric_ip}:25101)" in text, \
        text[-4000:]
    assert "'cut': 1" in text and "'transfers': 0" in text, text[-4000:]  # the head's relay report
    for rank_ in pair2.ranks:
        assert image_ids(rank_) == [], f"{rank_.name} loaded an image although the relay was cut"
    assert on_rank(worker, ["test", "-e", f"/var/lib/dspark/images/{archive().name}"], check=False).returncode == 1


def test_direct_staging_still_sends_each_rank_its_copy(pair2, clean_tree):
    """dspark_image_staging=direct, for pairs whose link cannot carry it: the control node sends two copies."""
    size = archive().stat().st_size
    before = network.pair_received_bytes(pair2)
    run(pair2, clean_tree, "-e", "dspark_image_staging=direct")
    assert network.pair_received_bytes(pair2) - before >= 2 * size
    for rank_ in pair2.ranks:
        assert image_ids(rank_) == [pin()["image_id"]], rank_.name
