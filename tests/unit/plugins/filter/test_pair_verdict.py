"""The pair_verdict filter: a thin wrapper over _audit.pair_verdict that names its errors."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.filter.pair_verdict import FilterModule

DESIRED = {"image_id": "sha256:" + "1" * 64, "manifest_sha256": "2" * 64, "model_revision": "3" * 40,
           "profile": "production", "profile_sha256": "4" * 64, "served_model": "m"}
verdict = FilterModule().filters()["pair_verdict"]


def test_both_ranks_unreachable_are_named_and_the_verdict_is_unreachable():
    result = verdict(DESIRED, pair="sim07", head={"unreachable": True, "msg": "timed out"}, worker=None,
                     head_name="sim07-head", worker_name="sim07-worker")
    assert result["pair"] == "sim07" and result["verdict"] == "UNREACHABLE"
    assert result["reasons"] == ["rank sim07-head: host is unreachable, expected reachable (timed out)",
                                 "rank sim07-worker: host is unreachable, expected reachable (no audit result)"]


def test_a_desired_state_without_a_key_is_a_filter_error_naming_the_pair():
    with pytest.raises(AnsibleFilterError, match="pair sim07: desired state lacks profile_sha256"):
        verdict(dict(DESIRED, profile_sha256=""), pair="sim07")


def test_the_pair_name_is_required():
    with pytest.raises(AnsibleFilterError, match="pair must be"):
        verdict(DESIRED, head=None, worker=None)
