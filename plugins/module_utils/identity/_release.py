# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A pair's release record on each rank: the release it runs and the one before it (``gb10.dspark.release_record``).

A release is a whole ``dspark_pin``: two pins are the same release when they are equal as JSON. The record is one
JSON file per rank (default ``/var/lib/dspark/release.json``)::

    {"schema": 1,
     "current":  {"release": "sim-v027", "pin": {...}, "profile": "production", "since": "2026-...Z"},
     "previous": {"release": "sim-v026", "pin": {...}, "profile": "production", "since": "2026-...Z"} | null,
     "retired":  [{"release": "sim-v025", "pin": {...}, "profile": ..., "since": ...}, ...]}

``retired`` holds the releases pushed out of ``previous``, newest first: the images the collection loaded for them
and may remove (``dspark_image_keep_releases``); nothing else on a rank is ever named for removal.

:func:`advance` is what a converge writes once the pair's gate passed: the same pin again changes nothing (the
profile, if it changed, is updated in place); the previous release's pin (a release rollback) swaps current and
previous; any other pin becomes current and the old current becomes previous.

Standard library only; it runs on the ranks.
"""
from __future__ import annotations

import copy
import os

from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import (
    StrictJSONError, canonical_json, loads)

SCHEMA = 1
DEFAULT_PATH = "/var/lib/dspark/release.json"
ENTRY_KEYS = ("release", "pin", "profile", "since")
# What a message shows of a release: enough to tell two apart without the whole pin.
SHOWN_KEYS = ("release", "image_tag", "image_id")


class ReleaseRecordError(Exception):
    """The record cannot be read or does not say what a rollback needs (the message names the rank and why)."""


def same_pin(a: object, b: object) -> bool:
    """Two pins are one release when they are equal as JSON (key order aside)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    return canonical_json(a) == canonical_json(b)


def entry(pin: dict, profile: str, since: str) -> dict:
    return {"release": str(pin.get("release") or pin.get("image_tag") or pin.get("image_id") or "unnamed"),
            "pin": copy.deepcopy(pin), "profile": profile, "since": since}


def shown(item: dict | None) -> str:
    """A release as a message names it: its name, tag and image ID (never the whole pin)."""
    if not item:
        return "none"
    pin = item.get("pin") or {}
    parts = [str(item.get("release"))] + [f"{k} {pin[k]}" for k in SHOWN_KEYS[1:] if pin.get(k)]
    return f"{parts[0]} ({', '.join(parts[1:])})" if len(parts) > 1 else parts[0]


def _check_entry(item: object, where: str, path: str) -> None:
    if not isinstance(item, dict) or any(k not in item for k in ENTRY_KEYS) or not isinstance(item["pin"], dict):
        raise ReleaseRecordError(f"{path}: {where} is not a release entry with {', '.join(ENTRY_KEYS)}")


def validate(record: object, path: str) -> dict:
    """The record as read, or ReleaseRecordError naming the path and what is wrong."""
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise ReleaseRecordError(f"{path}: expected a release record of schema {SCHEMA}, found "
                                 f"{record.get('schema') if isinstance(record, dict) else type(record).__name__}")
    _check_entry(record.get("current"), "current", path)
    if record.get("previous") is not None:
        _check_entry(record["previous"], "previous", path)
    retired = record.get("retired", [])
    if not isinstance(retired, list):
        raise ReleaseRecordError(f"{path}: retired is not a list")
    for index, item in enumerate(retired):
        _check_entry(item, f"retired[{index}]", path)
    return record


def load(path: str) -> dict | None:
    """The record at ``path``; None when the rank has none yet. A symbolic link there is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ReleaseRecordError(f"{path}: cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        text = f.read(1 << 20)
    try:
        return validate(loads(text, require_object=True), path)
    except StrictJSONError as exc:
        raise ReleaseRecordError(f"{path}: {exc}") from None


def advance(record: dict | None, pin: dict, profile: str, now: str) -> dict:
    """The record once the pair serves ``pin`` with ``profile`` (gated). Equal to ``record`` when nothing changed."""
    if record is None:
        return {"schema": SCHEMA, "current": entry(pin, profile, now), "previous": None, "retired": []}
    new = copy.deepcopy(record)
    new.setdefault("retired", [])
    current, previous = new["current"], new.get("previous")
    if same_pin(current["pin"], pin):
        current["profile"] = profile  # the same release with another profile: since is when it became current
        return new
    if previous and same_pin(previous["pin"], pin):  # back to the previous release: the two swap
        new["current"], new["previous"] = entry(pin, profile, now), current
        return new
    retired = [previous] if previous else []
    retired += [r for r in new["retired"] if not same_pin(r["pin"], pin) and not same_pin(r["pin"], current["pin"])
                and not (previous and same_pin(r["pin"], previous["pin"]))]
    new["current"], new["previous"], new["retired"] = entry(pin, profile, now), current, retired
    return new


def prune(record: dict, keep_releases: int) -> tuple[dict, list[dict]]:
    """(record, retired entries whose images go): keep the images of the ``keep_releases`` newest releases.

    0 keeps every image (nothing is pruned). Fewer than 2 would remove the previous release's image, which a
    release rollback needs: refused. An entry whose image ID is current's or previous's is never pruned.
    """
    if keep_releases == 0:
        return record, []
    if keep_releases < 2:
        raise ReleaseRecordError(f"keep_releases is {keep_releases}, expected 0 (keep every image) or at least 2 "
                                 "(the current and the previous release's images always stay)")
    kept_ids = {(record[k] or {}).get("pin", {}).get("image_id") for k in ("current", "previous") if record.get(k)}
    retired = record.get("retired", [])
    keep, go = retired[: keep_releases - 2], retired[keep_releases - 2:]
    new = dict(record, retired=keep)
    return new, [r for r in go if r["pin"].get("image_id") not in kept_ids]


def rollback_problem(rank: str, record: dict | None, path: str) -> str | None:
    """Why ``rank`` cannot go back to its previous release, or None."""
    if record is None:
        return f"rank {rank}: no release record at {path}, expected one with a previous release (provision the pair first)"
    if not record.get("previous"):
        return (f"rank {rank}: no previous release in {path} (current {shown(record['current'])}), expected one: "
                "the pair has run one release only")
    return None


def disagreement(rank: str, record: dict | None, expected: dict | None, expected_from: str) -> str | None:
    """Why ``rank``'s record differs from its pair's ``expected_from`` rank, or None when both say the same."""
    for key in ("current", "previous"):
        mine = (record or {}).get(key)
        theirs = (expected or {}).get(key)
        if not same_pin((mine or {}).get("pin"), (theirs or {}).get("pin")) and (mine or theirs):
            return (f"rank {rank}: {key} release is {shown(mine)}, expected {shown(theirs)} as rank {expected_from} "
                    "records it; the pair's ranks disagree, nothing was changed")
    return None
