"""Reading an archive's own identity: docker-save and OCI layouts, compression, corruption."""
from __future__ import annotations

import resource
import tarfile

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils import _image_archive as ia
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
