# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The identity pin: one YAML vars file per release (``dspark_pin``), the single source of truth.

This module knows its shape (which keys, which formats) and how the image labels of the frozen
image map onto it, so that every module, role and test reads the pin the same way.
"""
from __future__ import annotations

import re

SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
GIT_SHA = re.compile(r"^[0-9a-f]{40}$")

# The one KV-cache dtype the DSpark lane serves: the pin must name it, the profile's KV_CACHE_DTYPE
# is it (_profile), the gate's logs must show it (_runtime_gate). Spelled here only.
KV_CACHE_DTYPE = "nvfp4_ds_mla"

# key: (required, check) — check is a compiled pattern, a type, or None
FIELDS: dict[str, tuple[bool, object]] = {
    "release": (True, str),
    "image_tag": (True, re.compile(r"^[^@\s]+:[\w][\w.-]{0,127}$")),
    "image_id": (True, SHA256),
    "image_manifest_digest": (False, SHA256),
    "image_architecture": (True, re.compile(r"^(arm64|amd64)$")),
    "image_archive_sha256": (False, HEX64),
    "vllm_version": (True, str),
    "integrated_vllm_commit": (True, GIT_SHA),
    "source_revision": (True, GIT_SHA),
    "cudagraph_selector": (True, str),
    "model_id": (True, str),
    "model_revision": (True, GIT_SHA),
    "model_revision_marker": (True, str),
    "model_shard_count": (True, int),
    "model_total_size": (False, int),
    "model_config": (True, dict),
    "runtime_manifest_path": (True, re.compile(r"^/\S+$")),
    "runtime_manifest_sha256": (True, HEX64),
    "kv_cache_dtype": (True, re.compile("^" + re.escape(KV_CACHE_DTYPE) + "$")),
    "speculative_method": (True, str),
    "speculative_tokens": (True, int),
    "gpu_compute_capability": (True, re.compile(r"^\d+\.\d+$")),
}

# Image label → pin key: the labels the frozen image carries (spec: identity pins, launcher checks).
LABELS = {
    "org.opencontainers.image.revision": "source_revision",
    "io.r0b0tlab.model.revision": "model_revision",
    "io.r0b0tlab.vllm.package.version": "vllm_version",
    "io.r0b0tlab.vllm.integrated.commit": "integrated_vllm_commit",
    "io.r0b0tlab.cudagraph.selector": "cudagraph_selector",
    "io.r0b0tlab.kv-cache.dtype": "kv_cache_dtype",
    "io.r0b0tlab.speculative.method": "speculative_method",
    "io.r0b0tlab.speculative.tokens": "speculative_tokens",
}
# Pin key → the image label that carries it (the inverse of LABELS), for readers that start from the key.
LABEL_OF = {key: label for label, key in LABELS.items()}

# Top-level runtime-manifest fields that must equal the pin key of the same name.
MANIFEST_FIELDS = ("vllm_version", "integrated_vllm_commit", "model_id", "model_revision",
                   "kv_cache_dtype", "speculative_method")


class PinError(ValueError):
    pass


def problems(pin: object) -> list[str]:
    """Every way ``pin`` departs from the pin format (empty when it is well formed)."""
    if not isinstance(pin, dict):
        return [f"dspark_pin must be a mapping, not {type(pin).__name__}"]
    out = []
    for key, (required, check) in FIELDS.items():
        value = pin.get(key)
        if value is None:
            if required:
                out.append(f"dspark_pin.{key} is missing")
            continue
        if isinstance(check, type):
            if check is int and (isinstance(value, bool) or not isinstance(value, int)):
                out.append(f"dspark_pin.{key} must be an integer, not {value!r}")
            elif check is not int and not isinstance(value, check):
                out.append(f"dspark_pin.{key} must be a {check.__name__}, not {value!r}")
        elif hasattr(check, "match") and not (isinstance(value, str) and check.match(value)):
            out.append(f"dspark_pin.{key} {value!r} does not match {check.pattern}")  # type: ignore[attr-defined]
    unknown = sorted(set(pin) - set(FIELDS))
    if unknown:
        out.append("dspark_pin has unknown keys: " + ", ".join(unknown))
    return out


def check(pin: object) -> dict:
    errs = problems(pin)
    if errs:
        raise PinError("the identity pin is malformed: " + "; ".join(errs))
    return pin  # type: ignore[return-value]


def expected_labels(pin: dict) -> dict[str, str]:
    return {label: str(pin[key]) for label, key in LABELS.items()}


def manifest_expectations(pin: dict) -> dict:
    return {key: pin[key] for key in MANIFEST_FIELDS}
