"""Checkpoint verification against the simulator's realistic small DeepSeek-V4-Flash checkpoint."""
from __future__ import annotations

import builtins
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _model_checkpoint as mc
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError

sys.path.insert(0, str(Path(__file__).resolve().parents[5] / "sim"))
from dspark_sim import checkpoint  # noqa: E402

RANK = "sim01-worker"
OTHER = "0123456789abcdef0123456789abcdef01234567"
SHARD7 = "model-00007-of-00048.safetensors"


@pytest.fixture(name="model")
def _model(tmp_path):
    return checkpoint.write(tmp_path)


def index_of(model):
    return json.loads((model / "model.safetensors.index.json").read_text())


def write_index(model, index):
    (model / "model.safetensors.index.json").write_text(json.dumps(index))


def expect(**kwargs):
    base = {"revision": checkpoint.MODEL_REVISION, "config": dict(checkpoint.CONFIG)}
    base.update(kwargs)
    return mc.Expected(**base)


def run(model, **kwargs):
    return mc.verify(str(model), expect(**kwargs), RANK)


def messages(report):
    return [m.message for m in report.mismatches]


def items(report):
    return [m.item for m in report.mismatches]


# --- a good checkpoint -------------------------------------------------------------------------


def test_good_checkpoint_passes_and_reports_what_it_holds(model):
    total = index_of(model)["metadata"]["total_size"]
    report = run(model, total_size=total)
    assert report.mismatches == []
    cp = report.checkpoint()
    assert cp["path"] == str(model)
    assert cp["revision"] == checkpoint.MODEL_REVISION
    assert cp["shard_count"] == 48
    assert cp["total_size"] == total
    assert cp["bytes_on_disk"] == sum(p.stat().st_size for p in model.glob("model-*.safetensors"))
    assert cp["config"] == checkpoint.CONFIG
    assert cp["deep"] is False and "shard_sha256" not in cp


def test_default_mode_reads_nothing_from_the_shards(model, monkeypatch):
    opened = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    assert run(model).mismatches == []
    assert opened, "the spy saw nothing: the marker, config and index must be read through open()"
    assert not [p for p in opened if p.endswith(".safetensors")]


def test_symlinked_shards_are_followed(model, tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (model / SHARD7).rename(blobs / "abc")
    (model / SHARD7).symlink_to(blobs / "abc")
    assert run(model).mismatches == []


# --- revision marker ---------------------------------------------------------------------------


def test_wrong_revision(model):
    (model / checkpoint.REVISION_MARKER).write_text(OTHER + "\n")
    report = run(model)
    assert items(report) == ["model revision"]
    m = report.mismatches[0]
    assert (m.actual, m.expected) == (OTHER, checkpoint.MODEL_REVISION)
    assert m.message.startswith(f"rank {RANK}: model revision is {OTHER}, pinned {checkpoint.MODEL_REVISION}")
    assert report.revision == OTHER


def test_revision_compares_without_case(model):
    (model / checkpoint.REVISION_MARKER).write_text(checkpoint.MODEL_REVISION.upper())
    assert run(model).mismatches == []


def test_missing_marker(model):
    (model / checkpoint.REVISION_MARKER).unlink()
    report = run(model)
    assert items(report) == ["model revision"]
    assert report.mismatches[0].actual is None
    assert messages(report)[0].startswith(f"rank {RANK}: model revision is absent, pinned {checkpoint.MODEL_REVISION}")
    assert report.revision is None


def test_empty_marker(model):
    (model / checkpoint.REVISION_MARKER).write_text("\n")
    assert [m.actual for m in run(model).mismatches] == ["empty"]


def test_custom_marker_name_and_bad_marker_names(model):
    (model / checkpoint.REVISION_MARKER).rename(model / "REVISION")
    assert run(model, revision_marker="REVISION").mismatches == []
    for bad in ("../REVISION", "/etc/hostname", ""):
        with pytest.raises(CheckError, match=f"rank {RANK}: revision_marker"):
            run(model, revision_marker=bad)


# --- config.json -------------------------------------------------------------------------------


def test_config_key_mismatch(model):
    config = dict(checkpoint.CONFIG, num_hidden_layers=42)
    (model / "config.json").write_text(json.dumps(config))
    report = run(model)
    assert messages(report) == [f"rank {RANK}: config.json num_hidden_layers is 42, pinned 43"]
    assert report.config["num_hidden_layers"] == 42


def test_config_missing_key_and_list_and_type_differences(model):
    config = dict(checkpoint.CONFIG, architectures=["DeepseekV3ForCausalLM"])
    del config["expert_dtype"]
    (model / "config.json").write_text(json.dumps(config))
    report = run(model, config=dict(checkpoint.CONFIG, n_routed_experts="256"))
    got = {m.item: m for m in report.mismatches}
    assert set(got) == {"config.json architectures", "config.json expert_dtype", "config.json n_routed_experts"}
    assert got["config.json architectures"].actual == ["DeepseekV3ForCausalLM"]
    assert got["config.json expert_dtype"].message == f"rank {RANK}: config.json expert_dtype is absent, pinned fp4"
    assert "a JSON number, pinned a JSON string" in got["config.json n_routed_experts"].message
    assert report.config["expert_dtype"] is None


def test_duplicate_key_config_is_rejected(model):
    text = (model / "config.json").read_text()
    (model / "config.json").write_text(text.replace('"model_type"', '"num_hidden_layers": 43, "model_type"', 1))
    json.loads((model / "config.json").read_text())  # plain json would accept it
    report = run(model)
    assert items(report) == ["config.json"]
    m = report.mismatches[0]
    assert m.actual == "not strict JSON" and 'duplicate key "num_hidden_layers"' in m.reason
    assert "$.num_hidden_layers" in m.reason  # the shared reader names the JSON path
    assert m.message.startswith(f"rank {RANK}: config.json is not strict JSON, expected present and strict JSON")


def test_nan_config_is_rejected_and_absent_config_reported(model):
    (model / "config.json").write_text('{"model_type": "deepseek_v4", "rope_theta": NaN}')
    reason = run(model, config={"model_type": "deepseek_v4"}).mismatches[0].reason
    assert "NaN" in reason and "$.rope_theta" in reason
    (model / "config.json").unlink()
    report = run(model)
    assert items(report) == ["config.json"] and report.mismatches[0].actual == "absent"
    assert report.config == {key: None for key in checkpoint.CONFIG}


def test_config_that_is_not_an_object(model):
    (model / "config.json").write_text("[1, 2]")
    assert [m.actual for m in run(model).mismatches] == ["a JSON list"]


@pytest.mark.parametrize("text, needle", [
    ('{"model_type": "deepseek_v4", "rope_theta": 1e400}', "$.rope_theta"),
    ('{"model_type": "deepseek_v4", "scaling": {"x": 1, "x": 2}}', "$.scaling.x"),
    (b'{"model_type": "\xff"}', "not UTF-8"),
])
def test_config_refused_by_the_strict_reader(model, text, needle):
    path = model / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    report = run(model, config={"model_type": "deepseek_v4"})
    assert [(m.item, m.actual) for m in report.mismatches] == [("config.json", "not strict JSON")]
    assert needle in report.mismatches[0].reason


def test_config_value_of_another_json_type_names_both_types(model):
    report = run(model, config={"num_hidden_layers": "43", "model_type": ["deepseek_v4"]})
    reasons = {m.item: m.reason for m in report.mismatches}
    assert reasons["config.json num_hidden_layers"] == "a JSON number, pinned a JSON string"
    assert reasons["config.json model_type"] == "a JSON string, pinned a JSON list"


# --- index -------------------------------------------------------------------------------------


def test_index_naming_an_unexpected_shard(model):
    index = index_of(model)
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "model-00049-of-00048.safetensors"
    write_index(model, index)
    report = run(model)
    assert messages(report) == [
        f"rank {RANK}: shard model-00049-of-00048.safetensors in model.safetensors.index.json is present, "
        "pinned absent (not one of the 48 pinned shards)"
    ]
    assert report.shard_count == 49


def test_index_missing_a_shard(model):
    index = index_of(model)
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != SHARD7}
    write_index(model, index)
    report = run(model)
    assert items(report) == [f"shard {SHARD7} in model.safetensors.index.json"]
    assert report.mismatches[0].message.startswith(
        f"rank {RANK}: shard {SHARD7} in model.safetensors.index.json is absent, pinned present")


def test_index_without_weight_map_or_broken(model):
    write_index(model, {"metadata": {"total_size": 1}})
    report = run(model)
    assert items(report) == ["model.safetensors.index.json weight_map"]
    assert report.mismatches[0].actual == "absent"
    (model / "model.safetensors.index.json").write_text('{"weight_map": {"a": "x"}, "weight_map": {}}')
    assert run(model).mismatches[0].actual == "not strict JSON"
    assert "$.weight_map" in run(model).mismatches[0].reason
    (model / "model.safetensors.index.json").unlink()
    report = run(model)
    assert items(report) == ["model.safetensors.index.json"] and report.shard_count is None


def test_other_shard_count_and_index_name(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    names = mc.shard_names(3)
    assert names == ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                     "model-00003-of-00003.safetensors"]
    for name in names:
        (model / name).write_bytes(b"x")
    (model / "idx.json").write_text(json.dumps({"weight_map": {f"t{i}": n for i, n in enumerate(names)}}))
    (model / "config.json").write_text("{}")
    (model / checkpoint.REVISION_MARKER).write_text(checkpoint.MODEL_REVISION)
    report = mc.verify(str(model), mc.Expected(revision=checkpoint.MODEL_REVISION, shard_count=3,
                                               index_file="idx.json"), RANK)
    assert report.mismatches == [] and report.shard_count == 3 and report.bytes_on_disk == 3


# --- shard files -------------------------------------------------------------------------------


def test_missing_shard_file_names_the_shard(model):
    (model / SHARD7).unlink()
    report = run(model)
    assert messages(report) == [f"rank {RANK}: shard {SHARD7} is absent, pinned present and non-empty"]


def test_empty_shard(model):
    (model / SHARD7).write_bytes(b"")
    report = run(model)
    assert items(report) == [f"shard {SHARD7}"]
    assert report.mismatches[0].actual == "empty (0 bytes)"


def test_shard_that_is_a_directory_or_a_dangling_link(model):
    (model / SHARD7).unlink()
    (model / SHARD7).mkdir()
    (model / "model-00008-of-00048.safetensors").unlink()
    (model / "model-00008-of-00048.safetensors").symlink_to(model / "gone")
    report = run(model)
    assert [m.actual for m in report.mismatches] == ["not a regular file (a directory)", None]
    assert "symlink" in report.mismatches[1].reason


def test_total_size_mismatch(model):
    total = index_of(model)["metadata"]["total_size"]
    report = run(model, total_size=total + 1)
    assert messages(report) == [
        f"rank {RANK}: model.safetensors.index.json metadata.total_size is {total}, pinned {total + 1}"]
    index = index_of(model)
    del index["metadata"]
    write_index(model, index)
    report = run(model, total_size=total)
    assert [m.actual for m in report.mismatches] == [None] and report.total_size is None


# --- the directory itself ----------------------------------------------------------------------


def test_absent_directory_is_one_mismatch(tmp_path):
    report = mc.verify(str(tmp_path / "nope"), expect(), RANK)
    assert messages(report) == [f"rank {RANK}: checkpoint directory {tmp_path / 'nope'} is absent, "
                                "expected a readable directory"]


def test_path_that_is_a_file_is_not_a_directory(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    report = mc.verify(str(path), expect(), RANK)
    assert [m.actual for m in report.mismatches] == ["not a directory (a regular file)"]


def test_unreadable_directory(model, monkeypatch):
    # Tests run as root, where os.access says yes whatever the mode bits; so this checks how the
    # module acts on os.access's answer rather than chmod 000.
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if os.fspath(p) == str(model) else real_access(p, mode))
    report = run(model)
    assert [m.actual for m in report.mismatches] == ["unreadable"]
    assert report.mismatches[0].item == f"checkpoint directory {model}"


# --- every fault together ----------------------------------------------------------------------


def test_all_mismatches_are_reported_together(model):
    (model / checkpoint.REVISION_MARKER).write_text(OTHER)
    (model / SHARD7).unlink()
    (model / "config.json").write_text(json.dumps(dict(checkpoint.CONFIG, model_type="deepseek_v3")))
    report = run(model, total_size=1)
    assert items(report) == ["model revision", "config.json model_type", f"shard {SHARD7}",
                             "model.safetensors.index.json metadata.total_size"]


# --- deep mode ---------------------------------------------------------------------------------


def real_hashes(model):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(model.glob("model-*.safetensors"))}


def test_deep_mode_hashes_match_hashlib(model):
    report = run(model, deep=True)
    assert report.mismatches == []
    assert report.shard_sha256 == real_hashes(model)
    assert len(report.shard_sha256) == 48
    assert report.checkpoint()["shard_sha256"] == report.shard_sha256


def test_deep_mode_wrong_expected_hash_names_the_shard(model):
    hashes = real_hashes(model)
    hashes[SHARD7] = "f" * 64
    report = run(model, deep=True, shard_sha256=hashes)
    assert messages(report) == [
        f"rank {RANK}: shard {SHARD7} sha256 is {real_hashes(model)[SHARD7]}, pinned {'f' * 64}"]


def test_deep_mode_passes_with_right_hashes_and_skips_missing_shards(model):
    hashes = real_hashes(model)
    (model / SHARD7).unlink()
    report = run(model, deep=True, shard_sha256={k: v.upper() for k, v in hashes.items()})
    assert items(report) == [f"shard {SHARD7}"]
    assert SHARD7 not in report.shard_sha256 and len(report.shard_sha256) == 47


def test_expected_hashes_must_cover_exactly_the_pinned_shards(model):
    hashes = real_hashes(model)
    del hashes[SHARD7]
    with pytest.raises(CheckError, match="no hash for 1 pinned shards"):
        run(model, deep=True, shard_sha256=hashes)
    with pytest.raises(CheckError, match="not 64-hex"):
        run(model, deep=True, shard_sha256=dict(real_hashes(model), **{SHARD7: "abc"}))


def test_expected_hashes_without_deep_warn(model):
    report = run(model, shard_sha256=real_hashes(model))
    assert report.mismatches == [] and report.shard_sha256 is None
    assert report.warnings and "deep" in report.warnings[0]


def test_progress_file_is_written_and_valid_json(model, tmp_path):
    progress = tmp_path / "progress" / "p.json"
    progress.parent.mkdir()
    report = run(model, deep=True, progress_path=str(progress))
    data = json.loads(progress.read_text())
    total = sum(p.stat().st_size for p in model.glob("model-*.safetensors"))
    assert data["shards_done"] == data["shards_total"] == 48
    assert data["done_bytes"] == data["total_bytes"] == total
    assert data["shard"] == "model-00048-of-00048.safetensors"
    assert isinstance(data["updated"], int) and data["updated"] > 0
    assert report.mismatches == []
    assert os.listdir(progress.parent) == ["p.json"]  # no temp file left


def test_progress_is_throttled_within_a_shard_and_forced_after_it(tmp_path):
    now = [100.0]
    path = tmp_path / "p.json"
    progress = mc.Progress(str(path), 2, 10, RANK, clock=lambda: now[0], wall=lambda: 1234.0)
    progress.write(force=True)
    assert json.loads(path.read_text())["done_bytes"] == 0
    progress.begin("a")
    now[0] += 1.0
    progress.advance(3)
    assert json.loads(path.read_text())["done_bytes"] == 0  # within 2 s: not written
    now[0] += 1.5
    progress.advance(2)
    assert json.loads(path.read_text())["done_bytes"] == 5
    progress.advance(1)
    assert json.loads(path.read_text())["done_bytes"] == 5
    progress.shard_done()
    assert json.loads(path.read_text()) == {"shard": "a", "done_bytes": 6, "total_bytes": 10, "shards_done": 1,
                                            "shards_total": 2, "updated": 1234}


def test_unwritable_progress_path_is_a_check_error(model, tmp_path):
    with pytest.raises(CheckError, match=f"rank {RANK}: cannot write progress file"):
        run(model, deep=True, progress_path=str(tmp_path / "no" / "such" / "dir" / "p.json"))


# --- helpers and option validation -------------------------------------------------------------


@pytest.mark.parametrize("revision", ["9e165c30", "z" * 40, checkpoint.MODEL_REVISION + "0"])
def test_malformed_expected_revision_is_refused(model, revision):
    with pytest.raises(CheckError, match=f"rank {RANK}: expected_revision"):
        run(model, revision=revision)


def test_bad_shard_count_and_total_size_are_refused(model):
    with pytest.raises(CheckError, match="expected_shard_count"):
        run(model, shard_count=0)
    with pytest.raises(CheckError, match="expected_total_size"):
        run(model, total_size=-1)
