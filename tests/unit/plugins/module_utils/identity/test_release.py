"""A pair's release record: current and previous release, swapped by a release rollback, retired ones pruned."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _release


def pin(name: str, image_id: str | None = None) -> dict:
    return {"release": name, "image_tag": f"repo:{name}", "image_id": image_id or "sha256:" + name.encode().hex().ljust(64, "0"),
            "runtime_manifest_sha256": "a" * 64, "model_revision": "b" * 40, "image_manifest_digest": None}


V1, V2, V3, V4 = pin("v1"), pin("v2"), pin("v3"), pin("v4")


def test_the_first_gated_release_becomes_current_with_no_previous():
    rec = _release.advance(None, V1, "production", "T1")
    assert rec["current"] == {"release": "v1", "pin": V1, "profile": "production", "since": "T1"}
    assert rec["previous"] is None and rec["retired"] == [] and rec["schema"] == 1


def test_the_same_release_again_changes_nothing_and_a_new_profile_is_written_in_place():
    rec = _release.advance(_release.advance(None, V1, "production", "T1"), V2, "production", "T2")
    again = _release.advance(rec, dict(reversed(list(V2.items()))), "production", "T3")  # key order aside
    assert again == rec
    other = _release.advance(rec, V2, "breakable-ab", "T3")
    assert other["current"]["profile"] == "breakable-ab" and other["current"]["since"] == "T2"
    assert other["previous"] == rec["previous"]


def test_a_new_release_pushes_current_to_previous_and_previous_to_retired():
    rec = _release.advance(None, V1, "production", "T1")
    rec = _release.advance(rec, V2, "production", "T2")
    assert (rec["current"]["release"], rec["previous"]["release"], rec["retired"]) == ("v2", "v1", [])
    rec = _release.advance(rec, V3, "long-1m", "T3")
    assert (rec["current"]["release"], rec["previous"]["release"]) == ("v3", "v2")
    assert [r["release"] for r in rec["retired"]] == ["v1"]
    rec = _release.advance(rec, V4, "production", "T4")
    assert [r["release"] for r in rec["retired"]] == ["v2", "v1"]  # newest first


def test_going_back_to_the_previous_release_swaps_the_two_and_again_swaps_back():
    rec = _release.advance(_release.advance(None, V1, "production", "T1"), V2, "long-1m", "T2")
    back = _release.advance(rec, V1, "production", "T3")
    assert (back["current"]["release"], back["previous"]["release"]) == ("v1", "v2")
    assert back["current"]["since"] == "T3" and back["previous"] == rec["current"] and back["retired"] == []
    forth = _release.advance(back, V2, "long-1m", "T4")
    assert (forth["current"]["release"], forth["previous"]["release"]) == ("v2", "v1")


def test_a_retired_release_returning_leaves_retired():
    rec = None
    for n, p in enumerate((V1, V2, V3)):
        rec = _release.advance(rec, p, "production", f"T{n}")
    rec = _release.advance(rec, V1, "production", "T9")
    assert (rec["current"]["release"], rec["previous"]["release"]) == ("v1", "v3")
    assert [r["release"] for r in rec["retired"]] == ["v2"]


def test_prune_keeps_every_image_by_default_and_never_current_or_previous():
    rec = None
    for n, p in enumerate((V1, V2, V3, V4)):
        rec = _release.advance(rec, p, "production", f"T{n}")
    assert _release.prune(rec, 0) == (rec, [])
    kept, gone = _release.prune(rec, 2)
    assert kept["retired"] == [] and [r["release"] for r in gone] == ["v2", "v1"]
    kept, gone = _release.prune(rec, 3)
    assert [r["release"] for r in kept["retired"]] == ["v2"] and [r["release"] for r in gone] == ["v1"]
    shared = dict(rec, retired=[_release.entry(pin("v0", V4["image_id"]), "production", "T")])
    assert _release.prune(shared, 2)[1] == []  # an image current still uses is never pruned
    with pytest.raises(_release.ReleaseRecordError, match="keep_releases is 1, expected 0 .* or at least 2"):
        _release.prune(rec, 1)


def test_rollback_needs_a_record_with_a_previous_release_naming_the_rank():
    assert "rank r1: no release record at /p" in _release.rollback_problem("r1", None, "/p")
    one = _release.advance(None, V1, "production", "T1")
    msg = _release.rollback_problem("r1", one, "/p")
    assert msg.startswith("rank r1: no previous release in /p (current v1 (image_tag repo:v1, image_id sha256:")
    assert _release.rollback_problem("r1", _release.advance(one, V2, "production", "T2"), "/p") is None


def test_ranks_that_disagree_are_named_with_the_expected_and_actual_release():
    head = _release.advance(_release.advance(None, V1, "production", "T1"), V2, "production", "T2")
    assert _release.disagreement("w", json.loads(json.dumps(head)), head, "h") is None
    worker = _release.advance(_release.advance(None, V3, "production", "T1"), V2, "production", "T2")
    msg = _release.disagreement("w", worker, head, "h")
    assert msg.startswith("rank w: previous release is v3 (") and "expected v1 (" in msg and "as rank h records" in msg
    assert "current release is none, expected v2" in _release.disagreement("w", None, head, "h")


def test_load_reads_what_was_written_and_refuses_a_bad_record_or_a_link(tmp_path):
    path = tmp_path / "release.json"
    assert _release.load(str(path)) is None
    rec = _release.advance(None, V1, "production", "T1")
    path.write_text(json.dumps(rec))
    assert _release.load(str(path)) == rec
    path.write_text(json.dumps({"schema": 2}))
    with pytest.raises(_release.ReleaseRecordError, match="expected a release record of schema 1, found 2"):
        _release.load(str(path))
    path.write_text(json.dumps({"schema": 1, "current": {"release": "x"}}))
    with pytest.raises(_release.ReleaseRecordError, match="current is not a release entry"):
        _release.load(str(path))
    link = tmp_path / "link.json"
    os.symlink(path, link)
    with pytest.raises(_release.ReleaseRecordError, match="cannot be read"):
        _release.load(str(link))
