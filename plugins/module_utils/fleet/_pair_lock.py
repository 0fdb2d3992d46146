# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A per-pair lock held on the pair's head, so that two runs cannot provision one pair at once.

The lock is one small JSON file naming the run that holds it (run id, control host, the
``ansible-playbook`` process and its start time, playbook, user, when). Taking it is atomic: the
record is written to a temp file in the lock's directory and hard-linked to the lock path, which
fails when the path exists. A held lock is never overwritten, except by an explicit takeover that
names the holder's run id (the controller decides a holder is stale; see :func:`holder_state`).

Every change (take, take over, release) also holds ``flock`` on the lock's directory for the few
system calls it takes, so that reading the holder and acting on it cannot interleave with another
run's change. That flock is polled (``LOCK_NB``) until a deadline (``wait``): a process that holds it
for ever fails the run, naming the folder, instead of blocking it for ever.

The lock's folder (``/run/dspark/lock``) sits where only root can create it: ``/run`` is root's and
0755. Earlier versions used ``/run/lock/dspark``, and ``/run/lock`` is world-writable (1777): any
local user could make that folder before the first run and so block every provisioning of the pair
(the folder is refused, as below - fail closed, but a denial of service). The folder is still
trusted only when it is a real directory (not a symlink) owned by this process's effective uid and
writable by nobody else - otherwise another user could hold its flock, or delete the lock file
under a run (a ``dspark_lock_path`` set back to a world-writable place). Folders this module creates
are 0700; a root-owned 0755 folder is accepted. The folder is checked with ``lstat``, opened with
``O_NOFOLLOW | O_DIRECTORY``, re-checked with ``fstat`` (same inode), and every file operation after
that is relative to that descriptor.

Upgrades: a run of an earlier version may still hold the lock at the old location
(``LEGACY_PATH``). Before taking the lock, the old location is read (never created, flocked or
changed): a lock there held by another run is returned as ``legacy_holder`` without taking anything,
and the controller judges it like any holder (a live or foreign one refuses the run; a stale one is
passed with a warning, and left for the operator to remove). An old folder that no version would
have used (owned by another user, writable by others, a symlink) holds no run's lock: it is ignored,
with a ``legacy_note`` saying how to remove it, so a squatter there blocks nothing.

The pair name and run id are checked against ``_pair.SAFE_NAME`` before anything touches the disk.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import stat
import time
from contextlib import contextmanager
from typing import Iterator

from ansible_collections.gb10.dspark.plugins.module_utils.common._clock import utc_now
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import make_parents
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import SAFE_NAME, SAFE_NAME_EXPECTED

DEFAULT_PATH = "/run/dspark/lock/pair.lock"
LEGACY_PATH = "/run/lock/dspark/pair.lock"  # before issue 30: /run/lock is world-writable
FREE = "free"
MAX_BYTES = 64 * 1024
DEFAULT_WAIT = 30
FOLDER_MODE = 0o700
POLL_S = 0.1
OWNER_KEYS = ("run_id", "control_host", "control_pid", "control_pid_start", "playbook", "user")

# What the run passes to gb10.dspark.pair_lock (the action plugin validates these).
ACTION_ARGUMENT_SPEC = {
    "pair": {"type": "str", "required": True},
    "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
    # str, not path: the lock lives on the head, so ~ must not be expanded on the controller
    "path": {"type": "str", "default": DEFAULT_PATH},
    "run_id": {"type": "str", "required": True},
    "playbook": {"type": "str"},
    "break_stale": {"type": "bool", "default": False},
    "wait": {"type": "int", "default": DEFAULT_WAIT},
    # where earlier versions kept the lock; "" skips the check
    "legacy_path": {"type": "str", "default": LEGACY_PATH},
}
# What the module on the head accepts: the above, plus what the action plugin fills in.
ARGUMENT_SPEC = dict(
    ACTION_ARGUMENT_SPEC,
    path={"type": "path", "default": DEFAULT_PATH},
    legacy_path={"type": "path", "default": LEGACY_PATH},
    owner={"type": "dict", "options": {
        "run_id": {"type": "str"},
        "control_host": {"type": "str"},
        "control_pid": {"type": "int"},
        "control_pid_start": {"type": "int"},
        "playbook": {"type": "str"},
        "user": {"type": "str"},
    }},
    takeover_run_id={"type": "str"},
    legacy_stale_run_id={"type": "str"},
)


class LockFailure(Exception):
    """The module must fail with this message (and ``holder``, when one was read)."""

    def __init__(self, msg: str, holder: dict | None = None):
        super().__init__(msg)
        self.msg = msg
        self.holder = holder


class LockUnreadable(Exception):
    """The lock path exists but holds no dspark lock record; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def check_name(option: str, value: object) -> None:
    """Refuse a pair name or run id that could leave the lock's folder or break a record or message."""
    if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
        raise LockFailure(f"option {option} is {value!r}, expected {SAFE_NAME_EXPECTED}")


# --- the record ---------------------------------------------------------------------------------

def make_record(pair: str, run_id: str, playbook: str | None, owner: dict, acquired: str) -> dict:
    """The lock file's content. ``owner`` comes from the controller; its run_id, when given, must be
    ``run_id`` (it is the same run), and its playbook defaults to ``playbook``."""
    if owner.get("run_id") not in (None, run_id):
        raise LockFailure(f"pair {pair}: owner.run_id is {owner.get('run_id')}, expected the task's run_id {run_id}")
    return {
        "pair": pair,
        "run_id": run_id,
        "control_host": owner.get("control_host"),
        "control_pid": owner.get("control_pid"),
        "control_pid_start": owner.get("control_pid_start"),
        "playbook": owner.get("playbook") if owner.get("playbook") is not None else playbook,
        "user": owner.get("user"),
        "acquired": acquired,
    }


def parse_record(text: str) -> dict:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise LockUnreadable(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise LockUnreadable(f"a JSON {type(doc).__name__}, not an object")
    if not isinstance(doc.get("run_id"), str) or not doc["run_id"]:
        raise LockUnreadable("no run_id in it")
    return doc


def read_holder(path: str, dir_fd: int | None = None) -> dict | None:
    """The record in the lock file, or None when there is no lock file. Raises LockUnreadable for
    anything else: not a regular file (a symlink is not followed), unreadable, too big, not a record.
    With ``dir_fd`` (the lock folder's descriptor) the file is its entry ``basename(path)``."""
    name = os.path.basename(path) if dir_fd is not None else path
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LockUnreadable("it is a symbolic link") from None
        raise LockUnreadable(exc.strerror or str(exc)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LockUnreadable("not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise LockUnreadable(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise LockUnreadable(f"larger than {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise LockUnreadable("not UTF-8 text") from None
    return parse_record(text)


def holder_id(holder: dict | None) -> str:
    return holder["run_id"] if holder else FREE


def describe(holder: dict) -> str:
    """``run R (pid P on H, playbook, since T)`` for messages."""
    def field(key: str, missing: str = "?") -> object:
        value = holder.get(key)
        return missing if value in (None, "") else value
    return (f"run {field('run_id')} (pid {field('control_pid')} on {field('control_host')}, "
            f"{field('playbook', 'playbook unknown')}, since {field('acquired')})")


def unreadable_message(pair: str, path: str, reason: str) -> str:
    return (f"pair {pair}: lock {path} on this rank is unreadable ({reason}); expected a dspark lock; "
            "remove it by hand after checking no run is active")


# --- the controller's view of a holder ----------------------------------------------------------

def proc_start_ticks(stat_text: str) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks after boot). The command name,
    field 2, is in parentheses and may itself hold spaces and parentheses: count after the last ``)``."""
    _unused, sep, rest = stat_text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 20:
        return None
    try:
        return int(fields[19])  # fields[0] is field 3
    except ValueError:
        return None


def pid_start(pid: int, proc: str = "/proc") -> int | None:
    """The start time of a live process, or None when it cannot be read."""
    try:
        with open(os.path.join(proc, str(int(pid)), "stat"), encoding="utf-8", errors="replace") as handle:
            return proc_start_ticks(handle.read())
    except (OSError, ValueError):
        return None


def pid_alive(pid: object) -> bool | None:
    """Whether a process with this id exists on this host; None when the id is no process id."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def holder_state(holder: dict, this_host: str, pid_alive: bool | None, pid_start: int | None) -> str:
    """``live``, ``stale`` or ``foreign``: how the controller at ``this_host`` sees a lock holder.

    ``pid_alive``/``pid_start`` describe the process ``holder['control_pid']`` on this host now
    (None: unknown). A holder taken from another control host is ``foreign`` - its process cannot
    be checked from here. On this host it is ``stale`` when the process is gone, or when a process
    with that id runs but started at another time than the one recorded (the id was reused).
    Anything that cannot be decided is ``live``: a lock is never called stale on a guess."""
    if holder.get("control_host") != this_host:
        return "foreign"
    if pid_alive is None:
        return "live"
    if not pid_alive:
        return "stale"
    recorded = holder.get("control_pid_start")
    if isinstance(recorded, int) and isinstance(pid_start, int) and recorded != pid_start:
        return "stale"
    return "live"


def stale_message(pair: str, path: str, inventory_host: str, holder: dict) -> str:
    return (f"pair {pair}: lock {path} on {inventory_host} is stale: held by {describe(holder)}, which is no "
            "longer running; expected a free lock. Nothing was changed. "
            "Re-run with dspark_lock_break_stale=true to take it over.")


LEGACY_WHERE = "(where earlier versions of gb10.dspark keep it)"


def held_message(pair: str, path: str, inventory_host: str, holder: dict, this_host: str, state: str,
                 legacy: bool = False) -> str:
    """Why the run is refused while ``holder`` holds the lock at ``path`` (``legacy``: the old location, which
    a run of an earlier version still holds)."""
    where, who = (f" {LEGACY_WHERE}", "A run of an earlier version") if legacy else ("", "Another run")
    msg = (f"pair {pair}: lock {path}{where} on {inventory_host} is held by {describe(holder)}; expected a free "
           f"lock. {who} is working on this pair; nothing was changed.")
    if state == "foreign":
        msg += (f" Its liveness cannot be checked from {this_host}; if no run is active on "
                f"{holder.get('control_host') or '?'}, remove {path} on {inventory_host} by hand.")
    return msg


def legacy_held_message(pair: str, path: str, inventory_host: str, holder: dict, this_host: str, state: str) -> str:
    """A run of an earlier version holds the lock at the old location ``path``."""
    return held_message(pair, path, inventory_host, holder, this_host, state, legacy=True)


def legacy_stale_message(pair: str, path: str, inventory_host: str, holder: dict) -> str:
    return (f"pair {pair}: the lock {path} {LEGACY_WHERE} on {inventory_host} is stale: held by {describe(holder)}, "
            f"which is no longer running; it no longer blocks a run. Remove {path} on {inventory_host} by hand.")


# --- the file operations on the head ------------------------------------------------------------

def folder_message(directory: str, st: os.stat_result, euid: int) -> str | None:
    """Why the lock folder (as ``lstat`` or ``fstat`` saw it) must not be used, or None when it may."""
    if stat.S_ISLNK(st.st_mode):
        what = "a symbolic link "
    elif stat.S_ISREG(st.st_mode):
        what = "a file "
    elif not stat.S_ISDIR(st.st_mode):
        what = "not a directory, "
    elif st.st_uid != euid or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        what = ""
    else:
        return None
    return (f"lock folder {directory}: {what}owned by uid {st.st_uid} mode {stat.S_IMODE(st.st_mode):04o}, "
            f"expected a directory owned by uid {euid} and not writable by group or others; remove it")


def _check_folder(pair: str, directory: str, st: os.stat_result) -> None:
    problem = folder_message(directory, st, os.geteuid())
    if problem:
        raise LockFailure(f"pair {pair}: {problem}")


def _changed(pair: str, directory: str) -> LockFailure:
    return LockFailure(f"pair {pair}: lock folder {directory}: changed while it was checked (replaced by another "
                       "process); expected it to stay put. Nothing was changed.")


def _open_folder(pair: str, directory: str) -> int | None:
    """A descriptor of the checked lock folder, or None when there is no folder. Fails when the folder
    is not one this process may trust, or when the name stops pointing at the folder that was checked."""
    try:
        seen = os.lstat(directory)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LockFailure(f"pair {pair}: lock folder {directory}: cannot be read ({exc.strerror or exc}); "
                          "expected a directory this user owns") from None
    _check_folder(pair, directory, seen)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise _changed(pair, directory) from None  # gone, or now a symlink or no directory
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
            raise _changed(pair, directory)
        _check_folder(pair, directory, opened)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def _folder(pair: str, directory: str) -> Iterator[int | None]:
    """The checked lock folder's descriptor (None: no folder), closed afterwards."""
    fd = _open_folder(pair, directory)
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _flock(pair: str, directory: str, dir_fd: int, wait: int) -> None:
    """Exclusive flock on the lock folder, polled until ``wait`` seconds have passed; never blocks.
    Held until ``dir_fd`` is closed."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LockFailure(f"pair {pair}: lock folder {directory} is held by another process (flock); "
                                  f"waited {wait} s for it, expected it free. Nothing was changed.") from None
            time.sleep(min(POLL_S, left))
        except OSError:
            return  # a file system without flock: the link below is still exclusive


def _write_temp(dir_fd: int, name: str, record: dict) -> str:
    """A new temp file in the folder holding ``record``; its name (relative to ``dir_fd``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _attempt in range(100):
        temp = f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(temp, flags, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(errno.EEXIST, "no free temp file name", name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o644)
            handle.write(json.dumps(record, sort_keys=True, indent=2) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        os.unlink(temp, dir_fd=dir_fd)
        raise
    return temp


def _link_new(dir_fd: int, name: str, record: dict) -> bool:
    """Create the lock file with ``record`` if there is none: True, or False when one exists."""
    temp = _write_temp(dir_fd, name, record)
    try:
        os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileExistsError:
        return False
    finally:
        os.unlink(temp, dir_fd=dir_fd)
    os.fsync(dir_fd)
    return True


def _replace(dir_fd: int, name: str, record: dict) -> None:
    """Replace the lock file by ``record`` in one rename (takeover only)."""
    temp = _write_temp(dir_fd, name, record)
    try:
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def plan_acquire(current: dict | None, run_id: str, takeover_run_id: str | None) -> str:
    """``acquire``, ``reentrant``, ``takeover``, ``held`` or ``wrong_takeover``."""
    if current is None:
        return "acquire"
    if current["run_id"] == run_id:
        return "reentrant"
    if takeover_run_id:
        return "takeover" if current["run_id"] == takeover_run_id else "wrong_takeover"
    return "held"


def plan_release(current: dict | None, run_id: str) -> str:
    """``free``, ``release`` or ``held``."""
    if current is None:
        return "free"
    return "release" if current["run_id"] == run_id else "held"


def _read(pair: str, path: str, dir_fd: int | None) -> dict | None:
    if dir_fd is None:
        return None  # no folder, no lock
    try:
        return read_holder(path, dir_fd)
    except LockUnreadable as exc:
        raise LockFailure(unreadable_message(pair, path, exc.reason)) from None


def _make_folder(pair: str, directory: str) -> None:
    try:
        make_parents(directory, mode=FOLDER_MODE)
    except OSError as exc:
        raise LockFailure(f"pair {pair}: lock folder {directory} cannot be created ({exc.strerror or exc}); "
                          "expected a directory this user owns. Nothing was changed.") from None


def _present(pair: str, path: str, record: dict, takeover_run_id: str | None, wait: int,
             check_mode: bool) -> tuple[str, dict]:
    """(what happened, the holder afterwards); makes the change unless ``check_mode``."""
    run_id, directory, name = record["run_id"], os.path.dirname(path), os.path.basename(path)
    if check_mode:
        with _folder(pair, directory) as dir_fd:
            current = _read(pair, path, dir_fd)
        step = plan_acquire(current, run_id, takeover_run_id)
        return step, (record if step in ("acquire", "takeover") else current)
    _make_folder(pair, directory)
    with _folder(pair, directory) as dir_fd:
        if dir_fd is None:
            raise _changed(pair, directory)  # removed right after it was made
        _flock(pair, directory, dir_fd, wait)
        for _attempt in range(3):  # a writer that ignores the guard may slip in between read and link
            current = _read(pair, path, dir_fd)
            step = plan_acquire(current, run_id, takeover_run_id)
            if step == "acquire":
                if _link_new(dir_fd, name, record):
                    return step, record
                continue
            if step == "takeover":
                _replace(dir_fd, name, record)
                return step, record
            return step, current
    raise LockFailure(f"pair {pair}: lock {path} on this rank changed under this run three times; "
                      "expected it to settle. Nothing was changed.")


def legacy_holder(pair: str, legacy_path: str | None, path: str) -> tuple[dict | None, str | None]:
    """(the record of a lock at the old location, a note when its folder was ignored); read only.

    None, None when there is no old location to check (none given, or it is ``path`` itself) or
    nothing there. A folder no version of this module would have used (see :func:`folder_message`)
    is ignored, with a note: whoever made it holds no run's lock. A lock file in a folder that would
    have been used but that holds no lock record fails (LockFailure), as an unreadable lock does."""
    if not legacy_path:
        return None, None
    legacy_path = os.path.abspath(legacy_path)
    if legacy_path == path:
        return None, None
    directory = os.path.dirname(legacy_path)
    ignored = "no run of gb10.dspark used it, so it was ignored. Remove it: rm -rf " + directory
    try:
        seen = os.lstat(directory)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"the old lock folder {directory} cannot be read ({exc.strerror or exc}); it was ignored"
    problem = folder_message(directory, seen, os.geteuid())
    if problem:
        return None, f"the old {problem.removesuffix('; remove it')}; {ignored}"
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None, f"the old lock folder {directory} changed while it was checked; {ignored}"
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino) or folder_message(
                directory, opened, os.geteuid()):
            return None, f"the old lock folder {directory} changed while it was checked; {ignored}"
        return _read(pair, legacy_path, fd), None
    finally:
        os.close(fd)


def _absent(pair: str, path: str, run_id: str, wait: int, check_mode: bool) -> tuple[str, dict | None]:
    directory = os.path.dirname(path)
    with _folder(pair, directory) as dir_fd:
        if check_mode or dir_fd is None:
            current = _read(pair, path, dir_fd)
            return plan_release(current, run_id), current
        _flock(pair, directory, dir_fd, wait)
        current = _read(pair, path, dir_fd)
        step = plan_release(current, run_id)
        if step == "release":
            os.unlink(os.path.basename(path), dir_fd=dir_fd)
            os.fsync(dir_fd)
        return step, current


def run(params: dict, check_mode: bool = False, diff: bool = False, now: str | None = None) -> dict:
    """The module's work. Returns its result; raises LockFailure when it must fail."""
    pair, run_id = params["pair"], params["run_id"]
    check_name("pair", pair)
    check_name("run_id", run_id)
    takeover = params.get("takeover_run_id")
    if takeover is not None:
        check_name("takeover_run_id", takeover)
    legacy_stale = params.get("legacy_stale_run_id")
    if legacy_stale is not None:
        check_name("legacy_stale_run_id", legacy_stale)
    wait = params.get("wait")
    wait = DEFAULT_WAIT if wait is None else wait
    if isinstance(wait, bool) or not isinstance(wait, int) or wait < 0:
        raise LockFailure(f"option wait is {wait!r}, expected 0 or more seconds")
    path = os.path.abspath(params.get("path") or DEFAULT_PATH)
    if not os.path.basename(path):
        raise LockFailure(f"pair {pair}: option path is {path!r}, expected a file in a lock folder")
    result: dict = {"changed": False, "acquired": False, "released": False, "holder": None, "path": path}
    if params.get("state", "present") == "present":
        owner = params.get("owner")
        if not owner:
            raise LockFailure(f"pair {pair}: no owner given; gb10.dspark.pair_lock runs through its action plugin, "
                              "which fills in the owner from the control host")
        record = make_record(pair, run_id, params.get("playbook"), owner, now or utc_now())
        old, note = legacy_holder(pair, params.get("legacy_path"), path)
        result.update(legacy_path=params.get("legacy_path") or None, legacy_holder=old, legacy_note=note)
        if old is not None and old["run_id"] not in (run_id, legacy_stale):
            return result  # held at the old location: the controller judges its holder
        step, holder = _present(pair, path, record, takeover, wait, check_mode)
        if step == "wrong_takeover":
            raise LockFailure(f"pair {pair}: lock {path} on this rank is held by {describe(holder)}, "
                              f"expected run {takeover} to take over; nothing was changed", holder)
        before = holder_id(holder) if step in ("reentrant", "held") else (takeover if step == "takeover" else FREE)
        result.update(changed=step in ("acquire", "takeover"), acquired=step != "held", holder=holder)
    else:
        step, holder = _absent(pair, path, run_id, wait, check_mode)
        before = holder_id(holder)
        result.update(changed=step == "release", released=step == "release",
                      holder=holder if step == "held" else None)
    if diff:
        result["diff"] = {"before": before + "\n", "after": holder_id(result["holder"]) + "\n",
                          "before_header": path, "after_header": path}
    return result
