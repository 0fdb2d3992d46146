# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one strict reader of YAML (and JSON) vars files: a key given twice is refused.

YAML says the keys of a mapping are unique, but PyYAML and Ansible's loader keep the last value of
a repeated key, with at most a warning (Ansible's ``DUPLICATE_YAML_DICT_KEY``, which a control
node's ``ansible.cfg`` or environment may set to ``ignore``). For the fail-closed inputs (the
identity pin, the site file, the runtime manifest) the first value would then be silently ignored.
:func:`loads` reads the text itself, whatever Ansible is configured to do, and refuses a repeated
key at any depth, naming the source, the key and the lines of both occurrences.

* Merge keys (``<<: *anchor``) are YAML's way to override on purpose: a key given explicitly next
  to a merge, or by two merged anchors, is not a duplicate. ``<<`` itself given twice is.
* Anchors and aliases are read as PyYAML's SafeLoader reads them.
* Ansible's own tags (``!vault``, ``!unsafe``) and any other unknown tag are read as opaque values:
  this reader checks keys, never decrypts or interprets a value.
* Text that is JSON (Ansible reads a vars file as JSON first) goes through the collection's one
  strict JSON reader (:mod:`._strict_json`), which refuses duplicates the same way.

Control node only: PyYAML is a dependency of ansible-core there. Its import is guarded the way
``ansible.module_utils.common.yaml`` guards it, so the module imports on a Python without PyYAML (a
rank's); :func:`loads` then refuses, saying why.
"""
from __future__ import annotations

import json

try:
    import yaml
except ImportError:  # not on the control node: nothing here may read YAML
    yaml = None
    HAS_YAML = False
else:
    HAS_YAML = True

from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import StrictJSONError
from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import loads as strict_json_loads

__all__ = ["DuplicateKeyError", "Opaque", "StrictLoader", "StrictYAMLError", "loads", "top_level_lines"]

_MERGE = "tag:yaml.org,2002:merge"


class StrictYAMLError(ValueError):
    """The text cannot be read strictly; the message names the source."""

    def __init__(self, message: str, source: str = ""):
        super().__init__(message)
        self.source = source


class DuplicateKeyError(StrictYAMLError):
    """A mapping gives ``key`` twice: first at ``first_line``, again at ``second_line`` (1-based)."""

    def __init__(self, source: str, key: object, first_line: int | None, second_line: int | None, where: str = ""):
        self.key = key
        self.first_line = first_line
        self.second_line = second_line
        self.where = where
        lines = (f"lines {first_line} and {second_line}" if first_line and second_line
                 else "two places (lines unknown)")
        at = f" at {where}" if where else ""
        super().__init__(f"{source or '<text>'}: key {json.dumps(key, default=str)}{at} is given twice, at {lines}; "
                         "refused, whatever ansible.cfg says, because one of the two values would be "
                         "silently ignored", source)


class Opaque:
    """A value under a tag this reader does not interpret (``!vault``, ``!unsafe``)."""

    def __init__(self, tag: str):
        self.tag = tag

    def __repr__(self) -> str:  # never the value
        return f"Opaque({self.tag})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash(("Opaque", self.tag))


class StrictLoader(yaml.SafeLoader if HAS_YAML else object):  # type: ignore[misc,union-attr]
    """SafeLoader that refuses a mapping key given twice (``source`` names the file in the error)."""

    source = ""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _value in node.value:
                if key_node.tag == _MERGE:
                    key: object = "<<"
                else:
                    key = self.construct_object(key_node, deep=True)
                    try:
                        hash(key)
                    except TypeError:
                        continue  # SafeConstructor refuses an unhashable key with its own error below
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise DuplicateKeyError(self.source, key, seen[key], line)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


if HAS_YAML:
    StrictLoader.add_constructor(None, lambda loader, node: Opaque(node.tag))


def _need_yaml(source: str) -> None:
    if not HAS_YAML:
        raise StrictYAMLError(f"{source or '<text>'}: cannot be read, PyYAML is not installed on this machine", source)


def _is_json(text: str) -> bool:
    if not text.lstrip().startswith(("{", "[")):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def loads(text: str, source: str = "") -> object:
    """The data of one YAML (or JSON) document; :class:`DuplicateKeyError` for a key given twice at
    any depth, :class:`StrictYAMLError` for text that is not one readable document."""
    if _is_json(text):
        try:
            return strict_json_loads(text)
        except StrictJSONError as exc:
            if exc.key is not None:
                raise DuplicateKeyError(source, exc.key, exc.first_line, exc.second_line, exc.path or "") from None
            raise StrictYAMLError(f"{source or '<text>'}: {exc}", source) from None
    _need_yaml(source)
    loader = StrictLoader(text)
    loader.source = source
    try:
        return loader.get_single_data()
    except DuplicateKeyError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise StrictYAMLError(f"{source or '<text>'}: not valid YAML{where}: {problem}", source) from None
    except RecursionError:
        raise StrictYAMLError(f"{source or '<text>'}: nested too deeply", source) from None
    finally:
        loader.dispose()


def top_level_lines(text: str) -> dict[str, int]:
    """The line (1-based) of each top-level string key of a mapping document; empty when the text
    is not one (read it with :func:`loads` first for the errors)."""
    if not HAS_YAML:
        return {}
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
    except (yaml.YAMLError, RecursionError):
        return {}
    finally:
        loader.dispose()
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {key.value: key.start_mark.line + 1 for key, _value in node.value
            if isinstance(key, yaml.ScalarNode) and key.tag == "tag:yaml.org,2002:str"}
