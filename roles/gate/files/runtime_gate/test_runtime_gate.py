# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The schema-3 runtime gate of one pair (docs/wrapper-reference.md §5), as pytest-testinfra tests.

Each test asserts one part of the gate, so pytest's report names what failed; every part runs
even when an earlier one failed. The order is the spec's: per-rank identity, the cross-rank
check, the head's API canaries, and only then the log markers of both ranks (after the canaries,
so that a CUDA-graph replay has been logged). All decisions are made in
``plugins/module_utils/gate/_runtime_gate.py``; the ``gate`` fixture (conftest.py) holds the results
and writes the evidence document when the session ends.
"""
import pytest

RANKS = ("head", "worker")


def _verdict(errors):
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("rank", RANKS)
def test_rank_identity(gate, rank):
    """Image ID (the one the rank's image store reports for the pinned image), labels, architecture,
    command flags, PID 1 environment, runtime audit manifest."""
    _verdict(gate.step(f"identity:{rank}"))


def test_ranks_agree(gate):
    """Both ranks run the pinned image (the identical ID on one image store, each its own store's ID
    for it on two) with the same compilation config."""
    _verdict(gate.step("cross_rank"))


def test_api_serves_the_model(gate):
    _verdict(gate.step("models"))


def test_semantic_canary(gate):
    """7 x 19: exactly "133", finish_reason stop."""
    _verdict(gate.step("semantic"))


def test_tool_canary(gate):
    """A forced get_weather tool call."""
    _verdict(gate.step("tool_call"))


def test_retrieval_canary(gate):
    """The secret code from the middle of a long context, finish_reason stop."""
    _verdict(gate.step("retrieval"))


def test_api_usage_is_consistent(gate):
    """prompt_tokens + completion_tokens == total_tokens on every canary answer."""
    _verdict(gate.step("usage"))


@pytest.mark.parametrize("rank", RANKS)
def test_runtime_logs(gate, rank):
    """Required and forbidden CUDA-graph markers, matched in the engine's runtime lines only (not in
    the echo of its arguments and config), and the authoritative Worker_TP runtime line."""
    _verdict(gate.step(f"logs:{rank}"))
