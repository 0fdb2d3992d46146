"""The fleet_verdicts filter: one verdict document per pair of the play whose head is in it, FAILED where a rank
could not be judged (_audit_verdict.fleet_verdicts), over the topology's one mapping of the play's pairs
(dspark_play_pairs) and the ranks' facts as hostvars gives them; fleet_expected_pairs names the pairs the report
expects."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.filter.fleet_verdicts import FilterModule
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import host_records, play_pairs, topology

verdicts = FilterModule().filters()["fleet_verdicts"]
expected = FilterModule().filters()["fleet_expected_pairs"]


def name(pair, rank) -> str:
    return f"{pair}-{'worker' if rank else 'head'}"


def host(pair, rank, verdict=None, failure=None) -> tuple[str, dict]:
    out = {"dspark_pair": pair, "dspark_rank": rank, "dspark_fabric_ip": f"10.0.0.{rank + 1}",
           "inventory_hostname": name(pair, rank)}
    if verdict is not None:
        out["dspark_audit_verdict"] = verdict
    if failure is not None:
        out["dspark_audit_failure"] = failure
    return name(pair, rank), out


def play(*hosts) -> tuple[dict, dict]:
    """(dspark_play_pairs, hostvars) as the play has them after the topology role (partial_ok, as the audit runs it)."""
    hostvars = dict(hosts)
    groups = {"dspark_heads": [h for h, v in hostvars.items() if v["dspark_rank"] == 0],
              "dspark_workers": [h for h, v in hostvars.items() if v["dspark_rank"] == 1]}
    facts, problems = topology(host_records(list(hostvars), hostvars), groups, partial_ok=True)
    assert problems == []
    return play_pairs(facts), hostvars


def test_each_heads_verdict_is_reported_per_pair():
    ok1, drift2 = {"pair": "sim01", "verdict": "OK"}, {"pair": "sim02", "verdict": "DRIFT"}
    pairs, hostvars = play(host("sim02", 0, drift2), host("sim01", 0, ok1), host("sim01", 1), host("sim02", 1))
    assert sorted(verdicts(pairs, hostvars), key=lambda d: d["pair"]) == [ok1, drift2]
    assert sorted(expected(pairs)) == ["sim01", "sim02"]


def test_a_rank_that_could_not_be_judged_makes_its_pair_failed_with_every_reason_head_first():
    pairs, hostvars = play(host("sim01", 1, failure="rank sim01-worker: profile missing"),
                           host("sim01", 0, {"pair": "sim01", "verdict": "OK"}, failure="rank sim01-head: judge failed"),
                           host("sim02", 0, {"pair": "sim02", "verdict": "OK"}), host("sim02", 1))
    assert verdicts(pairs, hostvars) == [
        {"pair": "sim01", "verdict": "FAILED", "reasons": ["rank sim01-head: judge failed", "rank sim01-worker: profile missing"]},
        {"pair": "sim02", "verdict": "OK"}]


def test_a_failed_worker_alone_fails_its_pair_even_when_the_head_judged_ok():
    pairs, hostvars = play(host("sim03", 0, {"pair": "sim03", "verdict": "OK"}), host("sim03", 1, failure="rank sim03-worker: boom"))
    assert verdicts(pairs, hostvars) == [{"pair": "sim03", "verdict": "FAILED", "reasons": ["rank sim03-worker: boom"]}]


def test_a_head_without_verdict_or_failure_gives_nothing_and_a_worker_whose_head_is_out_of_the_play_neither():
    pairs, hostvars = play(host("sim04", 0), host("sim05", 1, failure="rank sim05-worker: x"))
    assert verdicts(pairs, hostvars) == []
    assert expected(pairs) == ["sim04"]  # the report names sim04 as missing; sim05 has no head in the play


@pytest.mark.parametrize("bad", ["sim01", None, [1, 2], {"sim01": "sim01-head"}])
def test_an_input_that_is_not_the_plays_pairs_is_a_filter_error(bad):
    with pytest.raises(AnsibleFilterError, match="the play's pairs"):
        verdicts(bad, {})
    with pytest.raises(AnsibleFilterError, match="the play's pairs"):
        expected(bad)


def test_the_filter_reads_the_audit_roles_public_facts_never_its_internals():
    """The verdict is the audit role's public result (dspark_audit_verdict, dspark_audit_failure in its
    argument_specs); an internal __dspark_audit_ name is not read."""
    pairs, hostvars = play(host("sim01", 0))
    hostvars["sim01-head"]["__dspark_audit_verdict"] = {"pair": "sim01", "verdict": "OK"}
    assert verdicts(pairs, hostvars) == []
    pairs, hostvars = play(host("sim01", 0, {"pair": "sim01", "verdict": "OK"}))
    assert verdicts(pairs, hostvars) == [{"pair": "sim01", "verdict": "OK"}]


@pytest.mark.parametrize("name", ["fleet_verdicts", "fleet_expected_pairs"])
def test_each_filter_has_documentation_that_parses_and_names_it(name):
    """ansible-doc reads plugins/filter/<name>.yml: it must be YAML whose DOCUMENTATION names the filter."""
    from pathlib import Path

    import yaml

    doc = yaml.safe_load((Path(__file__).resolve().parents[4] / "plugins" / "filter" / f"{name}.yml").read_text())
    assert doc["DOCUMENTATION"]["name"] == name and "_input" in doc["DOCUMENTATION"]["options"]
    assert name in FilterModule().filters()
