# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The evidence pack made: :func:`plan_pack` checks and reads everything first (names, artifacts, the run's
files, leaks, the publication verdict), then :func:`write_pack` writes the pack once, staged and renamed into place.

Split from :mod:`._evidence` (inputs, redaction, artifacts, the leak scan), with :mod:`._evidence_run` (the
run's own files and facts) and :mod:`._evidence_index` (publication and the index)."""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime

from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file
from ansible_collections.gb10.dspark.plugins.module_utils.common._clock import utc_now
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import (
    fsync_dir,
    make_parents,
    write_json_atomic,
)
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import (
    CheckError,
    IdentityError,
    Mismatch,
    refused,
)
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import MIN_SECRET_LENGTH, redact_document
from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence import (
    DIR_MODE,
    Entry,
    FILE_MODE,
    IMPLEMENTATIONS,
    KINDS,
    INDEX_JSON,
    INDEX_MD,
    Prefix,
    RANK,
    SUMS,
    _mismatch,
    check_dest,
    check_label,
    check_names,
    check_safe_name,
    find_leaks,
    json_bytes,
    load_artifact,
    name_leaks,
    normalise_prefixes,
    replace_prefixes,
    secret_values,
)
from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence_run import from_run, merge_facts
from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence_index import (
    build_index,
    check_facts,
    publication_reasons,
    render_markdown,
    sha256sums,
)


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


# The options of gb10.dspark.evidence_pack: the module and its action (which packs on the control node in the
# controller's worker process) validate them alike.
ARGUMENT_SPEC = {
    "dest": {"type": "path", "required": True},
    "pair": {"type": "str", "required": True},
    "run_id": {"type": "str", "required": True},
    "playbook": {"type": "str", "required": True},
    "artifacts": {
        "type": "list", "elements": "dict", "required": True,
        "options": {
            "name": {"type": "str", "required": True},
            "src": {"type": "path"},
            "content": {"type": "raw"},
            "kind": {"type": "str", "default": "other", "choices": list(KINDS)},
            "required": {"type": "bool", "default": False},
        },
        "mutually_exclusive": [["src", "content"]],
        "required_one_of": [["src", "content"]],
    },
    "facts": {
        "type": "dict", "default": {},
        "options": {
            "pin": {"type": "dict"},
            "manifest_sha256": {"type": "str"},
            "profile": {"type": "dict", "options": {
                "name": {"type": "str"},
                "sha256": {"type": "str"},
                "experimental": {"type": "bool"},
                "departures": {"type": "list", "elements": "raw"},
                "cudagraph_implementation": {"type": "str", "choices": list(IMPLEMENTATIONS)},
                "fabric_env": {"type": "dict"},
            }},
            "tree": {"type": "dict", "options": {
                "dirty": {"type": "bool"},
                "allow_dirty": {"type": "bool"},
                "commit": {"type": "str"},
            }},
            "gate_status": {"type": "str"},
            "guard_status": {"type": "str"},
            "guard_infra_errors": {"type": "int"},
            "guard_model_failures": {"type": "int"},
            "niah_status": {"type": "str"},
            "niah_infra_errors": {"type": "int"},
            "niah_model_failures": {"type": "int"},
            "systems_status": {"type": "str"},
            "systems_infra_errors": {"type": "int"},
            "systems_model_failures": {"type": "int"},
            "systems_not_implemented": {"type": "int"},
            "row_kinds": {"type": "list", "elements": "str", "choices": list(IMPLEMENTATIONS)},
            "client_kinds": {"type": "dict"},
        },
    },
    "run_files": {"type": "list", "elements": "dict"},
    "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
    "secret_env": {"type": "list", "elements": "str", "default": [], "no_log": True},
    "redact_prefixes": {
        "type": "list", "elements": "dict", "default": [],
        "options": {
            "prefix": {"type": "path", "required": True},
            "placeholder": {"type": "str", "required": True},
        },
    },
}


def pack(params: dict, check_mode: bool = False, diff: bool = False) -> dict:
    """The task result of gb10.dspark.evidence_pack for validated ``params`` (module and action alike): the pack
    planned, then written unless ``check_mode``; its files in ``diff`` when asked; warnings for short secrets and
    for a pack that is not valid for publication."""
    try:
        artifacts, facts = list(params["artifacts"]), params["facts"]
        if params["run_files"] is not None:
            found, derived = from_run(params["run_files"])
            artifacts += found
            facts = merge_facts(derived, facts)
        plan = plan_pack(params["dest"], params["pair"], params["run_id"], params["playbook"], artifacts, facts=facts,
                         secrets=params["secrets"], redact_prefixes=params["redact_prefixes"],
                         secret_env=params["secret_env"])
        if not check_mode:
            write_pack(plan)
    except (IdentityError, CheckError) as exc:
        return refused(exc)
    files = plan.files()
    result = {
        "changed": True,  # every run writes a new pack (in check mode: would write)
        "dest": plan.dest,
        "invalid_for_publish": plan.invalid_for_publish,
        "reasons": plan.reasons,
        "artifacts": [e.as_dict() for e in plan.entries],
        "files": files,
        "index": plan.index,
    }
    if diff:
        result["diff"] = {"before": {}, "after": {"path": plan.dest, "files": files}}
    warnings = []
    if plan.short_secrets:
        warnings.append(f"{plan.short_secrets} secret value(s) shorter than {MIN_SECRET_LENGTH} characters were not "
                        "searched for in the pack (their variables are still redacted by name)")
    if plan.invalid_for_publish:
        warnings.append(f"evidence pack {plan.dest} is not valid for publication: " + "; ".join(plan.reasons))
    if warnings:
        result["warnings"] = warnings
    return result
