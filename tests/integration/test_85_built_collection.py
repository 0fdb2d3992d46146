"""The Galaxy artefact works on its own: `ansible-galaxy collection build` makes it, it installs into
a fresh collections path, a fresh virtualenv gets the control node's install (README.md, "Real
pairs": meta/ee-requirements.txt and the dspark command from the installed copy, nothing of the
simulator's or the development tools), and the simulator's provision runs from there (not from
this checkout), passes the gate, and the wrapper-tree check verifies the installed files."""
from __future__ import annotations

import json

from simhelpers import INVENTORY

# What a control node must not get: the simulator's and the development tools' packages.
NOT_ON_A_CONTROL_NODE = {"docker", "molecule", "ansible-lint", "selenium", "ruff", "ansible-builder"}


def test_the_built_artefact_installs_and_provisions_the_simulator(pair_a, control_node):
    pair = pair_a
    root = control_node.root
    assert not (root / ".git").exists() and not (root / "inventories" / "sim").exists()
    assert not (root / "sim").exists() and not (root / "tools").exists()
    have = {token.lower() for line in control_node.run("pip", "freeze").stdout.splitlines()
            for token in [line.split("==")[0].split(" @ ")[0]]}
    assert {"ansible-core", "ansible-runner", "pytest", "pytest-testinfra", "pytest-timeout", "dspark-cli"} <= have, have
    assert not have & NOT_ON_A_CONTROL_NODE, have & NOT_ON_A_CONTROL_NODE
    assert "provision" in control_node.run("dspark", "--help").stdout

    evidence = control_node.base / "evidence"
    res = control_node.run("ansible-playbook", "-i", str(INVENTORY), "gb10.dspark.provision", "--limit", pair.group,
                           "-e", f"dspark_evidence_dir={evidence}")
    assert "failed=0" in res.stdout.split("PLAY RECAP")[-1]

    tree = json.loads((evidence / "wrapper-tree.json").read_text())
    assert tree["kind"] == "installed_collection", tree
    assert tree["path"] == str(root) and tree["dirty"] is False
    assert tree["revision"] == f"gb10.dspark:{control_node.version}"
    gate = json.loads((evidence / f"sim{pair.index:02d}" / "runtime-gate.json").read_text())
    assert gate["status"] == "PASS" and gate["errors"] == []
