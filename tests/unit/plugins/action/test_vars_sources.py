# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vars_sources action: the play's variable files read strictly on the control node, and the
preflight role refusing a pin with a key given twice, whatever ansible.cfg says."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import yaml
from ansible.parsing.dataloader import DataLoader

from ansible_collections.gb10.dspark.plugins.action import vars_sources as action
from tests.unit.plugins.action._plugin import make_plugin

ROOT = Path(__file__).resolve().parents[4]
PIN = ROOT / "inventories" / "sample" / "group_vars" / "all" / "pin.yml"
SITE = ROOT / "inventories" / "sample" / "group_vars" / "all" / "site.yml"
WRONG_ID = "sha256:" + "e" * 64


def _with_second_image_id(text: str) -> tuple[str, int, int]:
    """The sample pin with a second ``image_id:`` at the end of dspark_pin; its two lines."""
    lines = text.splitlines()
    first = next(n for n, line in enumerate(lines, 1) if line.startswith("  image_id:"))
    lines.insert(first - 1, f"  image_id: {WRONG_ID}")  # the wrong value first: the pinned one would win
    return "\n".join(lines) + "\n", first, first + 1


def _inventory(tmp_path: Path, pin_text: str) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "group_vars" / "all" / "pin.yml").write_text(pin_text)
    (inv / "group_vars" / "all" / "site.yml").write_text(SITE.read_text())
    hosts = {"all": {"children": {"dspark_pairs": {"children": {"pair_t": {
        "vars": {"dspark_pair": "t"},
        "hosts": {"t-head": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                             "dspark_rank": 0, "dspark_fabric_ip": "10.9.9.1", "dspark_eth_if": "eth0",
                             "dspark_ib_hca": "hca0", "dspark_model_dir": str(tmp_path / "model")}}}}}}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return inv


def _run_plugin(inv: Path, extra=()):
    plugin = make_plugin(action.ActionModule, "gb10.dspark.vars_sources", {})
    plugin._loader = DataLoader()
    task_vars = {"inventory_hostname": "t-head", "ansible_play_hosts_all": ["t-head"],
                 "hostvars": {"t-head": {"group_names": ["dspark_pairs", "pair_t"]}},
                 "ansible_inventory_sources": [str(inv)], "playbook_dir": str(inv.parent / "playbooks")}
    with mock.patch.object(action.context, "CLIARGS", {"extra_vars": tuple(extra)}):
        return plugin.run(task_vars=task_vars)


def test_a_clean_inventory_passes_and_lists_what_it_read(tmp_path):
    inv = _inventory(tmp_path, PIN.read_text())
    res = _run_plugin(inv)
    assert not res.get("failed"), res
    assert res["changed"] is False and res["mismatches"] == []
    assert res["sources"] == [str(inv / "group_vars" / "all" / "pin.yml"), str(inv / "group_vars" / "all" / "site.yml"),
                              str(inv / "hosts.yml")]


def test_a_pin_with_image_id_twice_is_refused_naming_file_key_and_lines(tmp_path):
    text, first, second = _with_second_image_id(PIN.read_text())
    inv = _inventory(tmp_path, text)
    res = _run_plugin(inv)
    pin = inv / "group_vars" / "all" / "pin.yml"
    assert res["failed"] is True
    assert [(d["source"], d["key"], d["first_line"], d["second_line"]) for d in res["mismatches"]] == [
        (str(pin), "image_id", first, second)]
    assert res["msg"].startswith(f'control node: {pin}: key "image_id" is given twice, at lines {first} and {second}')
    assert WRONG_ID not in res["msg"]


def test_an_e_file_and_an_inline_e_item_are_read_too(tmp_path):
    inv = _inventory(tmp_path, PIN.read_text())
    dup = tmp_path / "site-override.yml"
    dup.write_text("dspark_api_port: 8888\ndspark_api_port: 9999\n")
    with mock.patch.object(action.os, "getcwd", return_value=str(tmp_path)):
        res = _run_plugin(inv, ["@site-override.yml", '{"dspark_pin": {"release": "a", "release": "b"}}'])
    assert res["failed"] is True
    assert [(d["source"], d["key"], d["first_line"], d["second_line"]) for d in res["mismatches"]] == [
        (str(dup), "dspark_api_port", 1, 2), ("-e item 2", "release", 1, 1)]


def _playbook(tmp_path: Path, inv: Path, tasks: list, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "ansible.cfg").write_text("[defaults]\nstdout_callback = ansible.builtin.default\n")
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([{"name": "t", "hosts": "dspark_pairs", "gather_facts": False,
                                     "any_errors_fatal": True, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_DUPLICATE_YAML_DICT_KEY="ignore", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inv), str(book), *extra],
                          cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300)


def test_preflight_refuses_the_pin_first_even_when_ansible_cfg_ignores_duplicates(tmp_path):
    text, first, second = _with_second_image_id(PIN.read_text())
    inv = _inventory(tmp_path, text)
    res = _playbook(tmp_path, inv, [{"name": "Preflight", "ansible.builtin.import_role": {"name": "gb10.dspark.preflight"}},
                                    {"name": "Never reached", "ansible.builtin.debug": {"msg": "REACHED"}}])
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0, out[-3000:]
    assert "Found duplicate" not in out and "duplicate mapping key" not in out  # Ansible itself said nothing
    pin = os.path.realpath(inv / "group_vars" / "all" / "pin.yml")
    assert f'{pin}: key "image_id" is given twice, at lines {first} and {second}' in out, out[-3000:]
    assert "No key is given twice" in out
    assert "The inventory forms pairs" not in out and "REACHED" not in out  # refused first, before anything else
    assert WRONG_ID not in out


def test_the_check_passes_a_clean_inventory_through_ansible_playbook(tmp_path):
    inv = _inventory(tmp_path, PIN.read_text())
    res = _playbook(tmp_path, inv, [{"name": "Check", "gb10.dspark.vars_sources": None}])
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    dup = tmp_path / "dup.yml"
    dup.write_text("dspark_pin:\n  image_id: a\n  image_id: b\n")
    again = _playbook(tmp_path, inv, [{"name": "Check", "gb10.dspark.vars_sources": None}], "-e", "@dup.yml")
    assert again.returncode != 0
    assert f'{os.path.realpath(dup)}: key "image_id" is given twice, at lines 2 and 3' in " ".join(again.stdout.split())


def test_files_named_by_the_task_are_read_too(tmp_path):
    inv = _inventory(tmp_path, PIN.read_text())
    other = tmp_path / "release.yml"
    other.write_text("x:\n  y: 1\n  y: 2\n")
    plugin = make_plugin(action.ActionModule, "gb10.dspark.vars_sources", {"files": [str(other)]})
    plugin._loader = DataLoader()
    with mock.patch.object(action.context, "CLIARGS", {}):
        res = plugin.run(task_vars={"ansible_inventory_sources": [str(inv)], "hostvars": {}})
    assert res["failed"] is True and str(other) in res["sources"]
    assert [(m["key"], m["first_line"], m["second_line"]) for m in res["mismatches"]] == [("y", 2, 3)]
    plugin = make_plugin(action.ActionModule, "gb10.dspark.vars_sources", {"files": "x.yml"})
    assert plugin.run(task_vars={})["msg"] == "files must be a list of paths"
