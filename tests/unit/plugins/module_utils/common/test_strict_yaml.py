# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one strict YAML reader: a key given twice, at any depth, is refused with both lines."""
from __future__ import annotations

import pytest
import yaml

from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_yaml import (
    DuplicateKeyError,
    Opaque,
    StrictLoader,
    StrictYAMLError,
    loads,
)

PIN = """\
---
dspark_pin:
  release: v026
  image_id: sha256:1111111111111111111111111111111111111111111111111111111111111111
  model_config:
    num_hidden_layers: 43
  image_id: sha256:2222222222222222222222222222222222222222222222222222222222222222
"""


def test_a_clean_file_reads_as_safe_load_reads_it():
    text = PIN.replace("  image_id: sha256:2222222222222222222222222222222222222222222222222222222222222222\n", "")
    assert loads(text, "pin.yml") == yaml.safe_load(text)


def test_a_nested_duplicate_is_refused_naming_file_key_and_both_lines():
    with pytest.raises(DuplicateKeyError) as info:
        loads(PIN, "/inv/group_vars/all/pin.yml")
    err = info.value
    assert (err.key, err.first_line, err.second_line, err.source) == ("image_id", 4, 7, "/inv/group_vars/all/pin.yml")
    assert str(err).startswith('/inv/group_vars/all/pin.yml: key "image_id" is given twice, at lines 4 and 7')
    assert "sha256:" not in str(err)  # the key and the lines, never a value


def test_a_top_level_duplicate_is_refused():
    with pytest.raises(DuplicateKeyError) as info:
        loads("dspark_api_port: 8888\ndspark_master_port: 25000\n\ndspark_api_port: 9999\n", "site.yml")
    assert (info.value.key, info.value.first_line, info.value.second_line) == ("dspark_api_port", 1, 4)


def test_the_same_value_twice_is_still_a_duplicate():
    with pytest.raises(DuplicateKeyError):
        loads("a: 1\na: 1\n")


def test_keys_that_read_the_same_are_duplicates():
    with pytest.raises(DuplicateKeyError) as info:
        loads("a: 1\n'a': 2\n")
    assert info.value.key == "a"
    with pytest.raises(DuplicateKeyError):
        loads("1: x\n0x1: y\n")


def test_a_flow_mapping_duplicate_is_refused():
    with pytest.raises(DuplicateKeyError) as info:
        loads("x:\n  - {a: 1, b: 2, a: 3}\n")
    assert (info.value.first_line, info.value.second_line) == (2, 2)


def test_the_same_key_in_two_mappings_is_fine():
    assert loads("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}


def test_merge_keys_override_without_being_duplicates():
    text = "base: &b {x: 1, y: 2}\nother: &o {y: 3, z: 4}\nuse:\n  <<: [*b, *o]\n  x: 9\n"
    assert loads(text) == yaml.safe_load(text)
    assert loads(text)["use"] == {"x": 9, "y": 2, "z": 4}


def test_an_alias_used_twice_is_fine_but_a_merge_key_given_twice_is_refused():
    assert loads("a: &v [1]\nb: *v\nc: *v\n") == {"a": [1], "b": [1], "c": [1]}
    with pytest.raises(DuplicateKeyError) as info:
        loads("b: &b {x: 1}\no: &o {y: 2}\nuse:\n  <<: *b\n  <<: *o\n")
    assert (info.value.key, info.value.first_line, info.value.second_line) == ("<<", 4, 5)


def test_a_duplicate_inside_an_anchored_mapping_is_refused():
    with pytest.raises(DuplicateKeyError) as info:
        loads("base: &b\n  x: 1\n  x: 2\nuse:\n  <<: *b\n")
    assert (info.value.first_line, info.value.second_line) == (2, 3)


def test_ansible_tags_are_opaque_and_their_keys_still_checked():
    text = "k: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\nu: !unsafe '{{ x }}'\n"
    assert loads(text) == {"k": Opaque("!vault"), "u": Opaque("!unsafe")}
    assert "6162" not in repr(loads(text))
    with pytest.raises(DuplicateKeyError):
        loads(text + "k: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6364\n")


def test_json_text_goes_through_the_strict_json_reader_with_lines():
    with pytest.raises(DuplicateKeyError) as info:
        loads('{\n  "dspark_pin": {\n    "image_id": "a",\n    "image_id": "b"\n  }\n}\n', "pin.json")
    err = info.value
    assert (err.key, err.first_line, err.second_line, err.where) == ("image_id", 3, 4, "$.dspark_pin.image_id")
    assert str(err).startswith('pin.json: key "image_id" at $.dspark_pin.image_id is given twice, at lines 3 and 4')


def test_json_with_tabs_reads_as_json():
    assert loads('{\n\t"a": 1\n}') == {"a": 1}


def test_malformed_text_names_the_source_and_the_line():
    with pytest.raises(StrictYAMLError) as info:
        loads("dspark_pin:\n  image_id: [sha256:1\n  release: v026\n", "pin.yml")
    assert not isinstance(info.value, DuplicateKeyError)
    assert str(info.value).startswith("pin.yml: not valid YAML at line")


def test_two_documents_are_refused():
    with pytest.raises(StrictYAMLError):
        loads("a: 1\n---\na: 2\n")


def test_the_loader_is_a_safe_loader():
    assert issubclass(StrictLoader, yaml.SafeLoader)
    assert loads("!!python/object/apply:os.system ['true']") == Opaque("tag:yaml.org,2002:python/object/apply:os.system")


def test_top_level_lines_name_each_key_line():
    from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_yaml import top_level_lines

    assert top_level_lines("# c\na: 1\nb:\n  c: 2\n'd': 3\n") == {"a": 2, "b": 3, "d": 5}
    assert top_level_lines('{\n"a": 1,\n"b": 2}') == {"a": 2, "b": 3}
    assert top_level_lines("- a\n") == {} and top_level_lines("a: [\n") == {}


def test_without_pyyaml_json_is_still_read_and_yaml_is_refused_saying_why(monkeypatch):
    from ansible_collections.gb10.dspark.plugins.module_utils.common import _strict_yaml

    monkeypatch.setattr(_strict_yaml, "HAS_YAML", False)
    assert _strict_yaml.loads('{"a": 1}') == {"a": 1}
    with pytest.raises(StrictYAMLError, match="x.yml: cannot be read, PyYAML is not installed"):
        _strict_yaml.loads("a: 1\n", "x.yml")
    assert _strict_yaml.top_level_lines("a: 1\n") == {}
