"""The simulated bed: real SSH, one engine per rank, fake GPU/fabric, the stand-in pair."""
from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from simhelpers import PAIRS, UP_ARGS, ansible, container_state, fleet2, http_get, on_rank, playbook, sim_cli, site
from simhelpers import wait_for
from dspark_sim import layout
from dspark_sim import rank as sim_rank


def test_ansible_pings_every_rank_over_ssh(sim):
    res = ansible("all", "-m", "ansible.builtin.ping", "-o")
    answered = re.findall(r"^(\S+) \| SUCCESS", res.stdout, re.M)
    assert sorted(answered) == sorted(r.name for p in sim for r in p.ranks)
    assert len(answered) == 2 * PAIRS


def test_inventory_forms_pairs_with_head_rank0(sim):
    inv = json.loads(ansible("--list", tool="ansible-inventory").stdout)
    for pair in sim:
        hosts = inv[pair.group]["hosts"]
        assert sorted(hosts) == sorted([pair.head.name, pair.worker.name])
        hv = inv["_meta"]["hostvars"]
        assert hv[pair.head.name]["dspark_rank"] == 0 and hv[pair.worker.name]["dspark_rank"] == 1
        assert hv[pair.head.name]["dspark_eth_if"] != hv[pair.worker.name]["dspark_eth_if"]
    assert inv["dspark_heads"]["hosts"] == [p.head.name for p in sim]


def test_each_rank_is_a_host_of_its_own(sim):
    head, worker = sim[0].ranks
    ids = {r.name: on_rank(r, ["docker", "info", "--format", "{{.ID}}"]).stdout.strip() for p in sim for r in p.ranks}
    assert len(set(ids.values())) == 2 * PAIRS, ids
    assert on_rank(head, ["hostname"]).stdout.strip() == head.name
    # /etc/dspark is private to each rank: a file written on the head is absent on the worker and on the host.
    on_rank(head, ["sh", "-c", "echo head-only > /etc/dspark/probe"])
    try:
        assert on_rank(worker, ["test", "-e", "/etc/dspark/probe"], check=False).returncode == 1
        assert not __import__("os").path.exists("/etc/dspark/probe")
    finally:
        on_rank(head, ["rm", "-f", "/etc/dspark/probe"])
    # Each rank sees only its own links, named like a GB10's ports.
    links = on_rank(head, ["ip", "-br", "link"]).stdout
    assert "enP7s7" in links and "enp1s0f0np0" in links and "enp1s0f1np1" not in links


def test_ranks_reach_each_other_over_the_fabric_link(sim):
    head, worker = sim[0].ranks
    # The worker's sshd listens on the management port only, so the fabric answers with a refusal:
    # the packet crossed the 'cable' and came back.
    res = on_rank(head, ["bash", "-c", f"exec 3<>/dev/tcp/{worker.fabric_ip}/22"], check=False)
    assert "Connection refused" in res.stderr
    res = on_rank(head, ["bash", "-c", f"exec 3<>/dev/tcp/{worker.mgmt_ip}/22 && echo open"], check=False)
    assert res.stdout.strip() == "open"


def test_ranks_trust_the_control_node_only(sim):
    """No rank logs in to another: the collection reaches each rank through Ansible alone, so a
    pair needs no SSH trust between its ranks (and a stolen head gives no way onto its worker)."""
    head, worker = sim[0].ranks
    for rank_ in (head, worker):
        assert on_rank(rank_, ["test", "-e", "/root/.ssh/id_ed25519"], check=False).returncode == 1
    for src, dst in ((head, worker), (worker, head)):
        res = on_rank(src, ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "ConnectTimeout=5",
                            dst.mgmt_ip, "true"], check=False)
        assert res.returncode == 255, (src.name, dst.name, res.stderr)


def test_ranks_refuse_root_and_the_operator_needs_become(sim):
    """As many sites do, the ranks refuse SSH logins as root; Ansible logs in as an unprivileged
    operator, who cannot reach Docker without become, and becomes root through sudo."""
    head = sim[0].head
    res = subprocess.run([*sim_rank.ssh_login(head, "root"), "--", "true"],
                         capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 255 and "Permission denied" in res.stderr, res.stderr
    plain = ansible(head.name, "-m", "ansible.builtin.command", "-a", "id -un", "-o").stdout
    assert f"rc=0 | (stdout) {layout.OPERATOR}" in plain, plain
    refused = ansible(head.name, "-m", "ansible.builtin.command", "-a", "docker info", check=False)
    assert refused.returncode != 0 and "permission denied" in refused.stdout.lower(), refused.stdout[-800:]
    root = ansible(head.name, "--become", "-m", "ansible.builtin.command", "-a", "id -un", "-o").stdout
    assert "rc=0 | (stdout) root" in root, root


def test_bridge_survives_a_forward_drop_policy(sim):
    """A host dockerd sets FORWARD to DROP; with bridge-nf on, only the simulator's own rule keeps
    rank-to-rank traffic on the management bridge alive."""
    head, worker = sim[0].ranks
    probe = ["bash", "-c", f"timeout 3 bash -c 'exec 3<>/dev/tcp/{worker.mgmt_ip}/22' && echo open"]
    policy = next(l for l in subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True,
                                            check=True).stdout.splitlines() if l.startswith("-P FORWARD"))
    rule = next(l for l in subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True,
                                          check=True).stdout.splitlines() if "dsim-bridge" in l)
    subprocess.run(["iptables", "-w", "-P", "FORWARD", "DROP"], check=True)
    try:
        assert on_rank(head, probe, check=False).stdout.strip() == "open"
        subprocess.run(["iptables", "-w", "-D", *rule.split()[1:]], check=True)
        assert on_rank(head, probe, check=False).stdout.strip() == ""
    finally:
        subprocess.run(["iptables", "-w", "-P", "FORWARD", policy.split()[2]], check=True)
        sim_cli(*UP_ARGS)  # puts the rule back
    assert any("dsim-bridge" in l for l in subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True,
                                                          text=True, check=True).stdout.splitlines())


def test_fake_gpu_answers_as_a_gb10(sim):
    head = sim[0].head
    out = on_rank(head, ["nvidia-smi", "--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader"]).stdout
    assert out.strip() == "NVIDIA GB10, 12.1, [N/A]"


def test_ibdev2netdev_follows_the_link_state(sim):
    head = sim[1].head
    hca, netdev = layout.HEAD_PORT["hca"], layout.HEAD_PORT["netdev"]

    def line():
        return next(l for l in on_rank(head, ["ibdev2netdev"]).stdout.splitlines() if l.startswith(hca + " "))

    assert line() == f"{hca} port 1 ==> {netdev} (Up)"
    on_rank(head, ["ip", "link", "set", netdev, "down"])
    try:
        assert line() == f"{hca} port 1 ==> {netdev} (Down)"
    finally:
        on_rank(head, ["ip", "link", "set", netdev, "up"])
    wait_for(lambda: line().endswith("(Up)"), 10, what="link up again")


def test_smoke_playbook_reaches_every_rank_and_engine(sim):
    res = ansible("playbooks/sim_smoke.yml", tool="ansible-playbook")
    assert re.search(r"failed=0\s", res.stdout) and res.stdout.count("ok=") == 2 * PAIRS


@pytest.mark.fault("pair-isolation-crash")
def test_a_worker_crashing_at_start_fails_its_own_pair_only(sim, clean_tree, host_vars):
    """The session's first provision: sim02's worker crashes at start while the other pairs provision from nothing.
    They end gated and serving; sim02's engines are both stopped; the run exits non-zero and says, per pair, the
    verdict, the phase and the reason, in the terminal and in the evidence folder. (The next test's provision then
    brings sim02 up and leaves the others as they are.)"""
    healthy, broken = sim[0], sim[1]
    host_vars(broken.worker, {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "1", "DSPARK_SIM_FAULT": "crash_on_start"}})
    runs = Path(site()["dspark_evidence_dir"]) / "runs"
    before = set(runs.glob("*.json")) if runs.is_dir() else set()
    res = playbook("provision.yml", clean_tree, check=False)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 2, out[-5000:]
    status, body = http_get(f"http://{healthy.head.mgmt_ip}:8888/v1/models")
    assert status == 200, body
    gate = json.loads((Path(site()["dspark_evidence_dir"]) / healthy.name / "runtime-gate.json").read_text())
    assert gate["status"] == "PASS"
    for rank in broken.ranks:
        assert container_state(rank).get("Running") is not True, (rank.name, container_state(rank))
    assert f"PAIR SUMMARY provision.yml: {PAIRS - 1} of {PAIRS} pairs PASS" in out, out[-3000:]
    written = sorted(set(runs.glob("*.json")) - before)
    assert len(written) == 1, written
    rows = {r["pair"]: r for r in json.loads(written[0].read_text())["pairs"]}
    assert {p.name: rows[p.name]["verdict"] for p in sim if p is not broken} == {p.name: "PASS" for p in sim if p is not broken}
    # both ranks' waits fail at once (each reads its own engine), either may be the one named first
    assert (rows[broken.name]["verdict"], rows[broken.name]["phase"]) == ("FAILED", "Engine"), rows[broken.name]
    assert rows[broken.name]["rank"] in (broken.head.name, broken.worker.name)
    assert "the pair's engine exited on worker" in rows[broken.name]["reason"]
    # the healthy pairs' ranks never failed: no rank of them is in the recap with a failure
    recap = res.stdout.split("PLAY RECAP")[-1]
    assert all(re.search(rf"^{r.name}\s.*failed=0\s", recap, re.M) for p in sim if p is not broken for r in p.ranks), recap


def test_provision_serves_every_pair_and_is_idempotent(sim, clean_tree, host_vars):
    cold = [p for p in sim if container_state(p.head).get("Running") is not True]  # the crashed pair of the test above
    assert cold, "no pair to start: the test above left every pair serving"
    for rank in (r for p in cold for r in p.ranks):
        # a start of 5 s, not the site's 1 s: on a loaded machine more than a second can pass between the head's
        # start and the wait's first look, and the wait (whose lines this test reads) would find the pair serving.
        # (The one-pair lane of this pair starts by taking its engines away, this start's settings with them.)
        host_vars(rank, {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "5"}})
    res = playbook("provision.yml", clean_tree)
    assert "failed=0" in res.stdout
    for pair in sim:
        status, body = http_get(f"http://{pair.head.mgmt_ip}:8888/v1/models")
        assert status == 200, body
        card = json.loads(body)["data"][0]
        assert card["id"] == "deepseek-v4-flash-dspark" and card["max_model_len"] == 327680
        # The worker is headless: nothing listens on 8888 there.
        with socket.socket() as s:
            s.settimeout(2)
            assert s.connect_ex((pair.worker.mgmt_ip, 8888)) != 0
    for pair in cold:
        # Plain ansible-playbook shows each pair's cold start: the gb10.dspark.progress callback (enabled in
        # ansible.cfg) prints the head's phase lines from the wait's retries, then its READY line.
        head = re.escape(pair.head.name)
        phase = re.search(rf"^\[{head}\] \d\d:\d\d:\d\d waited \d+/3600 s; head \S.*; worker\b", res.stdout, re.M)
        ready = re.search(rf"^\[{head}\] READY served=deepseek-v4-flash-dspark kv_cache_size_tokens=\d+ after \d+ s$",
                          res.stdout, re.M)
        assert phase and ready and phase.start() < ready.start(), res.stdout[-6000:]
        # one line per retry of the wait's task: printed from the retry events, not by the wait itself
        retries = re.findall(rf"^FAILED - RETRYING: \[{head}\]: Engine \| Wait until the pair serves", res.stdout, re.M)
        phases = re.findall(rf"^\[{head}\] \d\d:\d\d:\d\d waited ", res.stdout, re.M)
        assert len(retries) == len(phases) >= 1, (retries, phases)
    status = json.loads(sim_cli("status").stdout)
    assert status["up"] and status["pairs"] == PAIRS + len(fleet2())  # the second fleet's pairs are up too
    assert all(r["sshd"] and r["dockerd"] for r in status["ranks"]), status["ranks"]
    served = {r.name for p in sim for r in p.ranks}  # this fleet's ranks: the second fleet's are not provisioned here
    assert all(r["containers"] == ["dspark_vllm running"] for r in status["ranks"] if r["name"] in served)
    started = {r.name: container_state(r)["StartedAt"] for p in sim for r in p.ranks}
    again = playbook("provision.yml", clean_tree)
    assert re.search(r"changed=0\s", again.stdout), again.stdout[-3000:]
    assert started == {r.name: container_state(r)["StartedAt"] for p in sim for r in p.ranks}


def test_head_serves_only_after_the_worker_joined_and_dies_with_it(sim, clean_tree):
    head, worker = sim[1].ranks
    url = f"http://{head.mgmt_ip}:8888/v1/models"
    if not container_state(head)["Running"]:
        playbook("provision.yml", clean_tree, "--limit", sim[1].group)
    # Killing the worker makes the head exit non-zero.
    on_rank(worker, ["docker", "kill", "dspark_vllm"])

    def head_exited():
        state = container_state(head)
        return state if not state["Running"] else None

    st = wait_for(head_exited, 60, what="head exit")
    assert st["ExitCode"] != 0
    # A head alone never serves: its API stays closed while it waits for rank 1.
    on_rank(head, ["docker", "start", "dspark_vllm"])
    for _attempt in range(6):
        assert container_state(head)["Running"]
        with socket.socket() as s:
            s.settimeout(1)
            assert s.connect_ex((head.mgmt_ip, 8888)) != 0
        __import__("time").sleep(0.5)
    on_rank(worker, ["docker", "start", "dspark_vllm"])
    wait_for(lambda: http_get(url)[0] == 200 if _port_open(head.mgmt_ip) else False, 90, what="head ready")
    logs = on_rank(worker, ["docker", "logs", "dspark_vllm"]).stdout + on_rank(worker, ["docker", "logs", "dspark_vllm"]).stderr
    assert "headless" in logs


def _port_open(ip: str) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((ip, 8888)) == 0


def test_sim_up_again_changes_nothing(sim):
    ranks = [r for p in sim + fleet2() for r in p.ranks]  # both fleets'
    pids = {r.name: (r.sub("run") / "dockerd.pid").read_text() for r in ranks}
    res = sim_cli(*UP_ARGS)
    assert "simulator up" in res.stdout
    assert pids == {r.name: (r.sub("run") / "dockerd.pid").read_text() for r in ranks}
