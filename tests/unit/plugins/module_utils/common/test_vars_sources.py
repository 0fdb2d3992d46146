# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which files a play's variables come from, and the verdict on them: a key given twice is refused."""
from __future__ import annotations

import os
from pathlib import Path

from ansible.parsing.dataloader import DataLoader

from ansible_collections.gb10.dspark.plugins.module_utils.common import _vars_sources as vs

ROOT = Path(__file__).resolve().parents[5]
DUP_PIN = "dspark_pin:\n  release: v026\n  image_id: sha256:aa\n  model_id: m\n  image_id: sha256:bb\n"


def _tree(tmp_path: Path) -> Path:
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "group_vars" / "all" / "pin.yml").write_text("dspark_pin:\n  release: v026\n")
    (inv / "group_vars" / "all" / "site.yml").write_text("dspark_api_port: 8888\n")
    (inv / "group_vars" / "all" / ".hidden.yml").write_text("a: 1\na: 2\n")
    (inv / "group_vars" / "pair_a.yml").write_text("dspark_pair: a\n")
    (inv / "group_vars" / "pair_other.yml").write_text("x: 1\nx: 2\n")  # no host of the play is in it
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "a-head.yml").write_text("dspark_rank: 0\n")
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    a-head:\n")
    (inv / "notes.txt").write_text("not an inventory file\n")
    return inv


def test_the_sources_are_the_vars_files_of_the_play_entities_the_inventory_and_the_e_files(tmp_path):
    inv = _tree(tmp_path)
    extra = tmp_path / "extra.yml"
    extra.write_text("a: 1\n")
    found = vs.sources([str(inv)], str(tmp_path / "pb"), ["all", "pair_a", "a-head"],
                       ["@extra.yml", "k=v", '{"x": 1}', ""], str(tmp_path), DataLoader().find_vars_files)
    g = inv / "group_vars"
    assert [s.name for s in found] == [
        str(g / "all" / "pin.yml"), str(g / "all" / "site.yml"), str(g / "pair_a.yml"),
        str(inv / "host_vars" / "a-head.yml"), str(inv / "hosts.yml"), str(extra), "-e item 3"]
    assert found[-1].text == '{"x": 1}' and found[-1].path is None


def test_an_inventory_file_source_and_the_playbook_folder_are_both_searched(tmp_path):
    inv = _tree(tmp_path)
    pb = tmp_path / "pb"
    (pb / "group_vars").mkdir(parents=True)
    (pb / "group_vars" / "all.yaml").write_text("b: 1\n")
    found = vs.sources([str(inv / "hosts.yml")], str(pb), ["all"], [], str(tmp_path), DataLoader().find_vars_files)
    assert [s.name for s in found] == [str(inv / "group_vars" / "all" / "pin.yml"), str(inv / "group_vars" / "all" / "site.yml"),
                                       str(pb / "group_vars" / "all.yaml"), str(inv / "hosts.yml")]


def test_a_host_list_source_is_not_a_path(tmp_path):
    assert vs.basedirs(["a-head,a-worker,"], None) == []
    assert vs.basedirs([str(tmp_path), str(tmp_path / "x.yml")], str(tmp_path)) == [os.path.realpath(tmp_path)]


def test_a_duplicate_in_the_pin_is_refused_naming_file_key_and_both_lines(tmp_path):
    inv = _tree(tmp_path)
    pin = inv / "group_vars" / "all" / "pin.yml"
    pin.write_text(DUP_PIN)
    found = vs.sources([str(inv)], None, ["all"], [], str(tmp_path), DataLoader().find_vars_files)
    problems = vs.check(found, lambda p: Path(p).read_text())
    assert [(p.source, p.key, p.first_line, p.second_line) for p in problems] == [(str(pin), "image_id", 3, 5)]
    message = problems[0].as_dict()["message"]
    assert message.startswith(f'control node: {pin}: key "image_id" is given twice, at lines 3 and 5')
    assert "sha256:aa" not in message and "sha256:bb" not in message
    assert vs.summary(problems, len(found)) == message


def test_every_refused_source_is_listed_and_clean_sources_pass(tmp_path):
    sources = [vs.Source("-e item 1", text='{"a": 1, "a": 2}'), vs.Source("ok", text="a: 1\n"),
               vs.Source("-e item 2", text="b:\n  c: 1\n  c: 2\n"), vs.Source("/gone.yml", path="/gone.yml"),
               vs.Source("bad", text="a: [1\n")]

    def read(path):
        raise FileNotFoundError(path)

    problems = vs.check(sources, read)
    assert [(p.source, p.key, p.first_line, p.second_line) for p in problems] == [
        ("-e item 1", "a", 1, 1), ("-e item 2", "c", 2, 3), ("/gone.yml", None, None, None), ("bad", None, None, None)]
    assert "cannot read /gone.yml (FileNotFoundError)" in problems[2].message
    text = vs.summary(problems, len(sources))
    assert text.startswith("4 variable sources refused:\n")
    assert vs.check([vs.Source("ok", text="a: 1\n")], read) == []
    assert vs.summary([], 3) == "3 variable sources read, no key given twice"


def test_the_sample_inventories_have_no_key_given_twice():
    for name in ("sample", "sample/hosts.yml", "sample/fleet.yml"):
        inv = ROOT / "inventories" / name
        found = vs.sources([str(inv)], str(ROOT / "playbooks"), ["all", "dspark_pairs", "dspark_heads", "dspark_workers"],
                           [], str(ROOT), DataLoader().find_vars_files)
        assert any(s.name.endswith("pin.yml") for s in found)
        assert vs.check(found, lambda p: Path(p).read_text()) == []


def test_two_pins_in_one_group_vars_folder_are_refused_naming_both(tmp_path):
    inv = _tree(tmp_path)
    folder = inv / "group_vars" / "all"
    (folder / "pin-v027.yml").write_text("# the next release\n\ndspark_pin:\n  release: v027\n")
    found = vs.sources([str(inv)], None, ["all", "pair_a"], [], str(tmp_path), DataLoader().find_vars_files)
    problems = vs.check(found, lambda p: Path(p).read_text())
    assert [(p.source, p.key, p.first_line, p.second_line) for p in problems] == [
        (str(folder / "pin.yml"), "dspark_pin", 3, 1)]
    assert problems[0].message.startswith(
        f"{folder / 'pin.yml'}: dspark_pin (line 1) is also set by {folder / 'pin-v027.yml'} (line 3), a file Ansible "
        f"reads at the same precedence ({folder})")


def test_a_pin_overridden_at_another_precedence_and_other_variables_set_twice_are_fine(tmp_path):
    inv = _tree(tmp_path)
    (inv / "group_vars" / "pair_a.yml").write_text("dspark_pin:\n  release: v027\n")  # a pair's own pin
    (inv / "group_vars" / "all" / "connection.yml").write_text("dspark_api_port: 8888\n")  # also in site.yml
    found = vs.sources([str(inv)], None, ["all", "pair_a"], [], str(tmp_path), DataLoader().find_vars_files)
    assert vs.check(found, lambda p: Path(p).read_text()) == []
