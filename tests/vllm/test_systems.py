"""The systems lanes (_systems.run, the gb10.dspark.systems_lanes module's entry point) against the real server,
with small settings: each row's status, and the speculative-decoding figures from the ngram counters."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems as S
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems_settings as S_settings
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems_measure as S_measure
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import json_client

# The prefill prompt leaves the lane's 4096-token window fewer tokens than the lane's 16 output tokens:
# the real server then caps max_tokens (200, finish_reason length), and the lane must still measure.
PREFILL_ROOM = 6
EXPECTED = {
    ("canary", None): "FAIL",  # the random model does not answer 133: a model result, not an error
    ("latency", None): "PASS",
    ("concurrency", 1): "PASS",
    ("concurrency", 2): "PASS",
    ("concurrency", 4): "PASS",
    ("throughput", "decode"): "PASS",
    ("throughput", "prefill"): "PASS",
    ("spec_decode", None): "PASS",
}


@pytest.fixture(scope="module")
def suite(real, tmp_path_factory):
    settings = S_settings.Settings(
        model=real.model, output_dir=str(tmp_path_factory.mktemp("systems")), base_url=real.url,
        lanes=("canary", "latency", "concurrency", "throughput", "spec_decode"), latency_reps=3,
        latency_max_tokens=32, concurrency_levels=(1, 2, 4), concurrency_reps=2, concurrency_max_tokens=64,
        decode_reps=2, decode_max_tokens=256, prefill_reps=2, prefill_prompt_tokens=real.window - PREFILL_ROOM,
        request_timeout=120.0)
    out = S.run(settings, json_client(real.url, None), S_measure.stream_client(real.url, None))
    return out["report"]


def _row(report: dict, lane: str, level: object) -> dict:
    rows = [r for r in report["rows"] if r["lane"] == lane and r["level"] == level]
    assert len(rows) == 1, f"rows for {lane} {level}: {rows}"
    return rows[0]


def test_the_suite_has_exactly_the_expected_rows(suite):
    """One row per selected lane and level, all measured by the suite's own OpenAI-API client."""
    assert sorted((r["lane"], str(r["level"])) for r in suite["rows"]) == sorted((k, str(v)) for k, v in EXPECTED)
    assert suite["client_kinds"] == ["openai_portable"]


@pytest.mark.parametrize("lane,level", list(EXPECTED), ids=[f"{k}-{v}" for k, v in EXPECTED])
def test_row_status(suite, lane, level, note):
    """Each row's status: PASS for every measuring lane (the prefill lane included, with a prompt that leaves
    the window fewer tokens than it asks for), FAIL for the canary's answer."""
    row = _row(suite, lane, level)
    assert row["status"] == EXPECTED[(lane, level)], row["reasons"]
    if lane == "canary":
        assert len(row["reasons"]) == 1 and row["reasons"][0].startswith("canary: answer is ")
        assert row["reasons"][0].endswith(", expected 133")
    note("; ".join(row["reasons"])[:200] or f"client {row['client'].get('tok_s')} tok/s")


def test_spec_decode_reads_the_ngram_counters(suite, note):
    """The ngram speculator's counters moved during the suite: drafts and draft tokens above 0, an acceptance
    rate in (0, 1] and a mean acceptance length of 1 + accepted / drafts."""
    spec = suite["spec_decode"]
    deltas = spec["deltas"]
    assert spec["reasons"] == []
    assert deltas["num_drafts"] > 0 and deltas["num_draft_tokens"] >= deltas["num_drafts"]
    assert 0 < spec["acceptance_rate"] <= 1
    assert spec["acceptance_rate"] == round(deltas["num_accepted_tokens"] / deltas["num_draft_tokens"], 4)
    assert spec["mean_acceptance_length"] == round(1 + deltas["num_accepted_tokens"] / deltas["num_drafts"], 4)
    note(f"acceptance {spec['acceptance_rate']}, mean length {spec['mean_acceptance_length']}, {deltas}")
