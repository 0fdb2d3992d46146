"""The Galaxy artefact, built from this checkout as a release would be, holds what a control node
runs and nothing of the simulator, the benches, the development tools and tests, or build
leftovers; galaxy.yml says where the code, the docs and the issues live."""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

# Top-level folders and files that belong to the checkout only.
LEFT_OUT = ("sim/", "bench/", "tools/", "molecule/", "tests/unit/", "tests/integration/", "tests/vllm/",
            "tests/fixtures/", "tests/support/", "inventories/sim/", "inventories/sim-fleet2/", "artifacts/", "collections/", ".venv/",
            ".deps/", ".ci/", "Makefile", "requirements.txt", "ruff.toml", ".ansible-lint",
            "ansible-navigator.yml")  # the checkout's settings for running in the EE against the simulator
# What a control node needs from it.
KEPT = ("MANIFEST.json", "FILES.json", "README.md", "meta/runtime.yml", "meta/ee-requirements.txt",
        "plugins/action/pair_ready.py", "plugins/modules/pair_ready.py", "plugins/module_utils/engine/_startup.py",
        "roles/engine/tasks/main.yml", "roles/gate/files/runtime_gate/conftest.py", "playbooks/provision.yml",
        "cli/pyproject.toml", "cli/dspark_cli/main.py", "inventories/sample/hosts.yml", "docs/operator-guide.md",
        "execution-environment.yml", "pytest.ini", "ansible.cfg")


@pytest.fixture(scope="module")
def members(tmp_path_factory) -> list[str]:
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    res = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), "--force",
                          str(REPO)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    (artefact,) = out.glob("gb10-dspark-*.tar.gz")
    with tarfile.open(artefact) as tar:
        return [m.name.removeprefix("./") for m in tar.getmembers()]


def test_the_artefact_leaves_the_checkouts_own_parts_out(members):
    leaked = sorted(name for name in members
                    if any(name == p.rstrip("/") or name.startswith(p) for p in LEFT_OUT)
                    or ".egg-info" in name or "__pycache__" in name or name.endswith(".pyc"))
    assert leaked == []


def test_the_artefact_holds_what_a_control_node_runs(members):
    names = set(members)
    assert [path for path in KEPT if path not in names] == []
    # tests/sanity stays: the Galaxy importer runs ansible-test sanity with its ignore files
    assert any(name.startswith("tests/sanity/") for name in names)


def test_galaxy_yml_names_the_repository_the_docs_and_the_issues():
    meta = yaml.safe_load((REPO / "galaxy.yml").read_text())
    for field in ("repository", "documentation", "issues"):
        assert str(meta.get(field, "")).startswith("https://"), field
