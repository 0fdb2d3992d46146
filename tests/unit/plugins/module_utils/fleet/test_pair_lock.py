"""The per-pair lock: taking, re-taking, contention, release by owner only, corrupt files, check and
diff mode, takeover, and how the controller judges a holder (live, stale, foreign)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
import yaml

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _pair_lock as pl
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair_lock import LockFailure, holder_state, run
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
    assert stat.S_IMODE(lock_path.parent.stat().st_mode) == 0o700  # issue 21: was 0755
    assert stat.S_IMODE(lock_path.parent.parent.stat().st_mode) == 0o700
    assert os.listdir(lock_path.parent) == ["pair.lock"]  # the temp file is gone


def test_parent_dirs_are_0700_whatever_the_umask(lock_path):
    old = os.umask(0o022)  # issue 21: was 0755 (with umask 077)
    try:
        run(params(lock_path), now=NOW)
    finally:
        os.umask(old)
    assert stat.S_IMODE(lock_path.parent.stat().st_mode) == 0o700


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

    def link_after_rival(src, dst, **kwargs):  # relative to the lock folder's descriptor (issue 21)
        if not lock_path.exists():
            with open(lock_path, "w") as handle:
                json.dump({"run_id": "rival", "control_host": "other"}, handle)
        return real_link(src, dst, **kwargs)

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


# --- the lock folder cannot be taken over by another local user (issue 21) ----------------------

ROLE = Path(__file__).resolve().parents[5] / "roles" / "lock"
EUID = os.geteuid()


def folder_message(folder, uid, mode, what=""):
    return (f"lock folder {folder}: {what}owned by uid {uid} mode {mode:04o}, expected a directory owned by "
            f"uid {EUID} and not writable by group or others; remove it")


@contextmanager
def folder_flock_held(folder, seconds=15):
    """Another process holds flock on ``folder`` for at most ``seconds`` (killed on exit)."""
    code = ("import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(float(sys.argv[2]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder), str(seconds)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("state, check_mode", [("present", False), ("present", True), ("absent", False),
                                               ("absent", True)])
def test_foreign_owned_lock_folder_is_refused(lock_path, state, check_mode):
    folder = lock_path.parent
    folder.mkdir(parents=True, mode=0o755)
    os.chmod(folder, 0o755)
    os.chown(folder, 12345, 12345)
    with pytest.raises(LockFailure) as exc:
        run(params(lock_path, state=state), check_mode=check_mode, now=NOW)
    assert exc.value.msg == f"pair spark-a: {folder_message(folder, 12345, 0o755)}"
    assert os.listdir(folder) == []


def test_foreign_lock_file_in_a_foreign_folder_is_never_released(lock_path):
    """A user who owns the folder could delete pair.lock under a run: such a folder is never used."""
    run(params(lock_path, run_id="run-a"), now=NOW)
    os.chown(lock_path.parent, 12345, 12345)
    before = lock_path.read_bytes()
    for state in ("present", "absent"):
        with pytest.raises(LockFailure, match="owned by uid 12345"):
            run(params(lock_path, run_id="run-a", state=state))
    assert lock_path.read_bytes() == before


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775, 0o757, 0o720, 0o702])
def test_group_or_world_writable_lock_folder_is_refused(lock_path, mode):
    folder = lock_path.parent
    folder.mkdir(parents=True)
    os.chmod(folder, mode)
    with pytest.raises(LockFailure) as exc:
        run(params(lock_path), now=NOW)
    assert exc.value.msg == f"pair spark-a: {folder_message(folder, EUID, mode)}"
    assert os.listdir(folder) == []
    assert stat.S_IMODE(folder.stat().st_mode) == mode  # not "repaired" behind the operator's back


@pytest.mark.parametrize("state", ["present", "absent"])
def test_symlinked_lock_folder_is_refused_even_to_a_folder_we_own(lock_path, tmp_path, state):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    lock_path.parent.parent.mkdir(parents=True)
    lock_path.parent.symlink_to(real)
    with pytest.raises(LockFailure) as exc:
        run(params(lock_path, state=state), now=NOW)
    st = os.lstat(lock_path.parent)
    want = folder_message(lock_path.parent, st.st_uid, stat.S_IMODE(st.st_mode), "a symbolic link ")
    assert exc.value.msg == f"pair spark-a: {want}"
    assert os.listdir(real) == []


def test_dangling_symlink_as_lock_folder_is_refused(lock_path, tmp_path):
    lock_path.parent.parent.mkdir(parents=True)
    lock_path.parent.symlink_to(tmp_path / "nowhere")
    with pytest.raises(LockFailure, match="a symbolic link owned by uid"):
        run(params(lock_path), now=NOW)
    assert not (tmp_path / "nowhere").exists()


def test_lock_folder_that_is_a_file_is_refused(lock_path):
    lock_path.parent.parent.mkdir(parents=True)
    lock_path.parent.write_text("x")
    with pytest.raises(LockFailure, match=rf"lock folder {lock_path.parent}: a file owned by uid {EUID} mode 0\d\d\d"):
        run(params(lock_path), now=NOW)


def test_lock_folder_swapped_between_check_and_open_is_refused(lock_path, tmp_path, monkeypatch):
    """lstat saw one folder, the open got another: the fd's inode is checked, not the name."""
    lock_path.parent.mkdir(parents=True, mode=0o700)
    decoy = tmp_path / "decoy"
    decoy.mkdir(mode=0o700)
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):
        if os.fspath(path) == str(lock_path.parent):
            return real_lstat(decoy)
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(pl.os, "lstat", lstat)
    with pytest.raises(LockFailure, match=rf"lock folder {lock_path.parent}: changed while it was checked"):
        run(params(lock_path), now=NOW)
    assert os.listdir(lock_path.parent) == []


def test_legacy_root_owned_0755_lock_folder_is_still_used(lock_path):
    """Earlier versions created /run/lock/dspark 0755: not writable by others, so an upgrade keeps working."""
    lock_path.parent.mkdir(parents=True)
    os.chmod(lock_path.parent, 0o755)
    assert run(params(lock_path), now=NOW)["acquired"] is True
    assert run(params(lock_path, state="absent"))["released"] is True
    assert stat.S_IMODE(lock_path.parent.stat().st_mode) == 0o755


def test_new_lock_folders_are_0700_and_ours_whatever_the_umask(lock_path):
    for umask in (0o000, 0o077):
        old = os.umask(umask)
        try:
            run(params(lock_path), now=NOW)
        finally:
            os.umask(old)
        for folder in (lock_path.parent, lock_path.parent.parent):
            st = os.lstat(folder)
            assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == EUID and stat.S_ISDIR(st.st_mode)
        assert stat.S_IMODE(lock_path.stat().st_mode) == 0o644
        run(params(lock_path, state="absent"))
        os.rmdir(lock_path.parent)
        os.rmdir(lock_path.parent.parent)


def test_folder_flock_held_by_another_process_is_refused_within_the_deadline(lock_path):
    folder = lock_path.parent
    folder.mkdir(parents=True, mode=0o700)
    with folder_flock_held(folder):
        for state in ("present", "absent"):
            started = time.monotonic()
            with pytest.raises(LockFailure) as exc:
                run(dict(params(lock_path, state=state), wait=1), now=NOW)
            elapsed = time.monotonic() - started
            assert 0.9 <= elapsed < 10, elapsed
            assert exc.value.msg == (f"pair spark-a: lock folder {folder} is held by another process (flock); "
                                     "waited 1 s for it, expected it free. Nothing was changed.")
    assert os.listdir(folder) == []


def test_folder_flock_released_within_the_deadline_is_taken(lock_path):
    folder = lock_path.parent
    folder.mkdir(parents=True, mode=0o700)
    with folder_flock_held(folder, seconds=0.5) as holder:
        res = run(dict(params(lock_path), wait=20), now=NOW)
        assert holder.poll() is not None  # taken only after the other process let go
    assert res["acquired"] is True and on_disk(lock_path)["run_id"] == "run-a"


def test_wait_zero_tries_once(lock_path):
    folder = lock_path.parent
    folder.mkdir(parents=True, mode=0o700)
    with folder_flock_held(folder):
        started = time.monotonic()
        with pytest.raises(LockFailure, match="waited 0 s for it"):
            run(dict(params(lock_path), wait=0), now=NOW)
        assert time.monotonic() - started < 5


BAD_NAMES = ["../x", "..", ".", "a/b", "/abs", ".hidden", "-dash", "_under", "", "a b", "a\nb", "x" * 65,
             "naïve", "a:b", "a\\b"]


@pytest.mark.parametrize("value", BAD_NAMES)
@pytest.mark.parametrize("option", ["pair", "run_id"])
def test_bad_pair_or_run_id_is_refused_before_any_file_work(lock_path, option, value):
    for state in ("present", "absent"):
        p = params(lock_path, state=state)
        p[option] = value
        if option == "run_id":
            p["owner"]["run_id"] = value
        with pytest.raises(LockFailure) as exc:
            run(p, now=NOW)
        assert exc.value.msg == (f"option {option} is {value!r}, expected 1 to 64 letters, digits, '.', '_' or '-', "
                                 "starting with a letter or digit")
    assert not lock_path.parent.exists()


@pytest.mark.parametrize("value", ["spark-a", "lab01", "sim01", "fleet03", "20260102T030405Z-4294967295",
                                   "20260102T030405Z-0", "a", "x" * 64, "pair_1.v2"])
def test_names_the_collection_produces_are_accepted(value):
    pl.check_name("pair", value)
    pl.check_name("run_id", value)


def test_takeover_run_id_is_validated_too(lock_path):
    run(params(lock_path, run_id="run-a"), now=NOW)
    with pytest.raises(LockFailure, match="option takeover_run_id is '../run-a'"):
        run(params(lock_path, run_id="run-b", takeover="../run-a"))
    assert on_disk(lock_path)["run_id"] == "run-a"


def test_module_documents_wait_and_the_role_passes_it():
    doc = yaml.safe_load(pair_lock_module.DOCUMENTATION)
    assert doc["options"]["wait"]["type"] == "int" and doc["options"]["wait"]["default"] == 30
    assert pl.ARGUMENT_SPEC["wait"] == {"type": "int", "default": 30}
    assert pl.ACTION_ARGUMENT_SPEC["wait"] == {"type": "int", "default": 30}
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["dspark_lock_wait"] == 30
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    for entry in ("main", "release"):
        assert specs[entry]["options"]["dspark_lock_wait"]["type"] == "int"
        assert specs[entry]["options"]["dspark_lock_wait"]["default"] == 30
    for tasks in ("main.yml", "release.yml"):
        steps = yaml.safe_load((ROLE / "tasks" / tasks).read_text())
        calls = [s["gb10.dspark.pair_lock"] for s in steps if "gb10.dspark.pair_lock" in s]
        assert calls and all(c["wait"] == "{{ dspark_lock_wait }}" for c in calls)


def test_negative_wait_is_refused(lock_path):
    with pytest.raises(LockFailure, match="option wait is -1, expected 0 or more seconds"):
        run(dict(params(lock_path), wait=-1), now=NOW)
    assert not lock_path.parent.exists()


# --- the lock lives where only root can make its folder; the old location (issue 30) ---------------

def test_the_default_lock_folder_sits_where_no_local_user_can_create_it_first():
    """/run/lock is world-writable (1777): any local user could mkdir /run/lock/dspark before the first
    run and block provisioning. The default's every existing ancestor must be writable by its owner only."""
    assert pl.DEFAULT_PATH == "/run/dspark/lock/pair.lock"
    folder = os.path.dirname(pl.DEFAULT_PATH)
    while folder != "/":
        folder = os.path.dirname(folder)
        if os.path.isdir(folder):
            st = os.stat(folder)
            assert st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH), (folder, oct(st.st_mode))
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["dspark_lock_path"] == pl.DEFAULT_PATH
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    assert {entry["options"]["dspark_lock_path"]["default"] for entry in spec.values()} == {pl.DEFAULT_PATH}
    doc = yaml.safe_load(pair_lock_module.DOCUMENTATION)["options"]
    assert doc["path"]["default"] == pl.DEFAULT_PATH and doc["legacy_path"]["default"] == pl.LEGACY_PATH
    assert pl.LEGACY_PATH == "/run/lock/dspark/pair.lock"


@pytest.fixture(name="legacy")
def _legacy(tmp_path):
    """Where an earlier version kept the lock (its folder as earlier versions made it: root's, 0755)."""
    return tmp_path / "run-lock" / "dspark" / "pair.lock"


def old_run_holds(legacy, run_id="run-old", folder_uid=EUID, folder_mode=0o755):
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_text(json.dumps({"pair": "spark-a", "run_id": run_id, "control_host": "ctl", "control_pid": 99,
                                  "control_pid_start": 1, "playbook": "provision", "user": "ops", "acquired": NOW}))
    os.chmod(legacy.parent, folder_mode)
    os.chown(legacy.parent, folder_uid, folder_uid)


def test_a_lock_held_at_the_old_location_stops_the_new_run_before_it_takes_its_own(lock_path, legacy):
    """A run of the previous version still going holds /run/lock/dspark/pair.lock: the module reports its
    holder (the action plugin judges it) and takes nothing, in check mode too."""
    old_run_holds(legacy)
    for check_mode in (False, True):
        res = run(dict(params(lock_path), legacy_path=str(legacy)), check_mode=check_mode, now=NOW)
        assert res["acquired"] is False and res["changed"] is False and res["holder"] is None
        assert res["legacy_holder"]["run_id"] == "run-old" and res["legacy_path"] == str(legacy)
        assert not lock_path.exists()
    assert json.loads(legacy.read_text())["run_id"] == "run-old"  # never touched


def test_a_stale_old_lock_named_by_the_controller_or_this_runs_own_is_passed(lock_path, legacy):
    old_run_holds(legacy)
    res = run(dict(params(lock_path), legacy_path=str(legacy), legacy_stale_run_id="run-old"), now=NOW)
    assert res["acquired"] is True and res["legacy_holder"]["run_id"] == "run-old"
    assert on_disk(lock_path)["run_id"] == "run-a" and legacy.exists()  # the old file is left for the operator
    run(params(lock_path, state="absent"))
    other = run(dict(params(lock_path), legacy_path=str(legacy), legacy_stale_run_id="run-other"), now=NOW)
    assert other["acquired"] is False  # another stale run id does not pass this holder


def test_a_squatted_old_lock_folder_blocks_nothing(lock_path, legacy):
    """A local user made /run/lock/dspark first (and even wrote a lock record in it): no version of the
    collection would have used that folder, so it holds no run's lock; the run goes on and says so."""
    for mode in (0o755, 0o777, 0o1777):
        old_run_holds(legacy, run_id="run-squatter", folder_uid=12345, folder_mode=mode)
        res = run(dict(params(lock_path), legacy_path=str(legacy)), now=NOW)
        assert res["acquired"] is True and res["legacy_holder"] is None
        assert res["legacy_note"] == (
            f"the old lock folder {legacy.parent}: owned by uid 12345 mode {mode:04o}, expected a directory owned by "
            f"uid {EUID} and not writable by group or others; no run of gb10.dspark used it, so it was ignored. "
            f"Remove it: rm -rf {legacy.parent}")
        run(params(lock_path, state="absent"))


def test_no_old_lock_folder_or_the_same_path_is_no_legacy_check(lock_path, legacy):
    res = run(dict(params(lock_path), legacy_path=str(legacy)), now=NOW)
    assert res["acquired"] is True and res["legacy_holder"] is None and res["legacy_note"] is None
    assert not legacy.parent.exists()  # nothing is made at the old location
    run(params(lock_path, state="absent"))
    again = run(dict(params(lock_path), legacy_path=str(lock_path)), now=NOW)  # configured to the old path
    assert again["acquired"] is True and again["legacy_holder"] is None


def test_an_unreadable_lock_in_a_trusted_old_folder_is_refused(lock_path, legacy):
    """Only root could have put it there: fail closed, naming the old path, as an unreadable lock is."""
    legacy.parent.mkdir(parents=True)
    legacy.write_text("not json")
    with pytest.raises(LockFailure, match=rf"^pair spark-a: lock {legacy} on this rank is unreadable \(not JSON"):
        run(dict(params(lock_path), legacy_path=str(legacy)), now=NOW)
    assert not lock_path.exists()
