# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet audit's verdict for one pair, as a Jinja filter (the logic is in module_utils/fleet/_audit_verdict.py)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._audit_verdict import pair_verdict as _pair_verdict


def pair_verdict(desired, pair=None, head=None, worker=None, head_name=None, worker_name=None):
    """``desired | gb10.dspark.pair_verdict(pair=..., head=<registered result>, worker=<registered result>,
    head_name=..., worker_name=...)``."""
    if not isinstance(pair, str) or not pair:
        raise AnsibleFilterError("pair_verdict: pair must be the pair's name")
    try:
        return _pair_verdict(pair, desired, head, worker, names=(head_name, worker_name))
    except ValueError as exc:
        raise AnsibleFilterError(f"pair_verdict: pair {pair}: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"pair_verdict": pair_verdict}
