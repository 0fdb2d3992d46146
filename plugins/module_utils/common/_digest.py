# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one streaming file hash, and its one hash of a text (:func:`sha256_text`).

Files checked here run from a few bytes (a wrapper's ``FILES.json``) to tens of gigabytes (an
image archive, a checkpoint shard), so they are hashed ``chunk`` bytes at a time into one reused
buffer: memory stays bounded whatever the file's size.

Standard library only; it runs on the ranks as well as on the control node.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable

__all__ = ["CHUNK", "sha256_file", "sha256_text"]

CHUNK = 1 << 20  # 1 MiB per read


def sha256_file(path: str, on_chunk: Callable[[int], None] | None = None, chunk: int = CHUNK) -> str:
    """The hex sha256 of the file at ``path``, read ``chunk`` bytes at a time.

    ``on_chunk``, when given, is called with the byte count of every read (for progress).
    Raises ``OSError`` when the file cannot be opened or read, ``ValueError`` for a ``chunk``
    that is not positive.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be a positive byte count, not {chunk}")
    digest = hashlib.sha256()
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            if on_chunk is not None:
                on_chunk(count)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    """The hex sha256 of ``text`` as UTF-8; lone surrogates (undecodable bytes read with
    ``surrogateescape``) hash as the bytes they stand for."""
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
