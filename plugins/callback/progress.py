# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Print the progress reports of the collection's long waits, next to any stdout callback."""
from __future__ import annotations

DOCUMENTATION = r"""
---
name: progress
author:
  - gb10.dspark contributors (!UNKNOWN)
version_added: 0.1.0
type: aggregate
short_description: Print the start-up progress of each pair while it starts (and its READY line)
description:
  - Prints the progress reports that the collection's long waits hand over in their task results, one line per
    report, C([host] text), in the formats of plugins/module_utils/engine/_progress.py; for
    M(gb10.dspark.pair_ready) run with C(progress_results) (as the engine role runs it), both ranks'
    start-up phases with the time waited, then the C(READY served=... kv_cache_size_tokens=... after N s) line.
  - Each report is a retry of the wait's task (a C(v2_runner_retry) event), so C(ansible-playbook),
    C(ansible-navigator) and AWX (which records it as a C(runner_retry) job event) all carry it; the
    stdout callback shows its own line for the same retry.
  - An aggregate callback, beside the stdout callback; it must be enabled, in ansible.cfg
    (C(callbacks_enabled = gb10.dspark.progress) in C([defaults])) or the environment
    (C(ANSIBLE_CALLBACKS_ENABLED=gb10.dspark.progress)).
  - C(dspark) prints the same lines through this plugin's C(texts) function.
  - A result of a task with C(no_log) shows nothing.
requirements:
  - enable in configuration (callbacks_enabled)
"""

import sys

from ansible.plugins.callback import CallbackBase

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _progress


def texts(result: object, show_bar: bool = False) -> list[str]:
    """The progress lines a task result carries, without the host: the one format, for this
    callback and for ``dspark``."""
    return _progress.texts(result, show_bar)


def lines(host: str, result: object, show_bar: bool = False) -> list[str]:
    """``[host] text`` for each progress line of a task result."""
    return [f"[{host}] {text}" for text in texts(result, show_bar)]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gb10.dspark.progress"
    CALLBACK_NEEDS_ENABLED = True

    def _show(self, result) -> None:
        try:
            found = lines(result.host.get_name(), result.result, sys.stdout.isatty())
        except Exception:  # a progress line must never break the run  # pylint: disable=broad-except
            return
        for line in found:
            self._display.display(line)

    def v2_runner_retry(self, result) -> None:
        self._show(result)

    def v2_runner_on_ok(self, result) -> None:
        self._show(result)
