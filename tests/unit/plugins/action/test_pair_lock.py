"""The pair_lock action plugin: the owner it adds, and what it does with a lock another run holds -
fail naming a live or foreign holder, fail on a stale one unless told to break it, then take it over."""
from __future__ import annotations

import json
import os
import socket

import pytest

from ansible_collections.gb10.dspark.plugins.action import pair_lock as action
from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _pair_lock as pl
from tests.unit.plugins.action._plugin import make_plugin

HOST = socket.gethostname()
NOW = "2026-01-02T03:04:05Z"


def dead_pid() -> int:
    """The id of a child that has exited and been reaped."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def holder(run_id="run-old", host=HOST, pid=None, start=None):
    return {"pair": "spark-a", "run_id": run_id, "control_host": host, "control_pid": pid,
            "control_pid_start": start, "playbook": "provision", "user": "ops", "acquired": NOW}


def make_action(args, module_results, check_mode=False):
    """An ActionModule whose module calls return ``module_results`` in turn (recorded in .calls)."""
    plugin = make_plugin(action.ActionModule, "gb10.dspark.pair_lock", args, check_mode)
    results = iter(module_results)
    plugin.calls = []

    def execute(module_name, module_args, task_vars):
        plugin.calls.append((module_name, module_args))
        return dict(next(results))

    plugin._execute_module = execute
    return plugin


ARGS = {"pair": "spark-a", "run_id": "run-new", "playbook": "provision", "path": "/run/dspark/lock/pair.lock"}
TASK_VARS = {"inventory_hostname": "head-a"}


def held(h):
    return {"changed": False, "acquired": False, "released": False, "holder": h, "path": ARGS["path"]}


def test_free_lock_is_taken_with_this_controllers_identity():
    plugin = make_action(ARGS, [{"changed": True, "acquired": True, "released": False, "holder": {}}])
    res = plugin.run(task_vars=TASK_VARS)
    assert res.get("failed") is not True and res["acquired"] is True and res["changed"] is True
    (name, margs), = plugin.calls
    assert name == "gb10.dspark.pair_lock"
    assert "takeover_run_id" not in margs and "break_stale" not in margs
    assert margs["run_id"] == "run-new" and margs["state"] == "present"
    owner = margs["owner"]
    assert owner["run_id"] == "run-new" and owner["control_host"] == HOST and owner["playbook"] == "provision"
    assert owner["control_pid"] == os.getppid()
    assert owner["control_pid_start"] == pl.pid_start(os.getppid()) and isinstance(owner["control_pid_start"], int)
    assert owner["user"]


def test_stale_holder_without_break_fails_and_calls_the_module_once():
    old = holder(pid=dead_pid(), start=123)
    plugin = make_action(ARGS, [held(old)])
    res = plugin.run(task_vars=TASK_VARS)
    assert res["failed"] is True and len(plugin.calls) == 1
    assert res["msg"] == (
        f"pair spark-a: lock /run/dspark/lock/pair.lock on head-a is stale: held by run run-old "
        f"(pid {old['control_pid']} on {HOST}, provision, since {NOW}), which is no longer running; "
        "expected a free lock. Nothing was changed. Re-run with dspark_lock_break_stale=true to take it over.")


def test_reused_pid_is_stale():
    me = os.getpid()  # alive, but started at another time than the holder recorded
    old = holder(pid=me, start=pl.pid_start(me) + 1)
    res = make_action(ARGS, [held(old)]).run(task_vars=TASK_VARS)
    assert res["failed"] is True and "is stale: held by run run-old" in res["msg"]


def test_stale_holder_with_break_takes_over_and_warns():
    old = holder(pid=dead_pid(), start=123)
    mine = holder(run_id="run-new", pid=os.getppid())
    plugin = make_action(dict(ARGS, break_stale=True),
                         [held(old), {"changed": True, "acquired": True, "released": False, "holder": mine}])
    res = plugin.run(task_vars=TASK_VARS)
    assert res.get("failed") is not True
    assert res["changed"] is True and res["acquired"] is True and res["broke_stale"] == old
    assert len(plugin.calls) == 2
    first, second = plugin.calls[0][1], plugin.calls[1][1]
    assert "takeover_run_id" not in first and second["takeover_run_id"] == "run-old"
    assert second["owner"] == first["owner"]
    assert len(res["warnings"]) == 1 and "broke the stale lock" in res["warnings"][0]
    assert "run run-old" in res["warnings"][0] and f"pid {old['control_pid']}" in res["warnings"][0]


def test_break_when_the_takeover_loses_to_another_run_fails_naming_it():
    old = holder(pid=dead_pid(), start=123)
    rival = holder(run_id="run-rival", pid=os.getpid(), start=pl.pid_start(os.getpid()))
    plugin = make_action(dict(ARGS, break_stale=True), [held(old), held(rival)])
    res = plugin.run(task_vars=TASK_VARS)
    assert res["failed"] is True and "is held by run run-rival" in res["msg"] and "broke_stale" not in res


def test_break_passes_a_module_failure_through():
    old = holder(pid=dead_pid(), start=123)
    plugin = make_action(dict(ARGS, break_stale=True), [held(old), {"failed": True, "msg": "pair spark-a: nope"}])
    res = plugin.run(task_vars=TASK_VARS)
    assert res["failed"] is True and res["msg"] == "pair spark-a: nope"


def test_live_holder_fails_naming_its_run_even_with_break():
    me = os.getpid()
    live = holder(pid=me, start=pl.pid_start(me))
    plugin = make_action(dict(ARGS, break_stale=True), [held(live)])
    res = plugin.run(task_vars=TASK_VARS)
    assert res["failed"] is True and len(plugin.calls) == 1
    assert res["msg"] == (
        f"pair spark-a: lock /run/dspark/lock/pair.lock on head-a is held by run run-old (pid {me} on {HOST}, "
        f"provision, since {NOW}); expected a free lock. Another run is working on this pair; nothing was changed.")


def test_holder_from_another_control_host_is_never_broken():
    far = holder(host=HOST + "-elsewhere", pid=dead_pid(), start=1)
    plugin = make_action(dict(ARGS, break_stale=True), [held(far)])
    res = plugin.run(task_vars=TASK_VARS)
    assert res["failed"] is True and len(plugin.calls) == 1
    assert "is held by run run-old" in res["msg"]
    assert f"liveness cannot be checked from {HOST}" in res["msg"]


def test_release_refused_for_another_runs_lock_is_not_a_failure():
    other = holder(pid=dead_pid())
    plugin = make_action(dict(ARGS, state="absent"),
                         [{"changed": False, "acquired": False, "released": False, "holder": other}])
    res = plugin.run(task_vars=TASK_VARS)
    assert res.get("failed") is not True and res["released"] is False and len(plugin.calls) == 1


def test_module_failure_is_passed_through():
    plugin = make_action(ARGS, [{"failed": True, "msg": "pair spark-a: lock /x on this rank is unreadable (not JSON)"}])
    res = plugin.run(task_vars=TASK_VARS)
    assert res["failed"] is True and res["msg"].endswith("unreadable (not JSON)") and len(plugin.calls) == 1


def test_unknown_option_is_refused():
    from ansible.errors import AnsibleActionFail
    with pytest.raises(AnsibleActionFail, match="owner"):
        make_action(dict(ARGS, owner={}), []).run(task_vars=TASK_VARS)


def test_two_runs_against_a_real_lock_file(tmp_path):
    """The action plugin over the real module logic: a second run is refused while the first holds the
    lock, a killed first run is stale, and breaking it hands the lock to the second."""
    path = str(tmp_path / "lock" / "pair.lock")

    def real(args, pid):
        plugin = make_action(dict(args, path=path), [])

        def execute(module_name, module_args, task_vars):
            plugin.calls.append((module_name, module_args))
            margs = dict(module_args)
            margs["owner"] = dict(margs["owner"], control_pid=pid, control_pid_start=pl.pid_start(pid))
            try:
                return pl.run(margs)
            except pl.LockFailure as exc:
                return {"failed": True, "msg": exc.msg}

        plugin._execute_module = execute
        return plugin

    me, gone = os.getpid(), dead_pid()
    assert real(dict(ARGS, run_id="run-1"), me).run(task_vars=TASK_VARS)["acquired"] is True
    refused = real(dict(ARGS, run_id="run-2", break_stale=True), me).run(task_vars=TASK_VARS)
    assert refused["failed"] is True and "is held by run run-1" in refused["msg"]
    assert pl.read_holder(path)["run_id"] == "run-1"
    # run-1's process dies without releasing: mark its record with a dead pid
    stale = dict(pl.read_holder(path), control_pid=gone)
    os.unlink(path)
    pl.run({"pair": "spark-a", "path": path, "run_id": "run-1", "owner": stale})
    assert "is stale" in real(dict(ARGS, run_id="run-2"), me).run(task_vars=TASK_VARS)["msg"]
    broke = real(dict(ARGS, run_id="run-2", break_stale=True), me).run(task_vars=TASK_VARS)
    assert broke["acquired"] is True and broke["broke_stale"]["run_id"] == "run-1"
    assert pl.read_holder(path)["run_id"] == "run-2"


def test_wait_is_passed_to_the_module():
    plugin = make_action(dict(ARGS, wait=7), [{"changed": True, "acquired": True, "released": False, "holder": {}}])
    plugin.run(task_vars=TASK_VARS)
    assert plugin.calls[0][1]["wait"] == 7
    plugin = make_action(ARGS, [{"changed": True, "acquired": True, "released": False, "holder": {}}])
    plugin.run(task_vars=TASK_VARS)
    assert plugin.calls[0][1]["wait"] == 30


@pytest.mark.parametrize("option, value", [("pair", "../etc"), ("pair", "a/b"), ("run_id", ".hidden"),
                                           ("run_id", "run/../../x")])
def test_bad_names_fail_on_the_controller_before_the_module_runs(option, value):
    for state in ("present", "absent"):
        plugin = make_action(dict(ARGS, state=state, **{option: value}), [])
        res = plugin.run(task_vars=TASK_VARS)
        assert res["failed"] is True and plugin.calls == []
        assert res["msg"] == (f"option {option} is {value!r}, expected 1 to 64 letters, digits, '.', '_' or '-', "
                              "starting with a letter or digit")


# --- the old lock location (issue 30): a run of the previous version still going keeps the pair -------

LEGACY = "/run/lock/dspark/pair.lock"


def legacy_held(h):
    return {"changed": False, "acquired": False, "released": False, "holder": None, "path": ARGS["path"],
            "legacy_path": LEGACY, "legacy_holder": h, "legacy_note": None}


def test_the_old_location_is_passed_to_the_module_by_default():
    plugin = make_action(ARGS, [{"changed": True, "acquired": True, "released": False, "holder": {}}])
    plugin.run(task_vars=TASK_VARS)
    assert plugin.calls[0][1]["legacy_path"] == LEGACY == pl.LEGACY_PATH
    assert "legacy_stale_run_id" not in plugin.calls[0][1]


def test_a_live_run_holding_the_old_lock_refuses_even_with_break_stale():
    me = os.getpid()
    old = holder(pid=me, start=pl.pid_start(me))
    plugin = make_action(dict(ARGS, break_stale=True), [legacy_held(old)])
    res = plugin.run(task_vars=TASK_VARS)
    assert res["failed"] is True and len(plugin.calls) == 1
    assert res["msg"] == (
        f"pair spark-a: lock {LEGACY} (where earlier versions of gb10.dspark keep it) on head-a is held by run "
        f"run-old (pid {me} on {HOST}, provision, since {NOW}); expected a free lock. A run of an earlier version is "
        "working on this pair; nothing was changed.")


def test_a_foreign_run_holding_the_old_lock_refuses_and_says_how_to_clear_it():
    res = make_action(ARGS, [legacy_held(holder(host="ops-laptop", pid=4242))]).run(task_vars=TASK_VARS)
    assert res["failed"] is True
    assert res["msg"].startswith(f"pair spark-a: lock {LEGACY} (where earlier versions of gb10.dspark keep it) on "
                                 "head-a is held by run run-old (pid 4242 on ops-laptop")
    assert res["msg"].endswith(f"if no run is active on ops-laptop, remove {LEGACY} on head-a by hand.")


def test_a_stale_old_lock_is_passed_with_a_warning_and_left_in_place():
    old = holder(pid=dead_pid())
    plugin = make_action(ARGS, [legacy_held(old), dict(legacy_held(old), changed=True, acquired=True,
                                                       holder={"run_id": "run-new"})])
    res = plugin.run(task_vars=TASK_VARS)
    assert res.get("failed") is not True and res["acquired"] is True
    assert plugin.calls[1][1]["legacy_stale_run_id"] == "run-old"
    assert res["warnings"] == [
        f"pair spark-a: the lock {LEGACY} (where earlier versions of gb10.dspark keep it) on head-a is stale: held by "
        f"run run-old (pid {old['control_pid']} on {HOST}, provision, since {NOW}), which is no longer running; it "
        f"no longer blocks a run. Remove {LEGACY} on head-a by hand."]


def test_a_squatted_old_folder_is_a_warning_not_a_refusal():
    note = "the old lock folder /run/lock/dspark: owned by uid 1000 mode 0777, ...; Remove it: rm -rf /run/lock/dspark"
    plugin = make_action(ARGS, [dict(legacy_held(None), changed=True, acquired=True, holder={"run_id": "run-new"},
                                     legacy_note=note)])
    res = plugin.run(task_vars=TASK_VARS)
    assert res.get("failed") is not True and res["acquired"] is True
    assert res["warnings"] == [f"pair spark-a: on head-a, {note}"]


def test_a_run_refused_by_a_squatter_at_the_old_location_no_more(tmp_path):
    """Over the real module logic, as root: a local user's /run/lock/dspark (with a lock record naming a
    live process) blocks nothing, and the run takes the lock at its own path."""
    legacy = tmp_path / "run-lock" / "dspark" / "pair.lock"
    legacy.parent.mkdir(parents=True)
    me = os.getpid()
    legacy.write_text(json.dumps(holder(run_id="squat", pid=me, start=pl.pid_start(me))))
    os.chown(legacy.parent, 12345, 12345)
    path = str(tmp_path / "dspark" / "lock" / "pair.lock")
    plugin = make_action(dict(ARGS, path=path, legacy_path=str(legacy)), [])

    def execute(module_name, module_args, task_vars):
        plugin.calls.append((module_name, module_args))
        return pl.run(dict(module_args))

    plugin._execute_module = execute
    res = plugin.run(task_vars=TASK_VARS)
    assert res.get("failed") is not True and res["acquired"] is True, res
    assert pl.read_holder(path)["run_id"] == "run-new"
    assert "owned by uid 12345" in res["warnings"][0]
