"""_audit against the real server: the head's API section and the token counters of /metrics."""
from __future__ import annotations

import secrets
import time

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _audit as A
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import json_client

TIMEOUT = 10.0


def test_audit_reads_the_heads_api_and_counters(real, lane_model, tmp_path):
    """collect(api=True) on a rank whose Docker engine does not answer: the API section is ready with the served
    model, its window and KV size; the metrics section has both token counters; docker is reported unreachable,
    not failed."""
    engine = A.open_engine("head", f"unix://{tmp_path}/no-dockerd.sock")
    audit = A.collect(engine, rank="head", model_dir=str(lane_model), api=True, base_url=real.url,
                      model=real.model, timeout=TIMEOUT)
    assert audit["docker"]["reachable"] is False
    api = audit["api"]
    assert api["ready"] is True and api["models"] == [real.model] and api["max_model_len"] == real.window
    assert api["kv_cache_size_tokens"] == real.logged_kv_tokens()
    assert api["num_requests_running"] == 0
    metrics = audit["metrics"]
    assert metrics["error"] is None
    assert isinstance(metrics["prompt_tokens_total"], int) and isinstance(metrics["generation_tokens_total"], int)


def _settled(url: str, before: dict, want_generated: int, timeout: float = 15.0) -> dict:
    """metrics_state once the generation counter has grown by ``want_generated`` (or the time is up):
    the engine publishes its counters shortly after the answer."""
    deadline = time.monotonic() + timeout
    while True:
        after = A.metrics_state(url, TIMEOUT, None)
        grown = after["generation_tokens_total"] - before["generation_tokens_total"]
        if grown >= want_generated or time.monotonic() > deadline:
            return after
        time.sleep(0.2)


def test_token_counters_move_by_one_completions_usage(real, note):
    """metrics_state: after one completion with ignore_eos, vllm:prompt_tokens_total and
    vllm:generation_tokens_total have grown by exactly that answer's usage."""
    before = A.metrics_state(real.url, TIMEOUT, None)
    prompt = f"Counter check {secrets.token_hex(4)}: describe the harbor ledger."
    status, body = json_client(real.url, None)("POST", "/v1/completions", {
        "model": real.model, "prompt": prompt, "max_tokens": 24, "ignore_eos": True, "temperature": 0}, 120)
    assert status == 200, body
    usage = body["usage"]
    assert usage["completion_tokens"] == 24
    after = _settled(real.url, before, usage["completion_tokens"])
    assert after["error"] is None
    assert after["prompt_tokens_total"] - before["prompt_tokens_total"] == usage["prompt_tokens"]
    assert after["generation_tokens_total"] - before["generation_tokens_total"] == usage["completion_tokens"]
    note(f"+{usage['prompt_tokens']} prompt, +{usage['completion_tokens']} generated")


def test_liveness_is_one_token_from_the_real_server(real, lane_model, tmp_path, note):
    """collect(liveness_timeout=...) asks the real server for one token: it comes, within the bound, and the
    server counts exactly one generated token for it (the audit's only effect on the served state)."""
    engine = A.open_engine("head", f"unix://{tmp_path}/no-dockerd.sock")
    before = A.metrics_state(real.url, TIMEOUT, None)
    audit = A.collect(engine, rank="head", model_dir=str(lane_model), api=True, base_url=real.url,
                      model=real.model, timeout=TIMEOUT, liveness_timeout=60)
    live = audit["liveness"]
    assert live["ok"] is True and live["status"] == 200 and live["error"] is None and live["stalled"] is False
    after = _settled(real.url, before, 1)
    assert after["generation_tokens_total"] - before["generation_tokens_total"] == 1
    note(f"one token in {live['seconds']} s")
