from dspark_sim import inventory, layout


def test_one_group_per_pair_head_is_rank_zero():
    inv = inventory.hosts(3)["all"]["children"]
    groups = inv["dspark_pairs"]["children"]
    assert list(groups) == ["pair_sim01", "pair_sim02", "pair_sim03"]
    for name, group in groups.items():
        ranks = {h: v["dspark_rank"] for h, v in group["hosts"].items()}
        assert sorted(ranks.values()) == [0, 1]
        head = [h for h, r in ranks.items() if r == 0][0]
        assert head in inv["dspark_heads"]["hosts"]
        assert group["vars"]["dspark_pair"] == name.removeprefix("pair_")


def test_per_host_nic_and_hca_names_come_from_the_cabling():
    hosts = inventory.hosts(1)["all"]["children"]["dspark_pairs"]["children"]["pair_sim01"]["hosts"]
    assert hosts["sim01-head"]["dspark_eth_if"] == layout.HEAD_PORT["netdev"]
    assert hosts["sim01-worker"]["dspark_ib_hca"] == layout.WORKER_PORT["hca"]
    assert hosts["sim01-head"]["ansible_host"] != hosts["sim01-worker"]["ansible_host"]
