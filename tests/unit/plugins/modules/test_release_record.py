"""gb10.dspark.release_record: the rank's record of its pair's current and previous release."""
from __future__ import annotations

import json

from ansible_collections.gb10.dspark.plugins.modules import release_record

V1 = {"release": "v1", "image_tag": "repo:v1", "image_id": "sha256:" + "1" * 64}
V2 = {"release": "v2", "image_tag": "repo:v2", "image_id": "sha256:" + "2" * 64}


def test_present_writes_once_and_a_converged_rerun_changes_nothing(tmp_path, run_module):
    path = tmp_path / "dspark" / "release.json"
    args = {"rank": "r0", "path": str(path), "pin": V1, "profile": "production"}
    checked = run_module(release_record, args, check_mode=True, diff=True)
    assert checked["changed"] is True and not path.exists()
    assert checked["diff"]["after"] == "current: v1 (image_tag repo:v1, image_id sha256:" + "1" * 64 + "), profile production\nprevious: none\n"
    first = run_module(release_record, args)
    assert first["changed"] is True and json.loads(path.read_text())["current"]["pin"] == V1
    mtime = path.stat().st_mtime_ns
    again = run_module(release_record, args)
    assert again["changed"] is False and path.stat().st_mtime_ns == mtime
    second = run_module(release_record, dict(args, pin=V2))
    assert (second["current"]["release"], second["previous"]["release"]) == ("v2", "v1")


def test_read_refuses_a_rank_without_a_previous_release_and_writes_nothing(tmp_path, run_module):
    path = tmp_path / "release.json"
    read = {"rank": "r1", "path": str(path), "state": "read", "require_previous": True}
    none = run_module(release_record, read)
    assert none["failed"] is True and none["msg"].startswith("rank r1: no release record at") and not path.exists()
    run_module(release_record, {"path": str(path), "pin": V1, "profile": "production"})
    text = path.read_text()
    one = run_module(release_record, read)
    assert one["failed"] is True and "rank r1: no previous release" in one["msg"] and path.read_text() == text


def test_read_refuses_a_rank_whose_record_differs_from_its_pairs_other_rank(tmp_path, run_module):
    head, worker = tmp_path / "h.json", tmp_path / "w.json"
    for p, pins in ((head, (V1, V2)), (worker, (V2, V1))):
        for v in pins:
            run_module(release_record, {"path": str(p), "pin": v, "profile": "production"})
    head_record = run_module(release_record, {"path": str(head), "state": "read", "require_previous": True})
    assert head_record["failed"] is False and head_record["previous"]["release"] == "v1"
    out = run_module(release_record, {"rank": "w1", "path": str(worker), "state": "read", "require_previous": True,
                                      "expect": head_record["record"], "expect_from": "h0"})
    assert out["failed"] is True
    assert out["msg"].startswith("rank w1: current release is v1 (") and "expected v2 (" in out["msg"]
    assert "as rank h0 records it" in out["msg"]


def test_keep_releases_returns_the_retired_releases_to_prune(tmp_path, run_module):
    path = tmp_path / "release.json"
    out = None
    for n in range(1, 5):
        v = {"release": f"v{n}", "image_id": f"sha256:{n}"}
        out = run_module(release_record, {"path": str(path), "pin": v, "profile": "production", "keep_releases": 2})
    assert [r["release"] for r in out["prune"]] == ["v2"] and out["record"]["retired"] == []
    bad = run_module(release_record, {"path": str(path), "pin": V1, "profile": "production", "keep_releases": 1})
    assert bad["failed"] is True and "keep_releases is 1" in bad["msg"]
