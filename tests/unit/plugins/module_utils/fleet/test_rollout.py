"""A release rollout's plan (the canary, waves of whole pairs), its canary check and its per-wave report."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _rollout as R


def _records(*pairs, reverse_ranks=False):
    out = []
    for pair in pairs:
        ranks = [(f"{pair}-head", 0), (f"{pair}-worker", 1)]
        for name, rank in reversed(ranks) if reverse_ranks else ranks:
            out.append({"name": name, "pair": pair, "rank": rank, "fabric_ip": None})
    return out


def test_the_canary_comes_first_and_every_wave_holds_whole_pairs_head_then_worker():
    plan = R.plan(_records("sim04", "sim02", "sim01", "sim03", reverse_ranks=True), 1, 2)
    assert plan["canary"] == ["sim01"] and plan["waves"] == [["sim02", "sim03"], ["sim04"]]
    assert plan["canary_hosts"] == ["sim01-head", "sim01-worker"]
    assert plan["rest_hosts"] == ["sim02-head", "sim02-worker", "sim03-head", "sim03-worker", "sim04-head",
                                  "sim04-worker"]
    assert plan["wave_hosts"] == 4
    # serial batches of wave_hosts over rest_hosts are exactly the waves' pairs
    batches = [plan["rest_hosts"][i:i + 4] for i in range(0, 6, 4)]
    assert [sorted({h.split("-")[0] for h in b}) for b in batches] == plan["waves"]


def test_a_host_that_forms_no_pair_goes_with_the_canary_whose_topology_refuses_the_run():
    records = _records("a", "b") + [{"name": "stray", "pair": None, "rank": None}]
    plan = R.plan(records, "1", "1")
    assert plan["canary_hosts"] == ["a-head", "a-worker", "stray"] and plan["waves"] == [["b"]]


@pytest.mark.parametrize("canary, wave, name", [(0, 1, "dspark_rollout_canary_pairs"), (1, "two", "dspark_rollout_wave_pairs"),
                                                (True, 1, "dspark_rollout_canary_pairs"), (1, -1, "dspark_rollout_wave_pairs")])
def test_a_setting_that_is_not_a_count_of_pairs_is_refused_by_name(canary, wave, name):
    with pytest.raises(ValueError, match=rf"^{name} is .*expected a whole number of pairs, 1 or more"):
        R.plan(_records("a"), canary, wave)


def _hostvars(passed=()):
    hv = {}
    for pair in ("c1", "c2", "p3"):
        for name, rank in ((f"{pair}-head", 0), (f"{pair}-worker", 1)):
            hv[name] = {"dspark_pair": pair, "dspark_rank": rank}
            if name in passed:
                hv[name]["__dspark_rollout_canary_passed"] = True
    return hv


def test_no_other_pair_starts_unless_every_canary_rank_passed():
    canary = ["c1-head", "c1-worker", "c2-head", "c2-worker"]
    assert R.canary_problem(["p3-head", "p3-worker"], canary, _hostvars(canary)) is None
    why = R.canary_problem(["p3-head", "p3-worker"], canary, _hostvars(["c1-head", "c1-worker", "c2-head"]))
    assert why.startswith("pair p3 not started: the canary pair c2 did not pass")
    assert "no other pair is touched" in why
    assert R.canary_problem(["p3-head"], [], _hostvars()).startswith("no canary pair ran")


def _rows():
    return [{"pair": "c1", "ranks": ["c1-head", "c1-worker"], "verdict": "PASS", "phase": "Gate", "rank": None, "reason": ""},
            {"pair": "p2", "ranks": ["p2-head", "p2-worker"], "verdict": "FAILED", "phase": "Engine",
             "rank": "p2-head", "reason": "rank p2-head: the head still has 1 request(s) in flight"},
            {"pair": "p3", "ranks": ["p3-head", "p3-worker"], "verdict": "PASS", "phase": "Gate", "rank": None, "reason": ""},
            {"pair": "p4", "ranks": ["p4-head", "p4-worker"], "verdict": "NOT STARTED", "phase": "Converge",
             "rank": "p4-head", "reason": "pair p4 not started"}]


def test_the_report_gives_each_step_its_pairs_times_and_verdicts_from_the_summary_rows():
    rest = ["p2-head", "p2-worker", "p3-head", "p3-worker", "p4-head", "p4-worker"]
    steps = [{"kind": "canary", "hosts": ["c1-head", "c1-worker"], "started": "t0", "ended": "t1", "failed": {}},
             {"kind": "stage", "hosts": rest, "started": "t1", "ended": "t2", "failed": {}},
             {"kind": "wave", "hosts": rest[:4], "started": "t2", "ended": "t3", "failed": {"p2-head": True, "p2-worker": True}},
             {"kind": "wave", "hosts": rest[4:], "started": "t3", "ended": "t4", "failed": {"p4-head": True, "p4-worker": True}}]
    plan = {"canary": ["c1"], "waves": [["p2", "p3"], ["p4"]]}
    doc = R.report(steps, _rows(), plan)
    assert [(s["step"], s["wave"], s["started"], s["ended"], s["verdict"]) for s in doc["steps"]] == [
        ("canary", None, "t0", "t1", "PASS"), ("stage", None, "t1", "t2", "PASS"), ("wave", 1, "t2", "t3", "FAILED"),
        ("wave", 2, "t3", "t4", "FAILED")]
    wave1 = {e["pair"]: e for e in doc["steps"][2]["pairs"]}
    assert wave1["p3"]["verdict"] == "PASS" and wave1["p2"]["verdict"] == "FAILED"
    assert wave1["p2"]["rank"] == "p2-head" and "in flight" in wave1["p2"]["reason"]
    assert doc["steps"][3]["pairs"][0]["verdict"] == "NOT STARTED"
    assert doc["not_started"] == ["p4"] and "failure budget" in doc["halted"]
    table = R.table(doc)
    assert "wave 1    t2 -> t3  p2 FAILED, p3 PASS" in table and "HALTED" in table


def test_a_failed_canary_halts_and_names_every_pair_left_untouched():
    rows = [{"pair": "c1", "ranks": ["c1-head", "c1-worker"], "verdict": "FAILED", "phase": "Gate", "rank": "c1-head",
             "reason": "gate FAIL"}]
    steps = [{"kind": "canary", "hosts": ["c1-head", "c1-worker"], "started": "t0", "ended": "t1",
              "failed": {"c1-head": True, "c1-worker": True}}]
    doc = R.report(steps, rows, {"canary": ["c1"], "waves": [["p2", "p3"], ["p4"]]})
    assert doc["steps"][0]["verdict"] == "FAILED" and doc["steps"][0]["pairs"][0]["reason"] == "gate FAIL"
    assert doc["not_started"] == ["p2", "p3", "p4"]
    assert doc["halted"] == "the canary pair c1 did not pass: no other pair was touched"
