# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gb10.dspark.wrapper_tree end to end, against real git checkouts and an installed collection."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.common import warnings as ansible_warnings

from ansible_collections.gb10.dspark.plugins.module_utils.identity._wrapper_tree import GIT_REDIRECTING_ENV
from ansible_collections.gb10.dspark.plugins.modules import wrapper_tree


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in GIT_REDIRECTING_ENV:
        monkeypatch.delenv(name, raising=False)
    ansible_warnings._global_warnings.clear()


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env,
                          check=True).stdout.strip()


def make_repo(repo: Path) -> Path:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "plugins").mkdir()
    (repo / "plugins" / "x.py").write_text("X = 1\n")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    git(repo, "tag", "v0.1.0")
    return repo


@pytest.fixture(name="repo")
def _repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "checkout")


def test_clean_checkout_succeeds(repo, run_module):
    result = run_module(wrapper_tree, {"path": str(repo), "expected_revision": "v0.1.0"})
    assert result["failed"] is False, result.get("msg")
    assert result["changed"] is False
    tree = result["tree"]
    assert tree["kind"] == "git"
    assert tree["revision"] == git(repo, "rev-parse", "HEAD")
    assert tree["describe"] == "v0.1.0"
    assert tree["dirty"] is False and tree["publishable"] is True
    assert ansible_warnings.get_warning_messages() == ()


def test_dirty_checkout_with_wrong_revision_fails_with_both_faults(repo, run_module):
    (repo / "plugins" / "x.py").write_text("X = 2\n")
    (repo / "notes.txt").write_text("")
    (repo / "debug.log").write_text("")
    head = git(repo, "rev-parse", "HEAD")
    result = run_module(wrapper_tree, {"path": str(repo), "expected_revision": "a" * 40})
    assert result["failed"] is True
    assert result["msg"].splitlines() == [
        "2 identity mismatches:",
        f"wrapper tree {repo} is dirty (2 paths: M plugins/x.py, ?? notes.txt), expected clean",
        f"wrapper tree {repo}: revision is {head}, expected {'a' * 40}",
    ]
    assert [m["item"] for m in result["mismatches"]] == ["tree", "revision"]
    assert result["mismatches"][1]["actual"] == head
    assert result["tree"]["dirty_paths"] == ["M plugins/x.py", "?? notes.txt"]


def test_ignore_untracked_lets_an_untracked_file_pass(repo, run_module):
    (repo / "notes.txt").write_text("")
    assert run_module(wrapper_tree, {"path": str(repo)})["failed"] is True
    result = run_module(wrapper_tree, {"path": str(repo), "ignore_untracked": True})
    assert result["failed"] is False and result["tree"]["dirty"] is False


def test_allow_dirty_succeeds_with_a_publication_warning(repo, run_module):
    (repo / "plugins" / "x.py").write_text("X = 2\n")
    result = run_module(wrapper_tree, {"path": str(repo), "allow_dirty": True})
    assert result["failed"] is False, result.get("msg")
    assert result["tree"]["publishable"] is False
    assert result["tree"]["publication_blockers"] == ["tree dirty: 1 path, allowed by allow_dirty"]
    warnings = ansible_warnings.get_warning_messages()
    assert len(warnings) == 1 and "not valid for publication" in warnings[0]


def test_allow_dirty_does_not_cover_a_revision_mismatch(repo, run_module):
    (repo / "plugins" / "x.py").write_text("X = 2\n")
    result = run_module(wrapper_tree, {"path": str(repo), "allow_dirty": True, "expected_revision": "b" * 40})
    assert result["failed"] is True
    assert result["msg"].startswith(f"wrapper tree {repo}: revision is ")


def test_check_mode_and_diff_return_the_same_result(repo, run_module):
    (repo / "plugins" / "x.py").write_text("X = 2\n")
    args = {"path": str(repo), "allow_dirty": True}
    normal = run_module(wrapper_tree, args)
    checked = run_module(wrapper_tree, args, check_mode=True, diff=True)
    assert checked == normal
    assert "diff" not in checked


def test_git_dir_in_the_environment_does_not_redirect_the_check(repo, tmp_path, run_module, monkeypatch):
    other = make_repo(tmp_path / "other")
    (other / "plugins" / "x.py").write_text("dirty elsewhere\n")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    result = run_module(wrapper_tree, {"path": str(repo)})
    assert result["failed"] is False, result.get("msg")
    assert result["tree"]["revision"] == git(repo, "rev-parse", "HEAD")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_installed_collection_end_to_end(tmp_path, run_module):
    root = tmp_path / "ansible_collections" / "gb10" / "dspark"
    (root / "plugins").mkdir(parents=True)
    body = b"X = 1\n"
    (root / "plugins" / "x.py").write_bytes(body)
    files_json = json.dumps({"files": [
        {"name": ".", "ftype": "dir", "chksum_type": None, "chksum_sha256": None, "format": 1},
        {"name": "plugins", "ftype": "dir", "chksum_type": None, "chksum_sha256": None, "format": 1},
        {"name": "plugins/x.py", "ftype": "file", "chksum_type": "sha256", "chksum_sha256": _sha(body), "format": 1},
    ], "format": 1}).encode()
    (root / "FILES.json").write_bytes(files_json)
    (root / "MANIFEST.json").write_text(json.dumps({
        "collection_info": {"namespace": "gb10", "name": "dspark", "version": "0.1.0"},
        "file_manifest_file": {"name": "FILES.json", "ftype": "file", "chksum_type": "sha256",
                               "chksum_sha256": _sha(files_json), "format": 1},
        "format": 1,
    }))
    args = {"path": str(root), "expected_revision": "gb10.dspark:0.1.0"}
    result = run_module(wrapper_tree, args)
    assert result["failed"] is False, result.get("msg")
    assert result["tree"]["kind"] == "installed_collection"
    assert result["tree"]["revision"] == "gb10.dspark:0.1.0"

    (root / "plugins" / "x.py").write_bytes(b"X = 2\n")
    result = run_module(wrapper_tree, args)
    assert result["failed"] is True
    assert result["msg"] == f"wrapper tree {root} is dirty (1 path: M plugins/x.py), expected clean"


def test_plain_directory_fails_as_unverifiable(tmp_path, run_module):
    result = run_module(wrapper_tree, {"path": str(tmp_path)})
    assert result["failed"] is True
    assert "not a git checkout nor an installed collection" in result["msg"]
    assert result["tree"]["kind"] == "unknown"


def test_missing_path_fails(tmp_path, run_module):
    result = run_module(wrapper_tree, {"path": str(tmp_path / "nope"), "allow_dirty": True})
    assert result["failed"] is True
    assert result["msg"] == f"wrapper tree {tmp_path / 'nope'} is absent, expected a directory"
    assert result["mismatches"] == []
