"""inventories/sample/hosts.yml (one pair) and inventories/sample/fleet.yml (three pairs, beside it so that
both use the folder's one group_vars) parse with ansible-inventory, each file as operators pass it with
-i and the folder whole (both: four pairs), form pairs by the collection's own pairing check,
give every host what the roles require, carry only
documentation addresses, and render a launch with the collection's own profile logic."""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "inventories"
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin  # noqa: E402
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _profile  # noqa: E402
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import check_pairs  # noqa: E402

INVENTORIES = {"sample/hosts.yml": 1, "sample/fleet.yml": 3, "sample": 4}  # what is given to -i -> pairs
DOCUMENTATION_NETS = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]
# Required by a role but set during the run, not by the inventory.
SET_DURING_THE_RUN = {"dspark_profile_active"}
# Read by a role default without a fallback (roles/image: dspark_image_archive_src).
ALSO_NEEDED = {"dspark_image_archive"}


def inventory(file: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run([str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(SAMPLE / file), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


@lru_cache(maxsize=None)
def listed(file: str) -> dict:
    res = inventory(file, "--list")
    assert res.returncode == 0, res.stderr
    assert "[WARNING]" not in res.stderr, res.stderr
    return json.loads(res.stdout)


def hostvars(file: str) -> dict[str, dict]:
    return listed(file)["_meta"]["hostvars"]


def group_hosts(file: str, group: str) -> set[str]:
    """Hosts of a group and of its child groups."""
    data = listed(file)
    out = set(data.get(group, {}).get("hosts", []))
    for child in data.get(group, {}).get("children", []):
        out |= group_hosts(file, child)
    return out


def required_inventory_vars() -> set[str]:
    """Every option a role entry point requires, from roles/*/meta/argument_specs.yml."""
    required = set()
    for spec_file in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(spec_file.read_text())["argument_specs"].values():
            required |= {k for k, v in (entry.get("options") or {}).items() if v.get("required")}
    return (required - SET_DURING_THE_RUN) | ALSO_NEEDED


@pytest.mark.parametrize("file", INVENTORIES)
def test_graph_shows_the_pairs_heads_and_workers(file):
    res = inventory(file, "--graph")
    assert res.returncode == 0, res.stderr
    for group in ("@dspark_pairs:", "@dspark_heads:", "@dspark_workers:"):
        assert group in res.stdout
    pairs = listed(file)["dspark_pairs"]["children"]
    assert len(pairs) == INVENTORIES[file]
    for group in pairs:
        assert f"@{group}:" in res.stdout


@pytest.mark.parametrize("file", INVENTORIES)
def test_every_pair_has_one_head_and_one_worker_by_the_collections_pairing_check(file):
    hv = hostvars(file)
    hosts = [{"name": h, "pair": v.get("dspark_pair"), "rank": v.get("dspark_rank")} for h, v in sorted(hv.items())]
    summary, problems = check_pairs(hosts, check_images=False)
    assert not problems, [p.message for p in problems]
    assert len(summary) == INVENTORIES[file]
    assert all(set(ranks) == {"head", "worker"} for ranks in summary.values())
    for group in listed(file)["dspark_pairs"]["children"]:
        members = group_hosts(file, group)
        assert {hv[h]["dspark_pair"] for h in members} == {group.removeprefix("pair_")}
        assert sorted(hv[h]["dspark_rank"] for h in members) == [0, 1]
    assert group_hosts(file, "dspark_heads") == {h for h, v in hv.items() if v["dspark_rank"] == 0}
    assert group_hosts(file, "dspark_workers") == {h for h, v in hv.items() if v["dspark_rank"] == 1}
    assert group_hosts(file, "dspark_pairs") == set(hv)


@pytest.mark.parametrize("file", INVENTORIES)
def test_every_host_has_what_the_roles_require(file):
    need = required_inventory_vars()
    assert {"dspark_pin", "dspark_rank", "dspark_pair", "dspark_eth_if", "dspark_ib_hca", "dspark_model_dir",
            "dspark_fabric_ip", "dspark_runtime_manifest_src"} <= need
    for host, v in hostvars(file).items():
        missing = sorted(k for k in need if v.get(k) in (None, ""))
        assert not missing, f"{file}: {host} lacks {missing}"
        assert v.get("ansible_host"), f"{file}: {host} lacks ansible_host"
        _pin.check(v["dspark_pin"])


@pytest.mark.parametrize("file", INVENTORIES)
def test_addresses_are_documentation_placeholders_and_distinct(file):
    hv = hostvars(file)
    for key in ("ansible_host", "dspark_fabric_ip"):
        values = [ipaddress.ip_address(v[key]) for v in hv.values()]
        assert len(set(values)) == len(values), f"{file}: {key} repeats"
        for value in values:
            assert any(value in net for net in DOCUMENTATION_NETS), f"{file}: {key} {value} is not a placeholder"


@pytest.mark.parametrize("file", INVENTORIES)
def test_every_rank_renders_its_launch_with_the_collections_profile_logic(file):
    """What gb10.dspark.profile_resolve would render for each rank, from the profile catalog."""
    catalog = yaml.safe_load((REPO / "roles" / "profile" / "vars" / "main.yml").read_text())["__dspark_profile_catalog"]
    hv = hostvars(file)
    heads = {v["dspark_pair"]: v["dspark_fabric_ip"] for v in hv.values() if v["dspark_rank"] == 0}
    sha = {}
    for host, v in sorted(hv.items()):
        out = _profile.build(catalog, v.get("dspark_profile", "production"), {}, False, v["dspark_pin"],
                             v["dspark_rank"], v["dspark_eth_if"], v["dspark_ib_hca"], heads[v["dspark_pair"]],
                             v["dspark_master_port"], v["dspark_api_port"], v["dspark_served_model_name"])
        assert f"NCCL_SOCKET_IFNAME={v['dspark_eth_if']}" in out["env_file"], host
        assert f"NCCL_IB_HCA={v['dspark_ib_hca']}" in out["env_file"], host
        assert heads[v["dspark_pair"]] in out["argv"], host
        assert not out["experimental"], host
        sha.setdefault(v["dspark_pair"], set()).add(out["profile_sha256"])
    assert all(len(s) == 1 for s in sha.values()), "the ranks of a pair must resolve the identical profile"


def test_the_samples_pin_and_site_settings_exist_once_without_links():
    """One pin, one site file: both inventory files read the folder's group_vars; nothing under
    inventories/ is a link, and no second pin.yml or site.yml exists."""
    assert not [p for p in SAMPLE.rglob("*") if p.is_symlink()]
    # inventories/sim and inventories/sim-fleet2 are the simulator's, written by `make sim-up` (not in git)
    for name in ("pin.yml", "site.yml"):
        assert [p.relative_to(SAMPLE).as_posix() for p in SAMPLE.rglob(name)
                if not p.relative_to(SAMPLE).as_posix().startswith(("sim/", "sim-fleet2/"))] == [
                    f"sample/group_vars/all/{name}"]


@pytest.mark.parametrize("file", ["hosts.yml", "fleet.yml"])
def test_a_copy_of_the_sample_folder_gives_every_host_the_pin_and_site(tmp_path, file):
    """cp -r of the folder (links copied as links, as cp -r does) still gives each host the pin and site."""
    copy = tmp_path / "inventory"
    shutil.copytree(SAMPLE / "sample", copy, symlinks=True)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    res = subprocess.run([str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(copy / file), "--list"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    hv = json.loads(res.stdout)["_meta"]["hostvars"]
    assert len(hv) == 2 * INVENTORIES[f"sample/{file}"]
    for host, v in hv.items():
        _pin.check(v.get("dspark_pin"))
        assert v.get("dspark_evidence_dir") and v.get("dspark_served_model_name"), host
