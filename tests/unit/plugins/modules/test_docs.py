"""Every module documents exactly the interface it implements, and ansible-doc renders it.

A small stand-in for ansible-test's validate-modules (which needs network access to bootstrap):
DOCUMENTATION options (with doc fragments) must match the argument_spec the module builds, in
name, type, default, required and elements; attributes must cover check and diff mode; EXAMPLES
and RETURN must be YAML, and EXAMPLES may only call modules by FQCN.
"""
from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import yaml
from ansible.module_utils import basic

from tests.unit.plugins.conftest import COLLECTIONS, REPO

MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if not p.name.startswith("_"))
FRAGMENTS = REPO / "plugins" / "doc_fragments"
BUILTIN_KEYS = {"name", "register", "when", "loop", "vars", "delegate_to", "run_once", "check_mode", "diff",
                "changed_when", "failed_when", "become", "tags", "notify", "ignore_errors", "until", "retries",
                "delay", "environment", "no_log", "async", "poll", "block", "rescue", "always", "loop_control"}


class _Captured(Exception):
    pass


def _doc(name: str) -> tuple[dict, dict, dict]:
    mod = importlib.import_module(f"ansible_collections.gb10.dspark.plugins.modules.{name}")
    doc = yaml.safe_load(mod.DOCUMENTATION)
    options = dict(doc.get("options") or {})
    for frag in doc.get("extends_documentation_fragment") or []:
        assert frag.startswith("gb10.dspark."), frag
        parts = frag.split(".")[2:]  # _name or _name.variant
        fmod = importlib.import_module(f"ansible_collections.gb10.dspark.plugins.doc_fragments.{parts[0]}")
        fdoc = yaml.safe_load(getattr(fmod.ModuleDocFragment, parts[1].upper() if len(parts) > 1 else "DOCUMENTATION"))
        options.update(fdoc.get("options") or {})
        for key, value in fdoc.items():
            if key != "options":
                doc.setdefault(key, value)
    return mod, doc, options


def _argument_spec(mod) -> dict:
    seen = {}

    def capture(self, argument_spec, **kwargs):
        seen.update(argument_spec=argument_spec, **kwargs)
        raise _Captured()

    with mock.patch.object(basic.AnsibleModule, "__init__", capture):
        with pytest.raises(_Captured):
            mod.main()
    return seen


@pytest.mark.parametrize("name", MODULES)
def test_documentation_matches_argument_spec(name):
    mod, doc, options = _doc(name)
    seen = _argument_spec(mod)
    spec = seen["argument_spec"]
    assert seen.get("supports_check_mode") is True
    assert sorted(options) == sorted(spec), f"{name}: documented {sorted(options)} vs spec {sorted(spec)}"
    for opt, want in spec.items():
        have = options[opt]
        assert have.get("type", "str") == want.get("type", "str"), (name, opt)
        assert bool(have.get("required", False)) == bool(want.get("required", False)), (name, opt)
        assert have.get("default") == want.get("default"), (name, opt)
        assert have.get("elements") == want.get("elements"), (name, opt)
        assert have.get("description"), (name, opt)
    for attr in ("check_mode", "diff_mode", "idempotent"):
        assert doc["attributes"][attr]["support"] in ("full", "partial", "none"), (name, attr)
    assert doc["module"] == name and doc["short_description"] and doc["author"]


@pytest.mark.parametrize("name", MODULES)
def test_examples_and_return_are_yaml_and_use_fqcn(name):
    mod = importlib.import_module(f"ansible_collections.gb10.dspark.plugins.modules.{name}")
    assert mod.EXAMPLES.lstrip().startswith("---")
    tasks = yaml.safe_load(mod.EXAMPLES)
    assert tasks and isinstance(tasks, list)
    used = set()
    for task in tasks:
        for key in task:
            if key not in BUILTIN_KEYS:
                assert key.count(".") == 2, f"{name}: example uses {key!r}, not an FQCN"
                used.add(key)
    assert f"gb10.dspark.{name}" in used
    ret = yaml.safe_load(mod.RETURN)
    assert "changed" in ret or name.endswith("_facts") or "mismatches" in ret
    for key, entry in ret.items():
        assert entry.get("description") and entry.get("returned") and entry.get("type"), (name, key)


def test_ansible_doc_renders_every_module():
    """One ansible-doc run renders every module's page, each under its own heading, with no warning."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_DEPRECATION_WARNINGS="1",
               ANSIBLE_NOCOLOR="1")
    exe = Path(sys.executable).with_name("ansible-doc")
    res = subprocess.run([str(exe), *(f"gb10.dspark.{name}" for name in MODULES)], env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert "[WARNING]" not in res.stderr and "[ERROR]" not in res.stderr, res.stderr
    headings = re.findall(r"^> MODULE (gb10\.dspark\.\w+) ", res.stdout, re.M)
    assert headings == [f"gb10.dspark.{name}" for name in MODULES], headings
    pages = re.split(r"^> MODULE gb10\.dspark\.\w+ ", res.stdout, flags=re.M)[1:]
    for name, page in zip(MODULES, pages):
        assert "OPTIONS" in page, (name, page[:2000])
