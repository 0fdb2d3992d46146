"""The niah_wait action's progress: printed by the wait itself, or, with progress_results, handed over as
results that the task's until retries (one wait across the retries) and the gb10.dspark.progress callback
prints - the same lines either way."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.gb10.dspark.plugins.action import niah_wait as action
from ansible_collections.gb10.dspark.plugins.callback import progress as callback
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _progress as P
from tests.unit.plugins.action._plugin import make_plugin

HOST = "sim02-head"
SUMMARY = {"status": "PASS", "pass_count": 3, "total": 3, "ran": 3, "resumed": 0}
STATUSES = [
    {"running": True, "progress": {"state": "running", "depth": 0.25, "index": 1, "total": 3}, "rows_done": []},
    {"running": True, "progress": {"state": "running", "depth": 0.25, "index": 1, "total": 3}, "rows_done": []},
    {"running": True, "progress": {"state": "running", "depth": 0.5, "index": 2, "total": 3}, "rows_done": [1]},
    {"running": False, "summary": SUMMARY},
]


def make(calls: list, **args):
    plugin = make_plugin(action.ActionModule, "gb10.dspark.niah_wait",
                         dict({"output_dir": "/var/lib/dspark/niah/run1", "interval": 0.01, "progress_every": 100},
                              **args))
    plugin._task._uuid = "t-niah"

    def execute(module_name, module_args, task_vars):
        assert module_name == "gb10.dspark.niah" and module_args["state"] == "status"
        calls.append(module_args)
        return dict(STATUSES[min(len(calls) - 1, len(STATUSES) - 1)], changed=False)

    plugin._execute_module = execute
    return plugin


@pytest.fixture(name="shown")
def _shown(monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr(action, "display", SimpleNamespace(display=lambda msg, *a, **kw: lines.append(msg)))
    return lines


def test_the_wait_prints_its_lines_without_progress_results(shown):
    calls: list = []
    res = make(calls).run(task_vars={"inventory_hostname": HOST})
    assert res["msg"] == "NIAH PASS: 3/3 passed, ran 3, resumed 0" and len(calls) == 4
    assert [line.split("; waited")[0] for line in shown] == [
        f"[{HOST}] NIAH running: depth 0.25 (1/3), 0 row(s) written",
        f"[{HOST}] NIAH running: depth 0.5 (2/3), 1 row(s) written"]
    assert P.KEY not in res


def test_progress_results_hand_each_line_to_the_callback(shown):
    calls: list = []
    results = []
    for _attempt in range(10):  # the task's until: a new handler per retry
        res = make(calls, progress_results=True).run(task_vars={"inventory_hostname": HOST})
        results.append(res)
        if not res.get(P.WAITING):
            break
    assert results[-1]["msg"] == "NIAH PASS: 3/3 passed, ran 3, resumed 0" and not results[-1].get("failed")
    assert len(calls) == 4 and len(results) == 3  # one wait across the retries; a retry per line
    assert shown == [] and action._WAITS == {}
    printed: list[str] = []
    cb = callback.CallbackModule(display=SimpleNamespace(verbosity=0, display=lambda msg, *a, **kw: printed.append(msg)))
    for res in results[:-1]:
        cb.v2_runner_retry(SimpleNamespace(host=SimpleNamespace(get_name=lambda: HOST), result=res))
    cb.v2_runner_on_ok(SimpleNamespace(host=SimpleNamespace(get_name=lambda: HOST), result=results[-1]))
    assert [line.split("; waited")[0] for line in printed] == [
        f"[{HOST}] NIAH running: depth 0.25 (1/3), 0 row(s) written",
        f"[{HOST}] NIAH running: depth 0.5 (2/3), 1 row(s) written"]
    assert all(line.endswith(" s") for line in printed)


def test_progress_results_need_the_tasks_until(shown):
    calls: list = []
    plugin = make(calls, progress_results=True)
    plugin._task.until = []
    with pytest.raises(AnsibleActionFail, match="progress_results needs the task's until"):
        plugin.run(task_vars={"inventory_hostname": HOST})
    assert calls == []
