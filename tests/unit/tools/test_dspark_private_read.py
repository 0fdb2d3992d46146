"""The ansible-lint rule dspark-private-read (tools/lint/rules/dspark_private_read.py): another role's
internal variables are flagged in a role and in a playbook; a role's own, public names and
internal names of no role pass. And the collection itself has no such read."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("ansiblelint")

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools" / "lint" / "rules"))
from dspark_private_read import foreign_reads, plugin_roles_dir, python_reads, roles_dir_of  # noqa: E402

ROLES = {"guard", "niah", "pubsuite", "systems"}

TEXT = """\
- name: Pubsuite | Record
  vars:
    __dspark_pubsuite_status: "{{ hostvars[h].__dspark_niah_done.summary.status }}"
    __dspark_pubsuite_other: "{{ __dspark_guard }}"
    __dspark_render_document: "{{ dspark_niah_result }}"
  # __dspark_systems_in_a_comment is not read
"""


def test_other_roles_internal_names_are_found_with_their_line():
    assert foreign_reads(TEXT, "pubsuite", ROLES) == [(3, "__dspark_niah_done", "niah"), (4, "__dspark_guard", "guard")]


def test_a_playbook_may_read_no_role_internal_name():
    assert [name for _n, name, _o in foreign_reads(TEXT, None, ROLES)] == [
        "__dspark_pubsuite_status", "__dspark_niah_done", "__dspark_pubsuite_other", "__dspark_guard"]


def test_a_longer_role_name_is_not_a_prefix_match():
    assert not foreign_reads("{{ __dspark_guardian_x }} {{ __dspark_niahx }}", None, ROLES)


def test_where_a_file_belongs():
    assert roles_dir_of(ROOT / "roles" / "gate" / "tasks" / "main.yml") == (ROOT / "roles", "gate")
    assert roles_dir_of(ROOT / "playbooks" / "niah.yml") == (ROOT / "roles", None)
    assert roles_dir_of(ROOT / "plugins" / "modules" / "niah.py") == (None, None)


def test_the_collection_reads_no_other_roles_internals():
    roles = {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()}
    found = []
    for path in sorted((ROOT / "roles").rglob("*.yml")) + sorted((ROOT / "playbooks").glob("*.yml")):
        own = roles_dir_of(path)[1]
        found += [f"{path.relative_to(ROOT)}:{n} {name}" for n, name, _o in foreign_reads(path.read_text(), own, roles)]
    assert found == []


PLUGIN = '''\
"""A filter. Its docstring may name __dspark_audit_verdict: documentation, not a read."""
DOCUMENTATION = r"""
description: reads C(__dspark_niah_done)
"""
EXAMPLES = "register: __dspark_guard"


def verdicts(hosts):
    # a comment naming __dspark_systems_x is not a read
    return [h.get("__dspark_audit_verdict") for h in hosts] + [h["__dspark_guard"] for h in hosts]


def own(hosts):
    return [h.get("__dspark_render_x") for h in hosts]  # no role is called render
'''


def test_a_python_plugin_reading_a_roles_internals_is_found_with_its_line():
    roles = ROLES | {"audit"}
    assert python_reads(PLUGIN, roles) == [(10, "__dspark_audit_verdict", "audit"), (10, "__dspark_guard", "guard")]


def test_python_plugins_are_checked_as_files_of_no_role():
    assert plugin_roles_dir(ROOT / "plugins" / "filter" / "fleet_verdicts.py") == ROOT / "roles"
    assert plugin_roles_dir(ROOT / "plugins" / "module_utils" / "fleet" / "_audit.py") == ROOT / "roles"
    assert plugin_roles_dir(ROOT / "plugins" / "filter" / "fleet_verdicts.yml") is None
    assert plugin_roles_dir(ROOT / "tools" / "lint" / "rules" / "dspark_private_read.py") is None


def test_the_collections_python_plugins_read_no_roles_internals():
    roles = {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()}
    found = [f"{path.relative_to(ROOT)}:{n} {name}" for path in sorted((ROOT / "plugins").rglob("*.py"))
             for n, name, _o in python_reads(path.read_text(), roles)]
    assert found == []
