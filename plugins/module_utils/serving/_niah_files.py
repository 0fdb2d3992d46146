# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NIAH run's output directory: one ``depth-<n>.json`` per finished depth (read back to resume a run),
``niah.json`` and ``progress.json``, and the run lock that keeps two runs out of one directory.

Split from :mod:`._niah` (the ladder and the run), which keeps its rows through it."""
from __future__ import annotations

import fcntl
import json
import os
import re

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError


SUMMARY_FILE = "niah.json"
PROGRESS_FILE = "progress.json"
LOCK_FILE = ".lock"
_ROW_FILE = re.compile(r"depth-(\d+)\.json")


# ---- the output directory --------------------------------------------------------------------
def row_path(output_dir: str, depth: int) -> str:
    return os.path.join(output_dir, f"depth-{depth}.json")


def _load(path: str, rank: str) -> object:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise CheckError(rank, f"cannot read {path}: {exc}") from None


def _load_optional(path: str, rank: str) -> object:
    return _load(path, rank) if os.path.exists(path) else None


def row_files(output_dir: str) -> dict[int, str]:
    """depth -> path of every ``depth-<n>.json`` in the directory."""
    if not os.path.isdir(output_dir):
        return {}
    found = {}
    for name in os.listdir(output_dir):
        match = _ROW_FILE.fullmatch(name)
        if match:
            found[int(match.group(1))] = os.path.join(output_dir, name)
    return dict(sorted(found.items()))


def existing_rows(output_dir: str, run_key: str, rank: str) -> dict[int, dict]:
    """The rows already in the directory; CheckError when it holds another run."""
    summary = _load_optional(os.path.join(output_dir, SUMMARY_FILE), rank)
    documents = [summary] if summary is not None else []
    rows = {depth: _load(path, rank) for depth, path in row_files(output_dir).items()}
    for doc in [*documents, *rows.values()]:
        other = doc.get("run_key") if isinstance(doc, dict) else None
        if other != run_key:
            raise CheckError(rank, f"{output_dir} holds the rows of run {other if other is not None else 'unknown'}, "
                                   f"this run is {run_key}")
    return rows


def lock_held(output_dir: str) -> bool:
    """Whether another open file holds the run lock (probed with a shared, non-blocking lock)."""
    path = os.path.join(output_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's lock
    return False


class RunLock:
    """``<output_dir>/.lock`` held with an exclusive ``flock`` for the whole run."""

    def __init__(self, output_dir: str, rank: str):
        self.output_dir, self.rank = output_dir, rank
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        fd = os.open(os.path.join(self.output_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CheckError(self.rank, f"a NIAH run is already in progress in {self.output_dir}") from None
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def make_output_dir(path: str) -> None:
    if not os.path.isdir(path):
        os.makedirs(path, exist_ok=True)
        os.chmod(path, 0o750)
