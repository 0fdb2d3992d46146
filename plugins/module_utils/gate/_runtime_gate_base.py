# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every part of the runtime gate shares: the ranks and implementations it knows, the types of its command
runner and its API fetch, its error, and how its messages show a value.

Split from :mod:`._runtime_gate`, with :mod:`._runtime_gate_identity`, :mod:`._runtime_gate_logs` and
:mod:`._runtime_gate_api` beside it."""
from __future__ import annotations

import re
from collections.abc import Callable

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import show


Run = Callable[[list[str]], tuple[int, str, str]]
Fetch = Callable[[str, str, "bytes | None", float], tuple[int, bytes]]


RANKS = ("head", "worker")

IMPLEMENTATIONS = ("regular", "breakable")


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


_EXCERPT = 240


class GateError(Exception):
    """A check could not be carried out; the message names the rank and goes into ``errors``."""


# ============================================================================================
# small helpers
# ============================================================================================
def _show(value: object) -> str:
    """How the gate's messages show a value: :func:`_identity.show` in its ``json`` style."""
    return show(value, "json")


def _excerpt(text: object, limit: int = _EXCERPT) -> str:
    text = _show(text)
    return text if len(text) <= limit else text[:limit] + "…"
