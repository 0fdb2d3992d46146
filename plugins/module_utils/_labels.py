# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's container labels: their names, in one table, and the few ways they are used.

The engine role labels both ranks' containers (:func:`engine_labels`); the audit, the probe and
the roles that report what served a run read them back (:func:`label_record`,
:func:`collection_labels`); the orphans sweep lists containers by the pair label
(:func:`label_name`). This file is the only place that spells a label name: everything else
takes it from :data:`LABELS` (Python) or from the ``gb10.dspark.label_name``,
``gb10.dspark.engine_labels`` and ``gb10.dspark.label_record`` filters (roles).

Standard library only; it runs on the ranks too.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping

PREFIX = "io.gb10.dspark."

# key (a plain name, usable as a Python identifier and a Jinja attribute) -> label name
LABELS: dict[str, str] = {
    "pair": PREFIX + "pair",
    "rank": PREFIX + "rank",
    "profile": PREFIX + "profile",
    "profile_sha256": PREFIX + "profile.sha256",
    "cudagraph_implementation": PREFIX + "cudagraph.implementation",
    "experimental": PREFIX + "profile.experimental",
    "image_id": PREFIX + "image.id",
    "manifest_sha256": PREFIX + "manifest.sha256",
    "model_revision": PREFIX + "model.revision",
    "release": PREFIX + "release",
    "api_key": PREFIX + "api_key",
}

# The fields of a record read back from labels: every key but api_key (a fingerprint of the key,
# which says whether the engine was started with one, not what served a run).
RECORD_KEYS = tuple(k for k in LABELS if k != "api_key")
# The values engine_labels takes; api_key is derived from the key and the pair.
VALUE_KEYS = RECORD_KEYS

NO_API_KEY = "none"
_FINGERPRINT_SALT = "gb10.dspark:"


def label_name(key: str) -> str:
    """The label name of ``key`` (``"pair"``, ``"profile_sha256"``, ...); ValueError for an unknown key."""
    try:
        return LABELS[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown label key {key!r}; known: {', '.join(LABELS)}") from None


def api_key_fingerprint(pair: object, api_key: object) -> str:
    """``fp:`` and the first 16 hex digits of sha256(``gb10.dspark:<pair>:<key>``), or ``none``
    without a key (None or empty). Salted with the pair and truncated: it tells keys apart (a
    rotation changes it), never the key."""
    if api_key is None or api_key == "":
        return NO_API_KEY
    text = f"{_FINGERPRINT_SALT}{pair}:{api_key}"
    return "fp:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def engine_labels(values: Mapping, api_key: object = None) -> dict[str, str]:
    """The engine container's labels, from ``values`` holding every key of :data:`VALUE_KEYS`.

    Every value becomes a string (the rank ``0`` becomes ``"0"``); ``experimental`` must be a
    bool and becomes ``"true"`` or ``"false"``. ``api_key`` is the engine's API key (None or empty:
    none); only its fingerprint (:func:`api_key_fingerprint`) is labelled. ValueError when a value
    is missing, None or unknown, or ``experimental`` is not a bool.
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"the label values must be a mapping, not {type(values).__name__}")
    unknown = sorted(str(k) for k in values if k not in VALUE_KEYS)
    if unknown:
        raise ValueError(f"unknown label value(s) {', '.join(unknown)}; known: {', '.join(VALUE_KEYS)}")
    missing = [k for k in VALUE_KEYS if values.get(k) is None]
    if missing:
        raise ValueError(f"no value for {', '.join(missing)}")
    if not isinstance(values["experimental"], bool):
        raise ValueError(f"experimental must be a bool, not {type(values['experimental']).__name__}")
    out = {}
    for key in VALUE_KEYS:
        value = values[key]
        out[LABELS[key]] = ("true" if value else "false") if key == "experimental" else str(value)
    out[LABELS["api_key"]] = api_key_fingerprint(values["pair"], api_key)
    return out


def collection_labels(labels: object) -> dict:
    """Only the collection's labels of ``labels`` (an image brings its own); {} for no mapping."""
    if not isinstance(labels, Mapping):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and k.startswith(PREFIX)}


def _plain(key: str, value: object) -> object:
    if key == "rank" and isinstance(value, str) and value.isdigit():
        return int(value)
    if key == "experimental" and value in ("true", "false"):
        return value == "true"
    return value


def label_record(labels: object, missing: object = None) -> dict:
    """A container's labels (or None) read back into a plain record with every key of
    :data:`RECORD_KEYS`: ``rank`` as an int and ``experimental`` as a bool where the label reads
    as one (else the label's text, so that nothing is hidden), every other field the label's text;
    ``missing`` for a label the container does not carry."""
    labels = labels if isinstance(labels, Mapping) else {}
    return {key: _plain(key, labels[LABELS[key]]) if LABELS[key] in labels else missing for key in RECORD_KEYS}
