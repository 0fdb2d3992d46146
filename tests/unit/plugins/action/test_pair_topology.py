"""The pair_topology action: the pairs of the play worked out once, from the ranks and the groups,
published per host, and refused (every problem named) before anything changes."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.action import pair_topology as action
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import topology
from tests.unit.plugins.action._plugin import make_plugin

HOSTS = {
    "a-head": {"dspark_pair": "a", "dspark_rank": 0, "dspark_fabric_ip": "10.77.1.1"},
    "a-worker": {"dspark_pair": "a", "dspark_rank": 1, "dspark_fabric_ip": "10.77.1.2"},
    "b-head": {"dspark_pair": "b", "dspark_rank": "0", "dspark_fabric_ip": "10.77.2.1"},
    "b-worker": {"dspark_pair": "b", "dspark_rank": "1", "dspark_fabric_ip": "10.77.2.2"},
}
GROUPS = {"dspark_heads": ["a-head", "b-head"], "dspark_workers": ["a-worker", "b-worker"]}


def run(me, hosts=None, groups=None, play=None, **args):
    hosts = HOSTS if hosts is None else hosts
    plugin = make_plugin(action.ActionModule, "gb10.dspark.pair_topology", args)
    groups = dict(GROUPS if groups is None else groups)
    groups.setdefault("all", list(hosts))  # the inventory's hosts, as Ansible's magic variable lists them
    task_vars = {"inventory_hostname": me, "hostvars": hosts, "groups": groups,
                 "ansible_play_hosts_all": list(hosts) if play is None else play}
    return plugin.run(task_vars=task_vars)


@pytest.mark.parametrize("me", ["b-head", "b-worker"])
def test_each_rank_gets_its_pair(me):
    res = run(me)
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert res["ansible_facts"] == {"dspark_pair_head": "b-head", "dspark_pair_worker": "b-worker",
                                    "dspark_pair_members": ["b-head", "b-worker"],
                                    "dspark_pair_head_fabric_ip": "10.77.2.1",
                                    "dspark_play_pairs": PLAY_PAIRS}


PLAY_PAIRS = {"a": {"head": "a-head", "worker": "a-worker"}, "b": {"head": "b-head", "worker": "b-worker"}}


def test_every_host_gets_the_same_one_mapping_of_the_plays_pairs():
    """dspark_play_pairs: the pairs of the play, as the audit's report reads them; a pair with one rank outside a
    limited play (partial_ok) names that rank null."""
    assert {me: run(me)["ansible_facts"]["dspark_play_pairs"] for me in HOSTS} == {me: PLAY_PAIRS for me in HOSTS}
    res = run("b-head", play=["a-head", "b-head", "b-worker"], partial_ok=True)
    assert res["ansible_facts"]["dspark_play_pairs"] == {"a": {"head": "a-head", "worker": None},
                                                          "b": {"head": "b-head", "worker": "b-worker"}}


def test_head_missing_from_its_group_is_refused_naming_host_expected_actual():
    res = run("a-worker", groups={"dspark_heads": ["b-head"], "dspark_workers": ["a-worker", "b-worker"]})
    assert res["failed"] is True
    assert "ansible_facts" not in res
    assert ("rank a-head: inventory groups is neither group, expected dspark_heads only (dspark_rank 0, head)"
            in res["msg"])


def test_worker_in_both_groups_is_refused():
    res = run("a-head", groups={"dspark_heads": ["a-head", "b-head", "b-worker"],
                                "dspark_workers": ["a-worker", "b-worker"]})
    assert res["failed"] is True
    assert "rank b-worker: inventory groups is dspark_workers, dspark_heads, expected dspark_workers only" in res["msg"]


def test_head_listed_as_worker_is_refused():
    res = run("a-head", groups={"dspark_heads": ["b-head", "a-worker"], "dspark_workers": ["a-head", "b-worker"]})
    assert res["failed"] is True
    assert [m["rank"] for m in res["mismatches"]] == ["a-head", "a-worker"]


def test_a_pair_without_worker_is_refused_unless_partial_ok():
    play = ["a-head", "b-head", "b-worker"]
    res = run("a-head", play=play)
    assert res["failed"] is True
    assert "worker hosts is 0 (none), expected exactly one" in res["msg"]
    res = run("a-head", play=play, partial_ok=True)
    assert not res.get("failed"), res
    assert res["ansible_facts"]["dspark_pair_worker"] is None
    assert res["ansible_facts"]["dspark_pair_members"] == ["a-head"]


def test_partial_ok_still_refuses_two_heads():
    hosts = dict(HOSTS)
    hosts["a-worker"] = dict(hosts["a-worker"], dspark_rank=0)
    res = run("b-head", hosts=hosts, groups={"dspark_heads": ["a-head", "a-worker", "b-head"],
                                             "dspark_workers": ["b-worker"]}, partial_ok=True)
    assert res["failed"] is True
    assert "head hosts is 2 (a-head, a-worker), expected exactly one" in res["msg"]


def test_a_host_without_pair_is_refused():
    hosts = dict(HOSTS, stray={"dspark_rank": 0})
    res = run("a-head", hosts=hosts, groups={"dspark_heads": ["a-head", "b-head", "stray"],
                                             "dspark_workers": ["a-worker", "b-worker"]})
    assert res["failed"] is True
    assert "rank stray: pair is absent, expected a pair name (dspark_pair)" in res["msg"]


def test_topology_without_groups_refuses_every_rank():
    records = [{"name": n, "pair": v["dspark_pair"], "rank": int(v["dspark_rank"]), "fabric_ip": None}
               for n, v in HOSTS.items()]
    facts, problems = topology(records, {})
    assert sorted(facts) == sorted(HOSTS)
    assert sorted(p.rank for p in problems) == sorted(HOSTS)


@pytest.mark.parametrize("key, what", [("sk-abcdef0123456789\n", "a line feed (\\n) at its end"),
                                       ("sk-abc def0123456789", "a space inside it"),
                                       ("\tsk-abcdef0123456789", "a tab (\\t) at its start")])
def test_an_api_key_that_cannot_be_a_header_is_refused_naming_the_variable_never_the_value(key, what):
    """`echo KEY | ansible-vault encrypt_string` keeps echo's newline; http.client would print the key."""
    hosts = {name: dict(values) for name, values in HOSTS.items()}
    hosts["a-head"]["dspark_api_key"] = key
    res = run("a-head", hosts=hosts)
    assert res["failed"] is True
    assert "ansible_facts" not in res
    assert res["msg"].startswith(f"rank a-head: dspark_api_key holds {what}")
    assert "sk-abc" not in str(res) and "0123456789" not in str(res)
    assert not run("a-worker", hosts=hosts).get("failed")  # its own key: none


def test_a_printable_key_passes():
    hosts = {name: dict(values, dspark_api_key="sk-abcdef0123456789") for name, values in HOSTS.items()}
    assert not run("b-head", hosts=hosts).get("failed")


# ---- a sliced AWX/AAP job (tests/support/awx_slicing.py makes each slice's inventory by AWX's rule) ----------
def slice_inventories(data, count):
    from tests.support.awx_slicing import effective_count, load, sliced

    for number in range(1, effective_count(len(data["hostvars"]), count) + 1):
        yield number, load(sliced(data, number, count))


def run_play(inventory, hostvars, **args):
    """The topology task on every host of a `hosts: dspark_pairs` play over ``inventory``."""
    play = [h.name for h in inventory.get_hosts("dspark_pairs")]
    plugin = make_plugin(action.ActionModule, "gb10.dspark.pair_topology", args)
    return {me: plugin.run(task_vars={"inventory_hostname": me, "hostvars": hostvars, "ansible_play_hosts_all": play,
                                      "groups": inventory.get_groups_dict()}) for me in play}


def sample_fleet():
    from tests.support.awx_slicing import from_sources
    from tests.support.lanes import ROOT

    return from_sources(str(ROOT / "inventories" / "sample"))  # hosts.yml and fleet.yml: lab01, fleet01 to fleet03


def sim_fleet(tmp_path, pairs):
    """The simulator's inventory of ``pairs`` pairs, as `make sim-up` writes it (sim/dspark_sim/inventory.py)."""
    import sys

    import yaml

    from tests.support.awx_slicing import from_sources
    from tests.support.lanes import ROOT

    if str(ROOT / "sim") not in sys.path:
        sys.path.insert(0, str(ROOT / "sim"))
    from dspark_sim import inventory as sim_inventory

    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(sim_inventory.hosts(pairs)))
    return from_sources(str(path))


@pytest.mark.parametrize("count", [2, 3, 4, 8])
@pytest.mark.parametrize("fleet", ["sample", "sim2", "sim3"])
def test_each_slice_of_a_sliced_job_is_refused_on_every_host_naming_its_half_pairs(fleet, count, tmp_path):
    """AWX's slices of the sample fleet (8 hosts) and the simulator's fleets: every slice holds half pairs, and
    every host of the slice fails the topology task, audit included, with one line per half pair and the fix."""
    data = sample_fleet() if fleet == "sample" else sim_fleet(tmp_path, int(fleet[-1]))
    for number, (inventory, hostvars) in slice_inventories(data, count):
        play = [h.name for h in inventory.get_hosts("dspark_pairs")]
        pairs = sorted({hostvars[h]["dspark_pair"] for h in play})
        for partial_ok in (False, True):
            results = run_play(inventory, hostvars, partial_ok=partial_ok)
            assert all(r.get("failed") is True and "ansible_facts" not in r for r in results.values()), (number, results)
            msg = next(iter(results.values()))["msg"]
            assert all(r["msg"] == msg for r in results.values())
            for host in play:
                pair, rank = hostvars[host]["dspark_pair"], int(hostvars[host]["dspark_rank"])
                missing = "worker" if rank == 0 else "head"
                assert (f"rank {missing} of pair {pair}: {missing} (dspark_rank {1 - rank}) is absent from the run's "
                        f"inventory, expected in it beside its {'head' if rank == 0 else 'worker'} {host}") in msg, msg
            assert f"rank inventory: half pairs is {len(pairs)} (" in msg and "job_slice_count 1" in msg


def test_the_sample_fleet_sliced_in_two_puts_every_head_in_slice_one_and_every_worker_in_slice_two():
    """The host lists AWX makes for the sample fleet at job_slice_count 2, and what slice 1's refusal says."""
    data = sample_fleet()
    (_n1, (first, first_vars)), (_n2, (second, _vars)) = slice_inventories(data, 2)
    assert [h.name for h in first.get_hosts("dspark_pairs")] == ["fleet01-head", "fleet02-head", "fleet03-head",
                                                                 "lab01-head"]
    assert sorted(h.name for h in second.get_hosts("dspark_pairs")) == ["fleet01-worker", "fleet02-worker",
                                                                        "fleet03-worker", "lab01-worker"]
    msg = run_play(first, first_vars)["fleet02-head"]["msg"]
    assert ("rank inventory: half pairs is 4 (fleet01 without its worker, fleet02 without its worker, fleet03 without "
            "its worker, lab01 without its worker), expected none (every pair whole) (a sliced AWX/AAP job") in msg


def test_one_slice_is_the_whole_inventory_and_runs():
    data = sample_fleet()
    [(_number, (inventory, hostvars))] = list(slice_inventories(data, 1))
    results = run_play(inventory, hostvars)
    assert not any(r.get("failed") for r in results.values()), results
    assert results["lab01-worker"]["ansible_facts"]["dspark_pair_head"] == "lab01-head"


def test_a_limit_to_one_head_of_the_sample_names_the_worker_left_out_and_the_audit_goes_on():
    from tests.support.awx_slicing import load

    inventory, hostvars = load(sample_fleet())
    inventory.subset("fleet02-head")
    res = run_play(inventory, hostvars)["fleet02-head"]
    assert res["failed"] is True
    assert ("rank worker of pair fleet02: worker hosts is 0 (none), expected exactly one (fleet02-worker is in the "
            "inventory but not in this play") in res["msg"]
    assert not run_play(inventory, hostvars, partial_ok=True)["fleet02-head"].get("failed")
