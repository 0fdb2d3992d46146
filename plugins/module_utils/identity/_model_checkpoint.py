# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify a DeepSeek-V4-Flash checkpoint directory on a rank against the pin.

What the original wrapper's ``verify_model_checkpoint.py`` checked, in the same order, but
collecting every difference instead of stopping at the first:

1. the directory is present, is a directory and is readable;
2. the revision marker (written by the operator after the download) holds the pinned revision;
3. ``config.json`` is strict JSON and holds every pinned key with an equal value;
4. the safetensors index is strict JSON and its ``weight_map`` names exactly the pinned shards
   ``model-00001-of-000NN.safetensors`` ... ``model-000NN-of-000NN.safetensors``;
5. every pinned shard file is present, a regular file and non-empty (``stat()`` only: the default
   mode reads nothing from the shards, so it stays fast on a 160 GB checkpoint);
6. the index's ``metadata.total_size`` equals the pin, when one is given;
7. in deep mode only: every shard's sha256 (1 MiB reads, bounded memory), compared with the pinned
   hashes when given, with progress written atomically to a JSON file for an async caller.
"""
from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils.common._files import read_limited, write_json_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import json_equal, json_kind, loads

REVISION_MARKER = ".r0b0tlab-model-revision"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
SHARD_COUNT = 48
PROGRESS_INTERVAL = 2.0  # seconds between progress writes within one shard
MARKER_LIMIT = 4096  # a marker holds one revision; anything longer is not a marker
JSON_LIMIT = 64 << 20  # config.json is a few KB, the index a few MB

_REVISION = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PRESENT = "present and non-empty"


@dataclass(frozen=True)
class Expected:
    """What the pin says the checkpoint must be."""

    revision: str
    revision_marker: str = REVISION_MARKER
    config: dict = field(default_factory=dict)
    shard_count: int = SHARD_COUNT
    index_file: str = INDEX_FILE
    total_size: int | None = None
    deep: bool = False
    shard_sha256: dict | None = None
    progress_path: str | None = None


@dataclass
class Report:
    """What the rank holds, and every way it differs from :class:`Expected`."""

    path: str
    deep: bool = False
    revision: str | None = None
    shard_count: int | None = None
    total_size: int | None = None
    bytes_on_disk: int = 0
    config: dict = field(default_factory=dict)
    shard_sha256: dict | None = None
    mismatches: list[Mismatch] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def checkpoint(self) -> dict:
        data = {
            "path": self.path,
            "revision": self.revision,
            "shard_count": self.shard_count,
            "total_size": self.total_size,
            "bytes_on_disk": self.bytes_on_disk,
            "config": self.config,
            "deep": self.deep,
        }
        if self.deep:
            data["shard_sha256"] = self.shard_sha256 or {}
        return data


# ----------------------------------------------------------------------------------------------
# Small pure helpers


def shard_names(count: int) -> list[str]:
    """The pinned shard file names, in order."""
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def _json_type(value: object) -> str:
    """:func:`json_kind` in this module's wording of mismatches ("a JSON list", not "array")."""
    kind = json_kind(value)
    return "list" if kind == "array" else kind


def _inside(name: str) -> bool:
    """A file name relative to the checkpoint directory that cannot leave it."""
    return bool(name) and not os.path.isabs(name) and ".." not in name.replace("\\", "/").split("/")


def validate(expected: Expected, rank: str) -> None:
    """Refuse options that cannot describe a checkpoint, before anything is looked at."""
    if not _REVISION.fullmatch(expected.revision.strip().lower()):
        raise CheckError(rank, f"expected_revision {expected.revision!r} is not a 40-hex git revision")
    if not 1 <= expected.shard_count <= 99999:
        raise CheckError(rank, f"expected_shard_count {expected.shard_count} is outside 1..99999")
    for option, name in (("revision_marker", expected.revision_marker), ("index_file", expected.index_file)):
        if not _inside(name):
            raise CheckError(rank, f"{option} {name!r} must be a relative path inside the checkpoint directory")
    if expected.total_size is not None and expected.total_size < 0:
        raise CheckError(rank, f"expected_total_size {expected.total_size} is negative")
    if expected.shard_sha256 is not None:
        pinned = set(shard_names(expected.shard_count))
        given = set(expected.shard_sha256)
        if given != pinned:
            unknown = sorted(given - pinned)
            missing = sorted(pinned - given)
            parts = []
            if missing:
                parts.append(f"no hash for {len(missing)} pinned shards ({', '.join(missing[:3])}"
                             f"{', ...' if len(missing) > 3 else ''})")
            if unknown:
                parts.append(f"hashes for shards that are not pinned ({', '.join(unknown)})")
            raise CheckError(rank, "expected_shard_sha256 must name exactly the pinned shards: " + "; ".join(parts))
        bad = sorted(n for n, h in expected.shard_sha256.items()
                     if not isinstance(h, str) or not _SHA256.fullmatch(h.strip().lower()))
        if bad:
            raise CheckError(rank, f"expected_shard_sha256 holds values that are not 64-hex sha256 digests for "
                                   f"{', '.join(bad)}")


# ----------------------------------------------------------------------------------------------
# File states


def _stat(path: str) -> tuple[str, os.stat_result | None, str]:
    """(state, stat, detail): state is one of present, absent, dangling, error."""
    try:
        return "present", os.stat(path), ""
    except FileNotFoundError:
        if os.path.islink(path):
            return "dangling", None, f"{path} is a symlink to {os.readlink(path)}, which does not exist"
        return "absent", None, ""
    except OSError as err:
        return "error", None, err.strerror or str(err)


def _kind(st: os.stat_result) -> str:
    if stat.S_ISDIR(st.st_mode):
        return "a directory"
    if stat.S_ISREG(st.st_mode):
        return "a regular file"
    return "a special file"


# ----------------------------------------------------------------------------------------------
# The checks, each appending to report.mismatches


def check_directory(root: str, rank: str) -> Mismatch | None:
    item = f"checkpoint directory {root}"
    want = "a readable directory"
    state, st, detail = _stat(root)
    if state != "present":
        actual = "unreadable" if state == "error" else "absent"
        return Mismatch(rank, item, want, actual, reason=detail, expected_word="expected")
    if not stat.S_ISDIR(st.st_mode):
        return Mismatch(rank, item, want, f"not a directory ({_kind(st)})", expected_word="expected")
    if not os.access(root, os.R_OK | os.X_OK):
        return Mismatch(rank, item, want, "unreadable", reason="no read and search permission for this user",
                        expected_word="expected")
    return None


def check_marker(root: str, expected: Expected, rank: str, report: Report) -> None:
    pinned = expected.revision.strip().lower()
    path = os.path.join(root, expected.revision_marker)

    def miss(actual: object, reason: str = "") -> None:
        report.mismatches.append(Mismatch(rank, "model revision", pinned, actual, reason=reason))

    state, st, detail = _stat(path)
    if state in ("absent", "dangling"):
        miss(None, detail or f"no marker file {path}")
        return
    if state == "error" or not stat.S_ISREG(st.st_mode):
        miss("unreadable", detail or f"marker {path} is {_kind(st)}")
        return
    try:
        text = read_limited(path, MARKER_LIMIT).decode("utf-8").strip()
    except (OSError, ValueError) as err:  # UnicodeDecodeError is a ValueError
        miss("unreadable", f"marker {path}: {err}")
        return
    report.revision = text
    if not text:
        miss("empty", f"marker {path} is empty")
    elif text.lower() != pinned:
        miss(text, f"marker {path}")


def load_json(root: str, name: str, rank: str, report: Report) -> object | None:
    """Read a small strict-JSON file of the checkpoint; a problem becomes a mismatch and None."""
    path = os.path.join(root, name)
    state, st, detail = _stat(path)
    problem: tuple[str, str] | None = None
    if state in ("absent", "dangling"):
        problem = ("absent", detail)
    elif state == "error" or not stat.S_ISREG(st.st_mode):
        problem = ("unreadable", detail or f"{path} is {_kind(st)}")
    else:
        try:
            return loads(read_limited(path, JSON_LIMIT))
        except OSError as err:
            problem = ("unreadable", err.strerror or str(err))
        except ValueError as err:  # StrictJSONError (not UTF-8, not JSON, duplicate key, NaN ...), too large
            problem = ("not strict JSON", str(err))
    report.mismatches.append(Mismatch(rank, name, "present and strict JSON", problem[0], reason=problem[1],
                                      expected_word="expected"))
    return None


def check_config(root: str, expected: Expected, rank: str, report: Report) -> None:
    config = load_json(root, CONFIG_FILE, rank, report)
    if config is None:
        report.config = {key: None for key in expected.config}
        return
    if not isinstance(config, dict):
        report.mismatches.append(Mismatch(rank, CONFIG_FILE, "a JSON object", f"a JSON {_json_type(config)}",
                                          expected_word="expected"))
        report.config = {key: None for key in expected.config}
        return
    for key, want in expected.config.items():
        have = config.get(key)
        report.config[key] = have
        item = f"{CONFIG_FILE} {key}"
        if key not in config:
            report.mismatches.append(Mismatch(rank, item, want, None))
        elif not json_equal(have, want):
            reason = ""
            if _json_type(have) != _json_type(want):
                reason = f"a JSON {_json_type(have)}, pinned a JSON {_json_type(want)}"
            report.mismatches.append(Mismatch(rank, item, want, have, reason=reason))


def check_index(root: str, expected: Expected, rank: str, report: Report) -> dict | None:
    """The parsed index when usable (its shard set checked), else None."""
    name = expected.index_file
    index = load_json(root, name, rank, report)
    if index is None:
        return None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        actual = "absent" if not isinstance(index, dict) or "weight_map" not in index else \
            f"a JSON {_json_type(weight_map)}"
        report.mismatches.append(Mismatch(rank, f"{name} weight_map", "a JSON object of tensor to shard", actual,
                                          expected_word="expected"))
        return index if isinstance(index, dict) else None
    odd = sorted({json.dumps(v) for v in weight_map.values() if not isinstance(v, str)})
    if odd:
        report.mismatches.append(Mismatch(rank, f"{name} weight_map", "shard file names only",
                                          f"holding non-string values ({', '.join(odd)})",
                                          expected_word="expected"))
    named = {v for v in weight_map.values() if isinstance(v, str)}
    report.shard_count = len(named)
    pinned = shard_names(expected.shard_count)
    for shard in pinned:
        if shard not in named:
            report.mismatches.append(Mismatch(rank, f"shard {shard} in {name}", "present", None,
                                              reason="no tensor of the weight_map is stored in it"))
    for shard in sorted(named - set(pinned)):
        report.mismatches.append(Mismatch(rank, f"shard {shard} in {name}", None, "present",
                                          reason=f"not one of the {expected.shard_count} pinned shards"))
    return index


def check_shards(root: str, expected: Expected, rank: str, report: Report) -> dict[str, int]:
    """stat() every pinned shard (nothing is read); returns name -> size of the usable ones."""
    usable: dict[str, int] = {}
    for shard in shard_names(expected.shard_count):
        path = os.path.join(root, shard)
        state, st, detail = _stat(path)
        item = f"shard {shard}"
        if state in ("absent", "dangling"):
            report.mismatches.append(Mismatch(rank, item, _PRESENT, None, reason=detail))
            continue
        if state == "error":
            report.mismatches.append(Mismatch(rank, item, _PRESENT, "unreadable", reason=detail))
            continue
        if not stat.S_ISREG(st.st_mode):
            report.mismatches.append(Mismatch(rank, item, _PRESENT, f"not a regular file ({_kind(st)})"))
            continue
        report.bytes_on_disk += st.st_size
        if st.st_size == 0:
            report.mismatches.append(Mismatch(rank, item, _PRESENT, "empty (0 bytes)"))
            continue
        if not os.access(path, os.R_OK):
            report.mismatches.append(Mismatch(rank, item, _PRESENT, "unreadable",
                                              reason="no read permission for this user"))
            continue
        usable[shard] = st.st_size
    return usable


def check_total_size(index: dict | None, expected: Expected, rank: str, report: Report) -> None:
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, int) and not isinstance(total, bool):
        report.total_size = total
    if expected.total_size is None or index is None:
        return
    item = f"{expected.index_file} metadata.total_size"
    if report.total_size is None:
        reason = "" if total is None else f"a JSON {_json_type(total)}, pinned an integer"
        report.mismatches.append(Mismatch(rank, item, expected.total_size, total, reason=reason))
    elif report.total_size != expected.total_size:
        report.mismatches.append(Mismatch(rank, item, expected.total_size, report.total_size))


# ----------------------------------------------------------------------------------------------
# Deep mode


class Progress:
    """Hashing progress for an async caller; written at the start, at most every ``interval``
    seconds within a shard, and after each shard. ``done_bytes``/``total_bytes`` count all shards."""

    def __init__(self, path: str | None, shards_total: int, total_bytes: int, rank: str,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 interval: float = PROGRESS_INTERVAL):
        self.path = path
        self.rank = rank
        self.clock = clock
        self.wall = wall
        self.interval = interval
        self.state = {"shard": None, "done_bytes": 0, "total_bytes": total_bytes,
                      "shards_done": 0, "shards_total": shards_total, "updated": 0}
        self._last: float | None = None

    def write(self, force: bool = False) -> None:
        if self.path is None:
            return
        now = self.clock()
        if not force and self._last is not None and now - self._last < self.interval:
            return
        self.state["updated"] = int(self.wall())
        try:
            write_json_atomic(self.path, dict(self.state))
        except OSError as err:
            raise CheckError(self.rank, f"cannot write progress file {self.path}: {err.strerror or err}") from err
        self._last = now

    def begin(self, shard: str) -> None:
        self.state["shard"] = shard

    def advance(self, count: int) -> None:
        self.state["done_bytes"] += count
        self.write()

    def shard_done(self) -> None:
        self.state["shards_done"] += 1
        self.write(force=True)


def hash_shards(root: str, usable: dict[str, int], expected: Expected, rank: str, report: Report,
                clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
    progress = Progress(expected.progress_path, len(usable), sum(usable.values()), rank, clock, wall)
    progress.write(force=True)
    hashes: dict[str, str] = {}
    pinned = {k: v.strip().lower() for k, v in (expected.shard_sha256 or {}).items()}
    for shard in usable:
        progress.begin(shard)
        try:
            hashes[shard] = sha256_file(os.path.join(root, shard), progress.advance)
        except OSError as err:
            report.mismatches.append(Mismatch(rank, f"shard {shard}", "readable", "unreadable",
                                              reason=err.strerror or str(err), expected_word="expected"))
        else:
            want = pinned.get(shard)
            if want is not None and hashes[shard] != want:
                report.mismatches.append(Mismatch(rank, f"shard {shard} sha256", want, hashes[shard]))
        progress.shard_done()
    report.shard_sha256 = hashes


# ----------------------------------------------------------------------------------------------
# Entry point


def verify(path: str, expected: Expected, rank: str,
           clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> Report:
    """Check the checkpoint at ``path``; every difference ends up in ``Report.mismatches``.

    Raises :class:`CheckError` only for options that cannot be right or a progress file that
    cannot be written.
    """
    validate(expected, rank)
    root = os.path.abspath(path)
    report = Report(path=root, deep=expected.deep, config={key: None for key in expected.config})
    if expected.shard_sha256 is not None and not expected.deep:
        report.warnings.append("expected_shard_sha256 is only compared in deep mode; "
                               "this run checked no shard hashes (set deep: true)")
    problem = check_directory(root, rank)
    if problem is not None:
        report.mismatches.append(problem)
        return report
    check_marker(root, expected, rank, report)
    check_config(root, expected, rank, report)
    index = check_index(root, expected, rank, report)
    usable = check_shards(root, expected, rank, report)
    check_total_size(index, expected, rank, report)
    if expected.deep:
        hash_shards(root, usable, expected, rank, report, clock, wall)
    return report


# The options of a checkpoint check: gb10.dspark.model_checkpoint's and gb10.dspark.rank_preflight's (documented once,
# in doc_fragments/_checkpoint.py).
CHECKPOINT_OPTIONS = {
    "path": {"type": "path", "required": True},
    "expected_revision": {"type": "str", "required": True},
    "revision_marker": {"type": "str", "default": REVISION_MARKER},
    "expected_config": {"type": "dict", "default": {}},
    "expected_shard_count": {"type": "int", "default": SHARD_COUNT},
    "index_file": {"type": "str", "default": INDEX_FILE},
    "expected_total_size": {"type": "int"},
    "deep": {"type": "bool", "default": False},
    "expected_shard_sha256": {"type": "dict"},
    "progress_path": {"type": "path"},
}


def expected_of(params: dict) -> Expected:
    """The :class:`Expected` of the options of :data:`CHECKPOINT_OPTIONS` in ``params``."""
    return Expected(
        revision=params["expected_revision"],
        revision_marker=params["revision_marker"],
        config=params["expected_config"] or {},
        shard_count=params["expected_shard_count"],
        index_file=params["index_file"],
        total_size=params["expected_total_size"],
        deep=params["deep"],
        shard_sha256=params["expected_shard_sha256"],
        progress_path=params["progress_path"] if params["deep"] else None,
    )
