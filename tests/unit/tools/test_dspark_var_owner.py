"""The ansible-lint rule dspark-var-owner (tools/lint/rules/dspark_var_owner.py), on a scratch role."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ansiblelint")

RULES = Path(__file__).resolve().parents[3] / "tools" / "lint" / "rules"
sys.path.insert(0, str(RULES))
from dspark_var_owner import owned  # noqa: E402

ANSIBLE_LINT = Path(sys.executable).parent / "ansible-lint"

DEFAULTS = """\
---
dspark_demo_ok: 1
__dspark_demo_internal: 2
dspark_demo: 3
dspark_other_thing: 4
demo_thing: 5
"""

TASKS = """\
---
- name: Demo | Registered, internal
  ansible.builtin.command: "true"
  register: __dspark_demo_out
  changed_when: false

- name: Demo | Registered, public
  ansible.builtin.command: "true"
  register: dspark_demo_out
  changed_when: false

- name: Demo | Facts
  ansible.builtin.set_fact:
    dspark_demo_public: 1
    __dspark_demo_private: 2
    dspark_elsewhere: 3

- name: Demo | Block with vars
  vars:
    __dspark_other_internal: 1
    dspark_profile: an input of the included task file
  block:
    - name: Demo | Inputs of another role are that role's business
      ansible.builtin.include_role:
        name: gb10.dspark.engine
      vars:
        __dspark_engine_x: 1

- name: Demo | Skipped with a noqa
  ansible.builtin.set_fact:  # noqa: dspark-var-owner
    dspark_skipped: 1
"""


def test_owned_names():
    assert owned("dspark_gate_dir", "gate") and owned("__dspark_gate_dir", "gate")
    assert owned("dspark_gate", "gate") and owned("__dspark_gate", "gate")
    assert not owned("dspark_gatekeeper", "gate") and not owned("gate_dir", "gate")
    assert not owned("dspark_engine_dir", "gate") and not owned("_dspark_gate_dir", "gate")
    assert owned("__dspark_gate_out", "gate", internal=True)
    assert not owned("dspark_gate_out", "gate", internal=True)


@pytest.mark.skipif(not ANSIBLE_LINT.exists(), reason="ansible-lint is not installed next to this Python")
def test_rule_on_a_scratch_role(tmp_path):
    role = tmp_path / "roles" / "demo"
    (role / "defaults").mkdir(parents=True)
    (role / "tasks").mkdir()
    (role / "defaults" / "main.yml").write_text(DEFAULTS)
    (role / "tasks" / "main.yml").write_text(TASKS)
    (tmp_path / ".ansible-lint").write_text(
        f"---\noffline: true\nrulesdir: ['{RULES}']\nuse_default_rules: true\nenable_list: [dspark-var-owner]\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    env = {**os.environ, "PATH": f"{ANSIBLE_LINT.parent}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    env.pop("ANSIBLE_CONFIG", None)
    res = subprocess.run([str(ANSIBLE_LINT), "--nocolor", "-f", "pep8", "--tags", "dspark-var-owner"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    found = sorted(re.findall(r"^(roles/\S+?):(\d+)(?::\d+)?: dspark-var-owner: (\w+[\w ]*?) '(\w+)'",
                              res.stdout, re.M))
    assert found == sorted([
        ("roles/demo/defaults/main.yml", "5", "variable", "dspark_other_thing"),
        ("roles/demo/defaults/main.yml", "6", "variable", "demo_thing"),
        ("roles/demo/tasks/main.yml", "7", "registered variable", "dspark_demo_out"),
        ("roles/demo/tasks/main.yml", "12", "set_fact variable", "dspark_elsewhere"),
        ("roles/demo/tasks/main.yml", "18", "internal task variable", "__dspark_other_internal"),
    ]), res.stdout + res.stderr
    assert res.returncode != 0
