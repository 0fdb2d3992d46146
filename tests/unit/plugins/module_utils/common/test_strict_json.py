# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import json

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import (
    StrictJSONError,
    canonical_json,
    json_equal,
    json_kind,
    loads,
)


def test_valid_document_parses_like_the_standard_library():
    text = '{"a": 1, "b": [true, false, null, 0.835, -0.0, "x"], "c": {"d": {"e": 1e308}}}'
    assert loads(text) == json.loads(text)
    assert loads(text, require_object=True) == json.loads(text)


def test_error_is_a_value_error():
    assert issubclass(StrictJSONError, ValueError)


def test_duplicate_top_level_key_is_named_with_its_path():
    with pytest.raises(StrictJSONError) as info:
        loads('{"kv_cache_dtype": "nvfp4_ds_mla", "kv_cache_dtype": "fp8"}')
    assert '"kv_cache_dtype"' in str(info.value)
    assert "$.kv_cache_dtype" in str(info.value)
    assert info.value.path == "$.kv_cache_dtype"


def test_duplicate_key_with_the_same_value_is_still_refused():
    with pytest.raises(StrictJSONError, match="duplicate key"):
        loads('{"a": 1, "a": 1}')


def test_nested_duplicate_key_inside_array_is_named_with_its_path():
    with pytest.raises(StrictJSONError) as info:
        loads('{"p": {"list": [{"ok": 1}, {"c": 1, "c": 2}]}}')
    assert info.value.path == "$.p.list[1].c"
    assert '"c"' in str(info.value) and "$.p.list[1].c" in str(info.value)


def test_same_key_in_different_objects_is_fine():
    assert loads('{"a": {"x": 1}, "b": {"x": 2}}') == {"a": {"x": 1}, "b": {"x": 2}}


def test_key_that_is_not_an_identifier_is_quoted_in_the_path():
    with pytest.raises(StrictJSONError) as info:
        loads('{"a b": {"c.d": 1, "c.d": 2}}')
    assert info.value.path == '$["a b"]["c.d"]'


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_constants_are_refused_with_their_path(literal):
    with pytest.raises(StrictJSONError) as info:
        loads('{"profile": {"gpu_memory_utilization": %s}}' % literal)
    assert literal in str(info.value)
    assert info.value.path == "$.profile.gpu_memory_utilization"


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "1.5E+999"])
def test_numbers_that_overflow_a_float_are_refused(literal):
    with pytest.raises(StrictJSONError, match="not a finite number"):
        loads("[0, %s]" % literal)


def test_non_finite_at_top_level():
    with pytest.raises(StrictJSONError) as info:
        loads("NaN")
    assert info.value.path == "$"


@pytest.mark.parametrize("text, kind", [("[1, 2]", "an array"), ('"s"', "a string"), ("3", "a number"),
                                        ("null", "null"), ("true", "a boolean")])
def test_require_object_refuses_other_top_levels(text, kind):
    assert loads(text) == json.loads(text)
    with pytest.raises(StrictJSONError) as info:
        loads(text, require_object=True)
    assert f"top level is {kind}, not an object" in str(info.value)


@pytest.mark.parametrize("text", ['{"a": 1,}', '{"a": 1} {"b": 2}', "{'a': 1}", "", '{"a": 01}'])
def test_invalid_json_is_refused_with_its_position(text):
    with pytest.raises(StrictJSONError) as info:
        loads(text)
    assert "not valid JSON" in str(info.value)
    assert "line 1 column" in str(info.value)


def test_position_names_the_line():
    with pytest.raises(StrictJSONError, match="line 3 column"):
        loads('{\n  "a": 1,\n  "b": ]\n}')


def test_bytes_are_decoded_as_utf8():
    assert loads('{"name": "Zürich"}'.encode()) == {"name": "Zürich"}
    assert loads(bytearray(b'{"a": 1}')) == {"a": 1}


def test_invalid_utf8_bytes_are_refused():
    with pytest.raises(StrictJSONError, match="not UTF-8"):
        loads(b'{"a": "\xff"}')


def test_byte_order_mark_is_refused():
    with pytest.raises(StrictJSONError):
        loads(b'\xef\xbb\xbf{"a": 1}')


def test_deep_nesting_is_a_strict_json_error_not_a_crash():
    with pytest.raises(StrictJSONError, match="nested too deeply"):
        loads("[" * 200_000 + "]" * 200_000)


def test_integer_beyond_the_digit_limit_is_a_strict_json_error():
    with pytest.raises(StrictJSONError):
        loads('{"n": %s}' % ("9" * 5000))


@pytest.mark.parametrize("text", ['{"a": 1, "a": 1}', '{"x": {"b": 1, "b": 2}}', "[Infinity]", '{"a": -Infinity}', "NaN"])
def test_what_plain_json_accepts_is_refused(text):
    json.loads(text)  # the standard library takes every one of these
    with pytest.raises(StrictJSONError):
        loads(text)


def test_nested_document_parses():
    assert loads('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}


# --- json_kind / json_equal ----------------------------------------------------------------------


@pytest.mark.parametrize("value, kind", [
    (None, "null"), (True, "boolean"), (False, "boolean"), (0, "number"), (0.835, "number"), ("", "string"),
    ("16", "string"), ([], "array"), ((1, 2), "array"), ({}, "object"), ({"a": 1}, "object"), (b"x", "bytes"),
])
def test_json_kind_names_the_json_type(value, kind):
    assert json_kind(value) == kind


def test_json_kind_of_every_parsed_value_is_a_json_type():
    document = loads('{"n": null, "b": true, "i": 1, "f": 1.5, "s": "x", "a": [], "o": {}}')
    assert {key: json_kind(value) for key, value in document.items()} == {
        "n": "null", "b": "boolean", "i": "number", "f": "number", "s": "string", "a": "array", "o": "object"}


@pytest.mark.parametrize("a, b", [
    (16, 16.0), (43, 43.0), (0, -0.0), ("x", "x"), (None, None), (True, True), ([], []), ({}, {}),
    (["a", "b"], ["a", "b"]), ((1, 2), [1, 2]), ({"a": [1]}, {"a": [1.0]}),
    ({"a": {"b": [1, {"c": None}]}}, {"a": {"b": [1.0, {"c": None}]}}),
])
def test_json_equal_holds_for_equal_json_values_both_ways(a, b):
    assert json_equal(a, b) and json_equal(b, a)


@pytest.mark.parametrize("a, b", [
    (True, 1), (False, 0), (True, 1.0), (None, 0), (None, ""), (None, "null"), (None, []), ("16", 16), ("43", 43.0),
    ("true", True), (16, 17), (0.835, 0.8350001), (["a", "b"], ["b", "a"]), ([1], [1, 1]), ([], {}),
    ({"a": 1}, {"a": 1, "b": 2}), ({"a": 1}, {"b": 1}), ({"a": [True]}, {"a": [1]}), ([{"a": 1}], [{"a": "1"}]),
    (float("nan"), float("nan")),
])
def test_json_equal_fails_across_types_and_values_both_ways(a, b):
    assert not json_equal(a, b) and not json_equal(b, a)


@pytest.mark.parametrize("value, text", [
    ({"b": 1, "a": [True, None, 0.5, "x"]}, '{"a":[true,null,0.5,"x"],"b":1}'),
    ([], "[]"), ("s", '"s"'), (16, "16"), (("t",), '["t"]'),
])
def test_canonical_json_sorts_keys_without_spaces(value, text):
    assert canonical_json(value) == text


def test_canonical_json_refuses_what_json_cannot_hold_exactly():
    with pytest.raises(ValueError):
        canonical_json({"a": float("nan")})
    with pytest.raises(TypeError):
        canonical_json({"a": {1, 2}})


def test_the_gate_records_with_canonical_json():
    from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_identity

    assert _runtime_gate_identity.canonical_json is canonical_json


def test_duplicate_key_names_the_lines_of_both_occurrences():
    text = '{\n  "image_id": "sha256:aa",\n  "p": {"x": 1,\n        "x"\n          : 2},\n  "image_id": "sha256:bb"\n}'
    with pytest.raises(StrictJSONError) as info:
        loads(text.replace('"x"\n', '"y"\n'))
    assert (info.value.key, info.value.first_line, info.value.second_line) == ("image_id", 2, 6)
    assert str(info.value) == 'duplicate key "image_id" at $.image_id (lines 2 and 6)'
    with pytest.raises(StrictJSONError) as nested:
        loads(text.encode())
    assert (nested.value.key, nested.value.first_line, nested.value.second_line) == ("x", 3, 4)
    assert nested.value.path == "$.p.x" and "(lines 3 and 4)" in str(nested.value)


def test_duplicate_key_in_an_array_of_objects_names_its_lines():
    with pytest.raises(StrictJSONError) as info:
        loads('[\n{"a": 1},\n{"a": 1,\n "b": 2, "a": 3}\n]')
    assert (info.value.path, info.value.first_line, info.value.second_line) == ("$[1].a", 3, 4)


def test_other_errors_carry_no_key_or_lines():
    with pytest.raises(StrictJSONError) as info:
        loads('{"a": NaN}')
    assert (info.value.key, info.value.first_line, info.value.second_line) == (None, None, None)
