"""Write synthetic image archives in the ``docker save`` layout, for tests and benchmarks.

``write(path, layer_bytes=...)`` builds one image whose single layer holds a file of the given
size (zeros, written in chunks: a multi-GB archive costs disk, not memory). Options add an OCI
``index.json`` (as Docker 25+ writes), gzip compression, extra images or a corrupt config.
The returned dict holds the IDs the archive declares, computed here independently of the
collection's reader.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

MTIME = 1785715200
CHUNK = 1 << 20


class _Zeros(io.RawIOBase):
    def __init__(self, size: int):
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = len(data), MTIME, 0o644
    tar.addfile(ti, io.BytesIO(data))


def _layer(dest: Path, layer_bytes: int, salt: str) -> str:
    """A layer tar holding /payload.bin (zeros) and /salt; returns its sha256."""
    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tar:
        _add_bytes(tar, "salt", salt.encode())
        ti = tarfile.TarInfo("payload.bin")
        ti.size, ti.mtime, ti.mode = layer_bytes, MTIME, 0o644
        tar.addfile(ti, io.BufferedReader(_Zeros(layer_bytes), CHUNK))
    h = hashlib.sha256()
    with dest.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _config(diff_id: str, arch: str, labels: dict, salt: str) -> bytes:
    cfg = {
        "architecture": arch,
        "os": "linux",
        "created": "2026-08-03T00:00:00Z",
        "config": {"Labels": labels, "Entrypoint": ["/bin/true"], "Env": [f"SALT={salt}"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }
    return json.dumps(cfg, sort_keys=True).encode()


def write(path: Path, tag: str = "dspark-test:v1", layer_bytes: int = 4096, arch: str = "amd64",
          labels: dict | None = None, salt: str = "a", oci: bool = False, gzipped: bool = False,
          images: int = 1, corrupt_config: bool = False) -> dict:
    path = Path(path)
    work = path.parent / (path.name + ".parts")
    work.mkdir(parents=True, exist_ok=True)
    entries, blobs, index_manifests = [], [], []
    ids = []
    for n in range(images):
        s = salt if n == 0 else f"{salt}-{n}"
        layer = work / f"layer-{n}.tar"
        diff_id = _layer(layer, layer_bytes, s)
        config = _config(diff_id, arch, labels or {}, s)
        config_id = hashlib.sha256(config).hexdigest()
        ids.append(f"sha256:{config_id}")
        if corrupt_config:
            config = config.replace(b"linux", b"linuX")
        entries.append({"Config": f"blobs/sha256/{config_id}" if oci else f"{config_id}.json",
                        "RepoTags": [tag] if n == 0 else [f"{tag}-extra{n}"],
                        "Layers": [f"blobs/sha256/{diff_id}" if oci else f"{diff_id}/layer.tar"]})
        blobs.append((config_id, config, diff_id, layer))
        if oci:
            manifest = json.dumps({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": f"sha256:{config_id}", "size": len(config)},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                            "digest": f"sha256:{diff_id}", "size": layer.stat().st_size}],
            }, sort_keys=True).encode()
            index_manifests.append((hashlib.sha256(manifest).hexdigest(), manifest))
    raw = path.with_suffix(path.suffix + ".raw") if gzipped else path
    with tarfile.open(raw, "w", format=tarfile.GNU_FORMAT) as tar:
        for config_id, config, diff_id, layer in blobs:
            layer_name = f"blobs/sha256/{diff_id}" if oci else f"{diff_id}/layer.tar"
            tar.add(str(layer), arcname=layer_name)
            _add_bytes(tar, f"blobs/sha256/{config_id}" if oci else f"{config_id}.json", config)
        manifest_digest = None
        if oci:
            for digest, manifest in index_manifests:
                _add_bytes(tar, f"blobs/sha256/{digest}", manifest)
            index = {"schemaVersion": 2, "manifests": [
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": f"sha256:{d}",
                 "size": len(m), "annotations": {"io.containerd.image.name": tag}} for d, m in index_manifests]}
            _add_bytes(tar, "index.json", json.dumps(index).encode())
            _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
            manifest_digest = f"sha256:{index_manifests[0][0]}"
        _add_bytes(tar, "manifest.json", json.dumps(entries).encode())
    if gzipped:
        with raw.open("rb") as src, gzip.open(path, "wb", compresslevel=1) as dst:
            for chunk in iter(lambda: src.read(CHUNK), b""):
                dst.write(chunk)
        raw.unlink()
    for _unused, _unused, _unused, layer in blobs:
        layer.unlink()
    work.rmdir()
    return {"path": str(path), "image_id": ids[0], "image_ids": ids, "manifest_digest": manifest_digest,
            "tag": tag, "labels": labels or {}, "architecture": arch}
