"""The changelog (antsibull-changelog): fragments lint clean, changelogs/changelog.yaml is valid, and
CHANGELOG.md is what `antsibull-changelog generate` makes of it (never edited by hand). Offline."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from packaging.version import Version

REPO = Path(__file__).resolve().parents[3]
TOOL = Path(sys.executable).with_name("antsibull-changelog")


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    assert TOOL.exists(), f"{TOOL} is missing: pip install -r requirements.txt (make deps)"
    env = dict(os.environ, PATH=f"{TOOL.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([str(TOOL), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_antsibull_changelog_lint_passes_from_the_repo_root():
    res = run("lint")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == "", res.stdout  # lint prints one line per problem


def test_the_changelog_yaml_is_valid():
    res = run("lint-changelog-yaml", "changelogs/changelog.yaml")
    assert res.returncode == 0, res.stdout + res.stderr


def test_changelog_md_is_generated_from_changelog_yaml(tmp_path):
    for name in ("galaxy.yml", "changelogs"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, tmp_path / name)
    res = run("generate", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "CHANGELOG.md").read_text() == (REPO / "CHANGELOG.md").read_text(), (
        "CHANGELOG.md differs from what `antsibull-changelog generate` writes: regenerate it, do not edit it")


def test_no_release_is_newer_than_galaxy_yml():
    version = Version(yaml.safe_load((REPO / "galaxy.yml").read_text())["version"])
    releases = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())["releases"]
    assert releases, "changelogs/changelog.yaml records no release"
    assert max(Version(v) for v in releases) <= version


def test_every_fragment_is_yaml_with_known_sections():
    config = yaml.safe_load((REPO / "changelogs" / "config.yaml").read_text())
    known = {s[0] for s in config["sections"]} | {config["prelude_section_name"], config["trivial_section_name"]}
    fragments = sorted((REPO / "changelogs" / "fragments").glob("*.y*ml"))
    assert fragments
    for path in fragments:
        data = yaml.safe_load(path.read_text())
        assert isinstance(data, dict) and data, path.name
        assert set(data) <= known, f"{path.name}: unknown sections {sorted(set(data) - known)}"
