"""gb10.dspark.image_identity end to end: module plumbing, the docker SDK client, fake engine on a socket."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file
from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin
from ansible_collections.gb10.dspark.plugins.modules import image_identity
from tests.support import synthetic_archive
from tests.support.fake_dockerd import FakeDockerd

from tests.unit.plugins.module_utils.identity.test_pin import sample_pin

LABELS = {label: str(sample_pin()[key]) for label, key in _pin.LABELS.items()}


@pytest.fixture
def dockerd(tmp_path):
    with FakeDockerd(str(tmp_path / "docker.sock")) as d:
        yield d


@pytest.fixture
def archive(tmp_path):
    return synthetic_archive.write(tmp_path / "img.tar", tag="dspark:prod", labels=LABELS)


def pin_for(archive):
    pin = sample_pin()
    pin.update(image_tag="dspark:prod", image_id=archive["image_id"], image_architecture="amd64",
               image_archive_sha256=sha256_file(archive["path"]))  # a load needs the archive's sha256
    return pin


def args(dockerd, archive, **kw):
    a = {"rank": "sim01-worker", "pin": pin_for(archive), "path": archive["path"], "docker_host": dockerd.docker_host}
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
    res = run_module(image_identity, {"rank": "r1", "pin": pin_for(archive), "path": archive["path"],
                                      "docker_host": f"unix://{tmp_path}/none.sock"})
    assert res["failed"] and res["msg"].startswith("rank r1: cannot reach the Docker engine")


def test_labels_that_differ_from_the_pin_fail_before_loading(run_module, dockerd, tmp_path):
    made = synthetic_archive.write(tmp_path / "l.tar", tag="dspark:prod", labels=dict(LABELS, **{"io.r0b0tlab.model.revision": "0" * 40}))
    res = run_module(image_identity, args(dockerd, made, pin=pin_for(made), path=made["path"]))
    assert res["failed"] and "label io.r0b0tlab.model.revision is " + "0" * 40 in res["msg"]
    assert dockerd.state.images == {}


def test_malformed_pin_fails_before_the_engine_is_asked(run_module, dockerd, archive):
    pin = pin_for(archive)
    pin["image_id"] = "latest"
    res = run_module(image_identity, args(dockerd, archive, pin=pin))
    assert res["failed"] and "dspark_pin.image_id" in res["msg"] and res["msg"].startswith("rank sim01-worker:")
    assert dockerd.state.requests == []


def test_image_archive_module_on_the_control_node(run_module, tmp_path, archive):
    from ansible_collections.gb10.dspark.plugins.modules import image_archive

    ok = run_module(image_archive, {"rank": "control node", "path": archive["path"], "pin": pin_for(archive)})
    assert ok["failed"] is False and ok["archive"]["image_id"] == archive["image_id"]
    other = synthetic_archive.write(tmp_path / "x.tar", tag="dspark:prod", labels=LABELS, salt="other")
    bad = run_module(image_archive, {"rank": "control node", "path": other["path"], "pin": pin_for(archive)},
                     check_mode=True)
    assert bad["failed"]
    assert bad["msg"] == f"rank control node: archive {other['path']} image is {other['image_id']}, pinned {archive['image_id']}"


def test_absent_removes_every_tag_of_the_pinned_id_check_mode_and_diff_first(run_module, dockerd, archive):
    run_module(image_identity, args(dockerd, archive))  # loaded and tagged dspark:prod
    dockerd.state.tags["dspark:old"] = archive["image_id"]
    gone = {"rank": "r1", "pin": pin_for(archive), "docker_host": dockerd.docker_host, "state": "absent"}
    would = run_module(image_identity, gone, check_mode=True, diff=True)
    assert would["failed"] is False and would["changed"] is True
    assert would["diff"] == {"before": {"image_id": archive["image_id"], "present": True},
                             "after": {"image_id": archive["image_id"], "present": False}}
    assert archive["image_id"] in dockerd.state.images  # check mode changed nothing
    done = run_module(image_identity, gone)
    assert done["failed"] is False and done["changed"] is True and "ansible_facts" not in done
    assert dockerd.state.images == {} and dockerd.state.tags == {}
    again = run_module(image_identity, gone)
    assert again["failed"] is False and again["changed"] is False


def test_absent_refused_by_the_engine_fails_naming_the_rank_and_changes_nothing(run_module, dockerd, archive):
    run_module(image_identity, args(dockerd, archive))
    dockerd.state.in_use.add(archive["image_id"])
    res = run_module(image_identity, {"rank": "r1", "pin": pin_for(archive), "docker_host": dockerd.docker_host,
                                      "state": "absent"})
    assert res["failed"] and res["msg"].startswith(f"rank r1: removing image {archive['image_id']} failed: ")
    assert "image is being used by running container" in res["msg"]
    assert dockerd.state.tags["dspark:prod"] == archive["image_id"]
