"""The deterministic 'model': canaries, max_tokens, EOS, stop strings, spec-decode counters."""
import random

import pytest

from dspark_engine import model, template
from dspark_engine import tokenizer as tok
from dspark_engine.model import ChatContext, Sampling

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def chat(content, sampling=None, **ctx):
    msgs = [{"role": "user", "content": content}]
    ids = template.render_ids(msgs, ctx.get("tools"), thinking=ctx.get("thinking", False))
    return model.generate(ids, tok.decode(ids), sampling or Sampling(64), ChatContext(content, **ctx), 6)


def complete(text, sampling):
    ids = tok.encode(text, add_bos=True)
    return model.generate(ids, text, sampling, None, 6)


def test_semantic_canary():
    out = chat("Compute 7 multiplied by 19. Reply with only the number.")
    assert out.content == "133" and out.finish_reason == "stop"
    assert [t.id for t in out.tokens][-1] == tok.EOS_ID and len(out.tokens) == 4


@pytest.mark.parametrize("a,b", [(12, 12), (-3, 41), (0, 99999)])
def test_any_product(a, b):
    assert chat(f"Compute {a} multiplied by {b}.").content == str(a * b)


def test_thinking_goes_to_reasoning_with_a_parser_and_to_content_without():
    parsed = chat("Compute 7 multiplied by 19.", thinking=True, reasoning_parser=True)
    assert parsed.content == "133" and parsed.reasoning == model.REASONING_TEXT
    raw = chat("Compute 7 multiplied by 19.", thinking=True, reasoning_parser=False)
    assert raw.content == model.REASONING_TEXT + "</think>133" and raw.reasoning is None


def test_forced_and_auto_tool_calls():
    for choice, finish in (("get_weather", "stop"), ("auto", "tool_calls"), ("required", "tool_calls")):
        out = chat("Use get_weather for Paris.", tools=[WEATHER], tool_choice=choice)
        assert out.finish_reason == finish and out.content is None
        assert out.tool_call == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert chat("Tell me a story.", tools=[WEATHER], tool_choice="auto").tool_call is None
    assert chat("Use get_weather for Paris.", tools=[WEATHER], tool_choice="none").tool_call is None


def test_tool_arguments_from_schema():
    schema = {"properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["C", "F"]},
                             "alerts": {"type": "boolean"}}}
    assert model.tool_arguments(schema, "Forecast for New York over 5 days") == {
        "city": "New York", "days": 5, "unit": "C", "alerts": True}


def test_truncated_tool_call_becomes_text():
    out = chat("Use get_weather for Paris.", Sampling(3), tools=[WEATHER], tool_choice="get_weather")
    assert out.finish_reason == "length" and out.tool_call is None and len(out.tokens) == 3 and out.content


def test_retrieval_canary_of_the_gate():
    filler = "A deterministic context sentence for retrieval validation. " * 900
    out = complete(filler + "Secret code: R0B0TLAB-DSVF-NVFP4-7319 " + filler + "Reply with the secret code only.",
                   Sampling(48))
    assert out.content == "R0B0TLAB-DSVF-NVFP4-7319" and out.finish_reason == "stop"


def test_niah_needle_and_question():
    text = ("A secret verification code appears exactly once." + " The archival record is calm." * 50
            + "\nIMPORTANT SECRET VERIFICATION CODE: R0B0-NIAH-7K3M\n" + " The archival record is calm." * 50
            + "\nQuestion: What is the secret verification code? Reply with only the code, nothing else.")
    assert "R0B0-NIAH-7K3M" in complete(text, Sampling(64)).content
    # no question -> no code
    assert "R0B0-NIAH-7K3M" not in (complete("Secret code: R0B0-NIAH-7K3M. Nice weather.", Sampling(64)).content)


def test_max_tokens_is_always_honoured():
    rng = random.Random(7)
    for i in range(200):
        max_tokens = rng.randrange(1, 80)
        out = complete(f"prompt number {i}", Sampling(max_tokens))
        assert len(out.tokens) <= max_tokens
        assert out.finish_reason == ("length" if len(out.tokens) == max_tokens and out.tokens[-1].id != tok.EOS_ID
                                     else "stop")
    out = complete("anything", Sampling(500, ignore_eos=True))
    assert len(out.tokens) == 500 and out.finish_reason == "length" and tok.EOS_ID not in [t.id for t in out.tokens]


def test_natural_ending_is_eos_and_deterministic():
    a = complete("Tell me about the harbor.", Sampling(1000))
    b = complete("Tell me about the harbor.", Sampling(1000))
    assert a.finish_reason == "stop" and a.tokens[-1].id == tok.EOS_ID and 13 <= len(a.tokens) <= 80
    assert [t.id for t in a.tokens] == [t.id for t in b.tokens]
    assert a.content != complete("Tell me about the meadow.", Sampling(1000)).content


def test_seed_matters_only_with_temperature():
    greedy = [complete("x", Sampling(30, temperature=0.0, seed=s)).content for s in (1, 2)]
    sampled = [complete("x", Sampling(30, temperature=0.8, seed=s)).content for s in (1, 2)]
    assert greedy[0] == greedy[1] and sampled[0] != sampled[1]


def test_stop_strings():
    full = complete("Tell me about the harbor.", Sampling(1000)).content
    word = full.split()[3]
    out = complete("Tell me about the harbor.", Sampling(1000, stop=(word,)))
    assert out.finish_reason == "stop" and out.stop_reason == word
    assert out.content == full[:full.index(word)]
    assert len(out.tokens) < len(tok.encode(full))


def test_speculative_counters_are_consistent():
    for n in (1, 2, 17, 400):
        stats = model.speculate(n, 6, random.Random(n))
        assert stats.draft_tokens == 6 * stats.drafts
        assert sum(stats.per_position) == stats.accepted <= stats.draft_tokens
        assert 1 + stats.drafts + stats.accepted == n
        assert stats.per_position == sorted(stats.per_position, reverse=True)
    assert model.speculate(50, 0, random.Random(1)).drafts == 0
