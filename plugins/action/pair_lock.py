# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take or release a pair's lock on its head: the controller adds who it is, the module on the head
does the file work, and a lock held by another run is judged here - live, stale (its run's process
on this control host is gone) or foreign (taken from another control host). A lock that a run of an
earlier version holds where that version kept it (``legacy_path``) is judged the same way: a live or
foreign holder refuses the run; a stale one is passed with a warning."""
from __future__ import annotations

import getpass
import os
import socket

from ansible.plugins.action import ActionBase

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _pair_lock as lock

MODULE = "gb10.dspark.pair_lock"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (containers)
        return str(os.getuid())


def controller_owner(run_id: str, playbook: str | None) -> dict:
    """Who takes the lock: this control host and the run's ansible-playbook process."""
    # Action plugins run in a worker process that ansible-playbook forks from its main process for
    # each task (multiprocessing 'fork' context), so the worker's parent is the run's own process:
    # it lives exactly as long as the run, and a killed run leaves a pid that is gone or reused.
    pid = os.getppid()
    return {"run_id": run_id, "control_host": socket.gethostname(), "control_pid": pid,
            "control_pid_start": lock.pid_start(pid), "playbook": playbook, "user": _user()}


def judge(holder: dict, this_host: str) -> str:
    """live, stale or foreign, checking the holder's process when it ran on this host."""
    alive = start = None
    if holder.get("control_host") == this_host:
        alive = lock.pid_alive(holder.get("control_pid"))
        if alive:
            start = lock.pid_start(holder["control_pid"])
    return lock.holder_state(holder, this_host, alive, start)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(lock.ACTION_ARGUMENT_SPEC)

    def _lock(self, module_args: dict, task_vars: dict | None) -> dict:
        return self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _unused, args = self.validate_argument_spec(argument_spec=lock.ACTION_ARGUMENT_SPEC)
        inventory_host = (task_vars or {}).get("inventory_hostname", "?")
        this_host = socket.gethostname()
        try:  # before anything reaches the head: a name that could leave the lock's folder
            lock.check_name("pair", args["pair"])
            lock.check_name("run_id", args["run_id"])
        except lock.LockFailure as exc:
            result.update(failed=True, msg=exc.msg)
            return result
        module_args = {key: args[key] for key in ("pair", "state", "path", "run_id", "playbook", "wait")}
        if args["state"] == "present":
            module_args["legacy_path"] = args["legacy_path"]
        module_args["owner"] = controller_owner(args["run_id"], args.get("playbook"))
        res = self._lock(module_args, task_vars)
        warnings: list[str] = []
        old = res.get("legacy_holder") if not res.get("failed") and not res.get("acquired") else None
        if old:  # a run of an earlier version holds the lock where that version keeps it
            old_path = res.get("legacy_path") or args["legacy_path"]
            verdict = judge(old, this_host)
            if verdict != "stale":
                msg = lock.legacy_held_message(args["pair"], old_path, inventory_host, old, this_host, verdict)
                result.update(res, failed=True, msg=msg)
                return result
            warnings.append(lock.legacy_stale_message(args["pair"], old_path, inventory_host, old))
            module_args["legacy_stale_run_id"] = old["run_id"]
            res = self._lock(module_args, task_vars)
            newer = res.get("legacy_holder") if not res.get("failed") and not res.get("acquired") else None
            if newer and newer.get("run_id") != old["run_id"]:  # another old run took it meanwhile
                result.update(res, failed=True, msg=lock.legacy_held_message(
                    args["pair"], old_path, inventory_host, newer, this_host, judge(newer, this_host)))
                return result
        if res.get("legacy_note"):
            warnings.append(f"pair {args['pair']}: on {inventory_host}, {res['legacy_note']}")
        result.update(res)
        if warnings:
            result["warnings"] = list(result.get("warnings") or []) + warnings
        if res.get("failed") or args["state"] != "present" or res.get("acquired"):
            return result

        holder = res.get("holder") or {}
        path = res.get("path") or args["path"]
        verdict = judge(holder, this_host)
        if verdict == "stale" and args["break_stale"]:
            again = self._lock(dict(module_args, takeover_run_id=holder["run_id"]), task_vars)
            said = list(result.get("warnings") or []) + list(again.get("warnings") or [])
            result.update(again)
            if said:
                result["warnings"] = said
            if again.get("failed"):
                return result
            if not again.get("acquired"):  # another run took the freed lock first
                newer = again.get("holder") or {}
                result.update(failed=True, msg=lock.held_message(args["pair"], path, inventory_host, newer, this_host,
                                                                 judge(newer, this_host)))
                return result
            verb = "would break" if self._task.check_mode else "broke"
            warning = (f"pair {args['pair']}: {verb} the stale lock {path} on {inventory_host} held by "
                       f"{lock.describe(holder)}, which was no longer running; run {args['run_id']} holds it now")
            result.update(changed=True, acquired=True, broke_stale=holder,
                          warnings=list(result.get("warnings") or []) + [warning])
            return result
        if verdict == "stale":
            msg = lock.stale_message(args["pair"], path, inventory_host, holder)
        else:
            msg = lock.held_message(args["pair"], path, inventory_host, holder, this_host, verdict)
        result.update(failed=True, msg=msg)
        return result
