"""gb10.dspark.image_identity end to end: module plumbing, stdlib client, fake engine on a socket."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.modules import image_identity
from tests.support import synthetic_archive
from tests.support.fake_dockerd import FakeDockerd

LABELS = {"io.r0b0tlab.vllm.package.version": "0.26.0+dspark.sm121.3"}


@pytest.fixture
def dockerd(tmp_path):
    with FakeDockerd(str(tmp_path / "docker.sock")) as d:
        yield d


@pytest.fixture
def archive(tmp_path):
    return synthetic_archive.write(tmp_path / "img.tar", tag="dspark:prod", labels=LABELS)


def args(dockerd, archive, **kw):
    a = {"rank": "sim01-worker", "image_tag": "dspark:prod", "image_id": archive["image_id"],
         "path": archive["path"], "labels": LABELS, "architecture": "amd64", "docker_host": dockerd.docker_host}
    a.update(kw)
    return a


def test_first_run_loads_second_run_changes_nothing(run_module, dockerd, archive):
    first = run_module(image_identity, args(dockerd, archive))
    assert first["failed"] is False and first["changed"] and first["loaded"]
    assert first["image_store"] == "classic" and first["image_id"] == archive["image_id"]
    assert first["ansible_facts"]["dspark_image"]["image_id"] == archive["image_id"]
    second = run_module(image_identity, args(dockerd, archive))
    assert second["changed"] is False and second["loaded"] is False
    assert [r for r in dockerd.state.requests if r.startswith("POST /images/load")] == ["POST /images/load"]


def test_check_mode_with_diff(run_module, dockerd, archive):
    res = run_module(image_identity, args(dockerd, archive), check_mode=True, diff=True)
    assert res["changed"] and not res["loaded"]
    assert res["diff"] == {"before": {"image_tag": "dspark:prod", "image_id": None},
                           "after": {"image_tag": "dspark:prod", "image_id": archive["image_id"]}}
    assert dockerd.state.images == {}


def test_pinned_tag_on_other_image_fails_with_rank_expected_actual(run_module, dockerd, archive):
    other = "sha256:" + "e" * 64
    dockerd.state.images[other] = {"Id": other, "Architecture": "amd64", "Config": {"Labels": {}}}
    dockerd.state.tags["dspark:prod"] = other
    res = run_module(image_identity, args(dockerd, archive))
    assert res["failed"]
    assert res["msg"] == f"rank sim01-worker: image dspark:prod is {other}, pinned {archive['image_id']}"
    assert res["mismatches"][0]["actual"] == other
    assert list(dockerd.state.images) == [other]


def test_engine_down_fails_naming_the_rank(run_module, tmp_path, archive):
    res = run_module(image_identity, {"rank": "r1", "image_tag": "dspark:prod", "image_id": archive["image_id"],
                                      "path": archive["path"], "docker_host": f"unix://{tmp_path}/none.sock"})
    assert res["failed"] and res["msg"].startswith("rank r1: cannot reach the Docker engine")
