# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A container's command as ``docker container inspect`` reports it, read one way.

The runtime gate and the fleet audit both record the engine container's command by its sha256
(never the command itself, which may hold the API key); both hash :func:`command_string`, so the
two records of one container agree.

Standard library only; it runs on the ranks as well as on the control node.
"""
from __future__ import annotations

__all__ = ["command_string"]


def command_string(path: object, args: object) -> str:
    """The container command as the spec records it: ``Path`` plus ``Args``, space-joined (what is
    not a string is left out)."""
    parts = [path] if isinstance(path, str) and path else []
    parts += [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    return " ".join(parts)
