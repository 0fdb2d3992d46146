# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read an image archive's own identity without loading it, in bounded memory.

An archive written by ``docker save`` (or by the simulator) holds ``manifest.json``, whose
``Config`` entry names the image config blob; the sha256 of that blob is the image ID a classic
engine (overlay2) will report. Archives written by Docker 25 and later are also OCI image
layouts: ``index.json`` names the manifest (or index) whose digest is the ID a containerd-store
engine (Docker 29's default) reports.

Plain tar archives are read by seeking from header to header, so a 30 GB archive costs a few
hundred small reads. Compressed archives (gzip, bzip2, xz) are decompressed once, as a stream.
Only small members (metadata, at most ``MAX_METADATA_BYTES`` each) are ever held in memory.
"""
from __future__ import annotations

import hashlib
import os
import tarfile
from dataclasses import dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils._strict_json import loads as strict_loads

MAX_METADATA_BYTES = 16 << 20  # manifest.json, index.json, image configs and OCI manifests
MAX_METADATA_TOTAL = 64 << 20
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class ArchiveError(Exception):
    """The archive is unreadable, malformed, or not a single image."""


@dataclass
class ArchiveIdentity:
    path: str
    size: int
    compression: str
    image_id: str  # sha256:<config digest>
    manifest_digest: str | None  # sha256:<OCI manifest or index digest>, when the archive is an OCI layout
    repo_tags: list[str] = field(default_factory=list)
    architecture: str | None = None
    labels: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "size": self.size,
            "compression": self.compression,
            "image_id": self.image_id,
            "manifest_digest": self.manifest_digest,
            "repo_tags": list(self.repo_tags),
            "architecture": self.architecture,
        }


def compression_of(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(6)
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(_ZSTD_MAGIC):
        return "zstd"
    return "none"


def _norm(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/")


def _small_members(path: str, compression: str) -> dict[str, bytes]:
    """Every regular member no bigger than MAX_METADATA_BYTES, by normalised name."""
    mode = "r:" if compression == "none" else "r|*"
    kept: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(path, mode=mode) as tar:
            for member in tar:
                if not member.isreg() or member.size > MAX_METADATA_BYTES:
                    continue
                name = _norm(member.name)
                if not _is_metadata_name(name):
                    continue
                f = tar.extractfile(member)
                if f is None:
                    continue
                first = f.read(1)
                if name.startswith("blobs/") and first != b"{":
                    continue  # a small layer, not a JSON manifest or config
                total += member.size
                if total > MAX_METADATA_TOTAL:
                    raise ArchiveError(f"{path}: more than {MAX_METADATA_TOTAL >> 20} MiB of image metadata")
                kept[name] = first + f.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"{path} is not a readable image archive: {exc}") from exc
    return kept


def _is_metadata_name(name: str) -> bool:
    # docker save: manifest.json, <hex>.json, repositories; OCI layout: index.json, oci-layout,
    # blobs/sha256/<hex> (configs and manifests are small; layers are skipped by size or name).
    if name in ("manifest.json", "index.json", "repositories", "oci-layout"):
        return True
    if name.endswith(".json") and "/" not in name:
        return True
    return name.startswith("blobs/sha256/")


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _loads(name: str, data: bytes, path: str) -> object:
    try:
        return strict_loads(data)
    except ValueError as exc:
        raise ArchiveError(f"{path}: {name} is not valid JSON: {exc}") from exc


def _blob_name(digest: str) -> str:
    algo, _sep, hexpart = digest.partition(":")
    return f"blobs/{algo}/{hexpart}"


def read_identity(path: str) -> ArchiveIdentity:
    """The identity the archive itself declares, verified against its own blob digests."""
    if not os.path.isfile(path):
        raise ArchiveError(f"{path} is not a file")
    compression = compression_of(path)
    if compression == "zstd":
        raise ArchiveError(f"{path} is zstd-compressed, which this reader cannot stream; decompress it first")
    members = _small_members(path, compression)
    if "manifest.json" not in members:
        raise ArchiveError(f"{path} has no manifest.json: not a docker-archive image")
    manifest = _loads("manifest.json", members["manifest.json"], path)
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        count = len(manifest) if isinstance(manifest, list) else "?"
        raise ArchiveError(f"{path} holds {count} images; an identity archive must hold exactly one")
    entry = manifest[0]
    config_name = _norm(str(entry.get("Config", "")))
    if config_name not in members:
        raise ArchiveError(f"{path}: the config {config_name!r} named by manifest.json is missing")
    config_bytes = members[config_name]
    image_id = _digest(config_bytes)
    declared = config_name.rsplit("/", 1)[-1].removesuffix(".json")
    if declared != image_id.split(":", 1)[1]:
        raise ArchiveError(f"{path}: config {config_name} hashes to {image_id}; the archive is corrupt")
    config = _loads(config_name, config_bytes, path)
    if not isinstance(config, dict):
        raise ArchiveError(f"{path}: {config_name} is not an image config")
    labels = (config.get("config") or {}).get("Labels") or {}
    return ArchiveIdentity(
        path=path,
        size=os.path.getsize(path),
        compression=compression,
        image_id=image_id,
        manifest_digest=_oci_digest(members, path, image_id),
        repo_tags=[str(t) for t in entry.get("RepoTags") or []],
        architecture=config.get("architecture"),
        labels={str(k): str(v) for k, v in labels.items()},
    )


def _oci_digest(members: dict[str, bytes], path: str, image_id: str) -> str | None:
    """The digest a containerd-store engine will report, from index.json (None without one)."""
    if "index.json" not in members:
        return None
    index = _loads("index.json", members["index.json"], path)
    descriptors = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(descriptors, list) or len(descriptors) != 1:
        raise ArchiveError(f"{path}: index.json must name exactly one image, names {len(descriptors or [])}")
    digest = str(descriptors[0].get("digest", ""))
    blob = members.get(_blob_name(digest))
    if blob is None:
        raise ArchiveError(f"{path}: the manifest {digest} named by index.json is missing")
    if _digest(blob) != digest:
        raise ArchiveError(f"{path}: blob {digest} hashes to {_digest(blob)}; the archive is corrupt")
    if _config_of(members, blob, path) not in (image_id, None):
        raise ArchiveError(f"{path}: index.json and manifest.json describe different images")
    return digest


def _config_of(members: dict[str, bytes], manifest_bytes: bytes, path: str) -> str | None:
    """The config digest an OCI manifest points at; for an index, that of its only manifest."""
    doc = _loads("manifest", manifest_bytes, path)
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("config"), dict):
        return str(doc["config"].get("digest"))
    inner = doc.get("manifests")
    if isinstance(inner, list) and len(inner) == 1:
        blob = members.get(_blob_name(str(inner[0].get("digest", ""))))
        return _config_of(members, blob, path) if blob else None
    return None
