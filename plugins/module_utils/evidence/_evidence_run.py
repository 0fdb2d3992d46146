# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run's own results: the files the producing roles recorded (``dspark_evidence_run_files``, by
``gb10.dspark.evidence_record``), each taken only while it holds the bytes the run recorded, and the facts those
files state (:func:`from_run`).

Split from :mod:`._evidence`; :mod:`._evidence_pack` reads the run through it."""
from __future__ import annotations

import hashlib
import json
import os
import re

from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError, Mismatch, failure
from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence import (
    IMPLEMENTATIONS,
    KINDS,
    RANK,
    _mismatch,
    name_problems,
)


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


def write_run_contents(files: list) -> list:
    """Write each entry's ``content`` (a JSON document the role made) to its ``src`` on the control node,
    atomically and with the folder made, and return the entries without it, ready for
    :func:`record_run_files`: one step writes a result and records it. Entries without ``content`` name
    files written before, and pass unchanged. A bad entry (name, kind, a source that is not an absolute
    path) is refused before anything is written."""
    specs, writes = [], []
    for item in files:
        if not isinstance(item, dict) or "content" not in item:
            specs.append(item)
            continue
        spec = {k: v for k, v in item.items() if k != "content"}
        problems = check_run_file(spec, recorded=False)
        if problems:
            raise IdentityError(problems)
        specs.append(spec)
        writes.append((spec, item["content"]))
    for spec, content in writes:
        try:
            write_json_atomic(spec["src"], content, make_dirs=True)
        except (OSError, ValueError) as exc:
            raise CheckError(RANK, f"run file {spec.get('name')}: cannot write {spec['src']}: {exc}") from exc
    return specs


RUN_FILES_FACT = "dspark_evidence_run_files"  # the host fact that holds the run's list


def record_result(existing: object, files: list) -> dict:
    """What an action returns for recording ``files`` (after :func:`write_run_contents`) into the run's list
    ``existing``: the new list as the ``dspark_evidence_run_files`` fact with what was recorded and missing,
    or ``failed`` with the reason (every bad entry named)."""
    try:
        run_files, recorded, missing = record_run_files(existing, write_run_contents(files))
    except IdentityError as exc:
        return {"failed": True, **failure(exc.mismatches)}
    except CheckError as exc:
        return {"failed": True, "msg": str(exc)}
    return {"recorded": recorded, "missing": missing, "mismatches": [], "ansible_facts": {RUN_FILES_FACT: run_files}}


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
