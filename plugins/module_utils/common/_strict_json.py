# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one strict JSON reader.

Python's :func:`json.loads` is lenient where an identity check must not be: a repeated key
silently keeps its last value (so a tampered file can shadow a field), and ``NaN``,
``Infinity`` and numbers like ``1e400`` come back as non-finite floats. :func:`loads` refuses
all of these and says where, as a JSON path such as ``$.production_profile.max_num_seqs``.

:func:`json_kind` and :func:`json_equal` are the collection's one way to name and compare JSON
values: by JSON type, so ``16 == 16.0`` but ``true != 1``, ``null != 0`` and ``"16" != 16``;
:func:`canonical_json` is its one canonical serialization (sorted keys, no spaces).

Standard library only; it runs on the ranks as well as on the control node.
"""
from __future__ import annotations

import json
import json.decoder
import json.scanner
import math
import re

__all__ = ["StrictJSONError", "canonical_json", "json_equal", "json_kind", "loads"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class StrictJSONError(ValueError):
    """The text is not strict JSON; ``path`` is the JSON path of the offending value, if known.

    For a duplicate key, ``key`` is the key and ``first_line`` / ``second_line`` the (1-based) lines
    of its two occurrences; they are None otherwise."""

    def __init__(self, message: str, path: str | None = None, key: str | None = None,
                 first_line: int | None = None, second_line: int | None = None):
        super().__init__(message)
        self.path = path
        self.key = key
        self.first_line = first_line
        self.second_line = second_line


class _Pairs(list):
    """An object's members in document order, before the duplicate-key check; ``lines`` holds each
    member's key line when the text was parsed by :func:`_located` (None on the fast path)."""

    lines: list[int] | None = None


class _NonFinite:
    """Stands in for ``NaN``, ``Infinity``, ``-Infinity`` or an overflowing number until its path is known."""

    def __init__(self, literal: str):
        self.literal = literal


def _float(literal: str) -> float | _NonFinite:
    value = float(literal)
    return value if math.isfinite(value) else _NonFinite(literal)


def _member(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENTIFIER.match(key) else f"{path}[{json.dumps(key)}]"


def _build(node: object, path: str) -> object:
    if isinstance(node, _Pairs):
        out: dict = {}
        first: dict[str, int] = {}
        for index, (key, value) in enumerate(node):
            where = _member(path, key)
            if key in out:
                if node.lines is None:
                    raise StrictJSONError(f"duplicate key {json.dumps(key)} at {where}", where, key)
                one, two = node.lines[first[key]], node.lines[index]
                raise StrictJSONError(f"duplicate key {json.dumps(key)} at {where} (lines {one} and {two})",
                                      where, key, one, two)
            first[key] = index
            out[key] = _build(value, where)
        return out
    if isinstance(node, list):
        return [_build(item, f"{path}[{index}]") for index, item in enumerate(node)]
    if isinstance(node, _NonFinite):
        raise StrictJSONError(f"{node.literal} at {path} is not a finite number", path)
    return node


def json_kind(value: object) -> str:
    """The JSON type of a value: null, boolean, number, string, array or object.

    A boolean is not a number (Python's ``bool`` is an ``int``); a tuple counts as an array.
    Anything JSON cannot hold is named by its Python type.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def json_equal(actual: object, expected: object) -> bool:
    """Equal as JSON values: the same :func:`json_kind`, numbers numerically (``16 == 16.0``),
    arrays member by member in order, objects by the same keys with equal values."""
    kind = json_kind(actual)
    if kind != json_kind(expected):
        return False
    if kind == "array":
        return len(actual) == len(expected) and all(  # type: ignore[arg-type]
            json_equal(a, e) for a, e in zip(actual, expected)  # type: ignore[call-overload]
        )
    if kind == "object":
        return actual.keys() == expected.keys() and all(  # type: ignore[union-attr]
            json_equal(actual[k], expected[k]) for k in actual  # type: ignore[index]
        )
    return actual == expected


def canonical_json(value: object) -> str:
    """One canonical serialization (sorted keys, no spaces) for comparing and recording JSON.
    Raises ``ValueError`` for a non-finite number and ``TypeError`` for what JSON cannot hold."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _a(kind: str) -> str:
    """``kind`` with its article, for prose: "an array", "a number", "null"."""
    if kind == "null":
        return kind
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _key_line(text: str, value_start: int) -> int:
    """The line of the key whose value starts at ``value_start``: back over ``ws : ws`` to the key's
    closing quote (a JSON string holds no raw newline, so its closing quote is on its line)."""
    at = value_start - 1
    while at >= 0 and text[at] in " \t\r\n":
        at -= 1
    at -= 1  # the colon
    while at >= 0 and text[at] in " \t\r\n":
        at -= 1
    return text.count("\n", 0, max(at, 0)) + 1


def _located(text: str) -> object:
    """Parse again with Python's pure scanner, noting each member's key line (only after a
    duplicate was found on the fast path: the lines are for the message)."""
    decoder = json.JSONDecoder(object_pairs_hook=_Pairs, parse_constant=_NonFinite, parse_float=_float)

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        starts: list[int] = []

        def scan(string: str, index: int):
            starts.append(index)
            return scan_once(string, index)

        pairs, end = json.decoder.JSONObject(s_and_end, strict, scan, object_hook, object_pairs_hook, memo)
        pairs.lines = [_key_line(text, start) for start in starts]
        return pairs, end

    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder.decode(text)


def loads(text: str | bytes | bytearray, *, require_object: bool = False) -> object:
    """Parse ``text`` (``bytes`` must be UTF-8) as strict JSON.

    Raises :class:`StrictJSONError` on invalid JSON, a duplicate key at any depth (with the lines
    of both occurrences), ``NaN``,
    ``Infinity``, ``-Infinity`` or a number that does not fit a finite float, and, with
    ``require_object``, on a top level that is not an object.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(f"not UTF-8: byte {exc.start} cannot be decoded") from None
    try:
        raw = json.loads(text, object_pairs_hook=_Pairs, parse_constant=_NonFinite, parse_float=_float)
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise StrictJSONError("not accepted: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer longer than Python's digit limit
        raise StrictJSONError(f"not accepted: {exc}") from None
    try:
        value = _build(raw, "$")
    except RecursionError:
        raise StrictJSONError("not accepted: JSON nested too deeply") from None
    except StrictJSONError as exc:
        if exc.key is None:
            raise
        try:  # the same document again, this time noting lines, so the message names both
            _build(_located(text), "$")
        except StrictJSONError as located:
            if located.key is not None:
                raise located from None
        except (ValueError, RecursionError):
            pass
        raise
    if require_object and not isinstance(value, dict):
        raise StrictJSONError(f"top level is {_a(json_kind(value))}, not an object", "$")
    return value
