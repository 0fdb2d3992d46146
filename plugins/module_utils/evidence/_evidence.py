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
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime

from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file
from ansible_collections.gb10.dspark.plugins.module_utils.common._clock import utc_now
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import (
    check_finite, fsync_dir, make_parents, write_json_atomic,
)
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
# the run's own results: what the producing roles recorded, and the facts those files state
# --------------------------------------------------------------------------------------------
# A pack never looks for files by name: every result file comes from this run's list
# (dspark_evidence_run_files, built by gb10.dspark.evidence_record as each role writes its file),
# and is taken only while it still holds the bytes the run recorded.
RUN_REQUIRED = (  # what every pack must hold from its own run: name used when it is absent, kind
    ("readiness.json", "readiness"),
    ("runtime-gate.json", "gate"),
    ("wrapper-tree.json", "tree"),
)
REQUIRED_RUN_KINDS = tuple(kind for _unused, kind in RUN_REQUIRED) + ("niah",)
_DEPTH_ROW = re.compile(r"depth-\d+\.json")


def _read_json(path: str) -> object:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def check_run_file(item: object, recorded: bool = True) -> list[Mismatch]:
    """One entry of the run's list: a safe pack name, a known kind, an absolute source path and
    (``recorded``) the sha256 the run recorded."""
    if not isinstance(item, dict):
        return [_mismatch("run file", type(item).__name__, "a mapping with name, src, kind and sha256")]
    name = item.get("name")
    problems = []
    why = name_problems(name)
    if why:
        problems.append(_mismatch(f"run file name {name!r}", why, "a relative path inside the pack"))
    if item.get("kind") not in KINDS:
        problems.append(_mismatch(f"run file {name} kind", item.get("kind"), "one of " + ", ".join(KINDS)))
    src = item.get("src")
    if not isinstance(src, str) or not os.path.isabs(src):
        problems.append(_mismatch(f"run file {name} src", repr(src), "an absolute path on the control node"))
    digest = item.get("sha256")
    if recorded and (not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest)):
        problems.append(_mismatch(f"run file {name} sha256", repr(digest), "64 lowercase hex digits"))
    return problems


def record_run_files(existing: object, files: list[dict],
                     checksum=sha256_file) -> tuple[list[dict], list[dict], list[str]]:
    """The run's list with ``files`` (name, src, kind) added, each with the sha256 of its bytes now.

    A file recorded again under the same pack name replaces the earlier entry (the second gate of a
    NIAH run replaces the first). A source that does not exist is not recorded and is returned in the
    third list; it never enters a pack. Returns (the new list sorted by name, the entries recorded,
    the names not found)."""
    current = {}
    problems = []
    for item in existing if isinstance(existing, list) else ([] if existing in (None, "") else [existing]):
        found = check_run_file(item)
        if found:
            problems += found
            continue
        current[item["name"]] = {k: item[k] for k in ("name", "src", "kind", "sha256")}
    recorded, missing = [], []
    for item in expand_folders(files):
        spec = dict(item) if isinstance(item, dict) else item
        found = check_run_file(spec, recorded=False)  # the digest is the file's, read below
        if found:
            problems += found
            continue
        if not os.path.isfile(spec["src"]):
            missing.append(spec["name"])
            continue
        try:
            spec["sha256"] = checksum(spec["src"])
        except OSError as exc:
            raise CheckError(RANK, f"run file {spec['name']}: cannot read {spec['src']}: {exc.strerror or exc}") from exc
        entry = {k: spec[k] for k in ("name", "src", "kind", "sha256")}
        current[entry["name"]] = entry
        recorded.append(entry)
    if problems:
        raise IdentityError(problems)
    return [current[n] for n in sorted(current)], recorded, missing


def expand_folders(files: list) -> list:
    """A ``niah_run`` entry (a NIAH run folder on the control node, named by its folder in the pack)
    stands for the folder's summary, depth rows and other JSON files, each with its own kind."""
    out = []
    for item in files:
        if not (isinstance(item, dict) and item.get("kind") == "niah_run"):
            out.append(item)
            continue
        src, name = item.get("src"), item.get("name")
        if not isinstance(src, str) or not os.path.isabs(src) or name_problems(name):
            raise IdentityError(_mismatch(f"run folder {name!r}", repr(src),
                                          "an absolute folder path on the control node and a safe pack name"))
        try:
            children = sorted(os.listdir(src))
        except OSError:
            children = []  # nothing there: nothing recorded
        for child in children:
            kind = niah_kind(child)
            if kind and os.path.isfile(os.path.join(src, child)):
                out.append({"name": f"{name}/{child}", "src": os.path.join(src, child), "kind": kind})
    return out


def _recorded_json(item: dict) -> object:
    """The JSON document of a run file, only while it holds the bytes the run recorded."""
    try:
        with open(item["src"], "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    if hashlib.sha256(raw).hexdigest() != item["sha256"]:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def from_run(run_files: list[dict] | None) -> tuple[list[dict], dict]:
    """Artifacts and facts from this run's own result files (see :func:`record_run_files`): the
    engine's readiness record, the runtime gate, the serving guard, the systems lanes, the NIAH run
    (summary, rows, what served it) and the wrapper-tree record. Nothing else is read. Each artifact
    carries the sha256 the run recorded, so a file rewritten since (by a later run) is left out
    (:func:`load_artifact` marks it ``stale``). A required result the run did not produce is an
    artifact in state ``not_in_run``. Facts come from the files' own contents; nothing is assumed. A
    client kind is a fact only where a file states it (the guard's or NIAH's ``client_kind``); the
    systems rows carry theirs and are read from the pack itself (:func:`client_kind_sources`)."""
    items = list(run_files or [])
    problems = [m for item in items for m in check_run_file(item)]
    if problems:
        raise IdentityError(problems)
    artifacts = [{"name": i["name"], "src": i["src"], "kind": i["kind"], "sha256": i["sha256"],
                  "required": i["kind"] in REQUIRED_RUN_KINDS} for i in sorted(items, key=lambda i: i["name"])]
    for name, kind in RUN_REQUIRED:
        if not any(i["kind"] == kind for i in items):
            artifacts.append({"name": name, "kind": kind, "required": True, "not_in_run": True})
    facts: dict = {}
    kinds: list[str] = []
    clients: dict[str, list[str]] = {}

    def stated(context: object, source: str) -> None:
        kind = context.get("client_kind") if isinstance(context, dict) else None
        if isinstance(kind, str) and kind:
            clients.setdefault(kind, []).append(source)

    def implementation_of(document: object, *path: str) -> None:
        for key in path:
            document = document.get(key) if isinstance(document, dict) else None
        if document in IMPLEMENTATIONS:
            kinds.append(document)

    for item in sorted(items, key=lambda i: i["name"]):
        document = _recorded_json(item)
        if not isinstance(document, dict):
            continue
        kind, name = item["kind"], item["name"]
        if kind == "readiness":
            facts.setdefault("profile", {}).update(
                {"name": document.get("profile"), "sha256": document.get("profile_sha256"),
                 "experimental": document.get("experimental"), "departures": document.get("departures") or [],
                 "fabric_env": document.get("fabric_env")})
        elif kind == "gate":
            # the sha256 of the runtime manifest the head's engine runs with, as the gate measured it
            identity = ((document.get("evidence") or {}).get("runtime_identity") or {}).get("head") or {}
            if isinstance(identity, dict) and identity.get("runtime_audit_manifest_sha256"):
                facts["manifest_sha256"] = identity["runtime_audit_manifest_sha256"]
            implementation = (document.get("evidence") or {}).get("expected_cudagraph_implementation")
            if implementation in IMPLEMENTATIONS:
                kinds.append(implementation)
                facts.setdefault("profile", {})["cudagraph_implementation"] = implementation
        elif kind == "guard":
            facts["guard_infra_errors"] = document.get("infra_failures")
            facts["guard_model_failures"] = document.get("contract_failures")
            implementation_of(document, "context", "cudagraph_implementation")
            stated(document.get("context"), name)
        elif kind == "systems":
            counts = document.get("counts") or {}
            facts["systems_infra_errors"] = counts.get("ERROR")
            facts["systems_model_failures"] = counts.get("FAIL")
            facts["systems_not_implemented"] = counts.get("NOT_IMPLEMENTED")
            implementation_of(document, "context", "cudagraph_implementation")
        elif kind == "niah":
            facts["niah_infra_errors"] = document.get("infra_error_count")
            facts["niah_model_failures"] = document.get("fail_count")
        elif kind == "tree":
            facts["tree"] = {"dirty": document.get("dirty"), "allow_dirty": document.get("allowed_dirty"),
                             "commit": document.get("revision")}
        elif kind == "other" and name.startswith("niah/") and name.endswith("/context.json"):
            implementation_of(document, "cudagraph_implementation")
            stated(document, name)
    facts["row_kinds"] = sorted(set(kinds))
    if clients:
        facts["client_kinds"] = clients
    return artifacts, facts


def niah_kind(name: str) -> str | None:
    """The pack kind of a file of a NIAH run folder: the summary, a depth row, other JSON, or None."""
    if name == "niah.json":
        return "niah"
    if _DEPTH_ROW.fullmatch(name):
        return "niah_row"
    return "other" if name.endswith(".json") else None


def merge_facts(found: dict, given: dict | None) -> dict:
    """The facts found in the files, with every value the caller gave explicitly (not None) on top."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in found.items()}
    for key, value in (given or {}).items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update({k: v for k, v in value.items() if v is not None})
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------------------------
# publication
# --------------------------------------------------------------------------------------------
def _document_of(entry: Entry) -> object:
    document = entry.document if entry.is_json else None
    if not entry.is_json and entry.data is not None:
        try:
            document = json.loads(entry.data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            document = None
    return document


def _status_of(entry: Entry) -> str | None:
    document = _document_of(entry)
    if isinstance(document, dict) and document.get("status") is not None:
        return str(document["status"])
    return None


def client_kind_sources(facts: dict, entries: list[Entry]) -> dict[str, list[str]]:
    """Each client kind of the run's result rows and where it came from: the facts (``client_kinds``,
    kind -> sources) and the rows of every systems report in the pack (their ``client_kind``; a row
    without one measured nothing and does not count)."""
    kinds: dict[str, list[str]] = {}
    for kind, where in (facts.get("client_kinds") or {}).items():
        for source in where:
            if source not in kinds.setdefault(kind, []):
                kinds[kind].append(source)
    for entry in entries:
        if entry.kind != "systems" or entry.state != "present":
            continue
        document = _document_of(entry)
        rows = document.get("rows") if isinstance(document, dict) else None
        labels: dict[str, list[str]] = {}
        for row in rows if isinstance(rows, list) else []:
            kind = row.get("client_kind") if isinstance(row, dict) else None
            if not isinstance(kind, str) or not kind:
                continue
            label = f"external {row.get('level')}" if row.get("lane") == "external" else str(row.get("lane"))
            if label not in labels.setdefault(kind, []):
                labels[kind].append(label)
        for kind, names in labels.items():
            source = f"{entry.name} rows {', '.join(names)}"
            if source not in kinds.setdefault(kind, []):
                kinds[kind].append(source)
    return kinds


def client_kind_reasons(kinds: dict[str, list[str]]) -> list[str]:
    reasons = [f"client kind {kind} of {'; '.join(where)} is unknown, expected {' or '.join(CLIENT_KINDS)}"
               for kind, where in sorted(kinds.items()) if kind not in CLIENT_KINDS]
    if len(kinds) > 1:
        reasons.append("result rows mix client kinds: "
                       + " and ".join(f"{kind} ({'; '.join(where)})" for kind, where in sorted(kinds.items()))
                       + "; vllm-bench and openai_portable rows are never published together")
    return reasons


def judge_result(label: str, kind: str, fact_status: str | None, entries: list[Entry],
                 always: bool = False, also_kinds: tuple[str, ...] = ()) -> tuple[dict, list[str]]:
    """One result (gate, guard, NIAH): its status from the facts and from the pack's own files.

    A result counts as run when ``always``, when any artifact of ``kind`` (or ``also_kinds``) is in the
    pack, or when the facts give a status. A run result is publishable only when its file is in the
    pack and every status seen (facts and files) is PASS."""
    present = [e for e in entries if e.kind == kind and e.state == "present"]
    related = [e for e in entries if e.kind in also_kinds and e.state == "present"]
    if not (always or present or related or fact_status is not None):
        return {"status": None, "ran": False, "sources": []}, []
    reasons = []
    seen = [("facts", fact_status)] if fact_status is not None else []
    seen += [(e.name, s) for e in present if (s := _status_of(e)) is not None]
    for source, status in seen:
        if fact_status is not None and source != "facts" and status != fact_status:
            reasons.append(f"{label} status is {status} in {source} but {fact_status} in the facts")
    failing = [status for _unused, status in seen if status != "PASS"]
    status = failing[0] if failing else ("PASS" if seen else None)
    if not present:
        reasons.append(f"{label} result is missing from the pack")
    elif status is None:
        reasons.append(f"{label} status is not recorded")
    if status is not None and status != "PASS":
        reasons.append(f"{label} status is {status}, expected PASS")
    return {"status": status, "ran": True, "sources": [s for s, _unused in seen]}, reasons


def _departure(item: object) -> str:
    if isinstance(item, dict) and "key" in item:
        return f"{item['key']} {item.get('actual')} (qualified {item.get('qualified')})"
    return str(item)


def publication_reasons(facts: dict, entries: list[Entry]) -> tuple[list[str], dict]:
    """Every reason the run may not be published, and the results section of the index."""
    reasons: list[str] = []
    pin = facts.get("pin") or {}
    for key, label in (("image_id", "image id"), ("model_revision", "model revision")):
        if not pin.get(key):
            reasons.append(f"{label} is not recorded (facts.pin.{key})")

    manifest, pinned = facts.get("manifest_sha256"), pin.get("runtime_manifest_sha256")
    if not manifest:
        reasons.append("runtime manifest sha256 is not recorded (facts.manifest_sha256)")
    elif pinned and manifest != pinned:
        reasons.append(f"runtime manifest sha256 is {manifest}, pinned {pinned}")

    tree = facts.get("tree") or {}
    commit = tree.get("commit") or "an unrecorded commit"
    if tree.get("dirty") is None:
        reasons.append("wrapper tree state is not recorded (facts.tree.dirty)")
    elif tree["dirty"]:
        how = "allowed by allow_dirty" if tree.get("allow_dirty") else "without allow_dirty"
        reasons.append(f"wrapper tree at {commit} is dirty ({how})")

    profile = facts.get("profile") or {}
    label = profile.get("name") or "(unnamed)"
    if not profile.get("name"):
        reasons.append("profile is not recorded (facts.profile.name)")
    if profile.get("experimental"):
        reasons.append(f"profile {label} is experimental")
    elif profile.get("experimental") is None and profile.get("name"):
        reasons.append(f"profile {label}: whether it is experimental is not recorded")
    departures = profile.get("departures") or []
    if departures:
        reasons.append(f"profile {label} departs from the qualified profile: "
                       + "; ".join(_departure(d) for d in departures))

    gate, why = judge_result("runtime gate", "gate", facts.get("gate_status"), entries, always=True)
    reasons += why
    guard, why = judge_result("serving guard", "guard", facts.get("guard_status"), entries)
    reasons += why
    niah, why = judge_result("NIAH", "niah", facts.get("niah_status"), entries, also_kinds=("niah_row",))
    reasons += why
    systems, why = judge_result("systems lanes", "systems", facts.get("systems_status"), entries)
    reasons += why
    for section, prefix, label_ in ((guard, "guard", "serving guard"), (niah, "niah", "NIAH"),
                                    (systems, "systems", "systems lanes")):
        section["infra_errors"] = facts.get(f"{prefix}_infra_errors")
        section["model_failures"] = facts.get(f"{prefix}_model_failures")
        if section["infra_errors"]:
            reasons.append(f"{label_} counted {section['infra_errors']} infra error(s); publishable rows need 0")
    # rows that were not measured (NOT_IMPLEMENTED): shown, neither failures nor infra errors
    systems["not_implemented"] = facts.get("systems_not_implemented")

    kinds = sorted(set(facts.get("row_kinds") or []))
    implementation = profile.get("cudagraph_implementation")
    if len(kinds) > 1:
        reasons.append(f"result rows mix CUDA-graph implementations: {', '.join(kinds)}")
    elif kinds and implementation and kinds[0] != implementation:
        reasons.append(f"result rows are {kinds[0]}, but profile {label} runs {implementation}")

    clients = client_kind_sources(facts, entries)
    reasons += client_kind_reasons(clients)

    for entry in entries:
        if entry.state == "missing":
            reasons.append(f"required artifact {entry.name} ({entry.kind}) is missing")
        elif entry.state == "not_in_run":
            reasons.append(f"required artifact {entry.name} ({entry.kind}) was not produced by this run "
                           "(a pack holds only its own run's results)")
        elif entry.state == "stale":
            found = entry.source_sha256 or "the file is gone"
            reasons.append(f"artifact {entry.name} ({entry.kind}) was rewritten after this run recorded it "
                           f"(sha256 {entry.recorded_sha256} recorded, {found} found); left out")
    return reasons, {"gate": gate, "guard": guard, "niah": niah, "systems": systems, "row_kinds": kinds,
                     "client_kinds": sorted(clients)}


def check_facts(facts: dict) -> list[Mismatch]:
    problems = []
    for key in ("guard_infra_errors", "guard_model_failures", "niah_infra_errors", "niah_model_failures",
                "systems_infra_errors", "systems_model_failures", "systems_not_implemented"):
        value = facts.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append(_mismatch(f"facts.{key}", repr(value), "a count (an integer >= 0)"))
    for kind in facts.get("row_kinds") or []:
        if kind not in IMPLEMENTATIONS:
            problems.append(_mismatch("facts.row_kinds element", repr(kind), " or ".join(IMPLEMENTATIONS)))
    clients = facts.get("client_kinds")
    if clients is not None and not isinstance(clients, dict):
        problems.append(_mismatch("facts.client_kinds", repr(clients), "a mapping of client kind to sources"))
    for kind, where in (clients if isinstance(clients, dict) else {}).items():
        if kind not in CLIENT_KINDS:
            problems.append(_mismatch("facts.client_kinds key", repr(kind), " or ".join(CLIENT_KINDS)))
        if not isinstance(where, list) or not all(isinstance(s, str) for s in where):
            problems.append(_mismatch(f"facts.client_kinds.{kind}", repr(where), "a list of sources (strings)"))
    return problems


# --------------------------------------------------------------------------------------------
# index and checksums
# --------------------------------------------------------------------------------------------
def build_index(pair: str, run_id: str, playbook: str, created: str, facts: dict, entries: list[Entry],
                reasons: list[str], results: dict) -> dict:
    pin = facts.get("pin") or {}
    profile = facts.get("profile") or {}
    tree = facts.get("tree") or {}
    return {
        "schema_version": SCHEMA_VERSION,
        "pair": pair,
        "run_id": run_id,
        "playbook": playbook,
        "created_utc": created,
        "identity": {key: pin.get(key) for key in ("release", "image_id", "model_id", "model_revision",
                                                   "runtime_manifest_sha256")},
        "manifest_sha256": facts.get("manifest_sha256"),
        "profile": {key: profile.get(key) for key in ("name", "sha256", "experimental", "departures",
                                                      "cudagraph_implementation")},
        # the site's RoCE settings each rank ran with (dspark_fabric_env): cabling, not a departure
        "fabric_env": profile.get("fabric_env"),
        "tree": {key: tree.get(key) for key in ("commit", "dirty", "allow_dirty")},
        "invalid_for_publish": bool(reasons),
        "reasons": list(reasons),
        "results": results,
        "artifacts": [e.as_dict() for e in entries],
        "generated": list(GENERATED),
    }


def _cell(value: object) -> str:
    if value is None:
        return "not recorded"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _code(value: str) -> str:
    return "`" + _cell(value).replace("`", "'") + "`"


def _result_row(label: str, section: dict, counts: bool) -> str:
    status = section["status"] if section["ran"] else "not run"
    if not counts:
        return f"| {label} | {_cell(status)} | - | - |"
    return f"| {label} | {_cell(status)} | {_cell(section.get('infra_errors'))} | {_cell(section.get('model_failures'))} |"


def _fabric_cell(fabric: object) -> str:
    """``head NCCL_IB_GID_INDEX=3; worker NCCL_IB_GID_INDEX=3``, or "not recorded"."""
    if not isinstance(fabric, dict) or not fabric:
        return _cell(None)
    parts = []
    for rank in sorted(fabric):
        env = fabric[rank] if isinstance(fabric[rank], dict) else {}
        parts.append(f"{rank} " + (" ".join(f"{k}={v}" for k, v in sorted(env.items())) or "none"))
    return _cell("; ".join(parts))


def render_markdown(index: dict, index_json: Entry) -> str:
    profile = index["profile"]
    identity = index["identity"]
    invalid = "true" if index["invalid_for_publish"] else "false"
    lines = [
        f"# Evidence pack: pair {_cell(index['pair'])}, run {_cell(index['run_id'])}",
        "",
        f"`invalid_for_publish: {invalid}`",
        "",
        "| Field | Value |",
        "|---|---|",
        f"| pair | {_cell(index['pair'])} |",
        f"| run_id | {_cell(index['run_id'])} |",
        f"| playbook | {_cell(index['playbook'])} |",
        f"| created (UTC) | {_cell(index['created_utc'])} |",
        f"| image id | {_cell(identity['image_id'])} |",
        f"| model revision | {_cell(identity['model_revision'])} |",
        f"| manifest sha256 | {_cell(index['manifest_sha256'])} |",
        f"| profile | {_cell(profile['name'])} (sha256 {_cell(profile['sha256'])}) |",
        f"| site fabric | {_fabric_cell(index.get('fabric_env'))} |",
        f"| wrapper tree | {_cell(index['tree']['commit'])} (dirty: {_cell(index['tree']['dirty'])}) |",
        f"| invalid_for_publish | {invalid} |",
        "",
        "## Reasons not valid for publication",
        "",
    ]
    lines += [f"- {_cell(reason)}" for reason in index["reasons"]] or ["none"]
    results = index["results"]
    lines += [
        "",
        "## Results",
        "",
        "Infra errors and model failures are counted separately; publishable rows need 0 infra errors.",
        "",
        "| Check | Status | Infra errors | Model failures |",
        "|---|---|---|---|",
        _result_row("runtime gate", results["gate"], counts=False),
        _result_row("serving guard", results["guard"], counts=True),
        _result_row("NIAH", results["niah"], counts=True),
        _result_row("systems lanes", results["systems"], counts=True),
        "",
        f"Result row implementations: {', '.join(results['row_kinds']) or 'not recorded'}",
        "",
        f"Result row client kinds: {', '.join(results.get('client_kinds') or []) or 'not recorded'}",
        "",
    ]
    if results["systems"].get("not_implemented") is not None:
        lines += [f"Systems rows NOT_IMPLEMENTED (not measured, no score, not failures): "
                  f"{_cell(results['systems']['not_implemented'])}", ""]
    lines += [
        "## Artifacts",
        "",
        "| File | Kind | State | Bytes | sha256 |",
        "|---|---|---|---|---|",
    ]
    for artifact in index["artifacts"]:
        state = artifact["state"]
        size = artifact["bytes"] if state == "present" else state
        digest = artifact["sha256"] if state == "present" else state
        lines.append(f"| {_code(artifact['name'])} | {artifact['kind']} | {state} | {size} | {digest} |")
    lines += [
        f"| {_code(index_json.name)} | index | present | {index_json.size} | {index_json.sha256} |",
        f"| {_code(INDEX_MD)} | index | present | - | this file; listed in {SUMS} |",
        f"| {_code(SUMS)} | checksums | present | - | sha256 of every other file (`sha256sum -c {SUMS}`) |",
    ]
    return "\n".join(lines) + "\n"


def sha256sums(entries: list[Entry]) -> bytes:
    """``sha256sum -c`` input: ``<hex>  <relative path>`` per file, sorted by path."""
    rows = sorted((e.name, e.sha256) for e in entries if e.data is not None)
    return "".join(f"{digest}  {name}\n" for name, digest in rows).encode("utf-8")


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


# --------------------------------------------------------------------------------------------
# plan
# --------------------------------------------------------------------------------------------
@dataclass
class Plan:
    dest: str
    entries: list[Entry]
    generated: list[Entry]
    reasons: list[str]
    index: dict
    secrets: list[str] = field(default_factory=list, repr=False)
    prefixes: list[Prefix] = field(default_factory=list)
    secret_labels: list[str] = field(default_factory=list)  # the variable each secret came from ("" if none)
    short_secrets: int = 0  # told secret values too short to search for (see MIN_SECRET_LENGTH)

    @property
    def invalid_for_publish(self) -> bool:
        return bool(self.reasons)

    def written(self) -> list[Entry]:
        """Every file, in writing order: artifacts, index.json, index.md, SHA256SUMS last."""
        return [e for e in self.entries if e.state == "present"] + self.generated

    def files(self) -> list[str]:
        return sorted(e.name for e in self.written())


def plan_pack(dest: str, pair: str, run_id: str, playbook: str, artifacts: list[dict], facts: dict | None = None,
              secrets: list[str] | None = None, redact_prefixes: list[dict] | None = None,
              now: datetime | None = None, secret_env: list[str] | None = None) -> Plan:
    """Everything the pack will hold, rendered and scanned in memory; nothing is written.

    ``secrets`` are values that must never appear in the pack; ``secret_env`` are ``NAME=value``
    entries (an engine's extra env) whose values count as secrets when their NAME looks secret."""
    dest = os.path.abspath(dest)
    secrets, labels, short = secret_values(secrets, secret_env)
    prefixes = normalise_prefixes(redact_prefixes)
    facts = facts or {}
    problems = [m for m in (check_safe_name("pair", pair), check_safe_name("run_id", run_id),
                            check_label("playbook", playbook)) if m]
    if not artifacts:
        problems.append(_mismatch("artifacts", "an empty list", "at least one artifact"))
    problems += check_names([a.get("name") for a in artifacts or []])
    problems += check_facts(facts)
    if problems:
        raise IdentityError(problems)
    check_dest(dest)

    entries = sorted((load_artifact(spec, prefixes, secrets) for spec in artifacts), key=lambda e: e.name)
    # by name only: a told secret in the facts is refused below, not hidden
    facts = redact_document(replace_prefixes(facts, prefixes))  # type: ignore[assignment]
    reasons, results = publication_reasons(facts, entries)
    index = build_index(pair, run_id, playbook, utc_now(now), facts, entries, reasons, results)
    index_json = Entry(INDEX_JSON, "index", data=json_bytes(index), document=index, is_json=True)
    index_md = Entry(INDEX_MD, "index", data=render_markdown(index, index_json).encode("utf-8"))
    present = [e for e in entries if e.state == "present"]
    sums = Entry(SUMS, "checksums", data=sha256sums(present + [index_json, index_md]))
    plan = Plan(dest, entries, [index_json, index_md, sums], reasons, index, secrets, prefixes, labels, short)

    leaks = name_leaks([e.name for e in entries], secrets, labels)
    for entry in plan.written():
        leaks += find_leaks(entry.name, entry.data or b"", secrets, prefixes, labels)
    if leaks:
        raise IdentityError(leaks)
    return plan


# --------------------------------------------------------------------------------------------
# write
# --------------------------------------------------------------------------------------------
def _remove_empty(folders: list[str]) -> None:
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except OSError:
            return


def _write_bytes(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), FILE_MODE)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _place(root: str, entry: Entry) -> str:
    parts = entry.name.split("/")
    folder = root
    for part in parts[:-1]:
        folder = os.path.join(folder, part)
        if not os.path.isdir(folder):
            os.mkdir(folder, DIR_MODE)
            os.chmod(folder, DIR_MODE)
    path = os.path.join(folder, parts[-1])
    if entry.is_json:
        write_json_atomic(path, entry.document, mode=FILE_MODE)
    else:
        _write_bytes(path, entry.data or b"")
    return path


def scan_folder(root: str, plan: Plan) -> list[Mismatch]:
    """Re-read the written folder: exactly the planned files, each with its planned sha256, and no
    secret or control-node path in any of them."""
    expected = {e.name: e.sha256 for e in plan.written()}
    problems = []
    found = set()
    for folder, dirs, files in os.walk(root):
        for entry in dirs + files:
            path = os.path.join(folder, entry)
            if os.path.islink(path):
                problems.append(_mismatch(f"pack entry {os.path.relpath(path, root)}", "a symlink", "a plain file"))
        for filename in files:
            path = os.path.join(folder, filename)
            name = os.path.relpath(path, root).replace(os.sep, "/")
            found.add(name)
            if name not in expected:
                problems.append(_mismatch(f"pack file {name}", "present", "absent (not in the plan)"))
                continue
            digest = sha256_file(path)
            if digest != expected[name]:
                problems.append(_mismatch(f"pack file {name} sha256", digest, expected[name]))
            with open(path, "rb") as handle:
                problems += find_leaks(name, handle.read(), plan.secrets, plan.prefixes, plan.secret_labels)
    for name in sorted(set(expected) - found):
        problems.append(_mismatch(f"pack file {name}", "absent", "written"))
    return problems


def write_pack(plan: Plan) -> None:
    """Write ``plan`` into a staging folder beside its destination, verify and scan it from disk, then
    rename it into place. On any fault nothing of the pack is left behind (nor the parent folders
    this call created)."""
    dest = plan.dest
    parent = os.path.dirname(dest)
    created: list[str] = []
    staging = None
    done = False
    try:
        make_parents(parent, created, DIR_MODE)
        staging = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.", suffix=".partial", dir=parent)
        os.chmod(staging, DIR_MODE)
        for entry in plan.written():
            _place(staging, entry)
        problems = scan_folder(staging, plan)
        if problems:
            raise IdentityError(problems)
        check_dest(dest)
        try:
            os.rename(staging, dest)
        except OSError as exc:
            raise IdentityError(_mismatch(f"evidence pack {dest}", f"not writable ({exc.strerror or exc})",
                                          "absent or an empty folder")) from exc
        done = True
        fsync_dir(parent)
    except OSError as exc:
        raise CheckError(RANK, f"cannot write the evidence pack {dest}: {exc}") from exc
    finally:
        if not done:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            _remove_empty(created)
