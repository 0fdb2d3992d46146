# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the ``rank`` option that every rank-side identity module takes."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  rank:
    description:
      - "The name of the rank this module runs on, used in every message it returns, so that a
        failure reads C(rank worker-01: <item> is <actual>, pinned <expected>)."
      - Roles pass C(inventory_hostname). Defaults to the machine's hostname.
    type: str
"""
