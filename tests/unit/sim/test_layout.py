import ipaddress

import pytest

from dspark_sim import layout


def test_names_and_addresses_are_unique_across_a_large_fleet():
    ranks = layout.all_ranks(layout.MAX_PAIRS)
    for attr in ("name", "netns", "host_veth", "mgmt_ip", "fabric_ip", "twin_ip"):
        values = [getattr(r, attr) for r in ranks]
        assert len(set(values)) == len(values), attr


def test_link_names_fit_the_kernel_limit():
    for pair in layout.pairs(layout.MAX_PAIRS):
        names = [r.host_veth for r in pair.ranks] + [r.host_veth + "i" for r in pair.ranks]
        names += [n for link in pair.fabric_links() for n in link[:4]]
        assert all(len(n) <= 15 for n in names), names


def test_management_addresses_stay_in_the_simulator_subnet():
    for r in layout.all_ranks(layout.MAX_PAIRS):
        ip = ipaddress.ip_address(r.mgmt_ip)
        assert ip in layout.MGMT_NET and ip != layout.CONTROL_IP


def test_head_is_rank_zero_with_the_asymmetric_cabling():
    pair = layout.pairs(3)[2]
    assert (pair.head.rank, pair.worker.rank) == (0, 1)
    assert pair.head.name == "sim03-head" and pair.worker.name == "sim03-worker"
    assert pair.head.port["netdev"] == "enp1s0f0np0" and pair.worker.port["netdev"] == "enp1s0f1np1"
    # both ends of the primary cable share a /24, the twin port sits in another subnet
    assert pair.head.fabric_ip.rsplit(".", 1)[0] == pair.worker.fabric_ip.rsplit(".", 1)[0]
    assert pair.head.twin_ip.rsplit(".", 1)[0] != pair.head.fabric_ip.rsplit(".", 1)[0]


@pytest.mark.parametrize("count", [0, -1, layout.MAX_PAIRS + 1])
def test_pair_count_out_of_range_is_refused(count):
    with pytest.raises(ValueError, match="PAIRS must be between"):
        layout.pairs(count)


def test_pairs_numbered_from_a_later_pair():
    assert [p.name for p in layout.pairs(2, 3)] == ["sim03", "sim04"]
    for count, first in ((0, 5), (2, 0), (2, layout.MAX_PAIRS)):
        with pytest.raises(ValueError, match="PAIRS must be between"):
            layout.pairs(count, first)


def test_a_negative_second_fleet_is_refused_before_anything_is_touched(monkeypatch):
    from dspark_sim import fleet
    from dspark_sim.proc import SimError

    monkeypatch.setattr(fleet, "_state", lambda: pytest.fail("read the simulator's state"))
    with pytest.raises(SimError, match="--fleet2 must be 0 or more, got -1"):
        fleet.up(2, -1)
