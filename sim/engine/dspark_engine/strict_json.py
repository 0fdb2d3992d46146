"""Strict JSON parsing: duplicate keys, NaN, Infinity and overflowing numbers are errors."""
import json
import math


class StrictJSONError(ValueError):
    """The text is not strict JSON (or not the expected JSON type)."""


def _reject_constant(name):
    raise StrictJSONError(f"non-finite number {name} is not allowed")


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"number {text} is not finite")
    return value


def _unique_keys(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise StrictJSONError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def loads(text, *, allow_duplicate_keys=False):
    """Parse ``text`` (str or bytes); raise StrictJSONError on anything non-strict."""
    try:
        return json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=None if allow_duplicate_keys else _unique_keys,
        )
    except StrictJSONError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8
        raise StrictJSONError(f"invalid JSON: {exc}") from None


def loads_object(text):
    """Parse strict JSON that must be an object."""
    value = loads(text)
    if not isinstance(value, dict):
        raise StrictJSONError(f"expected a JSON object, got {type(value).__name__}")
    return value
