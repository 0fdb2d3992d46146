from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.modules import pair_identity

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def test_pass_and_fail(run_module):
    hosts = [{"name": "h", "pair": "p", "rank": 0, "image_id": A, "image_store": "classic"},
             {"name": "w", "pair": "p", "rank": 1, "image_id": A, "image_store": "classic"}]
    ok = run_module(pair_identity, {"hosts": hosts, "expected_image_id": A}, check_mode=True)
    assert ok["failed"] is False and ok["changed"] is False and ok["pairs"] == {"p": {"head": "h", "worker": "w"}}
    hosts[1]["image_id"] = B
    bad = run_module(pair_identity, {"hosts": hosts, "expected_image_id": A})
    assert bad["failed"] and bad["msg"].startswith("2 identity mismatches:")
    assert f"rank w: image ID is {B}, pinned {A}" in bad["msg"]
