"""One table of site defaults: no role or playbook spells one, and the modules take theirs from it.

The site's container name, API port, master port and served model name fall back to
``_site.SITE_DEFAULTS`` (plugins/module_utils/common/_site.py) when the inventory does not set them. Roles
ask the ``gb10.dspark.site`` lookup; a ``dspark_… | default(<site value>)`` in any role or playbook
(comments aside) is a second copy of the table and fails here. The modules' options default to the
table too; their DOCUMENTATION states the same values literally (validate-modules compares the two),
so that is checked against the table as well.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import re
from unittest import mock

import pytest
import yaml
from ansible.module_utils import basic

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _audit
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _engine_probe, _profile
from ansible_collections.gb10.dspark.plugins.module_utils.common import _site
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems_settings
from tests.unit.plugins.conftest import REPO

# The default profile's value, production, is also the name of the qualified profile, which a play may
# name on purpose (playbooks/rollforward.yml rolls forward to it); `dspark_profile | default(` is caught below.
VALUES = "|".join(re.escape(str(v)) for k, v in _site.SITE_DEFAULTS.items() if k != "profile")
# default('dspark_vllm'), default( "dspark_vllm" ), default(8888), default(25000, true), ...
INLINE_DEFAULT = re.compile(r"""\bdefault\(\s*(['"]?)(?:%s)\1\s*[,)]|\bdspark_profile\s*\|\s*default\(""" % VALUES)
COMMENT = re.compile(r"(^|\s)#.*$")


def yaml_files() -> list:
    return sorted(REPO.glob("roles/**/*.yml")) + sorted(REPO.glob("roles/**/*.yaml")) + \
        sorted(REPO.glob("playbooks/*.yml")) + sorted(REPO.glob("playbooks/*.yaml"))


def offenders(text: str, rel: str) -> list[str]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        code = COMMENT.sub("", line)
        if INLINE_DEFAULT.search(code):
            out.append(f"{rel}:{number}: {line.strip()}")
    return out


def test_the_pattern():
    assert offenders("x: \"{{ dspark_container_name | default('dspark_vllm') }}\"", "f")
    assert offenders('x: "{{ dspark_api_port | default( 8888 ) }}"', "f")
    assert offenders('x: "{{ dspark_master_port | default(25000, true) }}"', "f")
    assert offenders("x: '{{ dspark_served_model_name | default(\"deepseek-v4-flash-dspark\") }}'", "f")
    assert not offenders("# was: dspark_api_port | default(8888)", "f")
    assert not offenders("x: 1  # was: dspark_api_port | default(8888)", "f")
    assert not offenders("x: \"{{ lookup('gb10.dspark.site', 'api_port') }}\"", "f")
    assert not offenders('x: "{{ port | default(88888) }}"', "f")
    assert offenders("x: \"{{ dspark_profile | default('production') }}\"", "f")
    assert not offenders("x: \"{{ dspark_rollforward_profile | default('production') }}\"", "f")


def test_no_role_or_playbook_spells_a_site_default():
    files = yaml_files()
    assert len(files) > 20
    found = []
    for path in files:
        found += offenders(path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix())
    assert found == [], ("take these from lookup('gb10.dspark.site', '<term>') "
                         "(plugins/module_utils/common/_site.py):\n" + "\n".join(found))


class _Captured(Exception):
    pass


def module_spec(name: str) -> tuple[dict, dict]:
    """(the argument_spec the module builds, its documented options)."""
    mod = importlib.import_module(f"ansible_collections.gb10.dspark.plugins.modules.{name}")
    seen = {}

    def capture(self, argument_spec, **kwargs):
        seen.update(argument_spec)
        raise _Captured()

    with mock.patch.object(basic.AnsibleModule, "__init__", capture):
        with pytest.raises(_Captured):
            mod.main()
    options = dict(yaml.safe_load(mod.DOCUMENTATION).get("options") or {})
    for fragment in yaml.safe_load(mod.DOCUMENTATION).get("extends_documentation_fragment") or []:
        fmod = importlib.import_module(f"ansible_collections.gb10.dspark.plugins.doc_fragments.{fragment.split('.')[2]}")
        options.update(yaml.safe_load(fmod.ModuleDocFragment.DOCUMENTATION).get("options") or {})
    return seen, options


SITE = _site.SITE_DEFAULTS
# module -> option -> the table's value it must default to
EXPECTED = {
    "engine_probe": {"container": SITE["container_name"], "base_url": _site.local_api_url()},
    "pair_ready": {"container": SITE["container_name"], "base_url": _site.local_api_url()},
    "rank_audit": {"container": SITE["container_name"], "base_url": _site.local_api_url()},
    "niah": {"base_url": _site.local_api_url()},
    "systems_lanes": {"base_url": _site.local_api_url()},
    "profile_resolve": {"master_port": SITE["master_port"], "api_port": SITE["api_port"]},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_modules_default_to_the_table(name):
    spec, options = module_spec(name)
    for option, value in EXPECTED[name].items():
        assert spec[option]["default"] == value, (name, option)
        assert options[option]["default"] == value, (name, option)  # the literal in DOCUMENTATION


def test_the_module_utils_default_to_the_table():
    assert _engine_probe.ARGUMENT_SPEC["container"]["default"] == SITE["container_name"]
    assert _engine_probe.ARGUMENT_SPEC["base_url"]["default"] == "http://127.0.0.1:%d" % SITE["api_port"]
    assert _profile.RESOLVE_ARGUMENT_SPEC["master_port"]["default"] == SITE["master_port"]
    assert _profile.RESOLVE_ARGUMENT_SPEC["api_port"]["default"] == SITE["api_port"]
    collect = inspect.signature(_audit.collect).parameters
    assert collect["container"].default == SITE["container_name"]
    assert collect["base_url"].default == _site.local_api_url()
    assert _systems_settings.Settings(model="m", output_dir="/tmp/x").base_url == _site.local_api_url()


def test_no_python_plugin_spells_a_site_default_outside_documentation():
    """Python code (not DOCUMENTATION / EXAMPLES / RETURN strings, not comments) takes the values from
    the table: a quoted site value in code is a second copy."""
    quoted = {str(v) for v in SITE.values()} | {_site.local_api_url()}
    found = []
    for path in sorted((REPO / "plugins").rglob("*.py")):
        if path == REPO / "plugins" / "module_utils" / "common" / "_site.py" or "doc_fragments" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = set()
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")):
                docs.add(id(node.value))
        for node in ast.walk(tree):
            is_port = (isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)
                       and node.value in (SITE["api_port"], SITE["master_port"]))
            if isinstance(node, ast.Constant) and id(node) not in docs and (node.value in quoted or is_port):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert found == [], "take these from plugins/module_utils/common/_site.py:\n" + "\n".join(found)
