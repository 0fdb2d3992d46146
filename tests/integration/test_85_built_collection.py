"""The Galaxy artefact works on its own: `ansible-galaxy collection build` makes it, it installs into
a fresh collections path, a fresh virtualenv gets the control node's install (README.md, "Real
pairs": meta/ee-requirements.txt and the dspark command from the installed copy, nothing of the
simulator's or the development tools), and the simulator's provision runs from there (not from
this checkout), passes the gate, and the wrapper-tree check verifies the installed files."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from simhelpers import INVENTORY, ROOT


def tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def run(argv: list[str], cwd: Path, env: dict, timeout: float = 1800) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout, check=False)
    assert res.returncode == 0, f"{argv} exited {res.returncode}:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    return res


def test_the_built_artefact_installs_and_provisions_the_simulator(sim, clean_tree, tmp_path):
    pair = sim[0]
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0")
    env.pop("ANSIBLE_CONFIG", None)

    # Build from a clean clone of HEAD, as a release would be cut.
    dist = tmp_path / "dist"
    run([tool("ansible-galaxy"), "collection", "build", "--output-path", str(dist), str(clean_tree)],
        cwd=tmp_path, env=env)
    artefact = dist / f"gb10-dspark-{version}.tar.gz"
    assert artefact.is_file(), sorted(p.name for p in dist.iterdir())

    # Install into a fresh collections path; community.docker comes from its own path, as it would
    # from a mirrored Galaxy server (Galaxy is not reachable here, so --no-deps).
    installed = tmp_path / "collections"
    run([tool("ansible-galaxy"), "collection", "install", "--no-deps", "-p", str(installed), str(artefact)],
        cwd=tmp_path, env=env)
    root = installed / "ansible_collections" / "gb10" / "dspark"
    manifest = json.loads((root / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == version
    assert not (root / ".git").exists() and not (root / "inventories" / "sim").exists()
    deps = tmp_path / "deps" / "ansible_collections"
    deps.mkdir(parents=True)
    (deps / "community").symlink_to(ROOT / "collections" / "ansible_collections" / "community")

    # The control node's Python: a fresh virtualenv with the collection's own requirements and its
    # dspark command (built from a copy, so that pip's build files stay out of the installed tree).
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=env)
    cli_copy = tmp_path / "dspark-cli"
    shutil.copytree(root / "cli", cli_copy)
    run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         "-r", str(root / "meta" / "ee-requirements.txt"), str(cli_copy)], cwd=tmp_path, env=env, timeout=900)
    have = {line.split("==")[0].lower() for line in
            run([str(venv / "bin" / "pip"), "freeze"], cwd=tmp_path, env=env).stdout.split()}
    assert {"ansible-core", "ansible-runner", "pytest", "pytest-testinfra", "pytest-timeout", "dspark-cli"} <= have, have
    assert not have & {"docker", "molecule", "ansible-lint", "selenium", "ruff"}, have & {"docker", "molecule"}
    assert "provision" in run([str(venv / "bin" / "dspark"), "--help"], cwd=tmp_path, env=env).stdout

    # A control node that has only the installed copy: its own ansible.cfg, run from outside the checkout.
    cfg = (ROOT / "ansible.cfg").read_text().replace(
        "collections_path = ./collections", f"collections_path = {installed}:{tmp_path / 'deps'}")
    assert str(installed) in cfg
    (tmp_path / "ansible.cfg").write_text(cfg)
    env["ANSIBLE_CONFIG"] = str(tmp_path / "ansible.cfg")
    evidence = tmp_path / "evidence"
    res = run([str(venv / "bin" / "ansible-playbook"), "-i", str(INVENTORY), "gb10.dspark.provision", "--limit", pair.group,
               "-e", f"dspark_evidence_dir={evidence}"], cwd=tmp_path, env=env)
    assert "failed=0" in res.stdout.split("PLAY RECAP")[-1]

    tree = json.loads((evidence / "wrapper-tree.json").read_text())
    assert tree["kind"] == "installed_collection", tree
    assert tree["path"] == str(root) and tree["dirty"] is False
    assert tree["revision"] == f"gb10.dspark:{version}"
    gate = json.loads((evidence / f"sim{pair.index:02d}" / "runtime-gate.json").read_text())
    assert gate["status"] == "PASS" and gate["errors"] == []
