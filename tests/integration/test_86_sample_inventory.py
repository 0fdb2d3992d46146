"""inventories/sample/hosts.yml works as the template it claims to be. Filled in the way its header
tells an operator to fill it in for a real pair (each host's management and fabric address, the SSH
key, the control-node paths), here pointing at a simulated pair (sim03, lane c's), it passes the preflight in
check mode and changes nothing, run the way a real control node runs it: gb10.dspark.preflight from
the control node that README.md's "Real pairs" block makes (the control_node fixture runs it as
written), from its ~/dspark, outside the checkout. Everything else comes from the sample unchanged: the pair,
head and worker groups, the ranks, the NIC and HCA names, the model directory, the profile, the
ports and the container name. Kept with its own v026 pin, the same run is refused before anything
changes, naming where, the expected value and the actual one."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simhelpers import ROOT, inventory_of, site_of, snapshot

SAMPLE = ROOT / "inventories" / "sample"
PLAYBOOK = "gb10.dspark.preflight"
# The sample's hosts, and the ranks of the simulated pair they are pointed at.
HOSTS = {"lab01-head": "head", "lab01-worker": "worker"}
# What the sample's header says to fill in per host that the simulator decides: the addresses.
PER_HOST = ("ansible_host", "dspark_fabric_ip")
# Site values of the sample that name control-node paths: replaced by the simulator's.
CONTROL_NODE_PATHS = ("dspark_image_archive", "dspark_runtime_manifest_src")


def sim_hostvars(inventory: Path) -> dict[str, dict]:
    res = subprocess.run([str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(inventory), "--list"],
                         cwd=ROOT, env=env(), text=True, capture_output=True, timeout=120, check=True)
    return json.loads(res.stdout)["_meta"]["hostvars"]


def env() -> dict:
    return dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")


def fill_in(dest: Path, pair, evidence: Path, pin: dict | None) -> Path:
    """A copy of inventories/sample with its placeholders replaced for the simulator's pair; with
    ``pin``, that release pin replaces the sample's. Returns the copy's hosts.yml."""
    shutil.copytree(SAMPLE, dest)
    hosts_file = dest / "hosts.yml"
    doc = yaml.safe_load(hosts_file.read_text())
    lab = doc["all"]["children"]["dspark_pairs"]["children"]["pair_lab01"]["hosts"]
    assert set(lab) == set(HOSTS), f"the sample's pair changed: {sorted(lab)}; update this test"
    sim_inventory = inventory_of(pair.head)
    sim = sim_hostvars(sim_inventory)
    for host, role in HOSTS.items():
        rank = getattr(pair, role)
        for key in PER_HOST:
            lab[host][key] = sim[rank.name][key]
    hosts_file.write_text(yaml.safe_dump(doc, sort_keys=False))

    site_file = dest / "group_vars" / "all" / "site.yml"
    ours = yaml.safe_load(site_file.read_text())
    sim_site = site_of(pair)
    for key in CONTROL_NODE_PATHS:
        assert key in ours, f"the sample's site.yml no longer sets {key}; update this test"
        ours[key] = sim_site[key]
    ours["dspark_evidence_dir"] = str(evidence)
    # The unprivileged account the ranks let in (the sample's gb10-ops is the site's to choose).
    connection = yaml.safe_load((sim_inventory / "group_vars" / "all" / "connection.yml").read_text())
    assert "ansible_user" in ours and ours["ansible_user"] != "root", "the sample should log in unprivileged"
    ours["ansible_user"] = connection["ansible_user"]
    site_file.write_text(yaml.safe_dump(ours, sort_keys=False))
    # The SSH key and known hosts of the simulator (the sample leaves the key commented out).
    shutil.copy(sim_inventory / "group_vars" / "all" / "connection.yml", dest / "group_vars" / "all" / "connection.yml")
    if pin is not None:
        (dest / "group_vars" / "all" / "pin.yml").write_text(yaml.safe_dump({"dspark_pin": pin}, sort_keys=False))
    return hosts_file


def preflight(inventory: Path, control_node) -> subprocess.CompletedProcess:
    return control_node.run("ansible-playbook", "-i", str(inventory), PLAYBOOK, "--limit", "pair_lab01",
                            "--check", "--diff", check=False, timeout=900)


def task_hosts(stdout: str) -> dict[str, set[str]]:
    """{task name: hosts it reported ok on} from the default callback's output."""
    out: dict[str, set[str]] = {}
    current = None
    for line in stdout.splitlines():
        m = re.match(r"^TASK \[(?:[\w.]+ : )?(.*?)\] \**$", line)
        if m:
            current = out.setdefault(m[1], set())
            continue
        m = re.match(r"^ok: \[([^\]]+)\]", line)
        if m and current is not None:
            current.add(m[1])
    return out


def recap(stdout: str) -> dict[str, dict[str, int]]:
    out = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", stdout, flags=re.M):
        out[host] = {k: int(v) for k, v in (kv.split("=") for kv in counts.split())}
    return out


@pytest.fixture
def pair(pair_c):
    return pair_c


def test_sample_filled_in_for_the_simulator_passes_preflight_in_check_mode(pair, control_node, tmp_path):
    sim_pin = yaml.safe_load((inventory_of(pair.head) / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]
    inventory = fill_in(tmp_path / "ours", pair, tmp_path / "evidence", pin=sim_pin)
    before = {r.name: snapshot(r) for r in pair.ranks}
    res = preflight(inventory, control_node)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    counts = recap(res.stdout)
    assert set(counts) == set(HOSTS), counts
    for host, c in counts.items():
        assert c["failed"] == 0 and c["unreachable"] == 0 and c["changed"] == 0, (host, c)
    # The per-rank checks ran on both ranks, with the sample's own NIC, HCA and model directory.
    ran = task_hosts(res.stdout)
    task = "Preflight | The rank has the pinned GPU, its fabric links are Up and it holds the pinned model checkpoint"
    assert ran.get(task) == set(HOSTS), (task, ran.get(task), sorted(ran))
    assert not [task for task in ran if "SSH" in task], ran  # no rank is reached but through Ansible
    assert {r.name: snapshot(r) for r in pair.ranks} == before, "preflight in check mode changed a rank"
    # the installed collection's tree was checked (its kind is asserted where a run writes the record: test_85,
    # test_87); check mode wrote nothing on the control node either
    assert "Preflight | The checkout we deploy from is a clean tree" in ran, sorted(ran)
    written = [str(f) for f in (tmp_path / "evidence").rglob("*") if f.is_file()]
    assert written == [], written


def test_sample_with_its_own_v026_pin_is_refused_before_anything_changes(pair, control_node, tmp_path):
    inventory = fill_in(tmp_path / "ours", pair, tmp_path / "evidence", pin=None)
    sample_pin = yaml.safe_load((SAMPLE / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]
    manifest = Path(site_of(pair)["dspark_runtime_manifest_src"])
    actual = hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert actual != sample_pin["runtime_manifest_sha256"]  # the simulator serves its own build, not v026
    before = {r.name: snapshot(r) for r in pair.ranks}
    res = preflight(inventory, control_node)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-6000:]
    flat = " ".join(out.split())
    # The sample pin is well formed (the pairing and pin check passed); the manifest check refuses it.
    assert "control node" in flat, out[-6000:]
    assert sample_pin["runtime_manifest_sha256"] in flat and actual in flat, out[-6000:]
    counts = recap(res.stdout)
    assert all(c["changed"] == 0 for c in counts.values()), counts
    ran = task_hosts(res.stdout)
    assert not ran.get("Preflight | The rank has the pinned GPU, its fabric links are Up and it holds the pinned model "
                       "checkpoint"), ran  # stopped before any rank was read
    assert {r.name: snapshot(r) for r in pair.ranks} == before, "a refused preflight changed a rank"
