"""The image decision logic against an in-memory engine that behaves like dockerd."""
from __future__ import annotations

import copy

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _image_archive as ia
from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file
from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import EngineError
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError
from ansible_collections.gb10.dspark.plugins.module_utils.identity._image_identity import Pin, ensure
from tests.support import synthetic_archive
from tests.unit.plugins.module_utils.identity.test_image_archive import TRICKS, honest_config

LABELS = {"io.r0b0tlab.model.revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"}


class FakeEngine:
    """Images keyed by ID, tags pointing at IDs; load reads the archive like dockerd does."""

    def __init__(self, store: str = "classic"):
        self.store = store
        self.images: dict[str, dict] = {}
        self.tags: dict[str, str] = {}
        self.calls: list[str] = []
        self.load_yields: str | None = None  # force the ID a load produces (containerd surprises)

    def image_store(self):
        return self.store

    def _record(self, image_id, arch, labels):
        return {"Id": image_id, "Architecture": arch, "Config": {"Labels": dict(labels)}}

    def add(self, image_id, tag=None, arch="amd64", labels=None):
        self.images[image_id] = self._record(image_id, arch, labels or {})
        if tag:
            self.tags[tag] = image_id

    def inspect_image(self, ref):
        image_id = self.tags.get(ref, ref)
        rec = self.images.get(image_id)
        return copy.deepcopy(rec) if rec else None

    def load(self, path):
        self.calls.append(f"load {path}")
        got = ia.read_identity(path)
        image_id = self.load_yields or (got.manifest_digest if self.store == "containerd" else got.image_id)
        self.images[image_id] = self._record(image_id, got.architecture, got.labels)
        for t in got.repo_tags:
            self.tags[t] = image_id
        return [{"stream": f"Loaded image: {t}\n"} for t in got.repo_tags]

    def tag(self, image, repo, tag):
        self.calls.append(f"tag {image} {repo}:{tag}")
        self.tags[f"{repo}:{tag}"] = image

    def remove_image(self, ref):
        self.calls.append(f"rm {ref}")
        image_id = self.tags.pop(ref, None)
        if image_id is None:
            self.images.pop(ref, None)
        elif image_id not in self.tags.values():
            self.images.pop(image_id, None)

    def snapshot(self):
        return copy.deepcopy((self.images, self.tags))


@pytest.fixture
def archive(tmp_path):
    return synthetic_archive.write(tmp_path / "img.tar", tag="dspark:prod", labels=LABELS, oci=True)


def pin_for(made, **kw):
    args = {"tag": "dspark:prod", "image_id": made["image_id"], "manifest_digest": made["manifest_digest"],
            "architecture": "amd64", "labels": LABELS, "archive_sha256": sha256_file(made["path"])}
    args.update(kw)
    return Pin(**args)


def test_loads_when_missing_then_nothing_on_rerun(archive):
    eng = FakeEngine()
    out = ensure(eng, "w1", pin_for(archive), archive["path"], check_mode=False)
    assert out.loaded and out.changed and not out.tagged  # the archive's RepoTags carried the tag
    assert eng.tags["dspark:prod"] == archive["image_id"]
    again = ensure(eng, "w1", pin_for(archive), archive["path"], check_mode=False)
    assert not again.changed and not again.loaded
    assert eng.calls == [f"load {archive['path']}"]


def test_tags_when_image_held_under_no_tag(archive):
    eng = FakeEngine()
    eng.add(archive["image_id"], labels=LABELS)
    out = ensure(eng, "w1", pin_for(archive), None, check_mode=False)
    assert out.present and out.tagged and not out.loaded and out.changed
    assert eng.calls == [f"tag {archive['image_id']} dspark:prod"]


def test_check_mode_reports_and_changes_nothing(archive):
    eng = FakeEngine()
    before = eng.snapshot()
    out = ensure(eng, "w1", pin_for(archive), archive["path"], check_mode=True)
    assert out.changed and not out.loaded
    assert not out.present and not out.needs_archive  # the staged archive is on the rank: it would be loaded
    assert out.actions == [f"load {archive['path']}", f"tag {archive['image_id']} as dspark:prod"]
    assert out.before == {"image_tag": "dspark:prod", "image_id": None}
    assert out.after["image_id"] == archive["image_id"]
    assert eng.snapshot() == before and eng.calls == []


def test_tag_naming_another_image_fails_before_anything(archive):
    eng = FakeEngine()
    eng.add("sha256:" + "a" * 64, tag="dspark:prod")
    before = eng.snapshot()
    with pytest.raises(IdentityError) as err:
        ensure(eng, "worker-01", pin_for(archive), archive["path"], check_mode=False)
    assert str(err.value) == f"rank worker-01: image dspark:prod is sha256:{'a' * 64}, pinned {archive['image_id']}"
    assert eng.snapshot() == before and eng.calls == []


def test_archive_with_other_id_is_refused_before_loading(tmp_path, archive):
    other = synthetic_archive.write(tmp_path / "other.tar", tag="dspark:prod", labels=LABELS, salt="zz")
    eng = FakeEngine()
    with pytest.raises(IdentityError) as err:
        ensure(eng, "w1", pin_for(archive), other["path"], check_mode=False)
    m = err.value.mismatches[0]
    assert (m.expected, m.actual) == (archive["image_id"], other["image_id"])
    assert "archive" in m.item and other["path"] in m.item
    assert eng.calls == []


def test_mismatched_archive_is_refused_even_when_image_is_held(tmp_path, archive):
    other = synthetic_archive.write(tmp_path / "other.tar", tag="dspark:prod", salt="zz")
    eng = FakeEngine()
    eng.add(archive["image_id"], tag="dspark:prod", labels=LABELS)
    with pytest.raises(IdentityError):
        ensure(eng, "w1", pin_for(archive), other["path"], check_mode=False)


def test_missing_archive_is_fine_when_image_is_held(archive):
    eng = FakeEngine()
    eng.add(archive["image_id"], tag="dspark:prod", labels=LABELS)
    out = ensure(eng, "w1", pin_for(archive), "/nonexistent/img.tar", check_mode=False)
    assert not out.changed and out.warnings and out.archive is None


def test_missing_archive_fails_when_image_is_needed(archive):
    with pytest.raises(CheckError, match=r"rank w1: .*archive /nonexistent/img.tar is absent"):
        ensure(FakeEngine(), "w1", pin_for(archive), "/nonexistent/img.tar", check_mode=False)


def test_label_and_architecture_mismatches_are_all_listed(archive):
    eng = FakeEngine()
    pin = pin_for(archive, architecture="arm64", labels={**LABELS, "io.r0b0tlab.speculative.tokens": "6"})
    with pytest.raises(IdentityError) as err:
        ensure(eng, "w1", pin, archive["path"], check_mode=False)
    items = sorted(m.item for m in err.value.mismatches)
    assert len(items) == 2
    assert any("architecture" in i for i in items) and any("speculative.tokens" in i for i in items)
    assert eng.calls == []


def test_loading_must_not_move_a_tag_the_archive_carries(tmp_path):
    made = synthetic_archive.write(tmp_path / "t.tar", tag="dspark:other", labels=LABELS)
    eng = FakeEngine()
    eng.add("sha256:" + "b" * 64, tag="dspark:other")
    with pytest.raises(IdentityError, match="would move this tag"):
        ensure(eng, "w1", pin_for(made, manifest_digest=None), made["path"], check_mode=False)
    assert eng.calls == []


def test_containerd_store_compares_manifest_digest(archive):
    eng = FakeEngine(store="containerd")
    out = ensure(eng, "w1", pin_for(archive), archive["path"], check_mode=False)
    assert out.image_store == "containerd" and out.image_id == archive["manifest_digest"]
    assert eng.tags["dspark:prod"] == archive["manifest_digest"]


def test_containerd_store_without_pinned_digest_fails_closed(archive):
    with pytest.raises(CheckError, match="containerd store"):
        ensure(FakeEngine(store="containerd"), "w1", pin_for(archive, manifest_digest=None), archive["path"], False)


def test_containerd_store_and_archive_without_oci_index(tmp_path):
    made = synthetic_archive.write(tmp_path / "plain.tar", tag="dspark:prod", labels=LABELS)
    eng = FakeEngine(store="containerd")
    with pytest.raises(IdentityError, match="no OCI index"):
        ensure(eng, "w1", pin_for(made, manifest_digest="sha256:" + "c" * 64), made["path"], False)


def test_a_load_that_yields_another_id_is_taken_back(archive):
    eng = FakeEngine()
    eng.load_yields = "sha256:" + "d" * 64
    with pytest.raises(IdentityError, match="removed again"):
        ensure(eng, "w1", pin_for(archive), archive["path"], check_mode=False)
    assert eng.images == {} and eng.tags == {}


def test_archive_checksum_is_checked_before_loading(archive):
    eng = FakeEngine()
    with pytest.raises(IdentityError, match="sha256"):
        ensure(eng, "w1", pin_for(archive, archive_sha256="0" * 64), archive["path"], check_mode=False)
    assert eng.calls == []
    good = sha256_file(archive["path"])
    assert ensure(eng, "w1", pin_for(archive, archive_sha256=good), archive["path"], check_mode=False).loaded


def test_engine_unreachable_names_the_rank(archive):
    class Down(FakeEngine):
        def image_store(self):
            raise EngineError("cannot reach the Docker engine at /run/docker.sock: refused")

    with pytest.raises(CheckError, match=r"^rank w9: cannot reach"):
        ensure(Down(), "w9", pin_for(archive), archive["path"], check_mode=False)


def test_check_mode_without_the_archive_on_the_rank_says_it_is_needed(archive):
    eng = FakeEngine()
    out = ensure(eng, "w1", pin_for(archive), "/var/lib/dspark/images/missing.tar", check_mode=True)
    assert out.needs_archive and out.changed and eng.calls == []
    assert out.actions[0].startswith("load /var/lib/dspark/images/missing.tar")


def test_check_archive_without_an_engine(tmp_path, archive):
    from ansible_collections.gb10.dspark.plugins.module_utils.identity._image_identity import check_archive

    assert check_archive("control node", archive["path"], pin_for(archive)).image_id == archive["image_id"]
    with pytest.raises(IdentityError, match="manifest digest"):
        check_archive("control node", archive["path"], pin_for(archive, manifest_digest="sha256:" + "f" * 64))
    other = synthetic_archive.write(tmp_path / "o.tar", tag="dspark:prod", labels=LABELS, salt="q")
    with pytest.raises(IdentityError) as err:
        check_archive("control node", other["path"], pin_for(archive))
    assert err.value.mismatches[0].actual == other["image_id"]


# ---- issue 21: the engine must load exactly what the archive's metadata shows ----------------------

@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_an_archive_the_engine_would_read_differently_is_never_loaded(tmp_path, monkeypatch, trick):
    monkeypatch.setattr(ia, "MAX_METADATA_BYTES", 4096)
    build, _mentions = TRICKS[trick]
    path = build(tmp_path / "trick.tar")
    honest = {"path": path, "image_id": "sha256:" + honest_config()[0], "manifest_digest": None}
    eng = FakeEngine()
    with pytest.raises(CheckError) as err:
        ensure(eng, "w1", pin_for(honest, architecture=None, labels={}), path, check_mode=False)
    assert str(err.value).startswith("rank w1: ") and path in str(err.value)
    assert eng.calls == [] and eng.images == {} and eng.tags == {}


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_load_needs_the_archive_sha256_in_the_pin(archive, check_mode):
    eng = FakeEngine()
    with pytest.raises(CheckError) as err:
        ensure(eng, "w1", pin_for(archive, archive_sha256=None), archive["path"], check_mode=check_mode)
    msg = str(err.value)
    assert msg.startswith("rank w1: ") and archive["path"] in msg
    assert "image_archive_sha256" in msg and "sha256sum" in msg
    assert eng.calls == [] and eng.images == {}


def test_no_archive_sha256_is_fine_when_nothing_is_loaded(archive):
    eng = FakeEngine()
    eng.add(archive["image_id"], tag="dspark:prod", labels=LABELS)
    out = ensure(eng, "w1", pin_for(archive, archive_sha256=None), archive["path"], check_mode=False)
    assert not out.changed and not out.loaded and eng.calls == []


class Smuggler(FakeEngine):
    """Loads the archive, then also reports (and holds) what a hidden manifest would have added."""

    def __init__(self, extra_lines):
        super().__init__()
        self.extra_lines = extra_lines

    def load(self, path):
        lines = super().load(path)
        for line in self.extra_lines:
            text = line["stream"].strip()
            if text.startswith("Loaded image: "):
                self.add("sha256:" + "e" * 64, tag=text.split(": ", 1)[1])
            else:
                self.add(text.split(": ", 1)[1])
        return lines + self.extra_lines


@pytest.mark.parametrize(("extra", "named"), [
    ({"stream": "Loaded image: evil:latest\n"}, "evil:latest"),
    ({"stream": "Loaded image ID: sha256:" + "e" * 64 + "\n"}, "sha256:" + "e" * 64),
])
def test_a_load_that_brings_more_than_the_archive_shows_fails(archive, extra, named):
    eng = Smuggler([extra])
    with pytest.raises(IdentityError) as err:
        ensure(eng, "w1", pin_for(archive), archive["path"], check_mode=False)
    assert named in str(err.value) and str(err.value).startswith("rank w1: ")
    assert archive["path"] in str(err.value)
    assert not any(c.startswith("tag ") for c in eng.calls)  # the pinned tag is not applied after that


def test_a_load_reporting_its_own_id_and_tag_is_fine(archive):
    eng = Smuggler([{"stream": f"Loaded image ID: {archive['image_id']}\n"},
                    {"stream": "Loaded image: docker.io/library/dspark:prod\n"}])
    eng.add = lambda *a, **k: None  # the engine holds these already: nothing extra
    assert ensure(eng, "w1", pin_for(archive), archive["path"], check_mode=False).loaded


def test_check_mode_before_the_archive_is_copied_needs_the_sha256_too(archive):
    eng = FakeEngine()
    with pytest.raises(CheckError, match=r"^rank w1: .*/var/lib/dspark/images/missing.tar.*image_archive_sha256"):
        ensure(eng, "w1", pin_for(archive, archive_sha256=None), "/var/lib/dspark/images/missing.tar", check_mode=True)
    assert eng.calls == []
