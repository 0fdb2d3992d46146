"""Deterministic, exactly reversible tokenizer of the stand-in.

Encoding splits text into *pieces* with one regular expression (leftmost alternative wins):

1. a special-token string (``SPECIAL_TOKENS`` below), matched literally;
2. an optional single leading space plus 1-3 ASCII letters (``" ?[A-Za-z]{1,3}"``);
3. one ASCII digit;
4. a run of 1-4 ASCII whitespace characters that does not end with a space directly
   followed by an ASCII letter (that space joins the word, rule 2);
5. any other single character (punctuation, CJK, emoji, non-ASCII whitespace, NUL...).

Every piece other than a special token is at most 4 UTF-8 bytes.  A piece's id is ``OFFSET`` plus its UTF-8 bytes read
as a big-endian integer (lone surrogates are encoded with ``surrogatepass``).  The mapping is
injective: only the single-character piece U+0000 starts with a zero byte, so decoding strips
leading zero bytes except for value 0.  Decoding the ids of a text gives the text back exactly
(``skip_special_tokens=False``; with the default ``True`` the special tokens in ``SKIPPED`` are
dropped, as HF tokenizers do).  Ids ``len(SPECIAL_TOKENS)..OFFSET-1`` are reserved and decode
to nothing; ids above ``MAX_ID`` or below 0 are out of vocabulary.

Examples: ``"Hello world"`` -> ``["Hel", "lo", " wor", "ld"]``; ``"7*19"`` -> ``["7", "*",
"1", "9"]``; ``"紫禁城"`` -> three pieces of three bytes each.
"""
import re

SPECIAL_TOKENS = {
    0: "<｜begin▁of▁sentence｜>",
    1: "<｜end▁of▁sentence｜>",
    2: "<｜User｜>",
    3: "<｜Assistant｜>",
    4: "<think>",
    5: "</think>",
    6: "<｜▁pad▁｜>",
}
BOS_ID, EOS_ID, USER_ID, ASSISTANT_ID, THINK_START_ID, THINK_END_ID, PAD_ID = range(7)
# <think> and </think> are ordinary added tokens: they stay in decoded text.
SKIPPED = frozenset({BOS_ID, EOS_ID, USER_ID, ASSISTANT_ID, PAD_ID})
OFFSET = 16
MAX_ID = OFFSET + 0xFFFFFFFF

_SPECIAL_BY_TEXT = {text: tid for tid, text in SPECIAL_TOKENS.items()}
_PIECE_RE = re.compile(
    "|".join(re.escape(t) for t in sorted(_SPECIAL_BY_TEXT, key=len, reverse=True))
    + r"| ?[A-Za-z]{1,3}"
    + r"|[0-9]"
    + r"|[ \t\n\r\f\v]{1,4}(?!(?<= )[A-Za-z])"
    + r"|.",
    re.DOTALL,
)


def pieces(text):
    """Split ``text`` into pieces (see the module docstring)."""
    return _PIECE_RE.findall(text)


def _piece_id(piece):
    special = _SPECIAL_BY_TEXT.get(piece)
    if special is not None:
        return special
    return OFFSET + int.from_bytes(piece.encode("utf-8", "surrogatepass"), "big")


def encode(text, add_bos=False):
    """Token ids of ``text``; with ``add_bos`` the BOS id is prepended."""
    ids = [_piece_id(p) for p in _PIECE_RE.findall(text)]
    return [BOS_ID] + ids if add_bos else ids


def _id_bytes(tid, skip_special_tokens):
    if tid in SPECIAL_TOKENS:
        if skip_special_tokens and tid in SKIPPED:
            return b""
        return SPECIAL_TOKENS[tid].encode("utf-8")
    if tid < OFFSET:
        return b""
    value = tid - OFFSET
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode(ids, skip_special_tokens=True):
    """Text of ``ids``; invalid UTF-8 (foreign ids) is replaced by U+FFFD."""
    data = b"".join(_id_bytes(t, skip_special_tokens) for t in ids)
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")


def token_text(tid, skip_special_tokens=True):
    """Text of one token (every generated token is made of whole characters)."""
    return decode([tid], skip_special_tokens)


def check_ids(ids):
    """Raise ValueError unless ``ids`` is a list of in-vocabulary token ids."""
    if not isinstance(ids, list):
        raise ValueError("token ids must be a list of integers")
    for tid in ids:
        if not isinstance(tid, int) or isinstance(tid, bool):
            raise ValueError(f"token id {tid!r} is not an integer")
        if tid < 0 or tid > MAX_ID:
            raise ValueError(f"Token id {tid} is out of vocabulary")
