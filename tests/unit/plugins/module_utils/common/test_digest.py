# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one streaming sha256 of a file."""
from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import CHUNK, sha256_file, sha256_text


def test_matches_hashlib(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc" * 700_000)
    assert sha256_file(str(p)) == hashlib.sha256(p.read_bytes()).hexdigest()


def test_reads_bounded_chunks_of_the_default_size(tmp_path):
    blob = os.urandom(CHUNK * 2 + 12345)
    path = tmp_path / "big"
    path.write_bytes(blob)
    seen = []
    assert sha256_file(str(path), seen.append) == hashlib.sha256(blob).hexdigest()
    assert sum(seen) == len(blob) and max(seen) <= CHUNK and len(seen) == 3
    assert CHUNK == 1 << 20


@pytest.mark.parametrize("chunk", [1, 7, 4096, 10_000, 10_001])
def test_any_chunk_size_gives_the_same_digest(tmp_path, chunk):
    blob = os.urandom(10_000)
    path = tmp_path / "f"
    path.write_bytes(blob)
    seen = []
    assert sha256_file(str(path), seen.append, chunk=chunk) == hashlib.sha256(blob).hexdigest()
    assert sum(seen) == len(blob) and max(seen) <= chunk


def test_empty_file_hashes_without_a_chunk_callback(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    seen = []
    assert sha256_file(str(path), seen.append) == hashlib.sha256(b"").hexdigest()
    assert seen == []


def test_different_content_gives_a_different_digest(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"x" * 100)
    b.write_bytes(b"x" * 99 + b"y")
    assert sha256_file(str(a)) != sha256_file(str(b))


def test_missing_file_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        sha256_file(str(tmp_path / "missing"))


def test_directory_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        sha256_file(str(tmp_path))


@pytest.mark.parametrize("chunk", [0, -1])
def test_chunk_must_be_positive(tmp_path, chunk):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    with pytest.raises(ValueError, match="chunk"):
        sha256_file(str(path), chunk=chunk)


@pytest.mark.parametrize("text", ["", "abc", "vllm serve --port 8888", "ü €", "bad \udcff byte"])
def test_sha256_text_hashes_utf8_and_escaped_bytes(text):
    assert sha256_text(text) == hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def test_sha256_text_of_a_surrogate_escaped_read_matches_the_raw_bytes():
    raw = b"log \xff\xfe line\n"
    assert sha256_text(raw.decode("utf-8", "surrogateescape")) == hashlib.sha256(raw).hexdigest()


def test_the_gate_and_the_audit_hash_text_with_it():
    from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _audit
    from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_logs

    assert _runtime_gate_logs.sha256_text is sha256_text and _audit.sha256_text is sha256_text
