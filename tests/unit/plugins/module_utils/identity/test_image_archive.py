"""Reading an archive's own identity: docker-save and OCI layouts, compression, corruption."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import resource
import tarfile

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _image_archive as ia
from tests.support import synthetic_archive


def test_docker_save_layout_gives_config_digest(tmp_path):
    made = synthetic_archive.write(tmp_path / "a.tar", labels={"x": "1"}, arch="arm64")
    got = ia.read_identity(made["path"])
    assert got.image_id == made["image_id"]
    assert got.manifest_digest is None
    assert got.repo_tags == ["dspark-test:v1"]
    assert got.architecture == "arm64"
    assert got.labels == {"x": "1"}
    assert got.compression == "none"


def test_oci_layout_also_gives_manifest_digest(tmp_path):
    made = synthetic_archive.write(tmp_path / "o.tar", oci=True)
    got = ia.read_identity(made["path"])
    assert got.image_id == made["image_id"]
    assert got.manifest_digest == made["manifest_digest"]
    assert got.manifest_digest != got.image_id


def test_gzip_archive_is_streamed(tmp_path):
    made = synthetic_archive.write(tmp_path / "g.tar.gz", gzipped=True, oci=True)
    got = ia.read_identity(made["path"])
    assert got.compression == "gzip"
    assert (got.image_id, got.manifest_digest) == (made["image_id"], made["manifest_digest"])


def test_different_content_gives_different_id(tmp_path):
    a = ia.read_identity(synthetic_archive.write(tmp_path / "a.tar", salt="a")["path"])
    b = ia.read_identity(synthetic_archive.write(tmp_path / "b.tar", salt="b")["path"])
    assert a.image_id != b.image_id


def test_corrupt_config_is_refused(tmp_path):
    made = synthetic_archive.write(tmp_path / "c.tar", corrupt_config=True)
    with pytest.raises(ia.ArchiveError, match="corrupt"):
        ia.read_identity(made["path"])


def test_two_images_are_refused(tmp_path):
    made = synthetic_archive.write(tmp_path / "two.tar", images=2)
    with pytest.raises(ia.ArchiveError, match="holds 2 images"):
        ia.read_identity(made["path"])


def test_not_an_archive(tmp_path):
    bad = tmp_path / "x.tar"
    bad.write_bytes(b"hello" * 100)
    with pytest.raises(ia.ArchiveError):
        ia.read_identity(str(bad))
    with pytest.raises(ia.ArchiveError, match="not a file"):
        ia.read_identity(str(tmp_path / "missing.tar"))


def test_tar_without_manifest(tmp_path):
    p = tmp_path / "plain.tar"
    with tarfile.open(p, "w") as tar:
        tar.add(__file__, arcname="file.py")
    with pytest.raises(ia.ArchiveError, match="no manifest.json"):
        ia.read_identity(str(p))


def test_zstd_is_refused_with_a_reason(tmp_path):
    p = tmp_path / "z.tar.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 64)
    with pytest.raises(ia.ArchiveError, match="zstd"):
        ia.read_identity(str(p))


def test_reading_a_large_archive_reads_metadata_only(tmp_path):
    """A 256 MiB layer: the reader seeks past it, so peak memory grows by far less than the layer."""
    made = synthetic_archive.write(tmp_path / "big.tar", layer_bytes=256 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = ia.read_identity(made["path"])
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert got.image_id == made["image_id"]
    assert grown_kib < 32 * 1024, f"peak RSS grew by {grown_kib} KiB reading a 256 MiB archive"


# ---- crafted archives: the reader must see exactly what the engine would load (issue 21) ----------
# Each archive below holds one honest image (config + manifest.json naming it, tag dspark:prod) and
# one trick that Docker (Go's archive/tar and path.Clean, then extraction) would resolve differently
# from a reader that keeps the last regular member it sees under a name stripped of "./" only.

HIDDEN_TAG = "evil:latest"


def honest_config() -> tuple[str, bytes]:
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {}},
                         "rootfs": {"type": "layers", "diff_ids": []}}, sort_keys=True).encode()
    return hashlib.sha256(config).hexdigest(), config


def manifest_bytes(tags: list[str], pad: int = 0) -> bytes:
    hexid = honest_config()[0]
    doc = json.dumps([{"Config": f"{hexid}.json", "RepoTags": tags, "Layers": []}])
    return (doc + " " * pad).encode()


def reg(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 1785715200, 0o644
    return info, data


def link(name: str, target: str, kind: bytes = tarfile.LNKTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mtime = kind, target, 1785715200
    return info, None


def craft(path, *trick, manifest: bool = True, fmt=tarfile.PAX_FORMAT, pax: dict | None = None) -> str:
    """The honest image, then the trick members, as one plain tar at ``path``."""
    hexid, config = honest_config()
    members = [reg(f"{hexid}.json", config)]
    if manifest:
        members.append(reg("manifest.json", manifest_bytes(["dspark:prod"])))
    with tarfile.open(path, "w", format=fmt, pax_headers=pax) as tar:
        for info, data in [*members, *trick]:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return str(path)


def raw_header(name: bytes, typeflag: bytes, size: int, magic: bytes = b"ustar\x0000", prefix: bytes = b"") -> bytes:
    """One ustar header block, written by hand (tarfile refuses absurd sizes); base-256 size field."""
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = b"0000000\0"
    block[116:124] = b"0000000\0"
    block[124:136] = b"\x80" + size.to_bytes(11, "big")
    block[136:148] = b"00000000000\0"
    block[156:157] = typeflag
    block[257:265] = magic
    block[345:345 + len(prefix)] = prefix
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def craft_raw(path, header: bytes, tail: bytes = b"path=manifest.json\n".ljust(512, b"\0")) -> str:
    """The honest image, then hand-written blocks (a header, then ``tail``), then the end marker."""
    craft(path)
    data = bytearray(open(path, "rb").read())
    while data.endswith(b"\0" * 512):  # drop the end-of-archive blocks (and tarfile's record padding)
        del data[-512:]
    data += header + tail + b"\0" * 1024
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def long_name(name: bytes) -> bytes:
    """A GNU long-name header and its data block, naming the member that follows."""
    return raw_header(b"././@LongLink", b"L", len(name) + 1) + (name + b"\0").ljust(512, b"\0")


def pax(records: bytes) -> bytes:
    """A PAX extended header and its data block, applying to the member that follows."""
    return raw_header(b"././@PaxHeader", b"x", len(records)) + records.ljust(512, b"\0")


def member_blocks(name: bytes, data: bytes) -> bytes:
    return raw_header(name, b"0", len(data)) + data.ljust(512, b"\0")


HIDDEN = manifest_bytes(["dspark:prod", HIDDEN_TAG])

TRICKS = {
    # name: (builder(path) -> archive path, what the refusal must mention)
    "later x/../manifest.json": (lambda p: craft(p, reg("x/../manifest.json", HIDDEN)), "x/../manifest.json"),
    "later .//manifest.json": (lambda p: craft(p, reg(".//manifest.json", HIDDEN)), ".//manifest.json"),
    "later /manifest.json": (lambda p: craft(p, reg("/manifest.json", HIDDEN)), "/manifest.json"),
    "duplicate manifest.json": (lambda p: craft(p, reg("manifest.json", HIDDEN)), "manifest.json"),
    "later hard-linked manifest.json": (
        lambda p: craft(p, reg("hidden.bin", HIDDEN), link("manifest.json", "hidden.bin")), "manifest.json"),
    "hard-linked manifest.json only": (
        lambda p: craft(p, reg("hidden.bin", HIDDEN), link("manifest.json", "hidden.bin"), manifest=False),
        "not a regular file"),
    "later symlinked manifest.json": (
        lambda p: craft(p, reg("hidden.bin", HIDDEN), link("manifest.json", "hidden.bin", tarfile.SYMTYPE)),
        "manifest.json"),
    "symlinked manifest.json only": (
        lambda p: craft(p, reg("hidden.bin", HIDDEN), link("manifest.json", "hidden.bin", tarfile.SYMTYPE),
                        manifest=False), "not a regular file"),
    "later oversized manifest.json": (lambda p: craft(p, reg("manifest.json", manifest_bytes([HIDDEN_TAG], 5000))),
                                      "manifest.json"),
    "oversized manifest.json only": (
        lambda p: craft(p, reg("manifest.json", manifest_bytes(["dspark:prod"], 5000)), manifest=False),
        "more than the 4096 bytes"),
    "global PAX header renaming members": (
        lambda p: craft(p, reg("other.bin", HIDDEN), fmt=tarfile.PAX_FORMAT, pax={"path": "manifest.json"}),
        "global"),
    "member through a symlinked directory": (
        lambda p: craft(p, link("d", ".", tarfile.SYMTYPE), reg("d/manifest.json", HIDDEN)), "d/manifest.json"),
    "../escape member": (lambda p: craft(p, reg("../escape", b"x")), "../escape"),
    # containerd's importer keeps a leading "/" where Docker's loader drops it: two engines, two names
    "absolute member name": (lambda p: craft(p, reg("/etc/dspark.bin", b"x")), "'/etc/dspark.bin' starts with '/'"),
    "absolute directory": (lambda p: craft(p, link("/blobs/", "", tarfile.DIRTYPE)), "'/blobs' starts with '/'"),
    "PAX header declaring a huge size": (lambda p: craft_raw(p, raw_header(b"././@PaxHeader", b"x", 1 << 62)),
                                         "header"),
    "GNU long name declaring a huge size": (lambda p: craft_raw(p, raw_header(b"././@LongLink", b"L", 1 << 62)),
                                            "header"),
    "two GNU long names for one member": (
        lambda p: craft_raw(p, long_name(b"manifest.json") + long_name(b"other.bin"), member_blocks(b"x", HIDDEN)),
        "2 GNU long name headers"),
    "a GNU long name and a PAX path for one member": (
        lambda p: craft_raw(p, pax(b"22 path=manifest.json\n") + long_name(b"other.bin"), member_blocks(b"x", HIDDEN)),
        "both a GNU long name and a PAX path"),
    "a PAX record tarfile stops at, then a hidden member": (
        lambda p: craft_raw(p, pax(b"0 path=x\n"), member_blocks(b"manifest.json", HIDDEN)), "unreadable tar header"),
    "a name prefix outside a ustar header": (
        lambda p: craft_raw(p, raw_header(b"manifest.json", b"0", len(HIDDEN), magic=b"ustar  \0", prefix=b"x"),
                            HIDDEN.ljust(512, b"\0")),
        "name prefix outside a ustar header"),
    "member declaring more bytes than the file": (
        lambda p: craft_raw(p, raw_header(b"manifest.json", b"0", 1 << 40)), "manifest.json"),
}


@pytest.fixture
def small_cap(monkeypatch):
    """A 4 KiB metadata cap: the honest members fit, a padded manifest.json does not."""
    monkeypatch.setattr(ia, "MAX_METADATA_BYTES", 4096)


def test_the_honest_crafted_archive_is_read(tmp_path, small_cap):
    got = ia.read_identity(craft(tmp_path / "ok.tar"))
    assert got.image_id == "sha256:" + honest_config()[0] and got.repo_tags == ["dspark:prod"]


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_an_archive_the_engine_would_read_differently_is_refused(tmp_path, small_cap, trick):
    build, mentions = TRICKS[trick]
    path = build(tmp_path / "trick.tar")
    with pytest.raises(ia.ArchiveError) as err:
        ia.read_identity(path)
    assert path in str(err.value) and mentions in str(err.value), str(err.value)


def test_names_are_cleaned_like_go_path_clean(tmp_path):
    """./, //, . and resolvable .. segments name the same member as the clean name; a root "./" entry is fine."""
    hexid, config = honest_config()
    p = tmp_path / "dots.tar"
    with tarfile.open(p, "w", format=tarfile.PAX_FORMAT) as tar:
        root = tarfile.TarInfo("./")
        root.type = tarfile.DIRTYPE
        tar.addfile(root)
        for info, data in (reg(f".//x/.././{hexid}.json", config), reg("./manifest.json", manifest_bytes(["a:b"]))):
            tar.addfile(info, io.BytesIO(data))
    got = ia.read_identity(str(p))
    assert got.image_id == f"sha256:{hexid}" and got.repo_tags == ["a:b"]


@pytest.mark.parametrize(("raw", "clean"), [
    ("manifest.json", "manifest.json"), ("./manifest.json", "manifest.json"), (".//manifest.json", "manifest.json"),
    ("/manifest.json", "manifest.json"), ("x/../manifest.json", "manifest.json"), ("a//b/./c/", "a/b/c"),
    ("/../x", "x"), ("../x", "../x"), ("a/../../x", "../x"), ("./", "."), ("", "."), ("a/..", "."),
])
def test_clean_name(raw, clean):
    assert ia.clean_name(raw) == clean


def test_a_symlinked_layer_is_not_metadata(tmp_path):
    """Docker 25+ writes legacy <id>/layer.tar symlinks into blobs/: links the reader never reads are fine."""
    path = craft(tmp_path / "legacy.tar", reg("blobs/sha256/" + "a" * 64, b"layer"),
                 link("a" * 64 + "/layer.tar", "../blobs/sha256/" + "a" * 64, tarfile.SYMTYPE))
    assert ia.read_identity(path).repo_tags == ["dspark:prod"]


def test_gzip_trick_is_refused_too(tmp_path):
    raw = craft(tmp_path / "t.tar", reg("x/../manifest.json", HIDDEN))
    gz = tmp_path / "t.tar.gz"
    with open(raw, "rb") as src, gzip.open(gz, "wb") as dst:
        dst.write(src.read())
    with pytest.raises(ia.ArchiveError, match="more than once"):
        ia.read_identity(str(gz))
