# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError
from ansible_collections.gb10.dspark.plugins.module_utils.identity._runtime_manifest import (
    IDENTITY_FIELDS,
    Expectation,
    normalize_sha256,
    read_manifest,
    verify,
)

SIM_MANIFEST = Path(__file__).resolve().parents[5] / "sim" / "engine" / "runtime-manifest.vllm-sim.3.json"
RANK = "sim01-worker"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(name="sim_bytes")
def _sim_bytes() -> bytes:
    return SIM_MANIFEST.read_bytes()


@pytest.fixture(name="sim_doc")
def _sim_doc(sim_bytes) -> dict:
    return json.loads(sim_bytes)


def _pinned(doc: dict, sha: str, **overrides) -> Expectation:
    """What a role would pass: the sim pin's identity fields and a few production profile values."""
    values = {
        "sha256": sha,
        "identity": {key: doc[key] for key in IDENTITY_FIELDS},
        "profile_section": "production_profile",
        "profile": {key: doc["production_profile"][key]
                    for key in ("max_model_len", "max_num_seqs", "gpu_memory_utilization", "cudagraph_strict",
                                "cudagraph_implementation")},
    }
    values.update(overrides)
    return Expectation(**values)


def _write(tmp_path: Path, data: bytes | str, name: str = "runtime-manifest.json") -> str:
    target = tmp_path / name
    target.write_bytes(data.encode() if isinstance(data, str) else data)
    return str(target)


def _items(report) -> list[str]:
    return [m.item for m in report.mismatches]


def test_sim_manifest_passes_with_its_real_sha256(sim_bytes, sim_doc, tmp_path):
    path = _write(tmp_path, sim_bytes)
    report = verify(path, _pinned(sim_doc, _sha(sim_bytes)), RANK)
    assert report.mismatches == []
    assert report.sha256 == _sha(sim_bytes)
    assert report.manifest["schema_version"] == sim_doc["schema_version"]
    for key in IDENTITY_FIELDS:
        assert report.manifest[key] == sim_doc[key]
    assert report.manifest["production_profile"] == sim_doc["production_profile"]
    assert "long_context_profile" not in report.manifest
    assert report.result()["mismatches"] == []


def test_the_sim_manifest_itself_verifies_in_place(sim_bytes, sim_doc):
    report = verify(str(SIM_MANIFEST), _pinned(sim_doc, "sha256:" + _sha(sim_bytes).upper()), RANK)
    assert report.mismatches == []


def test_every_profile_section_of_the_sim_manifest_matches_itself(sim_bytes, sim_doc):
    sections = [k for k, v in sim_doc.items() if isinstance(v, dict)]
    assert sections
    for section in sections:
        report = verify(str(SIM_MANIFEST), _pinned(sim_doc, _sha(sim_bytes), profile_section=section,
                                                   profile=dict(sim_doc[section])), RANK)
        assert report.mismatches == [], section


def test_one_byte_change_fails_the_sha256_and_names_both_digests(sim_bytes, sim_doc, tmp_path):
    tampered = sim_bytes.replace(b'"simulator"', b'"simulatoR"')
    assert len(tampered) == len(sim_bytes) and tampered != sim_bytes
    report = verify(_write(tmp_path, tampered), _pinned(sim_doc, _sha(sim_bytes)), RANK)
    assert _items(report) == ["runtime manifest sha256"]
    mismatch = report.mismatches[0]
    assert mismatch.expected == _sha(sim_bytes)
    assert mismatch.actual == _sha(tampered) == report.sha256
    assert mismatch.message.startswith(f"rank {RANK}: runtime manifest sha256 is {_sha(tampered)}, "
                                       f"pinned {_sha(sim_bytes)}")
    assert str(tmp_path) in mismatch.message


def test_changed_fields_are_all_reported_with_the_sha256(sim_bytes, sim_doc, tmp_path):
    doc = json.loads(sim_bytes)
    doc["kv_cache_dtype"] = "fp8"
    doc["production_profile"]["max_num_seqs"] = 8
    data = json.dumps(doc, indent=2)
    report = verify(_write(tmp_path, data), _pinned(sim_doc, _sha(sim_bytes)), RANK)
    assert _items(report) == [
        "runtime manifest sha256",
        "runtime manifest kv_cache_dtype",
        "runtime manifest production_profile.max_num_seqs",
    ]
    sha, kv, seqs = report.mismatches
    assert (sha.expected, sha.actual) == (_sha(sim_bytes), _sha(data.encode()))
    assert (kv.expected, kv.actual, kv.expected_word) == (sim_doc["kv_cache_dtype"], "fp8", "pinned")
    assert kv.message == f"rank {RANK}: runtime manifest kv_cache_dtype is fp8, pinned {sim_doc['kv_cache_dtype']}"
    assert (seqs.expected, seqs.actual, seqs.expected_word) == (sim_doc["production_profile"]["max_num_seqs"], 8,
                                                                "expected")
    assert seqs.message == (f"rank {RANK}: runtime manifest production_profile.max_num_seqs is 8, "
                            f"expected {sim_doc['production_profile']['max_num_seqs']}")
    assert report.manifest["kv_cache_dtype"] == "fp8"


def test_schema_version_and_vllm_version_and_max_model_len(sim_doc, tmp_path):
    doc = dict(sim_doc)
    doc["schema_version"] = 2
    doc["vllm_version"] = "0.26.0+dspark.sm121.2"
    doc["production_profile"] = dict(sim_doc["production_profile"], max_model_len=262144)
    data = json.dumps(doc)
    report = verify(_write(tmp_path, data), _pinned(sim_doc, _sha(data.encode())), RANK)
    assert _items(report) == [
        "runtime manifest schema_version",
        "runtime manifest vllm_version",
        "runtime manifest production_profile.max_model_len",
    ]
    assert report.mismatches[0].message == f"rank {RANK}: runtime manifest schema_version is 2, expected 3"


def test_expected_schema_version_is_honoured(sim_bytes, sim_doc):
    report = verify(str(SIM_MANIFEST), _pinned(sim_doc, _sha(sim_bytes), schema_version=4), RANK)
    assert _items(report) == ["runtime manifest schema_version"]
    assert (report.mismatches[0].expected, report.mismatches[0].actual) == (4, sim_doc["schema_version"])


def _profile_doc(tmp_path, **profile) -> tuple[str, str]:
    data = json.dumps({"schema_version": 3, "production_profile": profile})
    return _write(tmp_path, data), _sha(data.encode())


@pytest.mark.parametrize("manifest_value, expected_value", [
    (16, "16"),
    ("16", 16),
    (True, 1),
    (1, True),
    (False, 0),
    (None, 0),
    (0.835, "0.835"),
    ([1, 2], [1, 2, 3]),
    ({"a": 1}, {"a": "1"}),
])
def test_profile_values_are_compared_by_json_type(tmp_path, manifest_value, expected_value):
    path, sha = _profile_doc(tmp_path, value=manifest_value)
    report = verify(path, Expectation(sha256=sha, profile_section="production_profile",
                                      profile={"value": expected_value}), RANK)
    assert _items(report) == ["runtime manifest production_profile.value"]
    mismatch = report.mismatches[0]
    assert (mismatch.expected, mismatch.actual, mismatch.expected_word) == (expected_value, manifest_value, "expected")


def test_type_mismatch_says_which_types(tmp_path):
    path, sha = _profile_doc(tmp_path, max_num_seqs=16)
    report = verify(path, Expectation(sha256=sha, profile_section="production_profile",
                                      profile={"max_num_seqs": "16"}), RANK)
    assert report.mismatches[0].message == (f"rank {RANK}: runtime manifest production_profile.max_num_seqs is 16, "
                                            "expected 16 (number in the manifest, string expected)")


@pytest.mark.parametrize("manifest_value, expected_value", [
    (16, 16.0),
    (16.0, 16),
    (0.835, 0.835),
    (True, True),
    ("regular", "regular"),
    (None, None),
    ([1, "a", {"b": False}], [1.0, "a", {"b": False}]),
])
def test_equal_values_pass(tmp_path, manifest_value, expected_value):
    path, sha = _profile_doc(tmp_path, value=manifest_value)
    report = verify(path, Expectation(sha256=sha, profile_section="production_profile",
                                      profile={"value": expected_value}), RANK)
    assert report.mismatches == []


def test_missing_identity_key_and_profile_key_are_reported_as_absent(sim_bytes, sim_doc):
    expectation = _pinned(sim_doc, _sha(sim_bytes), identity={"vllm_commit": "568afb3a"},
                          profile={"mtp_tokens": 6, "not_in_manifest": 1})
    report = verify(str(SIM_MANIFEST), expectation, RANK)
    assert _items(report) == ["runtime manifest vllm_commit", "runtime manifest production_profile.not_in_manifest"]
    assert report.mismatches[0].actual is None
    assert report.mismatches[0].message == (f"rank {RANK}: runtime manifest vllm_commit is absent, pinned 568afb3a "
                                            "(key missing from the manifest)")


def test_missing_profile_section(sim_bytes, sim_doc):
    expectation = _pinned(sim_doc, _sha(sim_bytes), profile_section="c1_qualification_profile")
    report = verify(str(SIM_MANIFEST), expectation, RANK)
    assert _items(report) == ["runtime manifest c1_qualification_profile"]
    assert "section missing" in report.mismatches[0].message
    assert "c1_qualification_profile" not in report.manifest


def test_profile_section_that_is_not_an_object(tmp_path):
    data = json.dumps({"schema_version": 3, "production_profile": [1]})
    report = verify(_write(tmp_path, data), Expectation(sha256=_sha(data.encode()),
                                                        profile_section="production_profile"), RANK)
    assert _items(report) == ["runtime manifest production_profile"]
    assert "array in the manifest" in report.mismatches[0].reason


def test_profile_without_section_is_an_option_error(sim_bytes):
    with pytest.raises(CheckError, match=f"rank {RANK}: profile is set but profile_section is not"):
        verify(str(SIM_MANIFEST), Expectation(sha256=_sha(sim_bytes), profile={"max_num_seqs": 16}), RANK)


def test_duplicate_nested_key_is_reported_with_its_path(sim_bytes, sim_doc, tmp_path):
    # A shadowing duplicate: a lenient reader would see the last max_num_seqs only.
    tampered = sim_bytes.replace(b'"max_num_seqs": 16,', b'"max_num_seqs": 16, "max_num_seqs": 64,', 1)
    assert tampered != sim_bytes
    report = verify(_write(tmp_path, tampered), _pinned(sim_doc, _sha(sim_bytes)), RANK)
    assert _items(report) == ["runtime manifest sha256", "runtime manifest content"]
    content = report.mismatches[1]
    assert content.actual == "not strict JSON"
    assert '"max_num_seqs"' in content.message and "$.production_profile.max_num_seqs" in content.message
    assert str(tmp_path) in content.message and content.message.startswith(f"rank {RANK}: ")
    line = sim_bytes[:sim_bytes.index(b'"max_num_seqs": 16,')].count(b"\n") + 1
    assert f"(lines {line} and {line})" in content.message  # the file, the key and both lines
    assert report.manifest == {}


def test_duplicate_top_level_key_is_refused_even_when_the_sha256_is_pinned(sim_doc, tmp_path):
    data = json.dumps(sim_doc, indent=2)[:-2] + ',\n  "kv_cache_dtype": "fp8"\n}'
    report = verify(_write(tmp_path, data), _pinned(sim_doc, _sha(data.encode())), RANK)
    assert _items(report) == ["runtime manifest content"]
    assert "$.kv_cache_dtype" in report.mismatches[0].message
    lines = data.splitlines()
    first = next(n for n, text in enumerate(lines, 1) if text.startswith('  "kv_cache_dtype"'))
    assert f'duplicate key "kv_cache_dtype" at $.kv_cache_dtype (lines {first} and {len(lines) - 1})' \
        in report.mismatches[0].message


def test_nan_is_refused(sim_doc, tmp_path):
    doc = json.loads(json.dumps(sim_doc))
    doc["production_profile"]["gpu_memory_utilization"] = float("nan")
    data = json.dumps(doc)  # the standard library writes NaN
    assert "NaN" in data
    report = verify(_write(tmp_path, data), _pinned(sim_doc, _sha(data.encode())), RANK)
    assert _items(report) == ["runtime manifest content"]
    assert "NaN at $.production_profile.gpu_memory_utilization" in report.mismatches[0].message


def test_top_level_array_is_refused(tmp_path):
    data = "[]"
    report = verify(_write(tmp_path, data), Expectation(sha256=_sha(data.encode())), RANK)
    assert _items(report) == ["runtime manifest content"]
    assert "not an object" in report.mismatches[0].message


def test_missing_file_names_rank_and_path(tmp_path, sim_bytes):
    path = str(tmp_path / "absent.json")
    report = verify(path, Expectation(sha256=_sha(sim_bytes)), RANK)
    assert report.sha256 is None and report.manifest == {}
    assert _items(report) == ["runtime manifest sha256"]
    message = report.mismatches[0].message
    assert message.startswith(f"rank {RANK}: runtime manifest sha256 is absent, pinned {_sha(sim_bytes)}")
    assert path in message and "No such file" in message


def test_directory_is_unreadable(tmp_path, sim_bytes):
    report = verify(str(tmp_path), Expectation(sha256=_sha(sim_bytes)), RANK)
    assert _items(report) == ["runtime manifest sha256"]
    assert f"cannot read {tmp_path}" in report.mismatches[0].message


@pytest.mark.parametrize("given", ["sha256:" + "A" * 64, "a" * 64, "  " + "b" * 64 + "\n", "SHA256:" + "c" * 64])
def test_normalize_sha256_accepts_prefix_and_case(given):
    assert normalize_sha256(given, RANK) == given.strip().lower().removeprefix("sha256:")


@pytest.mark.parametrize("given", ["", "abc", "g" * 64, "a" * 63, "sha512:" + "a" * 64, "sha256:" + "a" * 65])
def test_normalize_sha256_refuses_what_is_not_a_digest(given):
    with pytest.raises(CheckError, match=f"^rank {RANK}: expected_sha256 .* is not a sha256 digest"):
        normalize_sha256(given, RANK)


def test_read_manifest_streams_the_whole_file_and_keeps_only_small_ones(tmp_path):
    data = bytes(range(256)) * (3 * 4096 + 7)  # about 3 MiB, several chunks
    path = _write(tmp_path, data, "big.bin")
    assert read_manifest(path) == (_sha(data), data)
    assert read_manifest(path, limit=1024) == (_sha(data), None)
    assert read_manifest(path, limit=len(data)) == (_sha(data), data)
