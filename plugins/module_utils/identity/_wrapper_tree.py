# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prove that the tree a deployment runs from is clean and at a known revision.

Runs on the control node. Two kinds of tree can be proven:

* a git checkout: ``git rev-parse HEAD`` gives the revision and ``git status --porcelain=v1 -z``
  lists what differs from it (untracked files count unless ``ignore_untracked``; gitignored
  files never do). Git runs with ``GIT_OPTIONAL_LOCKS=0`` so the check never rewrites the index,
  even in a checkout other people share.
* an installed collection (what ``ansible-galaxy collection install`` leaves): every file
  ``FILES.json`` lists must exist with its sha256, ``FILES.json`` must match the checksum in
  ``MANIFEST.json``, and files it does not list count as extra. The revision is
  ``<namespace>.<name>:<version>`` from ``MANIFEST.json``.

Anything else is unverifiable. Dirtiness (and unverifiability) fail unless ``allow_dirty``,
which instead records publication blockers; a revision mismatch always fails. All faults are
collected and reported together, each as ``<what> is <actual>, expected <expected>``.
"""
from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import Mismatch, outcome, refused
from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import loads

Run = Callable[[list[str], dict[str, str]], tuple[int, str, str]]
"""Runs an argv list with extra environment variables; returns (rc, stdout, stderr)."""

RANK = "control node"
GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
# Variables that would point git at another repository than the one under `path`
# (git sets some of them while running hooks, so a deployment started from a hook inherits them).
GIT_REDIRECTING_ENV = (
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_PREFIX",
)
MAX_DIRTY_PATHS = 200
MAX_MESSAGE_PATHS = 20
FULL_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


class TreeError(Exception):
    """The tree could not be checked at all (missing path, git unusable); always fails."""


@dataclass(frozen=True)
class TreeMismatch(Mismatch):
    """A :class:`Mismatch` worded for the control node: ``wrapper tree <path>: <item> is ...``."""

    tree: str = ""

    @property
    def message(self) -> str:
        subject = f"wrapper tree {self.tree}" if self.item == "tree" else f"wrapper tree {self.tree}: {self.item}"
        text = f"{subject} is {self.actual}, {self.expected_word} {self.expected}"
        if self.reason:
            text += f" ({self.reason})"
        return text


@dataclass(frozen=True)
class Entry:
    """One path that differs from the recorded tree, with a git-style status code."""

    code: str
    path: str
    orig: str | None = None

    def show(self) -> str:
        if self.orig is not None:
            return f"{self.code} {_printable(self.orig)} -> {_printable(self.path)}"
        return f"{self.code} {_printable(self.path)}"


@dataclass
class Report:
    path: str
    kind: str = "unknown"
    revision: str | None = None
    describe: str | None = None
    entries: list[Entry] = field(default_factory=list)
    allowed_dirty: bool = False
    blockers: list[str] = field(default_factory=list)
    mismatches: list[TreeMismatch] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unverifiable_reason: str | None = None

    @property
    def dirty(self) -> bool:
        return bool(self.entries) or self.kind == "unknown"

    def tree(self) -> dict:
        data = {
            "path": self.path,
            "kind": self.kind,
            "revision": self.revision,
            "dirty": self.dirty,
            "dirty_paths": [e.show() for e in self.entries[:MAX_DIRTY_PATHS]],
            "dirty_count": len(self.entries),
            "allowed_dirty": self.allowed_dirty,
            "publishable": not self.blockers and not self.mismatches,
            "publication_blockers": list(self.blockers),
        }
        if self.kind == "git":
            data["describe"] = self.describe
        return data


def _printable(path: str) -> str:
    """Paths git hands back may hold undecodable bytes (surrogates); keep results serialisable."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def clean_git_environment(environ: MutableMapping[str, str]) -> list[str]:
    """Drop variables that would redirect git to another repository; returns the names dropped."""
    dropped = [name for name in GIT_REDIRECTING_ENV if name in environ]
    for name in dropped:
        del environ[name]
    return dropped


# --- git ---------------------------------------------------------------------------------------

def parse_porcelain_z(output: str) -> list[Entry]:
    """Parse ``git status --porcelain=v1 -z``: ``XY path NUL``, and for renames and copies
    ``XY new NUL old NUL``."""
    entries: list[Entry] = []
    fields = output.split("\0")
    i = 0
    while i < len(fields):
        record = fields[i]
        i += 1
        if not record:
            continue
        if len(record) < 4 or record[2] != " ":
            raise ValueError(f"unexpected git status record {record!r}")
        xy, path = record[:2], record[3:]
        orig = None
        if "R" in xy or "C" in xy:
            if i >= len(fields) or not fields[i]:
                raise ValueError(f"git status rename record {record!r} lacks its source path")
            orig = fields[i]
            i += 1
        entries.append(Entry(code=xy.strip() or xy, path=path, orig=orig))
    return entries


def _git(run: Run, git: str, path: str, *args: str) -> tuple[int, str, str]:
    return run([git, "-C", path, *args], dict(GIT_ENV))


def _git_ok(run: Run, git: str, path: str, what: str, *args: str) -> str:
    rc, out, err = _git(run, git, path, *args)
    if rc != 0:
        raise TreeError(f"wrapper tree {path}: {what} failed (rc={rc}): {_first_line(err) or 'no message'}")
    return out


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def git_toplevel(run: Run, git: str, path: str) -> tuple[str | None, str]:
    """The work tree's top level holding ``path``, or None and git's complaint."""
    rc, out, err = _git(run, git, path, "rev-parse", "--show-toplevel")
    if rc != 0:
        return None, _first_line(err)
    return out.strip() or None, ""


def resolve_ref(run: Run, git: str, path: str, ref: str) -> str | None:
    """A full commit sha for ``ref`` (tag, branch, sha), or None when it names no commit."""
    if ref.startswith("-"):
        return None
    rc, out, _err = _git(run, git, path, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    sha = out.strip().lower()
    return sha if rc == 0 and FULL_SHA.match(sha) else None


def inspect_git(report: Report, run: Run, git: str, ignore_untracked: bool) -> None:
    path = report.path
    report.kind = "git"
    rc, out, err = _git(run, git, path, "rev-parse", "--verify", "HEAD^{commit}")
    if rc != 0:
        raise TreeError(f"wrapper tree {path}: HEAD is absent, expected a commit ({_first_line(err) or 'no commit yet'})")
    report.revision = out.strip().lower()
    status = _git_ok(run, git, path, "git status", "status", "--porcelain=v1", "-z", "--untracked-files=all")
    try:
        entries = parse_porcelain_z(status)
    except ValueError as exc:
        raise TreeError(f"wrapper tree {path}: {exc}") from exc
    if ignore_untracked:
        entries = [e for e in entries if e.code != "??"]
    report.entries = entries
    rc, out, _err = _git(run, git, path, "describe", "--always", "--tags")
    if rc == 0 and out.strip():
        # `describe --dirty` would refresh (write) the index; the suffix is added from our own status.
        report.describe = out.strip() + ("-dirty" if entries else "")


def git_expected(run: Run, git: str, path: str, expected: str) -> tuple[str | None, str]:
    """(sha the tree must be at or None when the ref names no commit, how to show the expectation)."""
    wanted = expected.strip().lower()
    if FULL_SHA.match(wanted):
        return wanted, wanted
    sha = resolve_ref(run, git, path, expected)
    if sha is None:
        return None, f"{expected} (which names no commit in this repository)"
    return sha, f"{expected} ({sha})"


# --- installed collection ----------------------------------------------------------------------

def _load_json(path: str) -> object:
    with open(path, "rb") as handle:
        return loads(handle.read())


def _safe_name(name: object) -> str | None:
    if not isinstance(name, str) or not name or "\0" in name or "\\" in name:
        return None
    if name == ".":
        return name
    norm = posixpath.normpath(name)
    if norm != name or norm.startswith("/") or norm == ".." or norm.startswith("../"):
        return None
    return norm


def collection_revision(manifest: object) -> str | None:
    info = manifest.get("collection_info") if isinstance(manifest, dict) else None
    if not isinstance(info, dict):
        return None
    parts = [info.get(key) for key in ("namespace", "name", "version")]
    if not all(isinstance(p, str) and p for p in parts):
        return None
    return f"{parts[0]}.{parts[1]}:{parts[2]}"


def _skipped_extra(rel: str) -> bool:
    return rel.endswith(".pyc") or "__pycache__" in rel.split("/")


def _listed(root: str, files_json: dict) -> dict[str, dict] | None:
    """FILES.json's records by name (the root "." left out), or None when it has no file list."""
    records = files_json.get("files")
    if not isinstance(records, list):
        return None
    listed: dict[str, dict] = {}
    for record in records:
        name = _safe_name(record.get("name")) if isinstance(record, dict) else None
        if name is None:
            raise TreeError(f"wrapper tree {root}: FILES.json entry {record!r} is not a relative path inside the "
                            "collection, expected one")
        if name != ".":
            listed[name] = record
    return listed


def _check_listed(root: str, listed: dict[str, dict]) -> list[Entry]:
    entries: list[Entry] = []
    for name, record in sorted(listed.items()):
        full = os.path.join(root, *name.split("/"))
        ftype = record.get("ftype")
        try:
            mode = os.stat(full).st_mode
        except FileNotFoundError:
            entries.append(Entry("D", name))
            continue
        except OSError:
            entries.append(Entry("M", name))
            continue
        if ftype == "dir":
            if not stat.S_ISDIR(mode):
                entries.append(Entry("T", name))
            continue
        if ftype != "file" or not stat.S_ISREG(mode):
            entries.append(Entry("T", name))
            continue
        if record.get("chksum_type") != "sha256" or not isinstance(record.get("chksum_sha256"), str):
            entries.append(Entry("M", name))
            continue
        try:
            if sha256_file(full) != record["chksum_sha256"].lower():
                entries.append(Entry("M", name))
        except OSError:
            entries.append(Entry("M", name))
    return entries


def _extras(root: str, listed: dict[str, dict]) -> list[Entry]:
    entries: list[Entry] = []
    for current, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(current, root).replace(os.sep, "/")
        prefix = "" if rel_dir == "." else rel_dir + "/"
        keep = []
        for name in sorted(dirs):
            rel = prefix + name
            if name == "__pycache__":
                continue
            if os.path.islink(os.path.join(current, name)):
                # not descended into; a link the collection does not list is extra
                if rel not in listed:
                    entries.append(Entry("??", rel))
                continue
            keep.append(name)
        dirs[:] = keep
        for name in sorted(files):
            rel = prefix + name
            if rel in ("MANIFEST.json", "FILES.json") or rel in listed or _skipped_extra(rel):
                continue
            entries.append(Entry("??", rel))
    return entries


def _files_json_matches(root: str, manifest: object) -> bool:
    info = manifest.get("file_manifest_file") if isinstance(manifest, dict) else None
    pinned = info.get("chksum_sha256") if isinstance(info, dict) else None
    if not isinstance(pinned, str):
        return False
    try:
        return sha256_file(os.path.join(root, "FILES.json")) == pinned.lower()
    except OSError:
        return False


def inspect_installed(report: Report, ignore_untracked: bool) -> None:
    root = report.path
    report.kind = "installed_collection"
    try:
        manifest = _load_json(os.path.join(root, "MANIFEST.json"))
    except (OSError, ValueError):
        manifest = None
    try:
        files_json = _load_json(os.path.join(root, "FILES.json"))
    except (OSError, ValueError):
        files_json = None
    entries: list[Entry] = []
    report.revision = collection_revision(manifest)
    if report.revision is None:
        entries.append(Entry("M", "MANIFEST.json"))
    listed = _listed(root, files_json) if isinstance(files_json, dict) else None
    if listed is None or not _files_json_matches(root, manifest):
        entries.append(Entry("M", "FILES.json"))
    if listed is not None:
        entries.extend(_check_listed(root, listed))
        if not ignore_untracked:
            entries.extend(_extras(root, listed))
    report.entries = entries


# --- the check ---------------------------------------------------------------------------------

def _dirty_text(entries: list[Entry]) -> str:
    shown = [e.show() for e in entries[:MAX_MESSAGE_PATHS]]
    if len(entries) > MAX_MESSAGE_PATHS:
        shown.append(f"... {len(entries) - MAX_MESSAGE_PATHS} more")
    noun = "path" if len(entries) == 1 else "paths"
    return f"dirty ({len(entries)} {noun}: {', '.join(shown)})"


def _fault(report: Report, item: str, actual: object, expected: object, reason: str = "") -> None:
    report.mismatches.append(TreeMismatch(rank=RANK, item=item, expected=expected, actual=actual, reason=reason,
                                          expected_word="expected", tree=report.path))


def _classify(path: str, run: Run, git: str | None) -> tuple[str, str]:
    """('git' | 'installed_collection' | 'unknown', why an unknown tree is unknown)."""
    has_git_marker = os.path.lexists(os.path.join(path, ".git"))
    has_collection = all(os.path.isfile(os.path.join(path, f)) for f in ("MANIFEST.json", "FILES.json"))
    if git:
        toplevel, complaint = git_toplevel(run, git, path)
        if toplevel is not None and (has_git_marker or not has_collection):
            return "git", ""
        if toplevel is None and has_git_marker:
            raise TreeError(f"wrapper tree {path}: git cannot read the checkout: {complaint or 'no message'}")
    elif has_git_marker:
        raise TreeError(f"wrapper tree {path}: git is absent on the control node, expected it to read the checkout")
    else:
        complaint = ""
    if has_collection:
        return "installed_collection", ""
    return "unknown", complaint


def check_tree(path: str, run: Run, git: str | None = "git", expected_revision: str | None = None,
               allow_dirty: bool = False, ignore_untracked: bool = False) -> Report:
    """Inspect the tree at ``path``; the caller fails when ``report.mismatches`` is not empty.

    Raises :class:`TreeError` when the tree cannot be inspected at all.
    """
    if not os.path.isdir(path):
        actual = "absent" if not os.path.lexists(path) else "not a directory"
        raise TreeError(f"wrapper tree {path} is {actual}, expected a directory")
    report = Report(path=path, allowed_dirty=bool(allow_dirty))
    kind, complaint = _classify(path, run, git)
    if kind == "git":
        inspect_git(report, run, git, ignore_untracked)
    elif kind == "installed_collection":
        inspect_installed(report, ignore_untracked)
    else:
        report.unverifiable_reason = "not a git checkout nor an installed collection"
        if complaint and "not a git repository" not in complaint:
            # e.g. git refusing a checkout another user owns (safe.directory)
            report.unverifiable_reason += f"; git says: {complaint}"

    if report.kind == "unknown":
        if allow_dirty:
            report.blockers.append(f"tree unverifiable: {report.unverifiable_reason}, allowed by allow_dirty")
        else:
            _fault(report, "tree", "unverifiable", "a git checkout or an installed collection",
                   report.unverifiable_reason)
    elif report.entries:
        if allow_dirty:
            count = len(report.entries)
            report.blockers.append(f"tree dirty: {count} path{'s' if count != 1 else ''}, allowed by allow_dirty")
        else:
            _fault(report, "tree", _dirty_text(report.entries), "clean")

    if expected_revision:
        _check_revision(report, run, git, expected_revision)

    if report.blockers and not report.mismatches:
        report.warnings.append(f"wrapper tree {path}: this run is not valid for publication ("
                               + "; ".join(report.blockers) + ")")
    return report


def _check_revision(report: Report, run: Run, git: str | None, expected: str) -> None:
    if report.kind == "git":
        sha, shown = git_expected(run, git, report.path, expected)
        if sha is None or sha != report.revision:
            _fault(report, "revision", report.revision, shown)
    elif report.revision != expected.strip():
        _fault(report, "revision", report.revision or "absent", expected.strip())


# The options of gb10.dspark.wrapper_tree: the module and its action (which inspects a checkout on the control
# node in the controller's worker process) validate them alike.
ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "expected_revision": {"type": "str"},
    "allow_dirty": {"type": "bool", "default": False},
    "ignore_untracked": {"type": "bool", "default": False},
}


def check(params: dict, run: Run, git: str | None) -> dict:
    """The task result of gb10.dspark.wrapper_tree for validated ``params`` (module and action alike): ``run(argv,
    env) -> (rc, stdout, stderr)`` runs git (``git``, its path, None when it is not installed) with the variables
    of ``env`` added to an environment that :func:`clean_git_environment` has cleaned."""
    try:
        report = check_tree(params["path"], run, git=git, expected_revision=params["expected_revision"],
                            allow_dirty=params["allow_dirty"], ignore_untracked=params["ignore_untracked"])
    except TreeError as exc:
        return refused(exc)
    return outcome({"tree": report.tree()}, report.mismatches, warnings=report.warnings)
