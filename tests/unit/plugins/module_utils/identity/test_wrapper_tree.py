# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_wrapper_tree against real git repositories and hand-built installed collections in tmp_path."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _wrapper_tree as wt


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git configuration (excludes files, hooks, default branch) leaks into the tests."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in wt.GIT_REDIRECTING_ENV:
        monkeypatch.delenv(name, raising=False)


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    full_env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
                    GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid", **(env or {}))
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=full_env, check=True)
    return proc.stdout.strip()


class Recorder:
    """A ``run`` callable that really runs the command and remembers every argv and env it got."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        self.calls.append((list(argv), dict(env)))
        proc = subprocess.run(argv, capture_output=True, env={**os.environ, **env},
                              encoding="utf-8", errors="surrogateescape", check=False)
        return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(name="repo")
def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "checkout"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "plugins").mkdir()
    (repo / "plugins" / "x.py").write_text("X = 1\n")
    (repo / "plugins" / "y.py").write_text("Y = 2\n")
    (repo / "README.md").write_text("readme\n")
    (repo / ".gitignore").write_text("*.log\nbuild/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def check(path: Path, **kwargs) -> wt.Report:
    return wt.check_tree(str(path), Recorder(), **kwargs)


# --- porcelain parsing -------------------------------------------------------------------------

def test_parse_porcelain_z_handles_renames_copies_and_odd_names():
    out = (" M plugins/x.py\0R  new name.py\0old name.py\0?? line\nbreak.txt\0"
           "C  copy.py\0orig.py\0UU both.py\0RM moved.py\0was.py\0")
    entries = wt.parse_porcelain_z(out)
    assert [e.show() for e in entries] == [
        "M plugins/x.py",
        "R old name.py -> new name.py",
        "?? line\nbreak.txt",
        "C orig.py -> copy.py",
        "UU both.py",
        "RM was.py -> moved.py",
    ]


@pytest.mark.parametrize("bad", ["M", "R  new.py\0", "XYZpath\0"])
def test_parse_porcelain_z_refuses_what_it_cannot_read(bad):
    with pytest.raises(ValueError):
        wt.parse_porcelain_z(bad)


# --- git checkouts -----------------------------------------------------------------------------

def test_clean_repo_passes_and_reports_head(repo):
    report = check(repo)
    tree = report.tree()
    assert report.mismatches == []
    assert tree["kind"] == "git"
    assert tree["revision"] == git(repo, "rev-parse", "HEAD")
    assert tree["dirty"] is False and tree["dirty_paths"] == [] and tree["dirty_count"] == 0
    assert tree["publishable"] is True and tree["publication_blockers"] == []
    assert tree["describe"] == git(repo, "rev-parse", "--short", "HEAD")
    assert report.warnings == []


def test_every_git_call_is_an_argv_list_without_optional_locks(repo):
    run = Recorder()
    wt.check_tree(str(repo), run)
    assert run.calls
    for argv, env in run.calls:
        assert argv[:3] == ["git", "-C", str(repo)]
        assert env["GIT_OPTIONAL_LOCKS"] == "0"
    assert ["git", "-C", str(repo), "status", "--porcelain=v1", "-z", "--untracked-files=all"] in [c[0] for c in run.calls]


def test_check_never_rewrites_the_index(repo):
    index = repo / ".git" / "index"
    # Stale stat data: the same content with a new mtime makes a plain `git status` refresh the index.
    os.utime(repo / "plugins" / "x.py", (1_000_000_000, 1_000_000_000))
    os.utime(index, (1_000_000_000, 1_000_000_000))
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    report = check(repo)
    assert report.mismatches == []
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    git(repo, "status", "--porcelain")  # the same status without GIT_OPTIONAL_LOCKS=0 does write it
    assert index.stat().st_mtime_ns != before[1]


def test_modified_tracked_file_fails_naming_the_path(repo):
    (repo / "plugins" / "x.py").write_text("X = 2\n")
    report = check(repo)
    assert [m.item for m in report.mismatches] == ["tree"]
    assert report.mismatches[0].message == f"wrapper tree {repo} is dirty (1 path: M plugins/x.py), expected clean"
    tree = report.tree()
    assert tree["dirty"] is True and tree["dirty_paths"] == ["M plugins/x.py"] and tree["dirty_count"] == 1
    assert tree["publishable"] is False
    assert tree["describe"].endswith("-dirty")


def test_untracked_file_fails_unless_ignored(repo):
    (repo / "notes.txt").write_text("todo\n")
    report = check(repo)
    assert "?? notes.txt" in report.mismatches[0].message
    relaxed = check(repo, ignore_untracked=True)
    assert relaxed.mismatches == [] and relaxed.tree()["dirty"] is False


def test_untracked_files_are_listed_one_by_one(repo):
    (repo / "newdir" / "deep").mkdir(parents=True)
    (repo / "newdir" / "deep" / "a.py").write_text("")
    (repo / "newdir" / "b.py").write_text("")
    paths = check(repo).tree()["dirty_paths"]
    assert sorted(paths) == ["?? newdir/b.py", "?? newdir/deep/a.py"]


def test_gitignored_files_do_not_count(repo):
    (repo / "run.log").write_text("noise\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_bytes(b"\0")
    report = check(repo)
    assert report.mismatches == [] and report.tree()["dirty"] is False


def test_staged_rename_is_parsed(repo):
    git(repo, "mv", "plugins/y.py", "plugins/z with space.py")
    report = check(repo)
    assert report.tree()["dirty_paths"] == ["R plugins/y.py -> plugins/z with space.py"]
    assert "R plugins/y.py -> plugins/z with space.py" in report.mismatches[0].message


def test_message_names_twenty_paths_and_dirty_paths_stop_at_200(repo):
    for i in range(205):
        (repo / f"u{i:03d}.txt").write_text("")
    report = check(repo)
    tree = report.tree()
    assert tree["dirty_count"] == 205
    assert len(tree["dirty_paths"]) == 200
    message = report.mismatches[0].message
    assert message.startswith(f"wrapper tree {repo} is dirty (205 paths: ?? u000.txt, ")
    assert "?? u019.txt, ... 185 more), expected clean" in message
    assert "u020.txt" not in message


def test_revision_mismatch_names_both_shas(repo):
    first = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("second\n")
    git(repo, "commit", "-q", "-am", "second")
    head = git(repo, "rev-parse", "HEAD")
    report = check(repo, expected_revision=first)
    assert [m.item for m in report.mismatches] == ["revision"]
    assert report.mismatches[0].message == f"wrapper tree {repo}: revision is {head}, expected {first}"
    assert check(repo, expected_revision=head.upper()).mismatches == []


def test_annotated_tag_resolves_to_its_commit(repo):
    git(repo, "tag", "-a", "v1.0", "-m", "release")
    report = check(repo, expected_revision="v1.0")
    assert report.mismatches == []
    assert report.tree()["describe"] == "v1.0"
    (repo / "README.md").write_text("after the tag\n")
    git(repo, "commit", "-q", "-am", "after")
    tagged = git(repo, "rev-parse", "v1.0^{commit}")
    moved = check(repo, expected_revision="v1.0")
    assert moved.mismatches[0].message == (
        f"wrapper tree {repo}: revision is {git(repo, 'rev-parse', 'HEAD')}, expected v1.0 ({tagged})")


def test_branch_name_resolves_and_unknown_ref_fails(repo):
    assert check(repo, expected_revision="main").mismatches == []
    report = check(repo, expected_revision="no-such-tag")
    assert "expected no-such-tag (which names no commit in this repository)" in report.mismatches[0].message
    assert "names no commit" in check(repo, expected_revision="--all").mismatches[0].message


def test_dirty_and_wrong_revision_are_reported_together(repo):
    (repo / "plugins" / "x.py").write_text("changed\n")
    report = check(repo, expected_revision="0" * 40)
    assert [m.item for m in report.mismatches] == ["tree", "revision"]


def test_allow_dirty_passes_but_is_not_publishable(repo):
    (repo / "plugins" / "x.py").write_text("changed\n")
    (repo / "notes.txt").write_text("")
    report = check(repo, allow_dirty=True)
    tree = report.tree()
    assert report.mismatches == []
    assert tree["allowed_dirty"] is True and tree["dirty"] is True and tree["dirty_count"] == 2
    assert tree["publishable"] is False
    assert tree["publication_blockers"] == ["tree dirty: 2 paths, allowed by allow_dirty"]
    assert len(report.warnings) == 1 and "not valid for publication" in report.warnings[0]


def test_allow_dirty_does_not_cover_a_revision_mismatch(repo):
    (repo / "plugins" / "x.py").write_text("changed\n")
    report = check(repo, allow_dirty=True, expected_revision="f" * 40)
    assert [m.item for m in report.mismatches] == ["revision"]


def test_subdirectory_of_a_checkout_is_checked_as_the_checkout(repo):
    (repo / "README.md").write_text("changed\n")
    report = check(repo / "plugins")
    assert report.kind == "git"
    assert report.tree()["dirty_paths"] == ["M README.md"]


def test_checkout_without_commits_cannot_be_checked(tmp_path):
    git(tmp_path, "init", "-q")
    with pytest.raises(wt.TreeError, match="HEAD is absent, expected a commit"):
        check(tmp_path)


def test_checkout_without_git_cannot_be_checked(repo):
    with pytest.raises(wt.TreeError, match="git is absent on the control node"):
        wt.check_tree(str(repo), Recorder(), git=None)


def test_clean_git_environment_drops_redirecting_variables():
    environ = {"GIT_DIR": "/elsewhere/.git", "GIT_WORK_TREE": "/elsewhere", "HOME": "/root", "GIT_AUTHOR_NAME": "a"}
    assert sorted(wt.clean_git_environment(environ)) == ["GIT_DIR", "GIT_WORK_TREE"]
    assert environ == {"HOME": "/root", "GIT_AUTHOR_NAME": "a"}


# --- installed collections ---------------------------------------------------------------------

def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_collection(root: Path, files: dict[str, bytes], version: str = "1.2.3") -> Path:
    """Write a collection as `ansible-galaxy collection install` leaves it: files, FILES.json, MANIFEST.json."""
    records = [{"name": ".", "ftype": "dir", "chksum_type": None, "chksum_sha256": None, "format": 1}]
    dirs: set[str] = set()
    for name, data in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        parts = name.split("/")[:-1]
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    for d in sorted(dirs):
        records.append({"name": d, "ftype": "dir", "chksum_type": None, "chksum_sha256": None, "format": 1})
    for name, data in sorted(files.items()):
        records.append({"name": name, "ftype": "file", "chksum_type": "sha256", "chksum_sha256": _sha(data),
                        "format": 1})
    files_json = json.dumps({"files": records, "format": 1}, indent=4).encode()
    (root / "FILES.json").write_bytes(files_json)
    manifest = {
        "collection_info": {"namespace": "gb10", "name": "dspark", "version": version},
        "file_manifest_file": {"name": "FILES.json", "ftype": "file", "chksum_type": "sha256",
                               "chksum_sha256": _sha(files_json), "format": 1},
        "format": 1,
    }
    (root / "MANIFEST.json").write_text(json.dumps(manifest, indent=4))
    return root


@pytest.fixture(name="installed")
def _installed(tmp_path: Path) -> Path:
    return build_collection(tmp_path / "ansible_collections" / "gb10" / "dspark", {
        "plugins/x.py": b"X = 1\n",
        "plugins/modules/m.py": b"M = 1\n",
        "README.md": b"readme\n",
    })


def test_installed_collection_passes_and_reports_its_version(installed):
    (installed / "plugins" / "__pycache__").mkdir()
    (installed / "plugins" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (installed / "plugins" / "modules" / "m.pyc").write_bytes(b"\0")
    report = check(installed, expected_revision="gb10.dspark:1.2.3")
    tree = report.tree()
    assert report.mismatches == []
    assert tree["kind"] == "installed_collection"
    assert tree["revision"] == "gb10.dspark:1.2.3"
    assert tree["dirty"] is False and tree["publishable"] is True
    assert "describe" not in tree


def test_installed_collection_modified_missing_and_extra_files_are_dirty(installed):
    (installed / "plugins" / "x.py").write_text("X = 2\n")
    (installed / "README.md").unlink()
    (installed / "plugins" / "extra.py").write_text("")
    report = check(installed)
    assert report.tree()["dirty_paths"] == ["D README.md", "M plugins/x.py", "?? plugins/extra.py"]
    assert report.mismatches[0].message == (
        f"wrapper tree {installed} is dirty (3 paths: D README.md, M plugins/x.py, ?? plugins/extra.py), "
        "expected clean")
    assert check(installed, ignore_untracked=True).tree()["dirty_count"] == 2


def test_installed_collection_files_json_must_match_the_manifest(installed):
    files_json = json.loads((installed / "FILES.json").read_text())
    files_json["files"] = [f for f in files_json["files"] if f["name"] != "plugins/x.py"]
    (installed / "FILES.json").write_text(json.dumps(files_json))
    report = check(installed)
    # x.py is no longer listed (so it is extra) and FILES.json no longer matches MANIFEST.json
    assert report.tree()["dirty_paths"] == ["M FILES.json", "?? plugins/x.py"]


def test_installed_collection_a_directory_where_a_file_belongs_is_dirty(installed):
    (installed / "README.md").unlink()
    (installed / "README.md").mkdir()
    assert check(installed).tree()["dirty_paths"] == ["T README.md"]


def test_installed_collection_revision_mismatch_fails(installed):
    report = check(installed, expected_revision="gb10.dspark:1.2.4")
    assert report.mismatches[0].message == (
        f"wrapper tree {installed}: revision is gb10.dspark:1.2.3, expected gb10.dspark:1.2.4")


def test_installed_collection_with_an_escaping_name_is_refused(installed):
    files_json = {"files": [{"name": "../outside.py", "ftype": "file", "chksum_type": "sha256",
                             "chksum_sha256": "0" * 64, "format": 1}], "format": 1}
    (installed / "FILES.json").write_text(json.dumps(files_json))
    with pytest.raises(wt.TreeError, match="not a relative path inside the collection"):
        check(installed)


def test_installed_collection_inside_a_git_repository_is_checked_as_installed(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    git(home, "init", "-q")
    root = build_collection(home / "collections" / "ansible_collections" / "gb10" / "dspark", {"a.py": b"a\n"})
    report = check(root)
    assert report.kind == "installed_collection" and report.mismatches == []


# --- neither -----------------------------------------------------------------------------------

def test_plain_directory_is_unverifiable(tmp_path):
    (tmp_path / "file.txt").write_text("")
    report = check(tmp_path)
    assert report.mismatches[0].message.startswith(
        f"wrapper tree {tmp_path} is unverifiable, expected a git checkout or an installed collection "
        "(not a git checkout nor an installed collection")


def test_plain_directory_allowed_dirty_is_recorded_as_unverifiable(tmp_path):
    report = check(tmp_path, allow_dirty=True)
    tree = report.tree()
    assert report.mismatches == []
    assert tree["kind"] == "unknown" and tree["revision"] is None and tree["dirty"] is True
    assert tree["publishable"] is False
    assert tree["publication_blockers"][0].startswith("tree unverifiable: not a git checkout nor an installed collection")
    assert report.warnings


def test_plain_directory_never_matches_an_expected_revision(tmp_path):
    report = check(tmp_path, allow_dirty=True, expected_revision="gb10.dspark:1.2.3")
    assert report.mismatches[0].message == f"wrapper tree {tmp_path}: revision is absent, expected gb10.dspark:1.2.3"


def test_missing_path_cannot_be_checked(tmp_path):
    with pytest.raises(wt.TreeError, match=r"is absent, expected a directory"):
        check(tmp_path / "nope", allow_dirty=True)
