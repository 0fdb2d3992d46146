"""The stand-in image archive: docker-save layout, ID = config digest, cached by its inputs."""
import hashlib
import io
import json
import tarfile

import pytest

from dspark_sim import image, layout


@pytest.fixture
def tiny_rootfs(tmp_path, monkeypatch):
    base = tmp_path / "rootfs.tar"
    with tarfile.open(base, "w") as t:
        for name, data in (("./etc/os-release", b"ID=debian\n"), ("./usr/bin/python3", b"#!fake\n")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    monkeypatch.setattr(layout, "CACHE_DIR", tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    monkeypatch.setattr(image, "rootfs", lambda: base)
    return base


def _members(path):
    with tarfile.open(path) as t:
        return {m.name: (t.extractfile(m).read() if m.isreg() else None) for m in t.getmembers()}


def test_archive_has_docker_save_layout_and_config_digest_id(tiny_rootfs):
    meta = image.build("9e165c30e2704aec5d9d593cce3eebd58bbef1cb")
    files = _members(meta["image_archive"])
    manifest = json.loads(files["manifest.json"])
    assert len(manifest) == 1 and manifest[0]["RepoTags"] == [image.IMAGE_TAG]
    config_bytes = files[manifest[0]["Config"]]
    assert meta["image_id"] == "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    assert manifest[0]["Config"] == meta["image_id"].split(":")[1] + ".json"
    layer = files[manifest[0]["Layers"][0]]
    config = json.loads(config_bytes)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/dspark-entrypoint.sh"]
    labels = config["config"]["Labels"]
    for key in ("org.opencontainers.image.revision", "io.r0b0tlab.model.revision", "io.r0b0tlab.vllm.package.version",
                "io.r0b0tlab.vllm.integrated.commit", "io.r0b0tlab.cudagraph.selector", "io.r0b0tlab.kv-cache.dtype",
                "io.r0b0tlab.speculative.method", "io.r0b0tlab.speculative.tokens"):
        assert labels[key], key
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        names = set(t.getnames())
    assert {"etc/os-release", "usr/local/bin/vllm", "usr/local/bin/dspark-entrypoint.sh",
            "opt/dspark-engine/dspark_engine/cli.py"} <= names


def test_archive_is_reused_then_rebuilt_when_an_input_changes(tiny_rootfs):
    first = image.build("a" * 40)
    again = image.build("a" * 40)
    assert again == first
    other = image.build("b" * 40)
    assert other["image_id"] != first["image_id"]
    # the superseded archive is removed from the cache
    assert [p.name for p in layout.CACHE_DIR.glob("dspark-standin-*.tar")] == [other["image_archive"].rsplit("/", 1)[1]]


def test_rebuilding_gives_the_same_id(tiny_rootfs):
    first = image.build("c" * 40)
    for p in layout.CACHE_DIR.glob("dspark-standin-*"):
        p.unlink()
    assert image.build("c" * 40)["image_id"] == first["image_id"]


def test_the_next_release_is_another_image_over_the_same_layer_and_both_archives_are_kept(tiny_rootfs):
    current = image.build("d" * 40)
    nxt = image.build("d" * 40, image.NEXT_RELEASE)
    assert (current["release"], nxt["release"]) == (image.CURRENT_RELEASE, image.NEXT_RELEASE)
    assert nxt["image_id"] != current["image_id"] and nxt["image_tag"] != current["image_tag"]
    assert nxt["layer_diff_id"] == current["layer_diff_id"]
    assert nxt["labels"]["org.opencontainers.image.version"] == image.NEXT_RELEASE
    assert "org.opencontainers.image.version" not in current["labels"]
    manifest = json.loads(_members(nxt["image_archive"])["manifest.json"])
    assert manifest[0]["RepoTags"] == [nxt["image_tag"]]
    kept = sorted(p.name for p in layout.CACHE_DIR.glob("dspark-standin-*.tar"))
    assert kept == sorted(m["image_archive"].rsplit("/", 1)[1] for m in (current, nxt))


def _rootfs_with(tmp_path, monkeypatch, members):
    base = tmp_path / "rootfs.tar"
    with tarfile.open(base, "w") as t:
        for name, data, link in members:
            ti = tarfile.TarInfo(name)
            if link:
                ti.type, ti.linkname = tarfile.LNKTYPE, link
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    monkeypatch.setattr(layout, "CACHE_DIR", tmp_path / "cache")
    (tmp_path / "cache").mkdir(exist_ok=True)
    monkeypatch.setattr(image, "rootfs", lambda: base)


def test_manuals_translations_docs_and_perl_modules_are_left_out_of_the_layer(tmp_path, monkeypatch):
    _rootfs_with(tmp_path, monkeypatch, [
        ("./usr/bin/python3", b"#!fake\n", None), ("./usr/share/doc/bash/copyright", b"c\n", None),
        ("./usr/share/man/man1/ls.1.gz", b"m\n", None), ("./usr/share/locale/de/LC_MESSAGES/x.mo", b"l\n", None),
        ("./usr/share/perl/5.36/strict.pm", b"p\n", None), ("./usr/share/perl5/Debconf/Db.pm", b"d\n", None),
        ("./usr/share/bash-completion/bash_completion", b"b\n", None), ("./usr/share/doctor/kept", b"k\n", None),
        ("./usr/lib/locale/C.utf8/LC_CTYPE", b"u\n", None),
    ])
    meta = image.build("e" * 40)
    files = _members(meta["image_archive"])
    with tarfile.open(fileobj=io.BytesIO(files[json.loads(files["manifest.json"])[0]["Layers"][0]])) as t:
        names = set(t.getnames())
    assert {"usr/bin/python3", "usr/share/bash-completion/bash_completion", "usr/share/doctor/kept",
            "usr/lib/locale/C.utf8/LC_CTYPE", "usr/local/bin/vllm"} <= names
    assert not [n for n in names if n.startswith(image.EXCLUDED_DIRS)], names


def test_a_kept_hard_link_to_a_left_out_file_stops_the_build(tmp_path, monkeypatch):
    _rootfs_with(tmp_path, monkeypatch, [("./usr/share/doc/x/README", b"r\n", None),
                                         ("./usr/bin/readme", b"", "./usr/share/doc/x/README")])
    with pytest.raises(image.SimError, match="hard-links usr/bin/readme"):
        image.build("f" * 40)
