# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's container labels as Jinja filters (the table and the logic are in module_utils/identity/_labels.py)."""
from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _labels


def label_name(key):
    """``'pair' | gb10.dspark.label_name``: the label name of a key of the table."""
    try:
        return _labels.label_name(key)
    except ValueError as exc:
        raise AnsibleFilterError(f"label_name: {exc}") from exc


def engine_labels(values, api_key_label=None):
    """``{'pair': ..., 'rank': ..., ...} | gb10.dspark.engine_labels(api_key_label=...)``: the engine's labels;
    ``api_key_label`` is what ``gb10.dspark.engine_key_label`` made on the rank (never the key itself)."""
    try:
        return _labels.engine_labels(values, api_key_label)
    except ValueError as exc:
        raise AnsibleFilterError(f"engine_labels: {exc}") from exc


def label_record(labels, missing=None):
    """``<container labels> | gb10.dspark.label_record``: the labels read back into a plain record."""
    if labels is not None and not isinstance(labels, Mapping):
        raise AnsibleFilterError(f"label_record: the labels must be a mapping, not {type(labels).__name__}")
    return _labels.label_record(labels, missing)


class FilterModule:
    def filters(self):
        return {"label_name": label_name, "engine_labels": engine_labels, "label_record": label_record}
