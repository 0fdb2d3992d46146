"""_rank_files.ensure: folders and files made once and then left alone, only what differs changed, check mode
writing nothing, links refused, and a secret file's content in no diff."""
from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.engine._rank_files import SECRET_DIFF, RankFilesError, ensure

UID, GID = os.getuid(), os.getgid()


def layout(tmp_path):
    d = tmp_path / "etc" / "profile"
    return ([{"path": str(d), "mode": "0755"}],
            [{"path": str(d / "engine.env"), "content": "TOKEN=s3cret-value\n", "mode": "0600", "secret": True},
             {"path": str(d / "compilation.json"), "content": "{}\n", "mode": "0644"}])


def run(dirs, files, check=False):
    return ensure(dirs, files, check, UID, GID)


def test_first_run_makes_everything_and_the_second_changes_nothing(tmp_path):
    dirs, files = layout(tmp_path)
    first = run(dirs, files)
    assert first.changed and len(first.changes) == 3
    env = tmp_path / "etc" / "profile" / "engine.env"
    assert env.read_text() == "TOKEN=s3cret-value\n" and stat.S_IMODE(env.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "etc" / "profile").stat().st_mode) == 0o755
    second = run(dirs, files)
    assert not second.changed and second.changes == [] and second.diff == []


def test_only_what_differs_is_changed_and_the_secret_is_in_no_diff(tmp_path):
    dirs, files = layout(tmp_path)
    run(dirs, files)
    compiled = tmp_path / "etc" / "profile" / "compilation.json"
    before = compiled.stat().st_ino
    files[0]["content"] = "TOKEN=another-secret\n"
    out = run(dirs, files)
    assert out.changes == [f"file {files[0]['path']}: content"]
    assert out.diff[0]["before"] == out.diff[0]["after"] == SECRET_DIFF
    assert "secret" not in repr(out.changes).replace("secret-value", "")
    assert compiled.stat().st_ino == before  # untouched
    os.chmod(compiled, 0o666)
    out = run(dirs, files)
    assert out.changes == [f"file {compiled}: mode 0666 -> 0644"] and stat.S_IMODE(compiled.stat().st_mode) == 0o644


def test_check_mode_writes_nothing_and_says_what_would_change(tmp_path):
    dirs, files = layout(tmp_path)
    out = run(dirs, files, check=True)
    assert out.changed and len(out.changes) == 3
    assert not (tmp_path / "etc").exists()
    assert all(SECRET_DIFF in d["after"] for d in out.diff if "engine.env" in d["after_header"])


def test_a_link_is_refused_never_followed(tmp_path):
    dirs, files = layout(tmp_path)
    run(dirs, files)
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    env = tmp_path / "etc" / "profile" / "engine.env"
    env.unlink()
    env.symlink_to(target)
    with pytest.raises(RankFilesError, match="is a symbolic link, expected a file"):
        run(dirs, files)
    assert target.read_text() == "keep\n"


def test_a_bad_entry_changes_nothing(tmp_path):
    dirs, files = layout(tmp_path)
    files.append({"path": "relative/file", "content": "x"})
    with pytest.raises(RankFilesError, match="expected an absolute path"):
        run(dirs, files)
    assert not (tmp_path / "etc").exists()
    dirs, files = layout(tmp_path)
    files[1]["mode"] = "rw-r--r--"
    with pytest.raises(RankFilesError, match="is not an octal mode"):
        run(dirs, files)
    assert not (tmp_path / "etc").exists()


def test_a_file_whose_folder_is_absent_and_not_listed_is_refused(tmp_path):
    with pytest.raises(RankFilesError, match="expected a folder"):
        run([], [{"path": str(tmp_path / "nowhere" / "f"), "content": "x"}])


def test_read_returns_the_matching_regular_files_sorted_and_nothing_else(tmp_path):
    import base64

    from ansible_collections.gb10.dspark.plugins.module_utils.engine._rank_files import read_files

    d = tmp_path / "profiles"
    d.mkdir()
    (d / "production.env").write_text("A=1\n")
    (d / "production.json").write_text("{}\n")
    (d / "notes.txt").write_text("no\n")
    (d / "sub.json").mkdir()
    (d / "link.env").symlink_to(tmp_path / "elsewhere.env")
    got = read_files([{"path": str(d), "patterns": ["*.env", "*.json"]}, {"path": str(tmp_path / "absent")}])
    assert [g["path"] for g in got] == [str(d / "production.env"), str(d / "production.json")]
    assert base64.b64decode(got[0]["content"]) == b"A=1\n"
    (tmp_path / "file").write_text("x")
    with pytest.raises(RankFilesError, match="expected a folder"):
        read_files([{"path": str(tmp_path / "file")}])


def test_a_file_without_text_content_is_refused_before_any_folder_is_made(tmp_path):
    dirs, files = layout(tmp_path)
    files[1]["content"] = None
    with pytest.raises(RankFilesError, match="content must be text, got NoneType"):
        run(dirs, files)
    assert not (tmp_path / "etc").exists()
