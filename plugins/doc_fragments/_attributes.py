# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Attributes shared by the collection's read-only modules (``gb10.dspark._attributes.read_only``) and its
waiting action plugins (``gb10.dspark._attributes.wait``)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
"""

    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    details: Changes nothing.
  idempotent:
    support: full
    details: Read-only.
"""

    WAIT = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: In check mode nothing was started, so it skips.
  diff_mode:
    support: none
    details: Changes nothing.
  idempotent:
    support: full
    details: Read-only.
  action:
    support: full
    details: An action plugin - runs on the controller and polls the head with a collection module.
"""
