"""Tokenizer: exact reversibility, piece rules, id formula, special tokens, chat template."""
import pytest

from dspark_engine import template
from dspark_engine import tokenizer as tok

PALACE = ("紫禁城南北长961米，东西宽753米，四面围有高10米的城墙，城外有宽52米的护城河。"
          "紫禁城有四座城门，南面为午门，北面为神武门，东面为东华门，西面为西华门。")


@pytest.mark.parametrize("text", [
    "Hello world", " The archival record contains neutral observations.", PALACE,
    "tabs\tand\n\nnewlines   with    runs \r\n", "emoji 😀🚀 and é à ü", "\x00\x00a\x00", "lone \ud800 surrogate",
    "<｜User｜>hi</think><think>x<｜end▁of▁sentence｜>", "Secret code: R0B0TLAB-DSVF-NVFP4-7319", "", "\u3000全角",
])
def test_decode_of_encode_is_exact(text):
    assert tok.decode(tok.encode(text), skip_special_tokens=False) == text


def test_pieces_are_at_most_four_bytes_and_ids_are_bytes_plus_offset():
    text = PALACE + " Hello wonderful world 12345 !? \t\t\t\t\t 😀 \x00"
    for piece, tid in zip(tok.pieces(text), tok.encode(text)):
        raw = piece.encode("utf-8")
        assert 1 <= len(raw) <= 4
        assert tid == tok.OFFSET + int.from_bytes(raw, "big")


def test_piece_rules():
    assert tok.pieces("Hello world") == ["Hel", "lo", " wor", "ld"]
    assert tok.pieces("7*19") == ["7", "*", "1", "9"]
    assert tok.pieces("a  b") == ["a", " ", " b"]            # the space before a word joins it
    assert tok.pieces("\n\nab") == ["\n\n", "ab"]
    assert tok.pieces("      ") == ["    ", "  "]            # whitespace runs in <= 4-byte pieces
    assert tok.pieces("紫禁") == ["紫", "禁"]


def test_special_tokens_and_skipping():
    ids = tok.encode("<｜begin▁of▁sentence｜>hi</think>ok<｜end▁of▁sentence｜>")
    assert ids[0] == tok.BOS_ID and ids[-1] == tok.EOS_ID and tok.THINK_END_ID in ids
    assert tok.decode(ids) == "hi</think>ok"                  # BOS/EOS skipped, </think> kept
    assert tok.encode("hi", add_bos=True) == [tok.BOS_ID] + tok.encode("hi")
    assert tok.decode([tok.OFFSET - 1]) == ""                # reserved ids decode to nothing


def test_ids_are_distinct_for_distinct_pieces():
    samples = ["\x00", "a", "\x00a", "aa", " a", "a ", "é", "😀"]
    ids = [tok.encode(s) for s in samples]
    assert len({tuple(i) for i in ids}) == len(samples)


@pytest.mark.parametrize("bad", [[-1], [tok.MAX_ID + 1], [True], ["5"], "123"])
def test_check_ids_rejects_out_of_vocabulary(bad):
    with pytest.raises(ValueError):
        tok.check_ids(bad)


def test_foreign_bytes_decode_with_replacement():
    assert tok.decode([tok.OFFSET + 0xFF]) == "\ufffd"


def test_chat_template_is_deterministic_and_documented():
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Compute 7 multiplied by 19."}]}]
    text = template.render(msgs, thinking=False)
    assert text == ("<｜begin▁of▁sentence｜>Be brief.<｜User｜>Compute 7 multiplied by 19."
                    "<｜Assistant｜></think>")
    assert template.render(msgs, thinking=True).endswith("<｜Assistant｜><think>")
    assert not template.render(msgs, add_generation_prompt=False).endswith("</think>")
    ids = template.render_ids(msgs)
    assert ids == tok.encode(text) and ids[0] == tok.BOS_ID
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    assert len(template.render_ids(msgs, tools)) > len(ids)
    with pytest.raises(template.TemplateError):
        template.render([{"role": "wizard", "content": "x"}])
