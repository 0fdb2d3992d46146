"""Tags: every task of every playbook carries one (a --tags selection never silently does nothing), the converge's
phases carry theirs, every dynamic include hands its selection on to what it includes, and a selection of one
phase lists that phase's tasks and the ones every run needs, nothing else."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOKS = sorted(p for p in (REPO / "playbooks").glob("*.yml"))
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
ENV = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))


def list_tasks_of(playbooks: list[Path], *selection: str) -> dict[str, list[tuple[str, set[str]]]]:
    """{playbook path: [(task, tags)]} from one ``ansible-playbook --list-tasks`` of all of them (each listed under
    its own ``playbook:`` line)."""
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(REPO / "inventories" / "sample" / "hosts.yml"),
                          *map(str, playbooks), "--list-tasks", *selection], cwd=REPO, env=ENV, text=True,
                         capture_output=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    listed: dict[str, list[tuple[str, set[str]]]] = {}
    rows: list[tuple[str, set[str]]] = []
    for line in res.stdout.splitlines():
        if line.startswith("playbook: "):
            rows = listed.setdefault(line[len("playbook: "):].strip(), [])
        m = re.match(r"^ {6}(.+)\tTAGS: \[(.*)\]$", line)
        if m:
            rows.append((m.group(1), {t.strip() for t in m.group(2).split(",") if t.strip()}))
    assert sorted(listed) == sorted(map(str, playbooks)), res.stdout
    for playbook, found in listed.items():
        assert found, f"{playbook}: no task listed\n{res.stdout}"
    return listed


def list_tasks(playbook: Path, *selection: str) -> list[tuple[str, set[str]]]:
    return list_tasks_of([playbook], *selection)[str(playbook)]


def test_every_task_of_every_playbook_has_a_tag():
    listed = list_tasks_of(PLAYBOOKS)
    untagged = [f"{Path(p).name}: {name}" for p, rows in listed.items() for name, tags in rows if not tags]
    assert untagged == []


def test_tags_preflight_on_provision_lists_the_preflight_and_what_every_run_needs_only():
    rows = list_tasks(REPO / "playbooks" / "provision.yml", "--tags", "preflight")
    phases = {"image", "profile", "engine", "gate", "evidence"}
    for name, tags in rows:
        if name.split(" : ", 1)[-1].startswith("Validating arguments"):
            continue  # Ansible tags a role's argument check always
        assert "always" in tags or "preflight" in tags, (name, tags)
        assert not (tags & phases) or "always" in tags, (name, tags)
    names = " ".join(name for name, _tags in rows)
    assert "Preflight | The rank has the pinned GPU, its fabric links are Up and it holds the pinned model checkpoint" in names
    assert "Converge | The tag selection keeps the fail-closed order" in names and "Lock | Take the pair's lock" in names
    assert "Image | Probe" not in names and "Engine | Plan" not in names and "Gate | Run" not in names


def _includes(path: Path):
    def walk(items):
        for item in items or []:
            if not isinstance(item, dict):
                continue
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                yield from walk(item.get(key))
            for key in ("ansible.builtin.include_role", "ansible.builtin.include_tasks"):
                if key in item:
                    yield item, key
    yield from walk(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("path", sorted((REPO / "roles").glob("*/tasks/*.yml")) + PLAYBOOKS,
                         ids=lambda p: str(p.relative_to(REPO)))
def test_every_dynamic_include_hands_the_selection_on(path):
    """A dynamic include's tags stop at the include: what it includes runs `always` once the include runs (the
    include carries its phase's or its play's tag), except the converge, whose phases carry their own tags and whose
    include is tagged always."""
    for task, key in _includes(path):
        args = task[key] if isinstance(task[key], dict) else {"file": task[key]}
        if args.get("name") == "gb10.dspark.converge" and "apply" not in args:
            assert "always" in (task.get("tags") or []), task["name"]
        else:
            assert "always" in ((args.get("apply") or {}).get("tags") or []), task["name"]
