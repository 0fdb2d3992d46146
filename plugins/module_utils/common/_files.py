# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files the collection writes and reads: one atomic JSON writer for every report, row and progress
file, the one directory fsync, and the one bounded read of a small file."""
from __future__ import annotations

import json
import math
import os
import tempfile


def check_finite(value: object, path: str = "$") -> None:
    """Refuse anything JSON cannot hold exactly: non-finite floats, non-string keys, other types."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path} is not a finite number ({value!r})")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path} has a non-string key {key!r}")
            check_finite(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_finite(item, f"{path}[{index}]")
    elif value is not None and not isinstance(value, (str, int, bool)):
        raise ValueError(f"{path} is a {type(value).__name__}, not a JSON value")


def make_parents(path: str, created: list[str] | None = None, mode: int = 0o755) -> None:
    """Create ``path`` and its missing parents, each with ``mode`` whatever the umask. Each folder
    created is appended to ``created`` (outermost first), so a caller can undo them even when this
    fails half way; a folder another process creates meanwhile is left to that process.

    The mode is set on the folder just made, through a descriptor opened without following a
    symlink: a folder swapped for a symlink after ``mkdir`` fails the call (OSError) instead of the
    symlink's target being chmod-ed."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:
            continue
        if created is not None:
            created.append(folder)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def write_json_atomic(path: str, document: object, mode: int = 0o644, make_dirs: bool = False) -> None:
    """Write ``document`` as pretty JSON (sorted keys, indent 2) with :func:`write_text_atomic`.
    Non-finite numbers and what JSON cannot hold are refused before anything is written."""
    check_finite(document)
    write_text_atomic(path, json.dumps(document, sort_keys=True, indent=2, allow_nan=False) + "\n", mode, make_dirs)


def write_text_atomic(path: str, text: str, mode: int = 0o644, make_dirs: bool = False) -> None:
    """Write ``text`` (UTF-8) with :func:`write_bytes_atomic`; bytes are refused (TypeError)."""
    if not isinstance(text, str):
        raise TypeError(f"text expected, got {type(text).__name__}")
    write_bytes_atomic(path, text.encode("utf-8"), mode, make_dirs)


def write_bytes_atomic(path: str, data: bytes, mode: int = 0o644, make_dirs: bool = False,
                       owner: tuple[int, int] | None = None) -> None:
    """Write ``data`` so that ``path`` is either the old file or the complete new one: a temp file in
    the same directory (given ``owner``, uid and gid, before a byte is written), fsync, rename, directory
    fsync. With ``make_dirs`` a missing directory is created."""
    directory = os.path.dirname(os.path.abspath(path))
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            if owner is not None:
                os.fchown(handle.fileno(), *owner)
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)


def fsync_dir(path: str) -> None:
    """Flush the directory ``path`` itself, so that a file created, renamed or removed in it survives
    a crash."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_limited(path: str, limit: int) -> bytes:
    """The bytes of the file at ``path``, reading at most ``limit`` + 1 of them: ``ValueError``
    ("larger than N bytes") when it holds more than ``limit``, ``OSError`` when it cannot be read."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return data
