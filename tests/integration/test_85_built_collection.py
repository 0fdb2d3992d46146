"""README.md's "Real pairs" block makes a working control node as written (tests/integration/control_node.py runs it
verbatim, twice: a new control node, then an upgrade): a virtualenv with ansible-core, community.docker from the
community package and nothing of the simulator's or the development tools; the collection installed as its
artefact holds it, nothing written into the checkout; `dspark` from the installed collection. From `~/dspark`,
with only the inventory pointing at the simulator, dspark provisions a pair (the gate passes, and the wrapper-tree
check verifies the installed files) and audits it."""
from __future__ import annotations

import json
import os
import subprocess

from control_node import operator_env, run
from simhelpers import GUIDE_OPS_USER, ROOT, inventory_of, on_rank

from dspark_sim import rank as sim_rank
from tests.support.docblocks import block_after

GUIDE = ROOT / "docs" / "operator-guide.md"

# What a control node must not get: the simulator's and the development tools' packages.
NOT_ON_A_CONTROL_NODE = {"docker", "molecule", "ansible-lint", "selenium", "ruff", "ansible-builder"}


def test_the_readme_block_makes_a_control_node_and_writes_nothing_into_the_checkout(pair_c, control_node, clean_tree):
    """(pair_c only places the test in that pair's lane, before the test that provisions from this control node.)"""
    for res in control_node.installs:  # both runs of the block printed `dspark --version` last
        assert "[WARNING]" not in res.stderr, res.stderr
        lines = res.stdout.splitlines()
        assert f"gb10.dspark {control_node.version} (installed: {control_node.root})" in lines, res.stdout[-3000:]
        assert any(line.startswith("pin ") for line in lines), res.stdout[-3000:]
    status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=clean_tree, text=True,
                            capture_output=True, check=True).stdout
    assert status == "", f"the README's steps wrote into the checkout:\n{status}"
    # the collection is the installed artefact (FILES.json), not a link to a checkout, and pip built nothing inside it
    root = control_node.root
    assert (root / "FILES.json").is_file() and not root.is_symlink()
    assert not (root / ".git").exists() and not (root / "inventories" / "sim").exists()
    assert not (root / "sim").exists() and not (root / "tools").exists()
    assert not list((root / "cli").glob("*.egg-info")) and not (root / "cli" / "build").exists()
    have = {token.lower() for line in control_node.run("pip", "freeze").stdout.splitlines()
            for token in [line.split("==")[0].split(" @ ")[0]]}
    assert {"ansible", "ansible-core", "ansible-runner", "pytest", "pytest-testinfra", "pytest-timeout",
            "dspark-cli"} <= have, have
    assert not have & NOT_ON_A_CONTROL_NODE, have & NOT_ON_A_CONTROL_NODE


def test_dspark_from_the_readme_control_node_provisions_and_audits_a_pair(pair_c, control_node):
    pair = pair_c
    root = control_node.root
    evidence = control_node.base / "evidence"
    common = ["--inventory", str(inventory_of(pair.head)), "--limit", pair.group, "-e", f"dspark_evidence_dir={evidence}"]
    res = control_node.run("dspark", "provision", *common, check=False)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]

    tree = json.loads((evidence / pair.name / "wrapper-tree.json").read_text())
    assert tree["kind"] == "installed_collection", tree
    assert tree["path"] == str(root) and tree["dirty"] is False
    assert tree["revision"] == f"gb10.dspark:{control_node.version}"
    gate = json.loads((evidence / pair.name / "runtime-gate.json").read_text())
    assert gate["status"] == "PASS" and gate["errors"] == []

    res = control_node.run("dspark", "audit", "--json", *common, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads(res.stdout)
    assert summary["audit"]["not_ok"] == [], summary["audit"]
    # the run folders are the control node's own, beside its ansible.cfg
    assert summary["run_folder"].startswith(str(control_node.base / "artifacts" / "runs")), summary["run_folder"]


OPS_USER = GUIDE_OPS_USER


def test_the_guides_ops_user_steps_make_a_rank_account_ansible_can_log_in_to_and_become_root(pair_c, tmp_path):
    """docs/operator-guide.md §1.1 step 2, run as written as root on a rank (pair_c's worker), with a key made for
    this test in the file the guide names: the new account takes that key (its own authorized_keys, which the
    simulator's sshd reads first, as a real rank's does) and becomes root through sudo with no password."""
    rank = pair_c.worker
    block = block_after(GUIDE, "2. **The ops user on each rank**")
    assert OPS_USER in block
    key = tmp_path / "gb10_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test_85", "-f", str(key)], check=True)
    # In a fresh folder holding the public key under the guide's file name, the block as the guide gives it.
    script = 'cd "$(mktemp -d)" && cat > gb10_ed25519.pub\n' + block
    try:
        on_rank(rank, ["bash", "-euo", "pipefail", "-c", script], input_text=(key.with_suffix(".pub")).read_text())
        login = [*sim_rank.ssh_login(rank, OPS_USER)]
        login[login.index(str(sim_rank.control_key()))] = str(key)  # this test's key, not the simulator's
        res = subprocess.run([*login, "--", "sudo", "-n", "id", "-un"], capture_output=True, text=True, timeout=60,
                             check=False)
        assert (res.returncode, res.stdout.strip()) == (0, "root"), res.stderr
        res = subprocess.run([*login, "--", "id", "-nG"], capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 0 and "docker" not in res.stdout.split(), res.stdout
    finally:
        on_rank(rank, ["bash", "-c", f"userdel -r {OPS_USER} 2>/dev/null; rm -f /etc/sudoers.d/{OPS_USER}"], check=False)


def test_the_guides_air_gapped_install_runs_from_the_carried_files_alone(pair_c, clean_tree, tmp_path):
    """docs/operator-guide.md §5, both blocks as written: the connected machine fills ~/carry from the clean clone
    (nothing written into it), and the control node installs from ~/carry with pip cut off from every index
    (no configuration file, no index, no other find-links) and ansible-galaxy offline."""
    carry = block_after(GUIDE, "**On a connected machine**")
    node = block_after(GUIDE, "**On the control node**, with `~/carry` in place")
    home = tmp_path / "home"
    home.mkdir()
    env = operator_env(home)
    run(["bash", "-euo", "pipefail", "-c", carry], cwd=clean_tree, env=env, timeout=1200)
    assert subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=clean_tree, text=True,
                          capture_output=True, check=True).stdout == ""
    offline = dict(env, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS="",
                   PIP_INDEX_URL="http://127.0.0.1:9/unreachable")
    res = run(["bash", "-euo", "pipefail", "-c", node], cwd=home, env=offline, timeout=1200)
    root = home / "dspark" / "collections" / "ansible_collections" / "gb10" / "dspark"
    assert f"(installed: {root})" in res.stdout and "\npin " in res.stdout, res.stdout[-3000:]
    assert "[WARNING]" not in res.stderr, res.stderr
