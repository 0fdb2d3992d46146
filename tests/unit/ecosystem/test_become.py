"""Ranks are reached as an unprivileged user and the collection asks for root where it needs it:
every play that works on a rank says ``become: true`` (the Docker socket, /etc/dspark,
/var/lib/dspark and the pair's lock under /run/dspark are root's), and every task that runs on
the control node says ``become: false`` (itself or through its block), so an operator's own
account on the control node is never asked for sudo. Read from the YAML, as Ansible would."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml")) + sorted((REPO / "bench").glob("*.yml"))  # the bench plays too
TASK_FILES = sorted((REPO / "roles").glob("*/tasks/*.yml"))
BLOCK_KEYS = ("block", "rescue", "always")
# Actions that Ansible runs inside the controller's own process: they never connect to a host.
CONTROLLER_ACTIONS = {"ansible.builtin.assert", "ansible.builtin.debug", "ansible.builtin.fail",
                      "ansible.builtin.set_fact", "ansible.builtin.meta", "ansible.builtin.add_host"}
# Plays that never connect to a rank, and so need no root there (render computes on the control node).
NO_RANK_PLAYS = {("render.yml", "Render the engine launch of GB10 pairs (control node only)")}


class _Loader(yaml.SafeLoader):
    """YAML as Ansible reads it, as far as this test needs: ``!unsafe`` marks a plain string."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load(path: Path) -> list:
    return yaml.load(path.read_text(), Loader=_Loader) or []  # noqa: S506 (a SafeLoader with one tag more)


def walk(tasks: list, become=None):
    """Every task of a task list with the ``become`` it runs with (None: inherited from the play)."""
    for task in tasks or []:
        own = task.get("become", become)
        if any(key in task for key in BLOCK_KEYS):
            for key in BLOCK_KEYS:
                yield from walk(task.get(key), own)
        else:
            yield task, own


def on_control_node(task: dict) -> bool:
    return str(task.get("delegate_to", "")).strip() in ("localhost", "127.0.0.1")


def action_of(task: dict) -> str:
    keys = set(task) - {"name", "when", "vars", "register", "tags", "become", "delegate_to", "run_once", "loop",
                        "loop_control", "changed_when", "failed_when", "check_mode", "no_log", "ignore_errors",
                        "environment", "until", "retries", "delay", "notify", "listen", "args", "diff"}
    return next(iter(keys), "")


@pytest.mark.parametrize("path", TASK_FILES + PLAYBOOKS, ids=lambda p: str(p.relative_to(REPO)))
def test_control_node_tasks_do_not_become(path):
    docs = load(path)
    task_lists = [play.get(key) for play in docs if "hosts" in play for key in ("pre_tasks", "tasks", "post_tasks")]
    if path.parent.name == "tasks":
        task_lists = [docs]
    found = [task.get("name") for tasks in task_lists for task, become in walk(tasks)
             if on_control_node(task) and become is not False]
    assert not found, f"{path.relative_to(REPO)}: tasks on the control node without become: false: {found}"


@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.name)
def test_plays_on_ranks_become_root(path):
    for play in load(path):
        if "hosts" not in play or (path.name, play["name"]) in NO_RANK_PLAYS:
            continue
        tasks = [task for key in ("pre_tasks", "tasks", "post_tasks") for task, _unused in walk(play.get(key))]
        connects = bool(play.get("roles")) or any(action_of(task) not in CONTROLLER_ACTIONS for task in tasks)
        if connects:
            assert play.get("become") is True, f"{path.name}: play {play['name']!r} works on ranks without become: true"
        else:
            assert "become" not in play, f"{path.name}: play {play['name']!r} never connects; it needs no become"


def test_the_walk_sees_blocks_and_their_become():
    tasks = [{"name": "a", "delegate_to": "localhost"},
             {"name": "b", "become": False, "block": [{"name": "c", "delegate_to": "localhost"},
                                                      {"name": "d", "become": True, "delegate_to": "localhost"}]}]
    seen = {task["name"]: become for task, become in walk(tasks)}
    assert seen == {"a": None, "c": False, "d": True}


def test_the_list_of_rank_free_plays_names_real_plays():
    names = {(path.name, play.get("name")) for path in PLAYBOOKS for play in load(path)}
    assert NO_RANK_PLAYS <= names
