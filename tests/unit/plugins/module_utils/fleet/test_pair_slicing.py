"""A sliced AWX/AAP job never runs half a pair: the topology refuses a slice that holds one rank of a pair
whose other rank its inventory lacks, naming every such pair, the rank missing and the fix, even for the
read-only audit (partial_ok); a --limit that leaves a rank out stays what it was (named, and accepted by
the audit). The slices are made by AWX's rule (tests/support/awx_slicing.py) for fleets of 1 to 10 pairs
and slice counts 1 to 8, under the usual host names and under the heads-first names that
docs/fleet-scale.md describes."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import SLICING_FIX, half_pairs, topology
from tests.support.awx_slicing import effective_count, slice_hosts


def fleet(pairs: int, layout: str) -> dict[str, dict]:
    """Host name -> record of a fleet of ``pairs`` pairs, named as ``layout`` says."""
    out = {}
    for i in range(1, pairs + 1):
        pair = f"fleet{i:02d}"
        for rank, role in ((0, "head"), (1, "worker")):
            name = f"{pair}-{role}" if layout == "usual" else f"{role}-{pair}"
            out[name] = {"name": name, "pair": pair, "rank": rank, "fabric_ip": f"10.0.{i}.{rank + 1}"}
    return out


def groups_of(records) -> dict[str, list[str]]:
    return {"dspark_heads": [r["name"] for r in records if r["rank"] == 0],
            "dspark_workers": [r["name"] for r in records if r["rank"] == 1]}


def run_slice(hosts: dict[str, dict], number: int, count: int, partial_ok: bool = False):
    """The topology as a slice's play works it out: its hosts are the play, and nothing of the inventory
    is outside it (AWX's slice inventory holds the slice's hosts only)."""
    records = [hosts[n] for n in slice_hosts(hosts, number, count)]
    return records, topology(records, groups_of(records), partial_ok=partial_ok, outside=[])


@pytest.mark.parametrize("pairs", range(1, 11))
@pytest.mark.parametrize("count", range(1, 9))
@pytest.mark.parametrize("layout", ["usual", "heads-first"])
def test_every_slice_awx_would_make_is_run_whole_or_refused_naming_its_half_pairs(pairs, count, layout):
    hosts = fleet(pairs, layout)
    effective = effective_count(len(hosts), count)
    seen = []
    for number in range(1, effective + 1):
        records, (facts, problems) = run_slice(hosts, number, count)
        seen += [r["name"] for r in records]
        in_slice = {}
        for r in records:
            in_slice.setdefault(r["pair"], set()).add(r["rank"])
        halves = sorted(p for p, ranks in in_slice.items() if ranks != {0, 1})
        if not halves:
            assert problems == [] and set(facts) == {r["name"] for r in records}
            continue
        # Refused: one line per half pair naming the rank it lacks and the one it holds, and one with the fix.
        texts = [m.message for m in problems]
        assert len(texts) == len(halves) + 1, texts
        for pair in halves:
            have = in_slice[pair].pop()
            missing, holder = ("worker", "head") if have == 0 else ("head", "worker")
            present = next(r["name"] for r in records if r["pair"] == pair)
            assert (f"rank {missing} of pair {pair}: {missing} (dspark_rank {1 - have}) is absent from the run's "
                    f"inventory, expected in it beside its {holder} {present}") in texts
        assert texts[-1].startswith(f"rank inventory: half pairs is {len(halves)} (")
        assert SLICING_FIX in texts[-1]
        # The read-only audit's partial_ok does not lift it: a slice's audit would judge half pairs.
        assert run_slice(hosts, number, count, partial_ok=True)[1][1] == problems
    assert sorted(seen) == sorted(hosts)  # the slices are the inventory, each host once


@pytest.mark.parametrize("pairs", range(1, 11))
@pytest.mark.parametrize("count", range(2, 9))
def test_the_usual_names_put_half_pairs_in_every_slice_and_heads_first_keeps_them_whole_when_the_count_divides_the_pairs(
        pairs, count):
    """What docs/fleet-scale.md tells an operator: with a pair's ranks named next to each other (fleet01-head,
    fleet01-worker) every slice of a sliced job is refused; named heads first (head-fleet01, ..., worker-fleet01,
    ...), every slice is whole exactly when the effective slice count divides the number of pairs."""
    for layout, whole_expected in (("usual", False),
                                   ("heads-first", pairs % effective_count(2 * pairs, count) == 0)):
        hosts = fleet(pairs, layout)
        refused = [bool(run_slice(hosts, n, count)[1][1]) for n in range(1, effective_count(len(hosts), count) + 1)]
        assert refused == [not whole_expected] * len(refused), (layout, refused)


SAMPLE = {"lab01-head": ("lab01", 0), "lab01-worker": ("lab01", 1)}


def test_a_limit_is_not_a_slice_the_rank_outside_the_play_is_named_and_the_audit_may_go_on():
    play = [{"name": "lab01-head", "pair": "lab01", "rank": 0, "fabric_ip": None}]
    outside = [{"name": "lab01-worker", "pair": "lab01", "rank": 1, "fabric_ip": None}]
    groups = {"dspark_heads": ["lab01-head"], "dspark_workers": ["lab01-worker"]}
    _facts, problems = topology(play, groups, outside=outside)
    assert [m.message for m in problems] == [
        "rank worker of pair lab01: worker hosts is 0 (none), expected exactly one "
        "(lab01-worker is in the inventory but not in this play: a --limit or the play's hosts leave it out)"]
    facts, problems = topology(play, groups, partial_ok=True, outside=outside)
    assert problems == [] and facts["lab01-head"]["worker"] is None


def test_a_rank_of_another_pair_outside_the_play_does_not_complete_a_half_pair():
    play = [{"name": "a-head", "pair": "a", "rank": 0}]
    outside = [{"name": "b-worker", "pair": "b", "rank": 1}, {"name": "a-head2", "pair": "a", "rank": "0"}]
    _facts, problems = topology(play, {"dspark_heads": ["a-head"]}, partial_ok=True, outside=outside)
    assert [m.rank for m in problems] == ["worker of pair a", "inventory"]


def test_half_pairs_lists_the_rank_each_pair_lacks():
    records = [{"name": "h1", "pair": "p1", "rank": 0}, {"name": "w2", "pair": "p2", "rank": 1},
               {"name": "h3", "pair": "p3", "rank": 0}, {"name": "w3", "pair": "p3", "rank": 1}]
    assert half_pairs(records) == [("p1", 1, "h1"), ("p2", 0, "w2")]
    assert half_pairs([]) == []


def test_without_the_rest_of_the_inventory_the_pairing_says_what_it_always_said():
    _facts, problems = topology([{"name": "h1", "pair": "p1", "rank": 0}], {"dspark_heads": ["h1"]})
    assert [m.message for m in problems] == ["rank worker of pair p1: worker hosts is 0 (none), expected exactly one"]
