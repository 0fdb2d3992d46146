"""The simulator's image artifact: a docker-archive of the vLLM stand-in, built without a registry.

1. A Debian rootfs tarball from mmdebstrap (the machine's own apt sources), cached by its inputs.
2. One layer = that rootfs plus the stand-in engine, its entrypoint and the runtime audit.
3. A docker-archive (``docker save`` layout: layer, config JSON named by its sha256, manifest.json,
   repositories) written directly, so the image ID is the config digest and is known before any
   engine loads it. The archive is cached by a key over all its inputs and rebuilt when one changes.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import tarfile
from pathlib import Path

from . import layout
from .proc import SimError, run, say

SUITE = "bookworm"
MMDEBSTRAP_ARGS = ["--variant=essential", "--include=python3-minimal,libpython3.11-stdlib,procps", "--mode=root"]
IMAGE_REPO = "dspark-r0b0tlab"
IMAGE_TAG_NAME = "production-v026-sim"
IMAGE_TAG = f"{IMAGE_REPO}:{IMAGE_TAG_NAME}"
# The simulator's releases: the one its inventory pins (sim-v026) and the next one (sim-v027), which a rollout
# test brings a pair to. The next release is the same layer under another tag and one more label, so its image
# ID differs (it is a different image to every engine) while an engine that holds one stores the layer once.
CURRENT_RELEASE = "sim-v026"
NEXT_RELEASE = "sim-v027"
RELEASE_TAGS = {CURRENT_RELEASE: IMAGE_TAG_NAME, NEXT_RELEASE: "production-v027-sim"}
# What the stand-in never reads, left out of the layer as slim images leave it out: manuals, translations,
# package docs, and the Perl modules only package scripts use. Nearly half the rootfs's files: every rank's
# engine unpacks the layer at each load, and sim-down deletes it again.
EXCLUDED_DIRS = tuple(f"usr/share/{d}/" for d in ("doc", "man", "locale", "info", "lintian", "perl", "perl5"))
CREATED = "2026-08-03T00:00:00Z"
FIXED_MTIME = 1785715200  # 2026-08-03, so rebuilt layers hash the same

ENGINE_SRC = layout.REPO_ROOT / "sim" / "engine"
# Identity the stand-in reports, mirroring the frozen v026 image (docs/wrapper-reference.md §1); the image ID,
# the source revision and the manifest digest are the simulator's own.
VLLM_VERSION = "0.26.0+dspark.sm121.3"
INTEGRATED_COMMIT = "fbad93432ebf60c8345397b3032fe03bf5d239cc"


def _arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def rootfs() -> Path:
    key = hashlib.sha256(json.dumps([SUITE, MMDEBSTRAP_ARGS, _arch()]).encode()).hexdigest()[:16]
    out = layout.CACHE_DIR / f"rootfs-{SUITE}-{key}.tar"
    if out.exists():
        return out
    layout.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.tar")
    say(f"building the Debian {SUITE} rootfs with mmdebstrap (about 20 s)")
    run(["mmdebstrap", *MMDEBSTRAP_ARGS, SUITE, str(tmp)], timeout=900)
    tmp.rename(out)
    return out


def _engine_files() -> list[tuple[str, Path, int]]:
    """(path in image, source file, mode) for everything the stand-in adds to the rootfs."""
    files = []
    pkg = ENGINE_SRC / "dspark_engine"
    for src in sorted(pkg.rglob("*.py")):
        files.append((f"opt/dspark-engine/dspark_engine/{src.relative_to(pkg)}", src, 0o644))
    files.append(("usr/local/bin/vllm", ENGINE_SRC / "bin" / "vllm", 0o755))
    files.append(("usr/local/bin/dspark-entrypoint.sh", ENGINE_SRC / "bin" / "dspark-entrypoint.sh", 0o755))
    return files


def source_revision() -> str:
    """A 40-hex revision of the stand-in's sources: what ``org.opencontainers.image.revision`` names."""
    h = hashlib.sha1()
    for dest, src, mode in _engine_files():
        h.update(dest.encode() + b"\0" + oct(mode).encode() + b"\0" + src.read_bytes())
    return h.hexdigest()


def labels(model_revision: str, release: str = CURRENT_RELEASE) -> dict[str, str]:
    extra = {} if release == CURRENT_RELEASE else {"org.opencontainers.image.version": release}
    return {
        **extra,
        "org.opencontainers.image.revision": source_revision(),
        "org.opencontainers.image.title": "DSpark vLLM stand-in (gb10.dspark simulator)",
        "io.r0b0tlab.model.revision": model_revision,
        "io.r0b0tlab.vllm.package.version": VLLM_VERSION,
        "io.r0b0tlab.vllm.integrated.commit": INTEGRATED_COMMIT,
        "io.r0b0tlab.cudagraph.selector": "native-v1",
        "io.r0b0tlab.kv-cache.dtype": "nvfp4_ds_mla",
        "io.r0b0tlab.speculative.method": "dspark",
        "io.r0b0tlab.speculative.tokens": "6",
    }


def _dir_entries(paths: list[str]) -> list[str]:
    dirs = set()
    for p in paths:
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return sorted(dirs)


def _write_layer(base: Path, out: Path) -> str:
    """Copy the rootfs members and append the stand-in; returns the layer's sha256 (diff ID)."""
    extra = _engine_files()
    extra_paths = {dest for dest, _unused, _unused in extra}
    h = hashlib.sha256()

    class _Hashing(io.RawIOBase):
        def __init__(self, f):
            self.f = f

        def writable(self):
            return True

        def write(self, b):
            h.update(b)
            return self.f.write(b)

    with out.open("wb") as raw, tarfile.open(fileobj=_Hashing(raw), mode="w|", format=tarfile.GNU_FORMAT) as dst, \
            tarfile.open(base, mode="r|") as src:
        seen_dirs = set()
        for m in src:
            name = m.name.removeprefix("./").rstrip("/")
            if not name or name == "." or name in extra_paths or f"{name}/".startswith(EXCLUDED_DIRS):
                continue
            if m.islnk() and m.linkname.removeprefix("./").startswith(EXCLUDED_DIRS):
                raise SimError(f"the rootfs hard-links {name} to {m.linkname}, which the layer leaves out")
            m.name = name
            if m.islnk():
                m.linkname = m.linkname.removeprefix("./")
            if m.isdir():
                seen_dirs.add(name.rstrip("/"))
            dst.addfile(m, src.extractfile(m) if m.isreg() else None)
        for d in _dir_entries(sorted(extra_paths)):
            if d not in seen_dirs:
                ti = tarfile.TarInfo(d)
                ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, FIXED_MTIME
                dst.addfile(ti)
        for dest, src_path, mode in extra:
            data = src_path.read_bytes()
            ti = tarfile.TarInfo(dest)
            ti.size, ti.mode, ti.mtime = len(data), mode, FIXED_MTIME
            dst.addfile(ti, io.BytesIO(data))
    return h.hexdigest()


def _tar_add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), 0o644, FIXED_MTIME
    tar.addfile(ti, io.BytesIO(data))


def build(model_revision: str, release: str = CURRENT_RELEASE) -> dict[str, str]:
    """Build (or reuse) one release's archive. Returns tag, image ID, archive path, digests and labels."""
    base = rootfs()
    lab = labels(model_revision, release)
    tag_name = RELEASE_TAGS[release]
    tag = f"{IMAGE_REPO}:{tag_name}"
    key_src = json.dumps([base.name, source_revision(), lab, tag, _arch(), EXCLUDED_DIRS], sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    archive = layout.CACHE_DIR / f"dspark-standin-{release}-{key}.tar"
    meta_path = archive.with_suffix(".json")
    if archive.exists() and meta_path.exists():
        return json.loads(meta_path.read_text())
    say(f"writing the stand-in image archive {archive.name}")
    layer_tmp = layout.CACHE_DIR / f"layer-{key}.tar"
    diff_id = _write_layer(base, layer_tmp)
    config = {
        "architecture": _arch(),
        "os": "linux",
        "created": CREATED,
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE=1"],
            "Entrypoint": ["/usr/local/bin/dspark-entrypoint.sh"],
            "Cmd": None,
            "WorkingDir": "/",
            "Labels": lab,
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": CREATED, "created_by": "gb10.dspark simulator: Debian rootfs + vLLM stand-in"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(config_bytes).hexdigest()
    manifest = [{"Config": f"{image_id}.json", "RepoTags": [tag], "Layers": [f"{diff_id}/layer.tar"]}]
    tmp = archive.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.GNU_FORMAT) as tar:
        ti = tarfile.TarInfo(diff_id)
        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, FIXED_MTIME
        tar.addfile(ti)
        _tar_add_bytes(tar, f"{diff_id}/VERSION", b"1.0")
        _tar_add_bytes(tar, f"{diff_id}/json", json.dumps({"id": diff_id, "created": CREATED}).encode())
        ti = tar.gettarinfo(str(layer_tmp), arcname=f"{diff_id}/layer.tar")
        ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = FIXED_MTIME, 0, 0, "", ""
        with layer_tmp.open("rb") as f:
            tar.addfile(ti, f)
        _tar_add_bytes(tar, f"{image_id}.json", config_bytes)
        _tar_add_bytes(tar, "manifest.json", json.dumps(manifest).encode())
        _tar_add_bytes(tar, "repositories", json.dumps({IMAGE_REPO: {tag_name: diff_id}}).encode())
    layer_tmp.unlink()
    os.replace(tmp, archive)
    meta = {
        "release": release,
        "image_tag": tag,
        "image_id": f"sha256:{image_id}",
        "image_archive": str(archive),
        "image_archive_sha256": _sha256_file(archive),
        "image_archive_bytes": str(archive.stat().st_size),
        "image_architecture": _arch(),
        "layer_diff_id": f"sha256:{diff_id}",
        "labels": lab,
    }
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    for old in layout.CACHE_DIR.glob(f"dspark-standin-{release}-*.tar"):
        if old != archive:
            old.unlink(missing_ok=True)
            old.with_suffix(".json").unlink(missing_ok=True)
    return meta
