# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify a runtime manifest file against the pin, read-only.

The frozen vLLM image audits ``/opt/r0b0tlab/runtime-manifest.json`` at start, and the
runtime gate compares its sha256 with the pin. This check runs wherever a copy of the
manifest sits (the control node's source file before anything is copied, each rank's placed
copy, the fleet audit) and collects every difference in one pass:

1. the sha256 of the file's bytes (streamed; the same bytes are then parsed);
2. strict JSON (no duplicate keys, no NaN/Infinity), top level an object;
3. ``schema_version``;
4. the identity fields the pin names (``vllm_version``, ``model_revision`` ...), top level;
5. the keys of the selected profile section (``production_profile`` ...).

A sha256 mismatch does not stop the field checks, so the operator sees what was changed.
Values compare by JSON type: numbers numerically (``16 == 16.0``), but a number never equals
a string (``16`` vs ``"16"``) and a boolean never equals a number (``true`` vs ``1``).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import (
    CheckError,
    IdentityError,
    Mismatch,
    outcome,
    rank_name,
    refused,
)
from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import (
    StrictJSONError,
    json_equal,
    json_kind,
    loads,
)

IDENTITY_FIELDS = (
    "vllm_version",
    "integrated_vllm_commit",
    "model_id",
    "model_revision",
    "kv_cache_dtype",
    "speculative_method",
)
CHUNK = 1 << 20
MAX_PARSE_BYTES = 16 << 20  # a schema-3 manifest is a few kB; anything this large is not one
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Expectation:
    sha256: str
    identity: dict = field(default_factory=dict)
    profile_section: str | None = None
    profile: dict = field(default_factory=dict)
    schema_version: int = 3


@dataclass
class Report:
    path: str
    sha256: str | None = None
    manifest: dict = field(default_factory=dict)
    mismatches: list[Mismatch] = field(default_factory=list)

    def result(self) -> dict:
        return {
            "sha256": self.sha256,
            "manifest": self.manifest,
            "mismatches": [m.as_dict() for m in self.mismatches],
        }


def normalize_sha256(value: str, rank: str) -> str:
    """The pinned digest as 64 lower-case hex characters; ``sha256:`` prefix optional."""
    text = (value or "").strip().lower()
    if text.startswith("sha256:"):
        text = text[len("sha256:"):]
    if not _HEX64.match(text):
        raise CheckError(rank, f"expected_sha256 {value!r} is not a sha256 digest (64 hex characters)")
    return text


def read_manifest(path: str, limit: int = MAX_PARSE_BYTES) -> tuple[str, bytes | None]:
    """Stream the file once: its sha256, and its bytes if it is no larger than ``limit``.

    Not :func:`_digest.sha256_file`: the digest must be of the very bytes that are then parsed,
    so a file replaced between a hash and a second read cannot pass with another content.

    Raises ``OSError`` when the file cannot be opened or read.
    """
    digest = hashlib.sha256()
    kept: list[bytes] | None = []
    size = 0
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
            if kept is not None:
                if size <= limit:
                    kept.append(chunk)
                else:
                    kept = None
    return digest.hexdigest(), (b"".join(kept) if kept is not None else None)


def _field_mismatch(rank: str, item: str, container: dict, key: str, expected: object, word: str) -> Mismatch | None:
    if key not in container:
        return Mismatch(rank, item, expected, None, reason="key missing from the manifest", expected_word=word)
    actual = container[key]
    if json_equal(actual, expected):
        return None
    reason = ""
    if json_kind(expected) != json_kind(actual):
        reason = f"{json_kind(actual)} in the manifest, {json_kind(expected)} {word}"
    return Mismatch(rank, item, expected, actual, reason=reason, expected_word=word)


def _summary(document: dict, expectation: Expectation) -> dict:
    keys = ["schema_version", *IDENTITY_FIELDS, *(k for k in expectation.identity if k not in IDENTITY_FIELDS)]
    summary = {key: document[key] for key in keys if key in document}
    section = expectation.profile_section
    if section and isinstance(document.get(section), dict):
        summary[section] = document[section]
    return summary


def check_document(document: dict, expectation: Expectation, rank: str) -> list[Mismatch]:
    """Every field difference between a parsed manifest and the expectation."""
    found: list[Mismatch] = []

    def add(mismatch: Mismatch | None) -> None:
        if mismatch is not None:
            found.append(mismatch)

    add(_field_mismatch(rank, "runtime manifest schema_version", document, "schema_version",
                        expectation.schema_version, "expected"))
    for key, value in expectation.identity.items():
        add(_field_mismatch(rank, f"runtime manifest {key}", document, key, value, "pinned"))
    section = expectation.profile_section
    if not section:
        return found
    if section not in document:
        found.append(Mismatch(rank, f"runtime manifest {section}", "an object", None,
                              reason="section missing from the manifest", expected_word="expected"))
        return found
    values = document[section]
    if not isinstance(values, dict):
        found.append(Mismatch(rank, f"runtime manifest {section}", "an object", values,
                              reason=f"{json_kind(values)} in the manifest, object expected", expected_word="expected"))
        return found
    for key, value in expectation.profile.items():
        add(_field_mismatch(rank, f"runtime manifest {section}.{key}", values, key, value, "expected"))
    return found


def verify(path: str, expectation: Expectation, rank: str) -> Report:
    """Check the manifest at ``path``; never raises for a bad file, only for bad options.

    A missing or unreadable file, or one that is not strict JSON, becomes a Mismatch that
    names the path and the reason, so an audit run without failing still gets it as data.
    """
    if expectation.profile and not expectation.profile_section:
        raise CheckError(rank, "profile is set but profile_section is not: name the manifest section to compare")
    pinned = normalize_sha256(expectation.sha256, rank)
    report = Report(path=path)
    try:
        report.sha256, content = read_manifest(path)
    except OSError as exc:
        report.mismatches.append(Mismatch(rank, "runtime manifest sha256", pinned, None,
                                          reason=f"cannot read {path}: {exc.strerror or exc}"))
        return report
    if report.sha256 != pinned:
        report.mismatches.append(Mismatch(rank, "runtime manifest sha256", pinned, report.sha256, reason=path))
    if content is None:
        report.mismatches.append(Mismatch(rank, "runtime manifest content", "a strict JSON object",
                                          f"larger than {MAX_PARSE_BYTES} bytes", reason=path,
                                          expected_word="expected"))
        return report
    try:
        document = loads(content, require_object=True)
    except StrictJSONError as exc:
        report.mismatches.append(Mismatch(rank, "runtime manifest content", "a strict JSON object",
                                          "not strict JSON", reason=f"{path}: {exc}", expected_word="expected"))
        return report
    report.manifest = _summary(document, expectation)
    report.mismatches.extend(check_document(document, expectation, rank))
    return report


# The options of gb10.dspark.runtime_manifest: the module and its action (which checks a manifest on the control
# node in the controller's worker process) validate them alike.
ARGUMENT_SPEC = {
    "rank": {"type": "str"},
    "path": {"type": "path", "required": True},
    "expected_sha256": {"type": "str", "required": True, "no_log": False},
    "expected": {"type": "dict", "default": {}},
    "profile_section": {"type": "str"},
    "profile": {"type": "dict", "default": {}},
    "expected_schema_version": {"type": "int", "default": 3},
    "fail_on_mismatch": {"type": "bool", "default": True},
}


def check(params: dict) -> dict:
    """The task result of gb10.dspark.runtime_manifest for validated ``params`` (module and action alike)."""
    rank = rank_name(params["rank"])
    expectation = Expectation(sha256=params["expected_sha256"], identity=params["expected"],
                              profile_section=params["profile_section"], profile=params["profile"],
                              schema_version=params["expected_schema_version"])
    try:
        report = verify(params["path"], expectation, rank)
    except (IdentityError, CheckError) as exc:
        return refused(exc)
    return outcome(report.result(), report.mismatches, params["fail_on_mismatch"])
