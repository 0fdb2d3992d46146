"""The control node of README.md's "Real pairs", made by running that section's command block as written: bash
runs the block's text, taken from the README of the clean clone under test, in that clone, for a user whose home
is a fresh folder (so `~/dspark` is this test's). Nothing of this checkout's virtualenv, collections or
ansible.cfg is on the way: PATH loses every virtualenv, and no ANSIBLE_* variable reaches the block. The block
runs twice, as a new control node and then as an upgrade from the same checkout, which is how an operator
upgrades. Playbooks and dspark then run from `~/dspark` with that virtualenv first on PATH, as the README says."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.docblocks import block_after  # conftest puts the checkout on sys.path

SECTION = "## Real pairs"


def readme_block(readme: Path) -> str:
    """The first sh block of README.md's "Real pairs" section, verbatim."""
    return block_after(readme, SECTION, end="\n## ")


def run(argv: list[str], cwd: Path, env: dict, timeout: float = 1800, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout,
                         check=False)
    if check:
        assert res.returncode == 0, f"{argv} exited {res.returncode}:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    return res


def operator_env(home: Path) -> dict:
    """A login's environment on a fresh control node: this checkout's virtualenv and Ansible settings left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    paths = [p for p in env.get("PATH", "").split(os.pathsep)
             if p and not (Path(p).parent / "pyvenv.cfg").is_file()]
    env.update(HOME=str(home), PATH=os.pathsep.join(paths), ANSIBLE_FORCE_COLOR="0")
    return env


@dataclass(frozen=True)
class ControlNode:
    base: Path       # ~/dspark: the virtualenv, its collections and ansible.cfg; runs start here
    venv: Path
    root: Path       # the installed gb10.dspark
    version: str
    env: dict        # the operator's environment with ~/dspark/bin/activate sourced
    installs: tuple  # the block's two runs (a new control node, then the upgrade)

    def tool(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(self, *argv: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess:
        return run([self.tool(argv[0]), *argv[1:]], cwd=self.base, env=self.env, timeout=timeout, check=check)


def install(home: Path, tree: Path) -> ControlNode:
    version = yaml.safe_load((tree / "galaxy.yml").read_text())["version"]
    env = operator_env(home)
    block = readme_block(tree / "README.md")
    installs = tuple(run(["bash", "-euo", "pipefail", "-c", block], cwd=tree, env=env, timeout=1200)
                     for _unused in ("new", "upgrade"))
    base = home / "dspark"
    root = base / "collections" / "ansible_collections" / "gb10" / "dspark"
    activated = dict(env, VIRTUAL_ENV=str(base), PATH=f"{base / 'bin'}{os.pathsep}{env['PATH']}")
    return ControlNode(base=base, venv=base, root=root, version=version, env=activated, installs=installs)
