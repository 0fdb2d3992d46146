"""Pairing and cross-rank image identity."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import (
    check_pairs, host_records, pairs_of, play_pairs, topology)

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def host(name, pair, rank, image_id=A, store="classic"):
    return {"name": name, "pair": pair, "rank": rank, "image_id": image_id, "image_store": store}


def test_good_pairs():
    pairs, problems = check_pairs([host("h1", "p1", 0), host("w1", "p1", 1), host("h2", "p2", 0), host("w2", "p2", 1)], A)
    assert problems == []
    assert pairs == {"p1": {"head": "h1", "worker": "w1"}, "p2": {"head": "h2", "worker": "w2"}}


def test_worker_with_other_image_names_rank_expected_actual():
    _unused, problems = check_pairs([host("h1", "p1", 0), host("w1", "p1", 1, image_id=B)], A)
    msgs = [p.message for p in problems]
    assert f"rank w1: image ID is {B}, pinned {A}" in msgs
    assert any(m.startswith(f"rank w1: image ID is {B}, its head h1 holds {A}") for m in msgs)


def test_ranks_disagree_without_a_pin():
    _unused, problems = check_pairs([host("h1", "p1", 0, image_id=B), host("w1", "p1", 1)])
    assert [p.rank for p in problems] == ["w1"]
    assert problems[0].expected == B and problems[0].actual == A


def test_missing_worker_and_two_heads():
    _unused, problems = check_pairs([host("h1", "p1", 0), host("h2", "p1", 0)], check_images=False)
    msgs = " | ".join(p.message for p in problems)
    assert "head hosts is 2 (h1, h2), expected exactly one" in msgs
    assert "worker hosts is 0 (none), expected exactly one" in msgs


def test_host_in_two_pairs_and_bad_rank():
    _unused, problems = check_pairs([host("h1", "p1", 0), host("w1", "p1", 1), host("w1", "p2", 1), host("x", "p3", 2)],
                                    check_images=False)
    msgs = " | ".join(p.message for p in problems)
    assert "rank w1: pair is p2, already in p1" in msgs
    assert "rank x: dspark_rank is 2" in msgs


def test_host_without_pair():
    _unused, problems = check_pairs([{"name": "lonely", "rank": 0}], check_images=False)
    assert problems[0].rank == "lonely" and problems[0].item == "pair"


def test_rank_that_never_reported_an_image():
    _unused, problems = check_pairs([host("h1", "p1", 0), host("w1", "p1", 1, image_id=None)], A)
    assert problems[0].rank == "w1" and "did not run" in problems[0].message


def test_mixed_image_stores_are_refused():
    _unused, problems = check_pairs([host("h1", "p1", 0), host("w1", "p1", 1, store="containerd")])
    assert any(p.item == "image store" for p in problems)


@pytest.mark.parametrize("bad", ["../etc", "a/b", ".hidden", "", " sim01", "x" * 65, "sim01\n"])
def test_a_pair_name_that_could_leave_a_folder_is_refused(bad):
    hosts = [{"name": "h", "pair": bad, "rank": 0}, {"name": "w", "pair": bad, "rank": 1}]
    _unused, problems = check_pairs(hosts, check_images=False)
    if bad == "":
        assert problems and all(p.item == "pair" for p in problems)
        return
    assert [p.rank for p in problems] == ["h", "w"]
    assert all(p.item == "dspark_pair" and p.actual == bad and "1 to 64 letters" in p.message for p in problems)


def test_the_names_the_collection_uses_are_accepted():
    for good in ("sim01", "lab01", "fleet-03", "pair_a.b"):
        hosts = [{"name": "h", "pair": good, "rank": 0}, {"name": "w", "pair": good, "rank": 1}]
        assert check_pairs(hosts, check_images=False)[1] == []


HOSTVARS = {"p-head": {"dspark_pair": "p", "dspark_rank": "0", "dspark_fabric_ip": "10.0.0.1", "other": 1},
            "p-worker": {"dspark_pair": "p", "dspark_rank": 1},
            "loose": {"x": 1}, "bad": {"dspark_pair": "../up", "dspark_rank": 0}, "novars": None}


def test_host_records_read_each_hosts_variables_once_for_the_action_and_the_cli():
    assert host_records(["p-head", "loose", "novars", "absent"], HOSTVARS) == [
        {"name": "p-head", "pair": "p", "rank": 0, "fabric_ip": "10.0.0.1"},
        {"name": "loose", "pair": None, "rank": None, "fabric_ip": None},
        {"name": "novars", "pair": None, "rank": None, "fabric_ip": None},
        {"name": "absent", "pair": None, "rank": None, "fabric_ip": None}]


def test_pairs_of_maps_each_host_the_topology_would_group_and_leaves_out_a_refused_name():
    records = host_records(list(HOSTVARS), HOSTVARS)
    assert pairs_of(records) == {"p-head": "p", "p-worker": "p"}
    assert pairs_of([]) == {}


def test_play_pairs_is_the_one_mapping_of_pairs_to_head_and_worker():
    groups = {"dspark_heads": ["p-head", "q-head"], "dspark_workers": ["p-worker"]}
    records = host_records(["q-head", "p-head", "p-worker"],
                           {**HOSTVARS, "q-head": {"dspark_pair": "q", "dspark_rank": 0, "dspark_fabric_ip": "10.0.1.1"}})
    facts, problems = topology(records, groups, partial_ok=True)
    assert problems == []
    assert play_pairs(facts) == {"p": {"head": "p-head", "worker": "p-worker"}, "q": {"head": "q-head", "worker": None}}
    assert list(play_pairs(facts)) == ["p", "q"]
