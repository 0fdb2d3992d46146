"""The per-pair lock: taking, re-taking, contention, release by owner only, corrupt files, check and
diff mode, takeover, and how the controller judges a holder (live, stale, foreign)."""
from __future__ import annotations

import json
import os
import stat
from unittest import mock

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils import _pair_lock as pl
from ansible_collections.gb10.dspark.plugins.module_utils._pair_lock import LockFailure, holder_state, run
from ansible_collections.gb10.dspark.plugins.modules import pair_lock as pair_lock_module
from tests.unit.plugins.modules.conftest import run_module

NOW = "2026-01-02T03:04:05Z"


def owner(run_id="run-a", host="ctl", pid=4711, start=1000, playbook="provision", user="ops"):
    return {"run_id": run_id, "control_host": host, "control_pid": pid, "control_pid_start": start,
            "playbook": playbook, "user": user}


def params(path, run_id="run-a", state="present", takeover=None, **kw):
    return {"pair": "spark-a", "state": state, "path": str(path), "run_id": run_id, "playbook": "provision",
            "break_stale": False, "owner": owner(run_id=run_id, **kw), "takeover_run_id": takeover}


@pytest.fixture(name="lock_path")
def _lock_path(tmp_path):
    return tmp_path / "state" / "lock" / "pair.lock"


def on_disk(path):
    return json.loads(path.read_text())


# --- state=present ------------------------------------------------------------------------------

def test_acquire_free_lock_writes_the_record_and_creates_dirs(lock_path):
    res = run(params(lock_path), now=NOW)
    assert res["changed"] is True and res["acquired"] is True and res["released"] is False
    want = {"pair": "spark-a", "run_id": "run-a", "control_host": "ctl", "control_pid": 4711,
            "control_pid_start": 1000, "playbook": "provision", "user": "ops", "acquired": NOW}
    assert on_disk(lock_path) == want and res["holder"] == want and res["path"] == str(lock_path)
    assert stat.S_IMODE(lock_path.stat().st_mode) == 0o644
    assert stat.S_IMODE(lock_path.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(lock_path.parent.parent.stat().st_mode) == 0o755
    assert os.listdir(lock_path.parent) == ["pair.lock"]  # the temp file is gone


def test_parent_dirs_are_0755_whatever_the_umask(lock_path):
    old = os.umask(0o077)
    try:
        run(params(lock_path), now=NOW)
    finally:
        os.umask(old)
    assert stat.S_IMODE(lock_path.parent.stat().st_mode) == 0o755


def test_reacquire_by_the_same_run_changes_nothing(lock_path):
    run(params(lock_path), now=NOW)
    again = run(params(lock_path), now="2026-01-02T09:00:00Z")
    assert again["changed"] is False and again["acquired"] is True
    assert on_disk(lock_path)["acquired"] == NOW  # the record is not rewritten


def test_contended_lock_is_not_a_failure_and_is_left_alone(lock_path):
    run(params(lock_path, run_id="run-a"), now=NOW)
    before = lock_path.read_bytes()
    res = run(params(lock_path, run_id="run-b", pid=999), now="2026-01-02T09:00:00Z")
    assert res["changed"] is False and res["acquired"] is False
    assert res["holder"]["run_id"] == "run-a" and res["holder"]["control_pid"] == 4711
    assert lock_path.read_bytes() == before


def test_acquire_uses_link_never_replace(lock_path, monkeypatch):
    run(params(lock_path, run_id="run-a"), now=NOW)
    monkeypatch.setattr(pl.os, "replace", mock.Mock(side_effect=AssertionError("replace over a held lock")))
    assert run(params(lock_path, run_id="run-b"))["acquired"] is False


def test_lost_race_at_link_time_reports_the_winner(lock_path, monkeypatch):
    """Another writer creates the lock between our read and our link: the link fails, the winner is read."""
    real_link = os.link

    def link_after_rival(src, dst):
        if not os.path.exists(dst):
            with open(dst, "w") as handle:
                json.dump({"run_id": "rival", "control_host": "other"}, handle)
        return real_link(src, dst)

    monkeypatch.setattr(pl.os, "link", link_after_rival)
    res = run(params(lock_path, run_id="run-a"), now=NOW)
    assert res["acquired"] is False and res["changed"] is False and res["holder"]["run_id"] == "rival"
    assert [n for n in os.listdir(lock_path.parent) if n != "pair.lock"] == []


def test_owner_run_id_must_be_the_tasks(lock_path):
    p = params(lock_path, run_id="run-a")
    p["owner"]["run_id"] = "run-z"
    with pytest.raises(LockFailure, match="owner.run_id is run-z, expected the task's run_id run-a"):
        run(p)
    assert not lock_path.exists()


def test_no_owner_fails_pointing_at_the_action_plugin(lock_path):
    p = params(lock_path)
    p["owner"] = None
    with pytest.raises(LockFailure, match="runs through its action plugin"):
        run(p)


@pytest.mark.parametrize("content, reason", [
    ("{not json", "not JSON"),
    ("[1, 2]", "a JSON list, not an object"),
    ('{"pair": "spark-a"}', "no run_id in it"),
    ("", "not JSON"),
])
def test_corrupt_lock_fails_naming_path_and_reason(lock_path, content, reason):
    lock_path.parent.mkdir(parents=True)
    lock_path.write_text(content)
    for state in ("present", "absent"):
        with pytest.raises(LockFailure) as exc:
            run(params(lock_path, state=state))
        assert exc.value.msg.startswith(f"pair spark-a: lock {lock_path} on this rank is unreadable ({reason}")
        assert exc.value.msg.endswith("); expected a dspark lock; remove it by hand after checking no run is active")
    assert lock_path.read_text() == content


def test_lock_path_that_is_a_directory_or_symlink_is_unreadable(lock_path, tmp_path):
    lock_path.mkdir(parents=True)
    with pytest.raises(LockFailure, match=r"is unreadable \(not a regular file\)"):
        run(params(lock_path))
    lock_path.rmdir()
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(owner(run_id="x")))
    lock_path.symlink_to(target)
    with pytest.raises(LockFailure, match=r"is unreadable \(it is a symbolic link\)"):
        run(params(lock_path))


# --- state=absent -------------------------------------------------------------------------------

def test_release_by_the_holder(lock_path):
    run(params(lock_path, run_id="run-a"), now=NOW)
    res = run(params(lock_path, run_id="run-a", state="absent"))
    assert res["changed"] is True and res["released"] is True and res["holder"] is None
    assert not lock_path.exists()


def test_release_of_a_free_lock_changes_nothing(lock_path):
    res = run(params(lock_path, state="absent"))
    assert res["changed"] is False and res["released"] is False and res["holder"] is None
    assert not lock_path.parent.exists()  # release creates nothing


def test_release_by_another_run_leaves_the_lock(lock_path):
    run(params(lock_path, run_id="run-a"), now=NOW)
    before = lock_path.read_bytes()
    res = run(params(lock_path, run_id="run-b", state="absent"))
    assert res["changed"] is False and res["released"] is False and res["holder"]["run_id"] == "run-a"
    assert lock_path.read_bytes() == before


# --- check mode and diff ------------------------------------------------------------------------

def test_check_mode_changes_nothing(lock_path):
    res = run(params(lock_path), check_mode=True, diff=True, now=NOW)
    assert res["changed"] is True and res["acquired"] is True
    assert res["diff"]["before"] == "free\n" and res["diff"]["after"] == "run-a\n"
    assert not lock_path.parent.exists()

    run(params(lock_path, run_id="run-a"), now=NOW)
    before = lock_path.read_bytes()
    released = run(params(lock_path, run_id="run-a", state="absent"), check_mode=True, diff=True)
    assert released["changed"] is True and released["released"] is True
    assert released["diff"]["before"] == "run-a\n" and released["diff"]["after"] == "free\n"
    taken = run(params(lock_path, run_id="run-b", takeover="run-a"), check_mode=True, diff=True)
    assert taken["changed"] is True and taken["acquired"] is True
    assert taken["diff"]["before"] == "run-a\n" and taken["diff"]["after"] == "run-b\n"
    assert lock_path.read_bytes() == before


def test_diff_of_real_changes_and_no_changes(lock_path):
    taken = run(params(lock_path, run_id="run-a"), diff=True, now=NOW)
    assert (taken["diff"]["before"], taken["diff"]["after"]) == ("free\n", "run-a\n")
    assert taken["diff"]["before_header"] == str(lock_path)
    again = run(params(lock_path, run_id="run-a"), diff=True)
    assert again["diff"]["before"] == again["diff"]["after"] == "run-a\n"
    held = run(params(lock_path, run_id="run-b"), diff=True)
    assert held["diff"]["before"] == held["diff"]["after"] == "run-a\n"
    assert "diff" not in run(params(lock_path, run_id="run-a"))


# --- takeover -----------------------------------------------------------------------------------

def test_takeover_of_the_named_holder_replaces_the_lock(lock_path):
    run(params(lock_path, run_id="run-a"), now=NOW)
    res = run(params(lock_path, run_id="run-b", takeover="run-a", pid=5000), diff=True, now="2026-01-02T09:00:00Z")
    assert res["changed"] is True and res["acquired"] is True
    assert on_disk(lock_path)["run_id"] == "run-b" and on_disk(lock_path)["control_pid"] == 5000
    assert res["diff"]["before"] == "run-a\n" and res["diff"]["after"] == "run-b\n"
    assert stat.S_IMODE(lock_path.stat().st_mode) == 0o644
    assert os.listdir(lock_path.parent) == ["pair.lock"]


def test_takeover_naming_another_run_fails_naming_the_holder(lock_path):
    run(params(lock_path, run_id="run-a"), now=NOW)
    before = lock_path.read_bytes()
    with pytest.raises(LockFailure) as exc:
        run(params(lock_path, run_id="run-b", takeover="run-old"))
    assert exc.value.holder["run_id"] == "run-a"
    assert exc.value.msg == (f"pair spark-a: lock {lock_path} on this rank is held by run run-a (pid 4711 on ctl, "
                             f"provision, since {NOW}), expected run run-old to take over; nothing was changed")
    assert lock_path.read_bytes() == before


def test_takeover_of_a_lock_that_was_freed_meanwhile_just_acquires(lock_path):
    res = run(params(lock_path, run_id="run-b", takeover="run-a"), now=NOW)
    assert res["changed"] is True and res["acquired"] is True and on_disk(lock_path)["run_id"] == "run-b"


# --- through the module -------------------------------------------------------------------------

def test_module_returns_and_fails_like_the_logic(lock_path):
    p = {k: v for k, v in params(lock_path).items() if v is not None}
    res = run_module(pair_lock_module, p, diff=True)
    assert res["failed"] is False and res["changed"] is True and res["acquired"] is True
    assert res["diff"]["after"] == "run-a\n"
    lock_path.write_text("garbage")
    bad = run_module(pair_lock_module, p)
    assert bad["failed"] is True and "is unreadable (not JSON" in bad["msg"] and bad["path"] == str(lock_path)


# --- the controller's view ----------------------------------------------------------------------

HOLDER = {"run_id": "run-a", "control_host": "ctl", "control_pid": 4711, "control_pid_start": 1000,
          "playbook": "provision", "acquired": NOW}


@pytest.mark.parametrize("alive, start, want", [
    (True, 1000, "live"),        # the run's process still runs
    (False, None, "stale"),      # the process is gone
    (True, 2000, "stale"),       # the pid was reused by a process started later
    (True, None, "live"),        # alive, start time unreadable: never stale on a guess
    (None, None, "live"),        # no usable pid in the record
])
def test_holder_state_on_this_host(alive, start, want):
    assert holder_state(HOLDER, "ctl", alive, start) == want


def test_holder_state_without_recorded_start_trusts_a_live_pid():
    assert holder_state(dict(HOLDER, control_pid_start=None), "ctl", True, 2000) == "live"


def test_holder_state_from_another_control_host_is_foreign():
    assert holder_state(HOLDER, "other-ctl", False, None) == "foreign"
    assert holder_state(dict(HOLDER, control_host=None), "ctl", False, None) == "foreign"


def test_proc_start_ticks_counts_after_the_command_name():
    rest = " ".join(str(n) for n in range(3, 60))  # field n holds n, from field 3 on
    assert pl.proc_start_ticks(f"4711 (ansible-playbook) {rest}") == 22
    assert pl.proc_start_ticks(f"4711 (we)ird (name) {rest}") == 22
    assert pl.proc_start_ticks("4711 (short) S 1 2") is None
    assert pl.proc_start_ticks("garbage") is None


def test_pid_start_and_alive_of_this_process():
    me = os.getpid()
    assert pl.pid_alive(me) is True
    assert isinstance(pl.pid_start(me), int)
    assert pl.pid_start(me) == pl.pid_start(me)
    assert pl.pid_alive(0) is None and pl.pid_alive("4711") is None and pl.pid_alive(True) is None


def test_pid_alive_of_a_reaped_child_is_false():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert pl.pid_alive(pid) is False
    assert pl.pid_start(pid) is None


def test_messages():
    assert pl.stale_message("spark-a", "/l", "head-a", HOLDER) == (
        "pair spark-a: lock /l on head-a is stale: held by run run-a (pid 4711 on ctl, provision, since "
        f"{NOW}), which is no longer running; expected a free lock. Nothing was changed. "
        "Re-run with dspark_lock_break_stale=true to take it over.")
    live = pl.held_message("spark-a", "/l", "head-a", HOLDER, "ctl", "live")
    assert live == ("pair spark-a: lock /l on head-a is held by run run-a (pid 4711 on ctl, provision, since "
                    f"{NOW}); expected a free lock. Another run is working on this pair; nothing was changed.")
    foreign = pl.held_message("spark-a", "/l", "head-a", HOLDER, "other-ctl", "foreign")
    assert foreign.startswith(live) and "liveness cannot be checked from other-ctl" in foreign
    assert pl.describe({"run_id": "r"}) == "run r (pid ? on ?, playbook unknown, since ?)"
