"""meta/runtime.yml: the action group `dspark` lists exactly the collection's modules, and Ansible
applies `module_defaults: group/gb10.dspark.dspark` to them."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
RUNTIME = REPO / "meta" / "runtime.yml"
MODULES = REPO / "plugins" / "modules"
MANIFEST = REPO / "sim" / "engine" / "runtime-manifest.vllm-sim.3.json"


def runtime() -> dict:
    return yaml.safe_load(RUNTIME.read_text())


def module_names() -> list[str]:
    return sorted(p.stem for p in MODULES.glob("*.py") if not p.name.startswith("_"))


def test_requires_ansible_is_kept():
    assert runtime()["requires_ansible"] == ">=2.19.0"


def test_the_dspark_group_lists_exactly_the_modules_in_plugins_modules():
    group = runtime()["action_groups"]["dspark"]
    assert all(isinstance(name, str) and "." not in name for name in group), "short names only"
    assert len(group) == len(set(group)), "a module listed twice"
    listed, present = set(group), set(module_names())
    assert not present - listed, f"modules missing from action_groups.dspark: {sorted(present - listed)}"
    assert not listed - present, f"action_groups.dspark names no module file: {sorted(listed - present)}"


def test_the_group_is_the_only_action_group():
    assert list(runtime()["action_groups"]) == ["dspark"]


def test_module_defaults_for_the_group_reach_a_module(tmp_path):
    """The module gets its required options only from the group's defaults."""
    sha = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()
    playbook = tmp_path / "defaults.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "module_defaults through the action group",
        "hosts": "localhost",
        "gather_facts": False,
        "module_defaults": {"group/gb10.dspark.dspark": {"path": str(MANIFEST), "expected_sha256": sha}},
        "tasks": [
            {"name": "Verify the manifest with options from the group", "gb10.dspark.runtime_manifest": {"rank": "ctl"},
             "register": "result"},
            {"name": "Show it", "ansible.builtin.debug": {"msg": "SHA={{ result.sha256 }}"}},
        ],
    }], sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_LOCALHOST_WARNING="0")
    res = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local",
                          "-e", json.dumps({"ansible_python_interpreter": sys.executable}), str(playbook)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"SHA={sha}" in res.stdout
