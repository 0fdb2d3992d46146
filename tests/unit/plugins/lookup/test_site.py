"""The gb10.dspark.site lookup: a thin wrapper over _site that names its errors, and the roles'
expressions rendered by Ansible itself, before (``dspark_<term> | default(<value>)``) and after
(``lookup('gb10.dspark.site', '<term>')``) the table."""
from __future__ import annotations

import json

import pytest
import yaml
from ansible.errors import AnsibleLookupError

from ansible_collections.gb10.dspark.plugins.lookup import site as site_lookup
from ansible_collections.gb10.dspark.plugins.module_utils.common import _site
from tests.unit.plugins._templar import render
from tests.unit.plugins.conftest import REPO

SITE_VARS = {"dspark_container_name": "engine_b", "dspark_api_port": 9999, "dspark_master_port": 26000,
             "dspark_served_model_name": "other-model", "dspark_profile": "long-1m"}
# Terms a site sets in group_vars/all/site.yml; a pair names its profile in its own group (sample/fleet.yml).
SITE_FILE_TERMS = ("container_name", "api_port", "master_port", "served_model_name")


class _Templar:
    """Stands in for Ansible's templar: records what it was asked to render."""

    def __init__(self):
        self.seen = []

    def template(self, value):
        self.seen.append(value)
        return value


def run(terms, variables=None):
    templar = _Templar()
    return site_lookup.LookupModule(templar=templar).run(terms, variables=variables), templar.seen


# ---- the table and the plugin, in this process ---------------------------------------------
def test_the_table():
    assert _site.SITE_DEFAULTS == {"container_name": "dspark_vllm", "api_port": 8888, "master_port": 25000,
                                   "served_model_name": "deepseek-v4-flash-dspark", "profile": "production"}
    assert _site.VARIABLES == {"container_name": "dspark_container_name", "api_port": "dspark_api_port",
                               "master_port": "dspark_master_port", "served_model_name": "dspark_served_model_name",
                               "profile": "dspark_profile"}
    assert _site.local_api_url() == "http://127.0.0.1:8888"
    assert _site.local_api_url(9000) == "http://127.0.0.1:9000"
    assert _site.default("master_port") == 25000 and _site.variable_name("api_port") == "dspark_api_port"


def test_the_sample_inventory_and_the_operator_guide_state_the_table():
    site = yaml.safe_load((REPO / "inventories" / "sample" / "group_vars" / "all" / "site.yml").read_text())
    assert {term: site[_site.VARIABLES[term]] for term in SITE_FILE_TERMS} == {
        term: _site.SITE_DEFAULTS[term] for term in SITE_FILE_TERMS}
    assert "dspark_profile" not in site  # the default profile is the table's
    guide = (REPO / "docs" / "operator-guide.md").read_text()
    row = ("| `dspark_served_model_name`, `dspark_api_port`, `dspark_master_port`, `dspark_container_name` | "
           "`{served_model_name}`, {api_port}, {master_port}, `{container_name}` |").format(**_site.SITE_DEFAULTS)
    assert row in guide


def test_the_default_when_the_variable_is_not_defined():
    assert run(["api_port", "container_name", "master_port", "served_model_name", "profile"],
               {"dspark_pair": "lab01"}) == ([8888, "dspark_vllm", 25000, "deepseek-v4-flash-dspark", "production"], [])
    assert run(["api_port"], None) == ([8888], [])
    assert run([], {}) == ([], [])


def test_the_variable_wins_when_defined_and_is_templated():
    values, seen = run(list(_site.SITE_DEFAULTS), SITE_VARS)
    assert values == ["engine_b", 9999, 26000, "other-model", "long-1m"]
    assert seen == ["engine_b", 9999, 26000, "other-model", "long-1m"]  # each value went through the templar
    # a defined variable wins whatever its value, as `dspark_api_port | default(8888)` did
    assert run(["api_port"], {"dspark_api_port": None})[0] == [None]
    assert run(["api_port"], {"dspark_api_port": "7777"})[0] == ["7777"]


@pytest.mark.parametrize("term", ["dspark_api_port", "port", "API_PORT", "", 8888, None])
def test_an_unknown_term_is_refused_naming_the_known_terms(term):
    with pytest.raises(AnsibleLookupError) as exc:
        run(["api_port", term], SITE_VARS)
    assert str(exc.value).startswith(f"gb10.dspark.site: unknown site term {term!r}; the known terms are "
                                     "container_name, api_port, master_port, served_model_name, profile")


def test_the_documentation():
    doc = yaml.safe_load(site_lookup.DOCUMENTATION)
    assert doc["name"] == "site" and doc["short_description"] and doc["author"]
    assert doc["options"]["_terms"]["required"] is True
    text = " ".join(doc["description"])
    for term, value in _site.SITE_DEFAULTS.items():
        assert f"C({term}) (C({_site.VARIABLES[term]})" in text or f"C({term}) (variable C({_site.VARIABLES[term]})" in text
        assert f"C({value})" in text, term
    assert yaml.safe_load(site_lookup.RETURN)["_raw"]["description"]
    for task in yaml.safe_load(site_lookup.EXAMPLES):
        assert "gb10.dspark.site" in json.dumps(task)
        assert all("." in key for key in set(task) - {"name", "register"})  # modules by FQCN


# ---- through Ansible's templar, with the collection's plugins ------------------------------


def test_the_lookup_through_ansible():
    base = {"inventory_hostname": "spark-a"}
    jobs = [
        [base, "{{ lookup('gb10.dspark.site', 'api_port') }}"],
        [base, "{{ lookup('gb10.dspark.site', 'container_name') }}"],
        [dict(base, dspark_api_port=9001), "{{ lookup('gb10.dspark.site', 'api_port') }}"],
        # a variable holding a template renders to what that template gives
        [dict(base, dspark_api_port="{{ 9000 + offset }}", offset=2), "{{ lookup('gb10.dspark.site', 'api_port') }}"],
        [dict(base, dspark_container_name="{{ inventory_hostname }}_vllm"),
         "{{ lookup('gb10.dspark.site', 'container_name') }}"],
        [base, "{{ query('gb10.dspark.site', 'master_port', 'served_model_name') }}"],
        [base, "http://127.0.0.1:{{ lookup('gb10.dspark.site', 'api_port') }}"],
        [base, "{{ lookup('gb10.dspark.site', 'apiport') }}"],
    ]
    out = render(jobs, catch=True)
    assert out[0] == {"value": 8888}
    assert out[1] == {"value": "dspark_vllm"}
    assert out[2] == {"value": 9001}
    assert out[3] == {"value": 9002}
    assert out[4] == {"value": "spark-a_vllm"}
    assert out[5] == {"value": [25000, "deepseek-v4-flash-dspark"]}
    assert out[6] == {"value": "http://127.0.0.1:8888"}
    assert "error" in out[7], out[7]
    assert "unknown site term 'apiport'; the known terms are container_name, api_port, master_port" in out[7]["message"]


LOOKUP = "lookup('gb10.dspark.site', '{}')"


def former(text: str) -> str:
    """The expression as the roles held it before the table: ``dspark_<term> | default(<value>)``."""
    for term, value in _site.SITE_DEFAULTS.items():
        text = text.replace(LOOKUP.format(term), f"{_site.VARIABLES[term]} | default({value!r})")
    return text


def role_expressions() -> list[tuple[str, str]]:
    """(file, string) for every string of roles/*/{defaults,tasks,vars}/*.yml that uses the lookup."""
    found = []

    def walk(node, rel):
        if isinstance(node, dict):
            for value in node.values():
                walk(value, rel)
        elif isinstance(node, list):
            for value in node:
                walk(value, rel)
        elif isinstance(node, str) and "gb10.dspark.site" in node:
            found.append((rel, node))

    for path in sorted(REPO.glob("roles/*/*/*.yml")):
        if path.parent.name in ("defaults", "tasks", "vars"):
            walk(yaml.safe_load(path.read_text()), path.relative_to(REPO).as_posix())
    return found


VARIABLE_SETS = [
    {},
    SITE_VARS,
    {"dspark_api_port": "7777", "dspark_container_name": "{{ 'engine_' ~ 'c' }}",
     "dspark_master_port": "{{ 25000 + 7 }}", "dspark_served_model_name": "{{ inventory_hostname }}-model"},
]


def test_the_roles_site_settings_render_as_before():
    expressions = role_expressions()
    # the roles that held `| default(<site value>)` now ask the lookup (their defaults and task lines)
    assert {rel.split("/")[1] for rel, _text in expressions} >= {
        "audit", "engine", "evidence", "gate", "guard", "niah", "profile", "systems"}
    jobs = []
    for variables in VARIABLE_SETS:
        for host in ({"inventory_hostname": "spark-a"}, {"inventory_hostname": "spark-a", "ansible_host": "10.0.0.1"}):
            for _rel, text in expressions:
                jobs += [[dict(variables, **host), former(text)], [dict(variables, **host), text]]
    out = render(jobs, catch=True)
    for i in range(0, len(out), 2):
        assert "value" in out[i], (jobs[i], out[i])
        assert out[i + 1] == out[i], (jobs[i + 1][1], jobs[i][0])
    assert {"value": "http://10.0.0.1:8888"} in out and {"value": "http://spark-a:9999"} in out
    assert {"value": "engine_c"} in out and {"value": 25007} in out
