"""The one atomic JSON writer (``_files``) used by the gate, the guard, NIAH rows and progress files."""
import json
import math
import os

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.common import _files as rg


def test_writer_writes_sorted_pretty_json_atomically(tmp_path):
    target = tmp_path / "runtime-gate.json"
    target.write_text("old")
    doc = {"status": "PASS", "b": [1, 2.5], "a": {"z": None, "y": True}}
    rg.write_json_atomic(str(target), doc)
    text = target.read_text()
    assert text == json.dumps(doc, sort_keys=True, indent=2) + "\n"
    assert text.index('"a"') < text.index('"b"') and json.loads(text) == doc
    assert os.listdir(tmp_path) == ["runtime-gate.json"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_writer_refuses_non_finite_numbers_and_keeps_the_old_file(tmp_path, bad):
    target = tmp_path / "runtime-gate.json"
    target.write_text("old")
    with pytest.raises(ValueError, match=r"\$\.evidence\.retrieval\.usage\[1\] is not a finite number"):
        rg.write_json_atomic(str(target), {"evidence": {"retrieval": {"usage": [1, bad]}}})
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["runtime-gate.json"]


def test_writer_refuses_what_json_cannot_hold(tmp_path):
    for bad in ({1: "int key"}, {"s": {1, 2}}, {"o": object()}):
        with pytest.raises(ValueError):
            rg.write_json_atomic(str(tmp_path / "x.json"), bad)
    assert os.listdir(tmp_path) == []


def test_writer_creates_the_directory_and_honours_the_mode(tmp_path):
    target = tmp_path / "a" / "b" / "row.json"
    with pytest.raises(FileNotFoundError):
        rg.write_json_atomic(str(target), {"x": 1})
    rg.write_json_atomic(str(target), {"x": 1}, mode=0o600, make_dirs=True)
    assert json.loads(target.read_text()) == {"x": 1}
    assert oct(target.stat().st_mode & 0o777) == "0o600"


def test_text_writer_replaces_whole_files_only(tmp_path):
    target = tmp_path / "systems.md"
    target.write_text("old")
    rg.write_text_atomic(str(target), "| lane |\n")
    assert target.read_text() == "| lane |\n" and os.listdir(tmp_path) == ["systems.md"]
    with pytest.raises(TypeError):
        rg.write_text_atomic(str(target), b"bytes are not text")
    assert target.read_text() == "| lane |\n" and os.listdir(tmp_path) == ["systems.md"]


def test_make_parents_creates_each_missing_folder_with_its_mode_whatever_the_umask(tmp_path):
    target = tmp_path / "a" / "b" / "c"
    created = []
    old = os.umask(0o077)
    try:
        rg.make_parents(str(target), created)
    finally:
        os.umask(old)
    assert created == [str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(target)]
    assert all(os.stat(p).st_mode & 0o777 == 0o755 for p in created)
    again = []
    rg.make_parents(str(target), again)  # already there: nothing created, nothing listed
    assert again == []


def test_make_parents_under_a_file_fails_and_lists_nothing(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "file").write_text("x")
    created = []
    with pytest.raises(NotADirectoryError):
        rg.make_parents(str(tmp_path / "a" / "file" / "sub"), created)
    assert created == []


def test_make_parents_never_chmods_through_a_symlink_swapped_in_after_mkdir(tmp_path, monkeypatch):
    """A folder renamed away and replaced by a symlink between mkdir and chmod: the symlink's target
    keeps its mode and the call fails, rather than chmod following the link."""
    victim = tmp_path / "victim"
    victim.mkdir()
    os.chmod(victim, 0o751)
    target = tmp_path / "a" / "lock"
    real_mkdir = os.mkdir

    def mkdir_then_swap(path, mode=0o777, *args, **kwargs):
        real_mkdir(path, mode, *args, **kwargs)
        if os.fspath(path) == str(target):
            os.rename(path, str(tmp_path / "moved"))
            os.symlink(victim, path)

    monkeypatch.setattr(rg.os, "mkdir", mkdir_then_swap)
    created = []
    with pytest.raises(OSError):
        rg.make_parents(str(target), created, 0o700)
    assert os.stat(victim).st_mode & 0o777 == 0o751
    assert created == [str(tmp_path / "a"), str(target)]  # the caller may still undo what it made


def test_make_parents_default_mode_is_unchanged_for_other_callers(tmp_path):
    rg.make_parents(str(tmp_path / "x" / "y"))
    assert os.stat(tmp_path / "x").st_mode & 0o777 == 0o755 and os.stat(tmp_path / "x" / "y").st_mode & 0o777 == 0o755


# ---- fsync_dir and read_limited: the one copy of each, shared -----------------------------------
def test_fsync_dir_opens_fsyncs_and_closes_the_directory(tmp_path, monkeypatch):
    synced, closed = [], []
    real_fsync, real_close = os.fsync, os.close
    monkeypatch.setattr(rg.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    monkeypatch.setattr(rg.os, "close", lambda fd: (closed.append(fd), real_close(fd)))
    rg.fsync_dir(str(tmp_path))
    assert synced == [str(tmp_path)] and len(closed) == 1


def test_fsync_dir_of_a_missing_directory_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        rg.fsync_dir(str(tmp_path / "absent"))


def test_the_atomic_writer_fsyncs_the_directory_through_fsync_dir(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(rg, "fsync_dir", seen.append)
    rg.write_text_atomic(str(tmp_path / "f.txt"), "x")
    assert seen == [str(tmp_path)]


def test_read_limited_reads_up_to_the_limit(tmp_path):
    path = tmp_path / "marker"
    path.write_bytes(b"abcd")
    assert rg.read_limited(str(path), 4) == b"abcd"
    assert rg.read_limited(str(path), 100) == b"abcd"
    with pytest.raises(ValueError, match=r"^larger than 3 bytes$"):
        rg.read_limited(str(path), 3)
    with pytest.raises(FileNotFoundError):
        rg.read_limited(str(tmp_path / "absent"), 3)


def test_the_one_copy_of_each_helper_is_shared():
    from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _audit
    from ansible_collections.gb10.dspark.plugins.module_utils.evidence import _evidence_pack
    from ansible_collections.gb10.dspark.plugins.module_utils.identity import _model_checkpoint

    assert _evidence_pack.fsync_dir is rg.fsync_dir
    assert _audit.read_limited is rg.read_limited and _model_checkpoint.read_limited is rg.read_limited
    assert not hasattr(_evidence_pack, "_fsync_dir") and not hasattr(_audit, "_read_limited")
    assert not hasattr(_model_checkpoint, "_read_limited")
