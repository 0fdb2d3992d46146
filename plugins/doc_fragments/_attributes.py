# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Attributes of the collection's modules.

``gb10.dspark._attributes`` says what the attributes every module declares mean (check_mode, diff_mode,
idempotent), ``gb10.dspark._attributes.action`` what ``action`` means; a module that states its own support
levels extends them for those descriptions. ``gb10.dspark._attributes.read_only`` (the read-only modules) and
``gb10.dspark._attributes.wait`` (the waiting action plugins) bring descriptions and support levels both.
"""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Whether the task runs in check mode and predicts its changed status there without touching the
      target; a task without support is skipped in check mode.
  diff_mode:
    description: Whether the task reports, in diff mode, what it changed (or would change, in check mode).
  idempotent:
    description: Whether a second run with the same arguments, right after the first and outside check mode,
      reports no change (provided nothing else changed the target in between).
"""

    ACTION = r"""
options: {}
attributes:
  action:
    description: Whether an action plugin of the same name runs part of the task on the controller.
"""

    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    description: Whether the task runs in check mode and predicts its changed status there without touching the
      target; a task without support is skipped in check mode.
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    description: Whether the task reports, in diff mode, what it changed (or would change, in check mode).
    support: none
    details: Changes nothing.
  idempotent:
    description: Whether a second run with the same arguments, right after the first and outside check mode,
      reports no change (provided nothing else changed the target in between).
    support: full
    details: Read-only.
"""

    WAIT = r"""
options: {}
attributes:
  check_mode:
    description: Whether the task runs in check mode and predicts its changed status there without touching the
      target; a task without support is skipped in check mode.
    support: full
    details: In check mode nothing was started, so it skips.
  diff_mode:
    description: Whether the task reports, in diff mode, what it changed (or would change, in check mode).
    support: none
    details: Changes nothing.
  idempotent:
    description: Whether a second run with the same arguments, right after the first and outside check mode,
      reports no change (provided nothing else changed the target in between).
    support: full
    details: Read-only.
  action:
    description: Whether an action plugin of the same name runs part of the task on the controller.
    support: full
    details: An action plugin - runs on the controller and polls the head with a collection module.
"""
