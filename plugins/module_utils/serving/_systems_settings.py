# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systems suite's settings (:class:`Settings`, from the module's options) and their validation, before any
request is sent: every bad option is reported at once.

Split from :mod:`._systems` (the suite)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.common._site import local_api_url
from ansible_collections.gb10.dspark.plugins.module_utils.serving._systems_rows import RANK, LANES
from ansible_collections.gb10.dspark.plugins.module_utils.serving._systems_external import (
    BFCL_LANES,
    DEFAULT_EXTERNAL_LANES,
    EXTERNAL_INT_ENV,
    EXTERNAL_PUBLIC,
    QUALITY_PILLARS,
)


PREFILL_OUTPUT_TOKENS = 16
MIN_PREFILL_PROMPT_TOKENS = 128


# ---- settings --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """What one suite is asked to do (the module's options)."""

    model: str
    output_dir: str
    base_url: str = local_api_url()
    lanes: tuple[str, ...] = LANES
    latency_reps: int = 5
    latency_max_tokens: int = 128
    concurrency_levels: tuple[int, ...] = (1, 2, 4, 6, 16)
    concurrency_reps: int = 3
    concurrency_max_tokens: int = 512
    decode_reps: int = 5
    decode_max_tokens: int = 2048
    prefill_reps: int = 3
    prefill_prompt_tokens: int = 14000
    request_timeout: float = 600.0
    external_client: dict | None = None
    context: dict | None = None  # what served the run (profile, implementation, image), recorded as given

    def public(self) -> dict:
        """The settings as recorded in the report (no secret is part of them)."""
        ext = None
        if self.external_client:
            ext = {k: self.external_client.get(k) for k in EXTERNAL_PUBLIC}
            for key, _unused, default in EXTERNAL_INT_ENV:
                if ext[key] is None:
                    ext[key] = default
        return {"base_url": self.base_url, "model": self.model, "lanes": [x for x in LANES if x in self.lanes],
                "latency_reps": self.latency_reps, "latency_max_tokens": self.latency_max_tokens,
                "concurrency_levels": list(self.concurrency_levels), "concurrency_reps": self.concurrency_reps,
                "concurrency_max_tokens": self.concurrency_max_tokens, "decode_reps": self.decode_reps,
                "decode_max_tokens": self.decode_max_tokens, "prefill_reps": self.prefill_reps,
                "prefill_prompt_tokens": self.prefill_prompt_tokens,
                "prefill_output_tokens": PREFILL_OUTPUT_TOKENS, "request_timeout": self.request_timeout,
                "external_client": ext}


def external_lanes(s: Settings) -> list[str]:
    if s.external_client and s.external_client.get("lanes") is not None:
        return list(s.external_client["lanes"])
    return list(DEFAULT_EXTERNAL_LANES)


def unconfigured_pillars(s: Settings) -> list[str]:
    """The quality pillars that are not among the external lanes: reported NOT_IMPLEMENTED."""
    names = external_lanes(s)
    return [p for p in QUALITY_PILLARS if p not in names]


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _validate_bench_options(ext: dict, names: list[str], runs: bool) -> list[Mismatch]:
    """The seed's options of the external client: absolute paths, positive integers, and - when the
    external lane runs - paths that exist and the BFCL settings the BFCL lanes need."""
    bad: list[Mismatch] = []
    paths = {key: ext.get(key) for key in ("tokenizer", "aquila_scripts", "bfcl_python")}
    for key, value in paths.items():
        if value not in (None, "") and not (isinstance(value, str) and os.path.isabs(value)):
            bad.append(_opt(f"external_client.{key}", value, "an absolute path"))
            paths[key] = None
    for key, _unused, _unused in EXTERNAL_INT_ENV:
        value = ext.get(key)
        if value is not None and not _positive_int(value):
            bad.append(_opt(f"external_client.{key}", value, "a positive integer"))
    if not runs:
        return bad
    bfcl = [n for n in names if n in BFCL_LANES]
    need = f"lanes {', '.join(bfcl)} need it" if len(bfcl) > 1 else f"lane {''.join(bfcl)} needs it"
    tokenizer, scripts, python = paths["tokenizer"], paths["aquila_scripts"], paths["bfcl_python"]
    if tokenizer and not os.path.exists(tokenizer):
        bad.append(_opt("external_client.tokenizer", tokenizer, "an existing tokenizer file or model folder"))
    if scripts and not os.path.isdir(scripts):
        bad.append(_opt("external_client.aquila_scripts", scripts,
                        "an existing folder (the DSV4 BFCL served-id registry scripts)"))
    elif not ext.get("aquila_scripts") and bfcl:
        bad.append(_opt("external_client.aquila_scripts", None, f"the DSV4 BFCL registry scripts folder ({need})"))
    if python and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        bad.append(_opt("external_client.bfcl_python", python, "an executable interpreter (the BFCL virtualenv's)"))
    elif not ext.get("bfcl_python") and bfcl:
        bad.append(_opt("external_client.bfcl_python", None, f"the BFCL virtualenv's python ({need})"))
    return bad


def _opt(item: str, actual: object, expected: str) -> Mismatch:
    return Mismatch(rank=RANK, item=f"option {item}", expected=expected, actual=actual, expected_word="expected")


def validate(s: Settings) -> list[Mismatch]:
    """Every option that cannot give a meaningful measurement."""
    bad: list[Mismatch] = []
    unknown = [x for x in s.lanes if x not in LANES]
    if unknown:
        bad.append(_opt("lanes", unknown, "names among " + ", ".join(LANES)))
    if not s.lanes:
        bad.append(_opt("lanes", [], "at least one lane"))
    if not s.model:
        bad.append(_opt("model", s.model, "the served model name"))
    checks = (("latency_reps", s.latency_reps, 2, "at least 2 (the first is a dropped warm-up)"),
              ("latency_max_tokens", s.latency_max_tokens, 2, "at least 2 (ITL needs two tokens)"),
              ("concurrency_reps", s.concurrency_reps, 1, "at least 1"),
              ("concurrency_max_tokens", s.concurrency_max_tokens, 2, "at least 2 (ITL needs two tokens)"),
              ("decode_reps", s.decode_reps, 1, "at least 1"),
              ("decode_max_tokens", s.decode_max_tokens, 2, "at least 2 (decode rate needs two tokens)"),
              ("prefill_reps", s.prefill_reps, 1, "at least 1"),
              ("prefill_prompt_tokens", s.prefill_prompt_tokens, MIN_PREFILL_PROMPT_TOKENS,
               f"at least {MIN_PREFILL_PROMPT_TOKENS}"))
    for name, value, low, text in checks:
        if value < low:
            bad.append(_opt(name, value, text))
    if not s.concurrency_levels:
        bad.append(_opt("concurrency_levels", [], "at least one level"))
    elif any(level < 1 for level in s.concurrency_levels):
        bad.append(_opt("concurrency_levels", list(s.concurrency_levels), "levels of at least 1"))
    elif len(set(s.concurrency_levels)) != len(s.concurrency_levels):
        bad.append(_opt("concurrency_levels", list(s.concurrency_levels), "distinct levels"))
    if not s.request_timeout > 0:
        bad.append(_opt("request_timeout", s.request_timeout, "greater than 0"))
    ext = s.external_client
    if ext:
        if ext.get("lanes") is not None and not ext["lanes"]:
            bad.append(_opt("external_client.lanes", ext.get("lanes"), "at least one lane name"))
        elif any(not n or "," in n for n in external_lanes(s)):
            bad.append(_opt("external_client.lanes", external_lanes(s), "lane names without commas"))
        if not (ext.get("timeout") or 0) > 0:
            bad.append(_opt("external_client.timeout", ext.get("timeout"), "greater than 0"))
        if "external" in s.lanes:
            if not os.path.isdir(str(ext.get("path"))):
                bad.append(_opt("external_client.path", ext.get("path"), "an existing checkout directory"))
            python = str(ext.get("python"))
            if not (os.path.isfile(python) and os.access(python, os.X_OK)):
                bad.append(_opt("external_client.python", ext.get("python"), "an executable interpreter"))
        bad += _validate_bench_options(ext, external_lanes(s), "external" in s.lanes)
    return bad
