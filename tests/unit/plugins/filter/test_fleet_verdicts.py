"""The fleet_verdicts filter: one verdict document per head of the play, FAILED where a rank could not be
judged (_audit.fleet_verdicts), read from the hosts' variables as hostvars gives them."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.filter.fleet_verdicts import FilterModule

verdicts = FilterModule().filters()["fleet_verdicts"]


def host(pair, rank, verdict=None, failure=None) -> dict:
    out = {"dspark_pair": pair, "dspark_rank": rank, "inventory_hostname": f"{pair}-{'worker' if rank else 'head'}"}
    if verdict is not None:
        out["dspark_audit_verdict"] = verdict
    if failure is not None:
        out["dspark_audit_failure"] = failure
    return out


def test_each_heads_verdict_is_reported_in_play_order():
    ok1, drift2 = {"pair": "sim01", "verdict": "OK"}, {"pair": "sim02", "verdict": "DRIFT"}
    hosts = [host("sim01", 0, ok1), host("sim01", 1), host("sim02", 0, drift2), host("sim02", 1)]
    assert verdicts(hosts) == [ok1, drift2]


def test_a_rank_that_could_not_be_judged_makes_its_pair_failed_with_every_reason_head_first():
    hosts = [host("sim01", 1, failure="rank sim01-worker: profile missing"),
             host("sim01", 0, {"pair": "sim01", "verdict": "OK"}, failure="rank sim01-head: judge failed"),
             host("sim02", 0, {"pair": "sim02", "verdict": "OK"}), host("sim02", 1)]
    assert verdicts(hosts) == [
        {"pair": "sim01", "verdict": "FAILED", "reasons": ["rank sim01-head: judge failed", "rank sim01-worker: profile missing"]},
        {"pair": "sim02", "verdict": "OK"}]


def test_a_failed_worker_alone_fails_its_pair_even_when_the_head_judged_ok():
    hosts = [host("sim03", 0, {"pair": "sim03", "verdict": "OK"}), host("sim03", 1, failure="rank sim03-worker: boom")]
    assert verdicts(hosts) == [{"pair": "sim03", "verdict": "FAILED", "reasons": ["rank sim03-worker: boom"]}]


def test_a_head_without_verdict_or_failure_gives_nothing_and_a_worker_whose_head_is_out_of_the_play_neither():
    assert verdicts([host("sim04", 0), host("sim05", 1, failure="rank sim05-worker: x")]) == []


@pytest.mark.parametrize("bad", ["sim01", None, [1, 2]])
def test_an_input_that_is_not_a_list_of_hosts_is_a_filter_error(bad):
    with pytest.raises(AnsibleFilterError, match="list of hosts' variables"):
        verdicts(bad)


def test_the_filter_reads_the_audit_roles_public_facts_never_its_internals():
    """The verdict is the audit role's public result (dspark_audit_verdict, dspark_audit_failure in its
    argument_specs); an internal __dspark_audit_ name is not read."""
    private = {"dspark_pair": "sim01", "dspark_rank": 0, "__dspark_audit_verdict": {"pair": "sim01", "verdict": "OK"}}
    assert verdicts([private]) == []
    assert verdicts([host("sim01", 0, {"pair": "sim01", "verdict": "OK"})]) == [{"pair": "sim01", "verdict": "OK"}]
