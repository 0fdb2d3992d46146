"""The collection's API-key handling against a second real server started with --api-key: 401 without the key,
200 with it, in the probe, the JSON client, the gate's fetch and the serving guard."""
from __future__ import annotations

import secrets

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _engine_probe as P
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate as R
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _serving_guard as G
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import json_client
from tools.vllm_lane import server

KEY = "lane-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def keyed(real_started_early, lane_venv, lane_model, lane, lane_logs):
    # real_started_early: the session's unkeyed server starts beside this one
    srv = server.start_vllm(lane_venv, lane_model, lane_logs, name="vllm-api-key", api_key=KEY)
    lane.servers["real vLLM server with --api-key"] = {"startup_s": srv.startup_s}
    yield srv
    srv.stop()


def test_probe_is_ready_only_with_the_key(keyed, note):
    """api_state without the key: not ready, HTTP 401 from /v1/models; with it: ready. /metrics answers either
    way (the server guards only its API routes), so the KV size is read in both cases."""
    without = P.api_state(keyed.url, server.SERVED, 10.0)
    with_key = P.api_state(keyed.url, server.SERVED, 10.0, KEY)
    assert without["ready"] is False and without["status"] == 401 and without["error"] == "HTTP 401"
    assert with_key["ready"] is True and with_key["status"] == 200 and with_key["models"] == [server.SERVED]
    assert with_key["kv_cache_size_tokens"] is not None
    assert without["kv_cache_size_tokens"] == with_key["kv_cache_size_tokens"]
    note("401 without the key, 200 with it; /metrics open")


def test_json_client_sends_the_key(keyed):
    """json_client: a completion is 401 with vLLM's {"error": "Unauthorized"} body without the key, 200 with it."""
    body = {"model": server.SERVED, "prompt": "Compute 7 multiplied by 19.", "max_tokens": 4, "temperature": 0}
    status, doc = json_client(keyed.url, None)("POST", "/v1/completions", body, 60)
    assert (status, doc) == (401, {"error": "Unauthorized"})
    status, doc = json_client(keyed.url, KEY)("POST", "/v1/completions", body, 60)
    assert status == 200 and doc["usage"]["completion_tokens"] == 4


def test_gate_fetch_sends_the_key(keyed, gate_fetch):
    """The gate's models step through the gate role's fetch: an HTTP 401 error without the key, no error with it;
    the key never appears in the errors."""
    config = {"model": server.SERVED, "api_timeout": 60, "retrieval_timeout": 60}
    without = R.Gate(config, {}, gate_fetch(keyed.url, None), secrets=[KEY])
    assert without.step("models") == ['head model list: GET /v1/models answered HTTP 401: {"error":"Unauthorized"}']
    with_key = R.Gate(config, {}, gate_fetch(keyed.url, KEY), secrets=[KEY])
    assert with_key.step("models") == []
    assert KEY not in repr([without.results, with_key.results])


def test_serving_guard_with_and_without_the_key(keyed, note):
    """A short guard plan (8 prompts x 16 tokens): every request passes with the key; without it every request is
    refused with HTTP 401 (the guard's /tokenize calls still answer: the server leaves /tokenize open)."""
    plan = G.requests_plan(count=8, max_tokens=16)
    good = G.run(keyed.url, server.SERVED, KEY, plan, 4, 120, 600, 0.0)
    bad = G.run(keyed.url, server.SERVED, None, plan, 4, 120, 600, 0.0)
    assert good["failed_requests"] == 0 and good["status"] == "PASS"
    # a refused request leaves no answer to judge: infrastructure, never a model failure
    assert bad["failed_requests"] == 8 and bad["infra_failures"] == 8 and bad["contract_failures"] == 0
    assert all("HTTP status is 401, expected 200" in e for e in bad["errors"] if not e.startswith("accuracy"))
    note(f"without the key: {bad['failed_requests']} failures, counted as infrastructure "
         f"({bad['infra_failures']}), not as contract failures ({bad['contract_failures']})")
