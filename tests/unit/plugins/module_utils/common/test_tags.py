"""_tags: which converge phases a --tags/--skip-tags selection runs, and which selections are refused."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.filter.tag_refusal import tag_refusal
from ansible_collections.gb10.dspark.plugins.module_utils.common import _tags as T

EVERY = list(T.PHASES)


@pytest.mark.parametrize("run,skip,want", [
    (["all"], [], EVERY),
    (None, None, EVERY),  # no selection at all
    (["preflight"], [], ["preflight"]),
    (["gate", "preflight"], [], ["preflight", "gate"]),
    (["all"], ["gate"], ["preflight", "image", "profile", "engine"]),
    (["tagged"], ["engine"], ["preflight", "image", "profile", "gate"]),
    (["evidence"], [], []),
    (["all"], ["all"], []),
    ("preflight,image", "", ["preflight", "image"]),  # a comma-separated string, as on the command line
])
def test_the_phases_a_selection_runs(run, skip, want):
    assert T.selected(run, skip) == want


@pytest.mark.parametrize("run,skip", [
    (["all"], []), (["preflight"], []), (["preflight", "image"], []), (["preflight", "image", "profile"], []),
    (["gate"], []), (["preflight", "gate"], []), (["evidence"], []), (["audit"], []), (["all"], ["evidence"]),
    (["all"], ["image", "profile", "engine", "gate"]),
])
def test_a_selection_that_keeps_the_order_is_not_refused(run, skip):
    assert T.refusal(run, skip) is None and tag_refusal(run, skip) == ""


@pytest.mark.parametrize("run,skip,lacks", [
    (["all"], ["preflight"], "preflight"),  # every change without its checks
    (["engine"], [], "preflight, image, profile, gate"),
    (["image"], [], "preflight"),
    (["preflight", "profile"], [], "image"),
    (["all"], ["gate"], "gate"),  # a new engine left ungated
    (["preflight", "image", "profile", "engine"], [], "gate"),
    (["all"], ["image"], "image"),
])
def test_a_selection_that_would_change_a_pair_out_of_order_is_refused_naming_what_it_lacks(run, skip, lacks):
    why = T.refusal(run, skip)
    assert why is not None and f"without {lacks}:" in why, why
    assert "preflight first" in why and "--tags preflight,image" in why
    assert tag_refusal(run, skip) == why
