# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every identity check of the collection reports what differs.

A check collects :class:`Mismatch` records instead of stopping at the first one, so an
operator sees everything that is wrong in one run. The message of each record always
names the rank, the expected (pinned) value and the actual value, in one fixed shape:

    rank worker-01: image dspark:prod-v026 is sha256:AAA..., pinned sha256:BBB...

Modules turn a non-empty list into ``fail_json(msg=..., mismatches=[...])`` via
:func:`failure`, so playbooks, tests and the evidence pack can read them as data too.
"""
from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import canonical_json

SHOW_STYLES = ("text", "json", "quoted")


@dataclass(frozen=True)
class Mismatch:
    """One difference between what a rank holds and what the pin (or profile) expects."""

    rank: str
    item: str
    expected: object
    actual: object
    reason: str = field(default="")
    expected_word: str = field(default="pinned")

    @property
    def message(self) -> str:
        text = f"rank {self.rank}: {self.item} is {show(self.actual)}, {self.expected_word} {show(self.expected)}"
        if self.reason:
            text += f" ({self.reason})"
        return text

    def as_dict(self) -> dict:
        data = asdict(self)
        data["message"] = self.message
        return data


class IdentityError(Exception):
    """Raised by module_utils logic when a check fails; carries every mismatch found."""

    def __init__(self, mismatches: list[Mismatch] | Mismatch):
        if isinstance(mismatches, Mismatch):
            mismatches = [mismatches]
        self.mismatches = list(mismatches)
        super().__init__(summary(self.mismatches))


class CheckError(Exception):
    """A check could not be carried out (tool missing, unreadable file, engine down).

    Fails the run just like a mismatch; the message still names the rank.
    """

    def __init__(self, rank: str, message: str):
        self.rank = rank
        super().__init__(f"rank {rank}: {message}")


def show(value: object, style: str = "text") -> str:
    """A value as the collection's messages show it; null is ``absent`` in every style.

    * ``text`` (:class:`Mismatch` messages): booleans as ``true``/``false``, lists, tuples and sets
      as ``[a, b]`` (each member shown the same way), anything else as ``str()``.
    * ``json`` (the runtime gate): strings as they are, booleans as ``true``/``false``, anything
      else as :func:`canonical_json` (``ValueError``/``TypeError`` for what JSON cannot hold).
    * ``quoted`` (the serving guard): strings, lists and dicts as JSON (a string in quotes),
      anything else as ``str()``.
    """
    if style not in SHOW_STYLES:
        raise ValueError(f"show style {style!r} is not one of {', '.join(SHOW_STYLES)}")
    if value is None:
        return "absent"
    if style == "quoted":
        return json.dumps(value) if isinstance(value, (str, dict, list)) else str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if style == "json":
        return value if isinstance(value, str) else canonical_json(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def summary(mismatches: list[Mismatch]) -> str:
    """All messages, one per line; the first line also counts them when there are several."""
    if not mismatches:
        return ""
    lines = [m.message for m in mismatches]
    if len(lines) == 1:
        return lines[0]
    return f"{len(lines)} identity mismatches:\n" + "\n".join(lines)


def failure(mismatches: list[Mismatch]) -> dict:
    """Keyword arguments for ``AnsibleModule.fail_json``."""
    return {"msg": summary(mismatches), "mismatches": [m.as_dict() for m in mismatches]}


def rank_name(given: str | None) -> str:
    """The name a module uses for its rank: the one the role passes (the inventory name),
    else the machine's hostname."""
    return given or socket.gethostname()


def refused(exc: Exception) -> dict:
    """The task result of a check that raised: an :class:`IdentityError` with every mismatch, any other error (a
    :class:`CheckError`, whose message names the rank, or a check's own error) with its message."""
    if isinstance(exc, IdentityError):
        return {"changed": False, "failed": True, **failure(exc.mismatches)}
    return {"changed": False, "failed": True, "msg": str(exc), "mismatches": []}


def outcome(result: dict, mismatches: list[Mismatch], fail_on_mismatch: bool = True,
            warnings: list[str] | tuple = ()) -> dict:
    """The task result of a read-only check, the same whether a module or an action plugin returns it: ``result``
    with ``changed`` false and the mismatches as data, failed (listing every mismatch) when there are any and
    ``fail_on_mismatch``, and the check's warnings under ``warnings``."""
    out = dict(result)
    out.setdefault("changed", False)
    out["mismatches"] = [m.as_dict() for m in mismatches]
    if warnings:
        out["warnings"] = list(warnings)
    if mismatches and fail_on_mismatch:
        out.update(failed=True, **failure(mismatches))
    return out


def end(module, result: dict) -> None:
    """End a module with a task result made by :func:`outcome` or :func:`refused`: its warnings warned, then
    ``fail_json`` when it failed, else ``exit_json``."""
    result = dict(result)
    for warning in result.pop("warnings", ()):
        module.warn(warning)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


def guarded(module, call):
    """Run ``call()``; a failed check ends the module with the collection's failure shape (:func:`refused`).

    ``module`` is the ``AnsibleModule``. Anything but an :class:`IdentityError` or a :class:`CheckError` is a bug
    and propagates with its traceback.
    """
    try:
        return call()
    except (IdentityError, CheckError) as exc:
        end(module, refused(exc))


def finish(module, result: dict, mismatches: list[Mismatch], fail_on_mismatch: bool = True,
           warnings: list[str] | tuple = ()) -> None:
    """End a read-only check: warnings, then fail (listing every mismatch) or exit with the result."""
    end(module, outcome(result, mismatches, fail_on_mismatch, warnings))
