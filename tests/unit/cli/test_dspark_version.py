"""`dspark --version` names the command, the gb10.dspark collection Ansible would load from the current folder and
that collection's release pin; it exits 69 when Ansible would find no gb10.dspark (README.md, "Real pairs")."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from dspark_cli import __version__
from dspark_cli import main as cli
from dspark_cli import version

PIN = {"release": "v099-test", "image_id": "sha256:" + "ab" * 32, "runtime_manifest_sha256": "cd" * 32,
       "model_id": "deepseek-ai/DeepSeek-V4-Flash-0731", "model_revision": "ef" * 20, "vllm_version": "0.99.0"}


def collection(base: Path, *, installed: bool, ver: str = "1.2.3", pin: dict | None = PIN) -> Path:
    root = base / "ansible_collections" / "gb10" / "dspark"
    root.mkdir(parents=True)
    if installed:
        (root / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": ver}}))
    else:
        (root / "galaxy.yml").write_text(yaml.safe_dump({"namespace": "gb10", "name": "dspark", "version": ver}))
    if pin is not None:
        pin_file = root.joinpath(*version.PIN_FILE)
        pin_file.parent.mkdir(parents=True)
        pin_file.write_text(yaml.safe_dump({"dspark_pin": pin}))
    return root


def report(paths) -> tuple[bool, str, str]:
    out, err = io.StringIO(), io.StringIO()
    found = version.report([str(p) for p in paths], out, err)
    return found, out.getvalue(), err.getvalue()


def test_an_installed_collection_shows_its_version_path_and_pin(tmp_path):
    root = collection(tmp_path / "collections", installed=True)
    found, out, err = report([tmp_path / "collections"])
    lines = out.splitlines()
    assert found and err == ""
    assert lines[0].startswith(f"dspark {__version__} (")
    assert lines[1] == f"gb10.dspark 1.2.3 (installed: {root})"
    assert lines[2].startswith("pin v099-test: ")
    for key in version.PIN_FIELDS:
        assert f"{key} {PIN[key]}" in lines[2]


def test_the_first_collection_on_the_search_path_is_the_one_shown_as_ansible_would(tmp_path):
    collection(tmp_path / "first", installed=False, ver="2.0.0")
    collection(tmp_path / "second", installed=True, ver="1.0.0")
    # a search path entry may also name the ansible_collections folder itself
    found, out, _err = report([tmp_path / "missing", tmp_path / "first" / "ansible_collections", tmp_path / "second"])
    assert found and "gb10.dspark 2.0.0 (checkout: " in out


def test_a_collection_without_its_pin_says_so(tmp_path):
    collection(tmp_path, installed=True, pin=None)
    found, out, _err = report([tmp_path])
    assert found and out.splitlines()[2].startswith("pin: unreadable (")


def test_no_collection_is_a_failure_naming_where_it_looked(tmp_path):
    found, out, err = report([tmp_path / "a", tmp_path / "b"])
    assert not found
    assert out.startswith("dspark ") and "gb10.dspark" not in out
    assert f"{tmp_path / 'a'}:{tmp_path / 'b'}" in err and "ansible.cfg" in err


@pytest.mark.parametrize("present,code", [(True, 0), (False, cli.EX_UNAVAILABLE)])
def test_the_command_line_exits_0_or_69(tmp_path, monkeypatch, capsys, present, code):
    if present:
        collection(tmp_path, installed=True)
    monkeypatch.setattr(cli, "collection_search_paths", lambda: [str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        cli.run(["--version"])
    assert exc.value.code == code
    assert ("gb10.dspark 1.2.3" in capsys.readouterr().out) is present
