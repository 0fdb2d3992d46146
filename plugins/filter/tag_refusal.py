# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why a --tags/--skip-tags selection would break the converge's fail-closed order (roles/converge); the logic is in
module_utils/common/_tags.py."""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.common._tags import refusal


def tag_refusal(run_tags, skip_tags=None):
    """``ansible_run_tags | gb10.dspark.tag_refusal(ansible_skip_tags)``: the reason, or an empty string."""
    return refusal(run_tags, skip_tags) or ""


class FilterModule:
    def filters(self):
        return {"tag_refusal": tag_refusal}
