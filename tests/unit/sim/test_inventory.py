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


def test_a_second_fleet_numbers_its_pairs_after_the_first_and_has_its_own_inventory(tmp_path, monkeypatch):
    import yaml

    for name, path in (("INVENTORY_DIR", "sim"), ("FLEET2_INVENTORY_DIR", "sim-fleet2"),
                       ("FLEET2_EVIDENCE_DIR", "evidence-fleet2"), ("RELEASES_DIR", "sim-releases")):
        monkeypatch.setattr(layout, name, tmp_path / path)
    labels = {"io.r0b0tlab.vllm.package.version": "0.0", "io.r0b0tlab.vllm.integrated.commit": "c",
              "org.opencontainers.image.revision": "r", "io.r0b0tlab.cudagraph.selector": "s",
              "io.r0b0tlab.kv-cache.dtype": "fp8", "io.r0b0tlab.speculative.method": "m",
              "io.r0b0tlab.speculative.tokens": "2"}
    meta = {"release": "sim-v026", "image_tag": "t:1", "image_id": "sha256:" + "a" * 64, "image_architecture": "amd64",
            "image_archive_sha256": "b" * 64, "image_archive": "/x.tar", "labels": labels}

    def fleet(inv):
        doc = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]
        return list(doc["dspark_pairs"]["children"]), yaml.safe_load((inv / "group_vars/all/site.yml").read_text())

    inventory.write(2, meta, None, fleet2=3)
    first, first_site = fleet(tmp_path / "sim")
    second, second_site = fleet(tmp_path / "sim-fleet2")
    assert first == ["pair_sim01", "pair_sim02"] and second == ["pair_sim03", "pair_sim04", "pair_sim05"]
    assert first_site["dspark_evidence_dir"] != second_site["dspark_evidence_dir"] == str(tmp_path / "evidence-fleet2")
    assert (tmp_path / "sim-fleet2/group_vars/all/pin.yml").read_text() == (tmp_path / "sim/group_vars/all/pin.yml").read_text()
    inventory.write(2, meta)  # without a second fleet, none is left behind
    assert not (tmp_path / "sim-fleet2").exists() and fleet(tmp_path / "sim")[0] == first
