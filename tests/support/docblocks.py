"""Command blocks of the documentation, taken verbatim, for the tests that run them as written."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path


def block_after(path: Path, marker: str, lang: str = "sh", end: str | None = None) -> str:
    """The first fenced ``lang`` block after the text ``marker`` in ``path`` (and before ``end``, when given),
    dedented as a list item's block is; an AssertionError names what is missing."""
    text = path.read_text()
    start = text.find(marker)
    assert start >= 0, f"{path.name} no longer says {marker!r}"
    stop = text.find(end, start + len(marker)) if end else -1
    scope = text[start:stop] if stop >= 0 else text[start:]
    match = re.search(rf"^([ \t]*)```{re.escape(lang)}\n(.*?)^\1```[ \t]*$", scope, flags=re.M | re.S)
    assert match, f"{path.name}: no {lang} block after {marker!r}"
    return textwrap.dedent(match[2])
