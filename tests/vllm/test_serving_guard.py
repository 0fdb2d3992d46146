"""_serving_guard's run (the gb10.dspark.serving_guard module's entry point) against the real server."""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.serving import _serving_guard as G

# gb10.dspark.serving_guard's defaults
CONCURRENCY, REQUEST_TIMEOUT, OVERALL_TIMEOUT, THRESHOLD = 8, 300.0, 1800.0, 0.9


def test_contract_and_accounting_pass_and_accuracy_fails_as_a_model_failure(real, note):
    """The full 64 prompts x 128 tokens: every answer is true to the contract (usage arithmetic, exactly 128
    tokens under ignore_eos, prompt_tokens equal to /tokenize, one finish and one usage chunk per stream), no
    failure is counted as infrastructure, and the only error is the random model's accuracy."""
    plan = G.requests_plan()
    report = G.run(real.url, real.model, None, plan, CONCURRENCY, REQUEST_TIMEOUT, OVERALL_TIMEOUT, THRESHOLD)
    accuracy = report["accuracy"]
    assert report["requests"] == G.PROMPTS == 64 and report["settings"]["max_tokens"] == G.MAX_TOKENS == 128
    assert report["infra_failures"] == 0
    assert report["contract_failures"] == 0 and report["failed_requests"] == 0
    assert accuracy["total"] == 16 and accuracy["pass"] is False
    assert report["errors"] == [f"accuracy {accuracy['correct']}/16 is below the threshold {THRESHOLD}"]
    assert report["status"] == "FAIL"
    exact = [c for c, item in zip(report["completions"], plan) if item["ignore_eos"]]
    assert len(exact) == 48 and all(c["usage"]["completion_tokens"] == 128 for c in exact)
    assert sum(1 for item in plan if item["stream"]) == 8
    note(f"{report['requests']} requests in {report['elapsed_s']} s; contract 0 failures, infra 0; "
         f"accuracy {accuracy['correct']}/16")
