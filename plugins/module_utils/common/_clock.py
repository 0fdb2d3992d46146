# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one timestamp: UTC, to the second, ISO 8601 ending in ``Z``.

Lock records, systems reports, fleet reports and evidence packs all stamp their time with
:func:`utc_now`, so the same moment reads the same everywhere: ``2026-08-05T12:00:00Z``.

Standard library only; it runs on the ranks as well as on the control node.
"""
from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["utc_now"]


def utc_now(moment: datetime | None = None) -> str:
    """``moment`` (default: now) as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC; a naive ``moment`` is taken as UTC."""
    moment = moment or datetime.now(timezone.utc)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
