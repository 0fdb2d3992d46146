"""The gb10.dspark.has_api_key lookup: the one definition of "has an API key", rendered by Ansible
itself, agrees with the expression the roles spelled before ((dspark_api_key | default('')) | length > 0)
and never returns the key."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.lookup import has_api_key as has_api_key_lookup
from ansible_collections.gb10.dspark.plugins.module_utils.common import _site
from tests.unit.plugins._templar import render

OLD = "{{ (dspark_api_key | default('')) | length > 0 }}"
NEW = "{{ lookup('gb10.dspark.has_api_key') }}"
CASES = [
    ({}, False),
    ({"dspark_api_key": ""}, False),
    ({"dspark_api_key": "sk-local-0123456789"}, True),
    ({"dspark_api_key": "x"}, True),
    ({"dspark_api_key": "{{ dspark_vault_key }}", "dspark_vault_key": "from-a-template"}, True),
    ({"dspark_api_key": "{{ dspark_vault_key }}", "dspark_vault_key": ""}, False),
]


class _Templar:
    def template(self, value):
        return value


@pytest.mark.parametrize(("variables", "expected"), CASES)
def test_the_lookup_says_what_the_roles_expression_said(variables, expected):
    old, new, shown = render([(variables, OLD), (variables, NEW), (variables, "{{ lookup('gb10.dspark.has_api_key') | string }}")])
    assert old is expected and new is expected
    assert shown == str(expected)  # a boolean, never the key


def test_no_key_without_variables_and_null_is_no_key():
    assert has_api_key_lookup.LookupModule(templar=_Templar()).run([], variables=None) == [False]
    assert _site.has_api_key({"dspark_api_key": None}) is False
    assert _site.has_api_key({"dspark_api_key": "k"}) is True
    assert _site.API_KEY_VARIABLE == "dspark_api_key"
