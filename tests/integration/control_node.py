"""The control node of README.md's "Real pairs", made the way an operator makes it: the collection
built from a clean clone as a release would be cut, installed into a fresh collections path
(community.docker from its own path, as from a mirrored Galaxy server), and a fresh virtualenv
holding only the collection's control-node requirements and its dspark command. Playbooks then run
from outside the checkout, with an ansible.cfg of their own."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from simhelpers import ROOT


def run(argv: list[str], cwd: Path, env: dict, timeout: float = 1800, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout,
                         check=False)
    if check:
        assert res.returncode == 0, f"{argv} exited {res.returncode}:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    return res


def _dev_tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


@dataclass(frozen=True)
class ControlNode:
    base: Path       # its working folder (outside the checkout): ansible.cfg, the venv, the collections
    venv: Path
    root: Path       # the installed gb10.dspark
    version: str
    env: dict        # ANSIBLE_CONFIG points at its own ansible.cfg

    def tool(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(self, *argv: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess:
        return run([self.tool(argv[0]), *argv[1:]], cwd=self.base, env=self.env, timeout=timeout, check=check)


def install(base: Path, tree: Path) -> ControlNode:
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0")
    env.pop("ANSIBLE_CONFIG", None)
    env.pop("VIRTUAL_ENV", None)

    dist = base / "dist"
    run([_dev_tool("ansible-galaxy"), "collection", "build", "--output-path", str(dist), str(tree)], cwd=base, env=env)
    artefact = dist / f"gb10-dspark-{version}.tar.gz"
    assert artefact.is_file(), sorted(p.name for p in dist.iterdir())
    installed = base / "collections"
    run([_dev_tool("ansible-galaxy"), "collection", "install", "--no-deps", "-p", str(installed), str(artefact)],
        cwd=base, env=env)
    root = installed / "ansible_collections" / "gb10" / "dspark"
    assert json.loads((root / "MANIFEST.json").read_text())["collection_info"]["version"] == version
    deps = base / "deps" / "ansible_collections"
    deps.mkdir(parents=True)
    (deps / "community").symlink_to(ROOT / "collections" / "ansible_collections" / "community")

    # The control node's Python, and its dspark command built from a copy (pip's build files stay
    # out of the installed tree, which preflight checks against its FILES.json).
    venv = base / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=base, env=env)
    cli_copy = base / "dspark-cli"
    shutil.copytree(root / "cli", cli_copy)
    run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         "-r", str(root / "meta" / "ee-requirements.txt"), str(cli_copy)], cwd=base, env=env, timeout=900)

    cfg = (ROOT / "ansible.cfg").read_text().replace(
        "collections_path = ./collections", f"collections_path = {installed}:{base / 'deps'}")
    assert str(installed) in cfg
    (base / "ansible.cfg").write_text(cfg)
    env["ANSIBLE_CONFIG"] = str(base / "ansible.cfg")
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return ControlNode(base=base, venv=venv, root=root, version=version, env=env)
