# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's own folders and small files on a rank, in one call (``gb10.dspark.rank_files``).

The profile role keeps the profile folder, the engine's environment file and the compilation config; the engine
role keeps the runtime manifest and the cache folders; the evidence role reads the rendered profiles back
(:func:`read_files`). Each was a task of its own (a folder, a copy: two or three
module runs per file on every converged re-run); here one module run reads them all and changes only what differs.

Every path is absolute, owned by the given uid and gid (root), and never a symbolic link: a link where a folder or
file belongs is refused, never followed (the writer runs as root). A file is written to a temporary file in its
folder, flushed and renamed over the old one, so a reader sees the old or the new content, never half. A secret
file's content is never in the diff or a message.
"""
from __future__ import annotations

import base64
import fnmatch
import os
import stat
from dataclasses import dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_bytes_atomic

SECRET_DIFF = "(content not shown: the file holds secret-named values)\n"


class RankFilesError(Exception):
    """A folder or file cannot be made what the caller asked (the message names the path and why)."""


@dataclass
class Outcome:
    changed: bool = False
    changes: list[str] = field(default_factory=list)
    diff: list[dict] = field(default_factory=list)


def _mode(value: object, path: str) -> int:
    try:
        mode = int(str(value), 8)
    except ValueError:
        raise RankFilesError(f"{path}: mode {value!r} is not an octal mode like '0644'") from None
    if mode & ~0o7777:
        raise RankFilesError(f"{path}: mode {value!r} is not an octal mode like '0644'")
    return mode


def _lstat(path: str) -> os.stat_result | None:
    if not os.path.isabs(path):
        raise RankFilesError(f"{path}: expected an absolute path")
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _kind(st: os.stat_result, expected: str) -> str:
    return "a symbolic link" if stat.S_ISLNK(st.st_mode) else f"not {expected}"


def _attrs(st: os.stat_result, mode: int, uid: int, gid: int) -> list[str]:
    out = []
    if stat.S_IMODE(st.st_mode) != mode:
        out.append(f"mode {stat.S_IMODE(st.st_mode):04o} -> {mode:04o}")
    if (st.st_uid, st.st_gid) != (uid, gid):
        out.append(f"owner {st.st_uid}:{st.st_gid} -> {uid}:{gid}")
    return out


def _directory(spec: dict, uid: int, gid: int, check_mode: bool, out: Outcome) -> None:
    path, mode = spec["path"], _mode(spec.get("mode", "0755"), spec["path"])
    st = _lstat(path)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise RankFilesError(f"{path}: is {_kind(st, 'a folder')}, expected a folder")
    todo = ["create"] if st is None else _attrs(st, mode, uid, gid)
    if not todo:
        return
    out.changed = True
    out.changes.append(f"folder {path}: {', '.join(todo)}")
    out.diff.append({"before_header": path, "after_header": path,
                     "before": {"state": "absent"} if st is None else {"state": "directory", "mode": f"{stat.S_IMODE(st.st_mode):04o}"},
                     "after": {"state": "directory", "mode": f"{mode:04o}"}})
    if check_mode:
        return
    if st is None:
        os.makedirs(path, mode=mode, exist_ok=True)
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, mode)


def _read(path: str, st: os.stat_result) -> bytes:
    if not stat.S_ISREG(st.st_mode):
        raise RankFilesError(f"{path}: is {_kind(st, 'a regular file')}, expected a file")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _text(data: bytes | None) -> str:
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return f"({len(data)} bytes, not UTF-8)\n"


def _file(spec: dict, uid: int, gid: int, check_mode: bool, out: Outcome) -> None:
    """One file, checked by :func:`ensure` already. In check mode its folder may not exist yet (it is
    listed, and would be made first): the file is then absent, and would be created."""
    path, mode = spec["path"], _mode(spec.get("mode", "0644"), spec["path"])
    data, secret = spec["content"].encode("utf-8"), bool(spec.get("secret", False))
    st = _lstat(path)
    old = None if st is None else _read(path, st)
    todo = ["create"] if st is None else (["content"] if old != data else []) + _attrs(st, mode, uid, gid)
    if not todo:
        return
    out.changed = True
    out.changes.append(f"file {path}: {', '.join(todo)}")
    out.diff.append({"before_header": path, "after_header": path,
                     "before": SECRET_DIFF if secret and old is not None else _text(old),
                     "after": SECRET_DIFF if secret else _text(data)})
    if check_mode:
        return
    if st is None or old != data:
        write_bytes_atomic(path, data, mode, owner=(uid, gid))
    else:
        os.chown(path, uid, gid, follow_symlinks=False)
        os.chmod(path, mode)


def _check(spec: object) -> None:
    if not isinstance(spec, dict) or not isinstance(spec.get("path"), str):
        raise RankFilesError(f"{spec!r}: each entry needs a path")
    _lstat(spec["path"])
    _mode(spec.get("mode", "0644"), spec["path"])


def ensure(directories: list[dict], files: list[dict], check_mode: bool, uid: int = 0, gid: int = 0) -> Outcome:
    """Make each folder, then each file, what it should be; in check mode, say what would change.
    Every entry is checked before anything is written: a bad one changes nothing."""
    for spec in directories:
        _check(spec)
    listed = {spec["path"] for spec in directories}
    for spec in files:
        _check(spec)
        path, content = spec["path"], spec.get("content")
        if not isinstance(content, str):
            raise RankFilesError(f"{path}: content must be text, got {type(content).__name__}")
        parent = os.path.dirname(path)
        pst = _lstat(parent)
        if parent not in listed and (pst is None or not stat.S_ISDIR(pst.st_mode)):
            raise RankFilesError(f"{path}: its folder {parent} is {'absent' if pst is None else 'not a folder'}, "
                                 "expected a folder (list it in directories)")
    out = Outcome()
    for spec in directories:
        _directory(spec, uid, gid, check_mode, out)
    for spec in files:
        _file(spec, uid, gid, check_mode, out)
    return out


MAX_READ_BYTES = 1 << 20  # one rendered profile file; a bigger file is not the collection's and is refused


def read_files(folders: list[dict]) -> list[dict]:
    """The regular files directly in each folder whose names match one of its ``patterns``, sorted by path,
    each as ``{path, content}`` with the content base64-encoded (as ``slurp`` returns it). A folder that is
    absent gives nothing; links and subfolders are not read."""
    out = []
    for spec in folders:
        folder, patterns = spec["path"], list(spec.get("patterns") or ["*"])
        st = _lstat(folder)
        if st is None:
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise RankFilesError(f"{folder}: is {_kind(st, 'a folder')}, expected a folder")
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            fst = os.lstat(path)
            if not stat.S_ISREG(fst.st_mode) or not any(fnmatch.fnmatch(name, p) for p in patterns):
                continue
            if fst.st_size > MAX_READ_BYTES:
                raise RankFilesError(f"{path}: is {fst.st_size} bytes, expected at most {MAX_READ_BYTES}")
            out.append({"path": path, "content": base64.b64encode(_read(path, fst)).decode("ascii")})
    return out
