"""No task hands Ansible a secret in its arguments without ``no_log``: a task's arguments and result reach
``-v`` output, ``--diff`` and the job events of every run folder (AWX keeps them too). The variables below
hold a secret (the API key, the secret-named values of the extra env) or a rank's raw records (a container's
inspect record, whose Env holds the key; log lines; the profile files); a task whose arguments mention one
runs with ``no_log``. Read from the YAML, as Ansible would (anchors resolved)."""
from __future__ import annotations

import json

import pytest

from tests.unit.ecosystem.test_become import BLOCK_KEYS, PLAYBOOKS, REPO, TASK_FILES, load

SECRET_BEARING = ("__dspark_engine_env", "__dspark_engine_secret_env", "__dspark_profile_secret_env",
                  "__dspark_evidence_probe", "__dspark_evidence_artifacts")
# Task keywords that are not a module's arguments (a condition may test a secret-bearing variable's length).
KEYWORDS = {"name", "when", "no_log", "register", "loop_control", "vars", "changed_when", "failed_when", "tags",
            "delegate_to", "run_once", "become", "check_mode", "until", "retries", "delay", "notify"}


def tasks_of(tasks):
    for task in tasks or []:
        if any(key in task for key in BLOCK_KEYS):
            for key in BLOCK_KEYS:
                yield from tasks_of(task.get(key))
        else:
            yield task


def every_task():
    for path in TASK_FILES:
        for task in tasks_of(load(path)):
            yield path, task
    for path in PLAYBOOKS:
        for play in load(path):
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                for task in tasks_of(play.get(key)):
                    yield path, task


def arguments(task: dict) -> str:
    """What Ansible templates into the module's arguments: everything but the keywords, with the task's own
    vars resolved one level (a vars entry that is itself secret-bearing counts where it is used)."""
    args = {k: v for k, v in task.items() if k not in KEYWORDS}
    text = json.dumps(args, default=str)
    for name, value in (task.get("vars") or {}).items():
        if name in text:
            text += json.dumps(value, default=str)
    return text


CASES = [(path, task) for path, task in every_task() if any(v in arguments(task) for v in SECRET_BEARING)]


def test_the_rule_finds_the_tasks_it_is_about():
    names = {task.get("name") for _unused, task in CASES}
    assert "Evidence | Assemble the pair's pack (control node)" in names
    assert "Profile | The profile folder, the rank's engine environment file and the compilation config" in names
    assert "Engine | Plan this rank's engine (changes nothing)" in names


@pytest.mark.parametrize("path, task", CASES, ids=[f"{p.relative_to(REPO)}:{t.get('name')}" for p, t in CASES])
def test_a_task_whose_arguments_hold_a_secret_runs_with_no_log(path, task):
    assert "no_log" in task, f"{path.relative_to(REPO)}: task {task.get('name')!r} passes a secret without no_log"
    assert task["no_log"] is True or (isinstance(task["no_log"], str) and "{{" in task["no_log"]), task["no_log"]


# A task that asks a module for a container's whole inspect record (its Env holds the API key) gets it back in its
# result, which reaches -v output and the job events like its arguments: such a task runs with no_log too.
RECORD_READS = [(path, task) for path, task in every_task()
                if isinstance(task.get("gb10.dspark.engine_probe"), dict) and task["gb10.dspark.engine_probe"].get("inspect")]


def test_the_record_rule_finds_the_evidence_read():
    assert [task.get("name") for _unused, task in RECORD_READS] == [
        "Evidence | Read this rank's engine container, its log (its last lines, both streams in the order written) "
        "and its rendered profiles, in one call"]


@pytest.mark.parametrize("path, task", RECORD_READS, ids=[f"{p.relative_to(REPO)}:{t.get('name')}" for p, t in RECORD_READS])
def test_a_task_that_reads_a_whole_inspect_record_runs_with_no_log(path, task):
    assert task.get("no_log") is True, f"{path.relative_to(REPO)}: task {task.get('name')!r} registers an inspect record"
