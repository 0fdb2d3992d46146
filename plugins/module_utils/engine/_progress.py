# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress reports of the collection's long waits, carried in task results for the
gb10.dspark.progress callback (plugins/callback/progress.py), which prints them, and for
``dspark``, which prints them through that callback's own function.

A wait run with ``progress_results`` returns at each report with ``waiting: true`` and the report
under :data:`KEY`; its task's ``until`` retries it, so each report reaches every callback as a
``v2_runner_retry`` event (AWX records it as a ``runner_retry`` job event). The wait's last result
carries its closing line (the ``READY`` line) the same way. A report is one of:

- ``{"kind": "pair_wait", ...}``: both ranks' start-up phases (engine/_pair_wait.py's record);
- ``{"kind": "line", "text": ...}``: a line made by the wait itself.

Standard library only; it runs on the control node.
"""
from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _pair_wait

__all__ = ["KEY", "WAITING", "line_record", "texts"]

KEY = "dspark_progress"
WAITING = "waiting"
LINE = "line"


def line_record(text: str) -> dict:
    return {"kind": LINE, "text": text}


def _text(record: Mapping, show_bar: bool) -> str | None:
    kind = record.get("kind")
    if kind == LINE:
        return " ".join(str(record.get("text") or "").split()) or None
    if kind == _pair_wait.RECORD_KIND:
        return _pair_wait.record_text(dict(record), show_bar)
    return None


def texts(result: object, show_bar: bool = False) -> list[str]:
    """The progress lines a task result carries (without the host), in the one format of each kind;
    none for a result without a report, a report of an unknown kind or one that cannot be read."""
    if not isinstance(result, Mapping) or result.get("_ansible_no_log"):
        return []
    record = result.get(KEY)
    if not isinstance(record, Mapping):
        return []
    try:
        text = _text(record, show_bar)
    except (KeyError, TypeError, ValueError):
        return []
    return [text] if text else []
