# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the collection's messages show a value (``_identity.show``), in the styles its callers use."""
from __future__ import annotations

import math

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _identity
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_base
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _serving_guard
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import Mismatch, show


@pytest.mark.parametrize("value, text", [
    (None, "absent"), (True, "true"), (False, "false"), ("x y", "x y"), ("", ""), (16, "16"), (0.5, "0.5"),
    (["a", None, True, [1, 2]], "[a, absent, true, [1, 2]]"), (("a", 1), "[a, 1]"), ({"b": 1}, "{'b': 1}"),
])
def test_text_style_shows_what_a_mismatch_message_shows(value, text):
    assert show(value) == show(value, "text") == text


def test_text_style_shows_a_set_member_by_member():
    assert show(frozenset({False})) == "[false]"


@pytest.mark.parametrize("value, text", [
    (None, "absent"), (True, "true"), (False, "false"), ("x y", "x y"), (16, "16"), (0.5, "0.5"),
    ({"b": [1, "x"], "a": None}, '{"a":null,"b":[1,"x"]}'), (["a", True], '["a",true]'), (("a",), '["a"]'),
])
def test_json_style_shows_structures_as_canonical_json(value, text):
    assert show(value, "json") == text


def test_json_style_refuses_what_json_cannot_hold():
    with pytest.raises(ValueError):
        show([math.nan], "json")
    with pytest.raises(TypeError):
        show({1, 2}, "json")


@pytest.mark.parametrize("value, text", [
    (None, "absent"), (True, "True"), ("x", '"x"'), (16, "16"), ({"b": 1, "a": [2]}, '{"b": 1, "a": [2]}'),
    (["a", None], '["a", null]'), (("a",), "('a',)"),
])
def test_quoted_style_quotes_strings_and_dumps_lists_and_dicts(value, text):
    assert show(value, "quoted") == text


def test_an_unknown_style_is_refused():
    with pytest.raises(ValueError, match="show style 'yaml' is not one of text, json, quoted"):
        show(1, "yaml")


def test_mismatch_messages_show_both_sides():
    m = Mismatch("r1", "image", expected=["a", "b"], actual=None, reason="why")
    assert m.message == "rank r1: image is absent, pinned [a, b] (why)"


def test_the_gate_and_the_guard_show_through_it():
    assert _runtime_gate_base.show is _identity.show and _serving_guard.show is _identity.show
    assert _runtime_gate_base._show({"k": True}) == '{"k":true}'  # pylint: disable=protected-access
    verdict = _serving_guard.Verdict("r1")
    verdict.fail("model", "other", "served")
    verdict.fail("finish", True, "stop")
    assert verdict.errors == ['request r1: model is "other", expected served', "request r1: finish is True, expected stop"]
