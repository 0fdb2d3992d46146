"""docs/ci/dspark-serving-guard.yml: the steps after the guard find the evidence where the guard wrote it."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
WORKFLOW = ROOT / "docs" / "ci" / "dspark-serving-guard.yml"


def steps() -> dict:
    return {s["name"]: s for s in yaml.safe_load(WORKFLOW.read_text())["jobs"]["guard"]["steps"]}


def test_the_evidence_steps_read_the_pair_folder_of_the_inventory_s_evidence_dir(tmp_path):
    """The step's script, run as written against the sample inventory, names the pair's folder under the inventory's
    dspark_evidence_dir; the print and upload steps read that folder, never the checkout's artifacts/."""
    every = steps()
    find = every["Find the pair's evidence folder in the inventory"]
    github_env = tmp_path / "github_env"
    env = dict(os.environ, DSPARK_INVENTORY=str(ROOT / "inventories" / "sample"), DSPARK_PAIR_GROUP="pair_lab01",
               GITHUB_ENV=str(github_env), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    res = subprocess.run(["bash", "-eo", "pipefail", "-c", find["run"]], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    site = yaml.safe_load((ROOT / "inventories" / "sample" / "group_vars" / "all" / "site.yml").read_text())
    assert github_env.read_text() == f"DSPARK_PAIR_EVIDENCE={site['dspark_evidence_dir']}/lab01\n"
    assert find["if"] == "always()"
    assert '"${DSPARK_PAIR_EVIDENCE}"/serving-guard.json' in every["Print the completions for review"]["run"]
    assert every["Keep the evidence"]["with"]["path"] == "${{ env.DSPARK_PAIR_EVIDENCE }}/"
    assert "artifacts/evidence" not in WORKFLOW.read_text()
