"""What the execution environment (EE) is built from, and the hash that names a build of it.

Pure functions (no container engine, no network): the unit tests in tests/unit/tools/test_ee.py call them.

- :func:`wheel_requirements`: every Python requirement the build installs, read from execution-environment.yml,
  its Python requirements file and each collection's own EE metadata (what ansible-builder's introspection
  reads), plus what ansible-builder's stages install for themselves. The wheelhouse is made from this list on
  the host, so the build needs no package index.
- :func:`inputs_key`: a sha256 over everything that decides the image's content. `make ee` builds only when no
  image carries this key.
- :func:`artefact_from_installed`: a collection tarball made from an installed copy (collections/), for the
  collections that would otherwise come from Galaxy.
"""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import yaml

# What ansible-builder's Containerfile installs with pip on its own (its builder stage: bindep, pyyaml,
# packaging; its final stage: the container init, dumb-init, unless the definition names another).
BUILDER_OWN = ("bindep", "pyyaml", "packaging")
DEFAULT_CONTAINER_INIT = "dumb-init==1.2.5"
# ee/requirements.yml: the collections of the EE, one tarball each, named <namespace>-<name>.tar.gz.
REQUIREMENTS = Path(__file__).resolve().parents[2] / "ee" / "requirements.yml"


def tarballs(requirements: Path = REQUIREMENTS) -> dict[str, str]:
    """The tarballs that ``requirements`` installs, file name -> the collection it holds, in its order."""
    out = {}
    for entry in (yaml.safe_load(requirements.read_text()) or {}).get("collections") or []:
        if entry.get("type") != "file":
            raise ValueError(f"{requirements}: {entry.get('name')!r} is not a local tarball (type: file); the EE "
                             f"is built without Galaxy")
        file = Path(entry["name"]).name
        namespace, sep, name = file.removesuffix(".tar.gz").partition("-")
        if not sep or not file.endswith(".tar.gz"):
            raise ValueError(f"{requirements}: {file!r} is not named <namespace>-<name>.tar.gz")
        out[file] = f"{namespace}.{name}"
    return out


TARBALLS = tarballs()


def requirement_lines(text: str) -> list[str]:
    """The requirement lines of a pip requirements file (comments and blank lines dropped)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def wheel_requirements(definition: Path, collections: Path) -> list[str]:
    """Every requirement the EE build installs with pip, in a stable order without repeats.

    ``definition`` is execution-environment.yml (version 3); ``collections`` the ``ansible_collections`` folder
    holding the collections it installs (each one's meta/execution-environment.yml may name a Python
    requirements file, as ansible-builder's introspection reads it)."""
    ee = yaml.safe_load(definition.read_text())
    if ee.get("version") != 3:
        raise ValueError(f"{definition}: expected an ansible-builder version 3 definition, got version {ee.get('version')!r}")
    deps = ee.get("dependencies") or {}
    reqs: list[str] = []
    for key in ("ansible_core", "ansible_runner"):
        ref = (deps.get(key) or {}).get("package_pip")
        if ref:
            reqs.append(ref)
    python = deps.get("python")
    if isinstance(python, str):
        reqs += requirement_lines((definition.parent / python).read_text())
    elif isinstance(python, list):
        reqs += [str(r) for r in python]
    for meta in sorted(collections.glob("*/*/meta/execution-environment.yml")):
        coll_deps = (yaml.safe_load(meta.read_text()) or {}).get("dependencies") or {}
        py = coll_deps.get("python")
        if isinstance(py, str):
            reqs += requirement_lines((meta.parent.parent / py).read_text())
        elif isinstance(py, list):
            reqs += [str(r) for r in py]
    reqs += BUILDER_OWN
    init = ((ee.get("options") or {}).get("container_init") or {}).get("package_pip", DEFAULT_CONTAINER_INIT)
    if init:
        reqs.append(init)
    seen, out = set(), []
    for r in reqs:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def tarball_digest(path: Path) -> str:
    """A sha256 of a tarball's members (names, kinds, modes and contents), blind to the archive's own
    timestamps and compression: the same collection built twice gives the same digest."""
    h = hashlib.sha256()
    with tarfile.open(path, "r:*") as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            h.update(f"{m.name}\0{m.type!r}\0{m.mode:o}\0{m.linkname}\0".encode())
            if m.isreg():
                f = tar.extractfile(m)
                h.update(hashlib.sha256(f.read() if f else b"").digest())
    return h.hexdigest()


def inputs_key(*, files: dict[str, bytes], tarballs: dict[str, str], wheels: list[str], base_image: str) -> str:
    """The sha256 that names a build: the definition's files (path -> content), the collection tarballs
    (name -> :func:`tarball_digest`), the wheelhouse's file names and the base image's own key."""
    doc = {
        "files": {k: hashlib.sha256(v).hexdigest() for k, v in sorted(files.items())},
        "tarballs": dict(sorted(tarballs.items())),
        "wheels": sorted(wheels),
        "base_image": base_image,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def artefact_from_installed(src: Path, dest: Path) -> None:
    """A collection artefact made from the installed copy at ``src`` (…/ansible_collections/NS/NAME). That copy
    may come from the `ansible` community package, which leaves out files its FILES.json lists (tests, docs,
    CI), so FILES.json is written again for the files present and MANIFEST.json takes its new checksum."""
    if not (src / "MANIFEST.json").is_file():
        raise FileNotFoundError(f"{src}: no installed collection there (MANIFEST.json missing): run `make deps`")
    manifest = json.loads((src / "MANIFEST.json").read_text())
    entries = [p for p in sorted(src.rglob("*"))
               if p.name not in ("MANIFEST.json", "FILES.json") or p.parent != src]
    entries = [p for p in entries if "__pycache__" not in p.parts and not p.name.endswith(".pyc")]
    files = [{"name": ".", "ftype": "dir", "chksum_type": None, "chksum_sha256": None, "format": 1}]
    for p in entries:
        rel = p.relative_to(src).as_posix()
        if p.is_dir():
            files.append({"name": rel, "ftype": "dir", "chksum_type": None, "chksum_sha256": None, "format": 1})
        else:
            files.append({"name": rel, "ftype": "file", "chksum_type": "sha256",
                          "chksum_sha256": _sha256(p.read_bytes()), "format": 1})
    files_json = json.dumps({"files": files, "format": 1}, indent=4).encode()
    manifest["file_manifest_file"]["chksum_sha256"] = _sha256(files_json)
    manifest_json = json.dumps(manifest, indent=4).encode()
    with tarfile.open(dest, "w:gz") as tar:
        for name, data in (("MANIFEST.json", manifest_json), ("FILES.json", files_json)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for p in entries:
            tar.add(p, arcname=p.relative_to(src).as_posix(), recursive=False)
