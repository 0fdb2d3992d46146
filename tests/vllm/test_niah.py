"""NIAH (_niah.run) against the real server: the window from /v1/models, prompts built from the server's own
/tokenize (chat template included), exact depths, and the answers judged as model results."""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.serving import _niah as N
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import json_client

FRACTIONS = (0.25, 0.5, 0.9, 1.0)


def test_depths_fill_the_real_window_exactly(real, tmp_path, note):
    """Depths int((max_model_len - reserve) x fraction), clamped to [min_depth, usable]: the deepest prompt plus
    its reserve is exactly the window and is accepted; usage.prompt_tokens equals every depth; the random model
    finds no code, so every row is a model FAIL and none an infrastructure ERROR."""
    settings = N.Settings(model=real.model, output_dir=str(tmp_path / "niah"), run_key="vllm-lane",
                          fractions=FRACTIONS, request_timeout=300.0)
    result = N.run(json_client(real.url, None), settings)
    summary = result["summary"]
    usable = real.window - N.DEFAULT_RESERVE
    expected = []
    for fraction in FRACTIONS:
        depth = min(max(int(usable * fraction), N.DEFAULT_MIN_DEPTH), usable)
        if depth not in expected:
            expected.append(depth)
    assert summary["max_model_len"] == real.window
    assert summary["depths"] == expected and expected[-1] + N.DEFAULT_RESERVE == real.window
    assert summary["kv_cache_size_tokens"] == real.logged_kv_tokens() and summary["kv_below_window"] is False
    assert summary["tokenizer"] == N.SERVER_TOKENIZER
    assert [row["usage"]["prompt_tokens"] for row in summary["rows"]] == expected
    assert [row["http_status"] for row in summary["rows"]] == [200] * len(expected)
    assert {(row["status"], row["kind"]) for row in summary["rows"]} == {("FAIL", "model")}
    assert summary["error_count"] == 0 and summary["infra_error_count"] == 0 and summary["status"] == "FAIL"
    note(f"depths {expected}")


def test_the_template_is_rendered_with_thinking_off(real):
    """The server renders NIAH's chat template with chat_template_kwargs thinking false: the generation prompt
    ends in the model's </think> token, and with thinking true it would end in <think>."""
    call = json_client(real.url, None)
    rendered = N.render_template(call, "head", real.model)
    ids = {}
    for token in ("<think>", "</think>"):
        status, doc = call("POST", "/tokenize", {"model": real.model, "prompt": token, "add_special_tokens": False},
                           30)
        assert status == 200 and len(doc["tokens"]) == 1, doc
        ids[token] = doc["tokens"][0]
    assert rendered[-1] == ids["</think>"]
    status, doc = call("POST", "/tokenize", {"model": real.model, "messages": [{"role": "user", "content": N.TEMPLATE}],
                                             "add_generation_prompt": True, "chat_template_kwargs": {"thinking": True}},
                       30)
    assert status == 200 and doc["tokens"][-1] == ids["<think>"]
    parts = N.prompt_parts(rendered, N.server_encoder(call, "head", real.model), N.DEFAULT_CODE, "head")
    assert parts.prefix and parts.suffix[-1] == ids["</think>"]
