# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The evidence pack: one folder per pair and run, written once, on the control node.

A pack holds the run's artifacts (pin, manifest, profile, gate, guard, NIAH, inspect data, ...),
an ``index.json`` and an ``index.md`` that say what the run was and whether it may be published,
and a ``SHA256SUMS`` over every other file. The work is split in two:

* :func:`plan_pack` reads every source, redacts it, judges publication and renders every file in
  memory. It writes nothing, so check mode runs it alone.
* :func:`write_pack` writes the plan into a hidden staging folder next to the destination,
  re-hashes every file from disk, scans the folder for secrets and private control-node paths, and
  only then renames it into place. On any fault the staging folder is removed: the destination
  never holds a partial or leaking pack.

Standard library only (plus the collection's own file helpers).

This file holds the pack's inputs (names, prefixes, the secrets to look for), the artifacts read and redacted, and
the leak scan; beside it, by concern: :mod:`._evidence_run` (the run's own result files and their facts),
:mod:`._evidence_index` (publication reasons, ``index.json``/``index.md``, ``SHA256SUMS``) and
:mod:`._evidence_pack` (:func:`plan_pack` and :func:`write_pack`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass

from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import check_finite
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError, Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import SAFE_NAME, SAFE_NAME_EXPECTED
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import (
    MIN_SECRET_LENGTH, REDACTED, is_secret_name, json_container, redact_document, redact_secrets_text, replace_each,
    spellings, variable_leaks,
)

RANK = "control node"
SCHEMA_VERSION = 1
KINDS = ("pin", "manifest", "profile", "compilation_config", "gate", "guard", "niah", "niah_row", "systems", "inspect",
         "readiness", "tree", "log", "other")
IMPLEMENTATIONS = ("regular", "breakable")
# Who measured result rows: an OpenAI-compatible API client (the collection's own lanes, guard and
# NIAH, and r0b0bench) or vLLM's own benchmark tool. Rows of both are never published together.
CLIENT_KINDS = ("openai_portable", "vllm-bench")
INDEX_JSON = "index.json"
INDEX_MD = "index.md"
SUMS = "SHA256SUMS"
GENERATED = (INDEX_JSON, INDEX_MD, SUMS)
FILE_MODE = 0o644
DIR_MODE = 0o755

CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def _mismatch(item: str, actual: object, expected: object) -> Mismatch:
    return Mismatch(rank=RANK, item=item, expected=expected, actual=actual, expected_word="expected")


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prefix:
    """A control-node path and the placeholder that stands for it inside the pack."""

    prefix: str
    placeholder: str


def normalise_prefixes(items: list[dict] | None) -> list[Prefix]:
    """The redaction prefixes, trailing slashes dropped, each also under its resolved (symlink-free)
    spelling, longest first so that a nested prefix wins over the folder that holds it."""
    found: dict[str, str] = {}
    problems: list[Mismatch] = []
    for i, item in enumerate(items or []):
        prefix = item.get("prefix") if isinstance(item, dict) else None
        placeholder = item.get("placeholder") if isinstance(item, dict) else None
        if not isinstance(prefix, str) or not prefix.startswith("/") or os.path.normpath(prefix) == "/":
            problems.append(_mismatch(f"redact_prefixes[{i}].prefix", repr(prefix),
                                      "an absolute control-node path other than /"))
            continue
        if (not isinstance(placeholder, str) or not placeholder or CONTROL_CHARS.search(placeholder)
                or '"' in placeholder or "\\" in placeholder):
            problems.append(_mismatch(f"redact_prefixes[{i}].placeholder", repr(placeholder),
                                      "a non-empty single-line text without quotes or backslashes"))
            continue
        for spelling in (os.path.normpath(prefix), os.path.realpath(prefix)):
            found.setdefault(spelling, placeholder)
    for spelling, placeholder in found.items():
        if any(other in placeholder for other in found):
            problems.append(_mismatch(f"redact_prefixes placeholder for {spelling}", placeholder,
                                      "a placeholder that holds no redacted path"))
    if problems:
        raise IdentityError(problems)
    return sorted((Prefix(p, h) for p, h in found.items()), key=lambda p: (-len(p.prefix), p.prefix))


def name_problems(name: object) -> str | None:
    """Why ``name`` cannot be a file of the pack, or None when it can."""
    if not isinstance(name, str) or not name:
        return "an empty name"
    if name.startswith("/"):
        return "an absolute path"
    if "\\" in name or CONTROL_CHARS.search(name):
        return "a name with a backslash or a control character"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "a path with an empty, '.' or '..' component"
    if any(len(part.encode("utf-8")) > 255 for part in parts):
        return "a path with a component longer than 255 bytes"
    if name.lower() in (g.lower() for g in GENERATED):
        return "a name the pack reserves for its own index and checksums"
    return None


def check_names(names: list[str]) -> list[Mismatch]:
    """Every artifact name must be a relative path inside the pack, unique, and no file may be
    another one's folder."""
    problems = []
    for name in names:
        why = name_problems(name)
        if why:
            problems.append(_mismatch(f"artifact name {name!r}", why, "a relative path inside the pack"))
    clean = [n for n in names if not name_problems(n)]
    seen: set[str] = set()
    for name in clean:
        if name in seen:
            problems.append(_mismatch(f"artifact name {name!r}", "given twice", "unique"))
        seen.add(name)
    for name in sorted(seen):
        if any(other.startswith(name + "/") for other in seen):
            problems.append(_mismatch(f"artifact name {name!r}", "also the folder of another artifact",
                                      "a file name"))
    return problems


def check_label(item: str, value: object) -> Mismatch | None:
    if not isinstance(value, str) or not value.strip() or CONTROL_CHARS.search(value):
        return _mismatch(item, repr(value), "a non-empty single-line text")
    return None


def check_safe_name(item: str, value: object) -> Mismatch | None:
    """A pair name or run id, which name the pack's folder: nothing that could leave it."""
    if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
        return _mismatch(item, repr(value), SAFE_NAME_EXPECTED)
    return None


def check_dest(dest: str) -> None:
    """A pack is written once: the destination must be absent or an empty folder."""
    if not os.path.lexists(dest):
        return
    if os.path.islink(dest):
        actual = "a symlink"
    elif not os.path.isdir(dest):
        actual = "a file"
    else:
        try:
            count = len(os.listdir(dest))
        except OSError as exc:
            raise CheckError(RANK, f"cannot list the evidence pack {dest}: {exc.strerror}") from exc
        if not count:
            return
        actual = f"a non-empty folder ({count} entries)"
    raise IdentityError(_mismatch(f"evidence pack {dest}", actual, "absent or an empty folder (packs are never overwritten)"))


# --------------------------------------------------------------------------------------------
# redaction
# --------------------------------------------------------------------------------------------
def replace_prefixes(value: object, prefixes: list[Prefix]) -> object:
    """``value`` (a text or a document) with every prefix replaced by its placeholder, in strings and
    keys at any depth (:func:`_secrets.replace_each`)."""
    return replace_each(value, ((p.prefix, p.placeholder) for p in prefixes))


# The one secret rule of the pack is the collection's variable rule (:func:`_secrets.redact_document`,
# :func:`_secrets.redact_secrets_text`): a variable's value is redacted when its NAME looks secret
# (:func:`is_secret_name`) or when the value is one the pack was told is secret.
# A told secret value shorter than _secrets.MIN_SECRET_LENGTH is not searched for (it would match
# ordinary values such as 1 or true); the variable that holds it is still redacted by its name.

_SHOWN_NAME = re.compile(r"-{0,2}[A-Za-z_][A-Za-z0-9_.-]{0,127}")


def secret_values(secrets: list[str] | None, secret_env: list[str] | None = None) -> tuple[list[str], list[str], int]:
    """The told secret values, each with the variable it came from ("" for a bare value): every
    non-empty element of ``secrets`` and the value of every ``NAME=value`` of ``secret_env`` whose
    NAME looks secret, each once. Values shorter than :data:`MIN_SECRET_LENGTH` are counted apart."""
    values: list[str] = []
    labels: list[str] = []
    short = 0
    told = [("", s) for s in secrets or []]
    problems = []
    for i, entry in enumerate(secret_env or []):
        name, sep, value = entry.partition("=") if isinstance(entry, str) else ("", "", "")
        if not sep or not name:
            problems.append(_mismatch(f"secret_env[{i}]", "not a NAME=value entry (value withheld)", "NAME=value"))
        elif is_secret_name(name):
            told.append((name, value))
    if problems:
        raise IdentityError(problems)
    for label, value in told:
        if not isinstance(value, str) or not value or value in values:
            continue
        if len(value) < MIN_SECRET_LENGTH:
            short += 1
            continue
        values.append(value)
        labels.append(label)
    return values, labels, short


# --------------------------------------------------------------------------------------------
# artifacts
# --------------------------------------------------------------------------------------------
def json_bytes(document: object) -> bytes:
    """The bytes ``write_json_atomic`` writes for ``document``; the writer verifies every file it
    wrote against these, so a drift between the two fails the run instead of the index."""
    return (json.dumps(document, sort_keys=True, indent=2, allow_nan=False) + "\n").encode("utf-8")


@dataclass
class Entry:
    """One file of the pack (or an artifact that is not there)."""

    name: str
    kind: str
    required: bool = False
    state: str = "present"  # present | missing | absent | not_in_run | stale
    data: bytes | None = None
    document: object = None
    is_json: bool = False  # written through write_json_atomic from ``document``
    source_sha256: str | None = None
    recorded_sha256: str | None = None  # what the run recorded, when the file holds something else now
    redacted: bool = False

    @property
    def sha256(self) -> str | None:
        return hashlib.sha256(self.data).hexdigest() if self.data is not None else None

    @property
    def size(self) -> int | None:
        return len(self.data) if self.data is not None else None

    def as_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "required": self.required, "state": self.state,
                "bytes": self.size, "sha256": self.sha256, "source_sha256": self.source_sha256,
                "recorded_sha256": self.recorded_sha256, "redacted": self.redacted}


def _as_json_document(name: str, document: object, prefixes: list[Prefix],
                      secrets: list[str] | None = None) -> tuple[object, bool]:
    cleaned = redact_document(replace_prefixes(document, prefixes), secrets)
    try:
        check_finite(cleaned)
    except ValueError as exc:
        raise CheckError(RANK, f"artifact {name}: content cannot be written as JSON: {exc}") from exc
    return cleaned, cleaned != document


def _parse_inspect(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CheckError(RANK, f"artifact {name} (inspect) is not JSON, so its Env and --api-key values cannot be "
                               f"redacted: {exc}") from exc


def _from_text(entry: Entry, text: str, prefixes: list[Prefix], secrets: list[str] | None = None) -> None:
    """Text is copied with its paths replaced and its secret variables redacted. A JSON text (other
    than inspect data, which is always parsed) keeps its bytes unless a secret had to be redacted;
    then it is written back as JSON."""
    if entry.kind == "inspect":
        document, changed = _as_json_document(entry.name, _parse_inspect(entry.name, text), prefixes, secrets)
        entry.document, entry.is_json, entry.redacted = document, True, changed
        entry.data = json_bytes(document)
        return
    cleaned = replace_prefixes(text, prefixes)
    document = json_container(cleaned)
    if document is None:
        cleaned = redact_secrets_text(cleaned, secrets)
    elif redact_document(document, secrets) != document:
        entry.document = _as_json_document(entry.name, document, prefixes, secrets)[0]
        entry.is_json, entry.redacted, entry.data = True, True, json_bytes(entry.document)
        return
    entry.data, entry.redacted = cleaned.encode("utf-8"), cleaned != text


def load_artifact(spec: dict, prefixes: list[Prefix], secrets: list[str] | None = None) -> Entry:
    """Read (or render) one artifact, redacted (paths by ``prefixes``, secret variables by the one
    rule, told ``secrets`` where they are a variable's whole value). A source that does not exist is ``missing`` when the
    artifact is required and ``absent`` when it is not; any other read fault fails the run."""
    name, kind = spec["name"], spec.get("kind") or "other"
    entry = Entry(name=name, kind=kind, required=bool(spec.get("required")))
    if kind not in KINDS:
        raise IdentityError(_mismatch(f"artifact {name} kind", kind, "one of " + ", ".join(KINDS)))
    if spec.get("not_in_run"):
        entry.state = "not_in_run"
        return entry
    src, content = spec.get("src"), spec.get("content")
    if (src is None) == (content is None):
        raise IdentityError(_mismatch(f"artifact {name}", "given both src and content" if src is not None
                                      else "given neither src nor content", "exactly one of src and content"))
    if content is not None:
        if isinstance(content, (dict, list)):
            entry.document, entry.redacted = _as_json_document(name, content, prefixes, secrets)
            entry.is_json, entry.data = True, json_bytes(entry.document)
        elif isinstance(content, str):
            _from_text(entry, content, prefixes, secrets)
        else:
            raise IdentityError(_mismatch(f"artifact {name} content", type(content).__name__,
                                          "a dict, a list or a string"))
        return entry
    if not os.path.exists(src):
        if spec.get("sha256"):
            # the run recorded it, and it is gone since: as untrustworthy as a rewritten one
            entry.state, entry.recorded_sha256 = "stale", spec["sha256"]
            return entry
        entry.state = "missing" if entry.required else "absent"
        return entry
    if os.path.isdir(src):
        raise CheckError(RANK, f"artifact {name}: its source {src} is a folder, expected a file")
    try:
        with open(src, "rb") as handle:
            raw = handle.read()
        entry.source_sha256 = sha256_file(src)
    except OSError as exc:
        raise CheckError(RANK, f"artifact {name}: cannot read its source {src}: {exc.strerror or exc}") from exc
    if entry.source_sha256 != hashlib.sha256(raw).hexdigest():
        raise CheckError(RANK, f"artifact {name}: its source {src} changed while it was read")
    recorded = spec.get("sha256")
    if recorded and entry.source_sha256 != recorded:
        # rewritten after this run recorded it (by a later run): not this run's file, left out
        entry.state, entry.recorded_sha256 = "stale", recorded
        return entry
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        if kind == "inspect":
            raise CheckError(RANK, f"artifact {name} (inspect) is not UTF-8 JSON, so its Env and --api-key values "
                                   "cannot be redacted") from None
        entry.data = raw  # binary: copied as is; the leak scan still covers it
        return entry
    _from_text(entry, text, prefixes, secrets)
    return entry


# --------------------------------------------------------------------------------------------
# leak scan
# --------------------------------------------------------------------------------------------
def _spellings(value: str) -> set[bytes]:
    return {form.encode("utf-8") for form in spellings(value)}


def _strings(value: object):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _holds(data: bytes, decoded: list[str], needle: str) -> bool:
    return any(form in data for form in _spellings(needle)) or any(needle in s for s in decoded)


def _shown(name: str, secrets: list[str]) -> str:
    """A variable name fit for a message: never a secret, nor anything that could hold one."""
    if _SHOWN_NAME.fullmatch(name) and not any(s in name for s in secrets):
        return name
    return "a variable (name withheld)"


def _secret_label(number: int, labels: list[str] | None) -> str:
    label = labels[number - 1] if labels and number <= len(labels) else ""
    return f"secret #{number}, the value of {label}" if label else f"secret #{number}"


def find_leaks(name: str, data: bytes, secrets: list[str], prefixes: list[Prefix],
               labels: list[str] | None = None) -> list[Mismatch]:
    """Secrets, unredacted secret variables and control-node paths left in one file. The message
    names the file and the secret's position in O(secrets) (with the variable it came from, when
    known) or the variable, never a value."""
    try:
        decoded = list(_strings(json.loads(data.decode("utf-8"))))
    except (UnicodeDecodeError, ValueError):
        decoded = []
    leaks = []
    for number, secret in enumerate(secrets, 1):
        if secret and len(secret) >= MIN_SECRET_LENGTH and _holds(data, decoded, secret):
            leaks.append(_mismatch(f"pack file {name}", f"carrying {_secret_label(number, labels)} (value withheld)",
                                   "free of secrets"))
    for variable in variable_leaks(data, secrets):
        leaks.append(_mismatch(f"pack file {name}",
                               f"carrying an unredacted value of {_shown(variable, secrets)} (value withheld)",
                               f"{REDACTED} in its place"))
    for prefix in prefixes:
        if _holds(data, decoded, prefix.prefix):
            leaks.append(_mismatch(f"pack file {name}", f"carrying the control-node path {prefix.prefix}",
                                   f"{prefix.placeholder} in its place"))
    return leaks


def name_leaks(names: list[str], secrets: list[str], labels: list[str] | None = None) -> list[Mismatch]:
    leaks = []
    for number, secret in enumerate(secrets, 1):
        if secret and len(secret) >= MIN_SECRET_LENGTH and any(secret in name for name in names):
            leaks.append(_mismatch("an artifact name", f"carrying {_secret_label(number, labels)} (value withheld)",
                                   "free of secrets"))
    return leaks
