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
    task_vars = {"inventory_hostname": me, "hostvars": hosts, "groups": GROUPS if groups is None else groups,
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
