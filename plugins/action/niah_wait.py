# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for a NIAH run on a head to finish, printing its progress; the run itself is an async job
on the head, so it survives an interrupted control node and this wait can be re-attached.

With ``progress_results`` each progress line is handed to the gb10.dspark.progress callback as a
result instead (``waiting: true``, the line under engine/_progress.py's key) and the task's ``until``
runs the wait again, which goes on where it stopped (``_WAITS``: a task's retries run in one worker
process), as gb10.dspark.pair_ready does."""
from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _progress as P
from ansible_collections.gb10.dspark.plugins.module_utils.serving._niah import WAIT_ARGUMENT_SPEC

display = Display()
# (start, last line's key, last print) of the waits of this worker process that returned a progress
# line, by (task, host): the task's next retry goes on with the same wait.
_WAITS: dict[tuple[str, str], tuple[float, object, float]] = {}


def _progress_line(status: dict, elapsed: float) -> str:
    """``NIAH running: depth ...; waited N s`` (the host goes in front where it is shown)."""
    prog = status.get("progress") or {}
    depth = prog.get("depth")
    done = len(status.get("rows_done") or [])
    total = prog.get("total") or "?"
    since = ""
    if prog.get("current_started") and prog.get("updated"):
        since = f", this depth running {max(0, int(time.time() - prog['current_started']))} s"
    return (f"NIAH {prog.get('state', 'starting')}: depth {depth if depth else '-'} "
            f"({prog.get('index', '-')}/{total}), {done} row(s) written{since}; waited {elapsed:.0f} s")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(WAIT_ARGUMENT_SPEC)

    def _status(self, output_dir: str, task_vars: dict) -> dict:
        return self._execute_module(module_name="gb10.dspark.niah",
                                    module_args={"state": "status", "output_dir": output_dir}, task_vars=task_vars)

    def _job(self, jid: str, task_vars: dict) -> dict:
        # what ansible.builtin.async_status does: the job file lives in the shell's async_dir on the head
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                    module_args={"jid": jid, "mode": "status", "_async_dir": async_dir})

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _unused, args = self.validate_argument_spec(argument_spec=WAIT_ARGUMENT_SPEC)
        output_dir = args["output_dir"]
        jid = args.get("jid") or None
        budget, interval, every = args["budget"], args["interval"], args["progress_every"]
        host = (task_vars or {}).get("inventory_hostname", "?")
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: no NIAH run to wait for")
            return result
        stepwise = bool(args["progress_results"])
        if stepwise and not self._task.until:
            raise AnsibleActionFail(f"{host}: progress_results needs the task's until (for example "
                                    f"until: not (result.{P.WAITING} | default(false))) and enough retries")
        key = (str(self._task._uuid), host)
        resumed = _WAITS.pop(key, None) if stepwise else None
        if resumed is None:
            start, last_line, last_print = time.monotonic(), None, -every
        else:
            start, last_line, last_print = resumed
            time.sleep(interval)  # the next read is one interval after the last
        while True:
            elapsed = time.monotonic() - start
            status = self._status(output_dir, task_vars)
            if status.get("failed"):
                result.update(failed=True, msg=f"{host}: reading the NIAH status failed: {status.get('msg')}")
                return result
            job = self._job(jid, task_vars) if jid else None
            if job is not None and job.get("failed") and not job.get("finished"):
                result.update(failed=True, msg=f"{host}: the NIAH job {jid} is unknown: {job.get('msg')}")
                return result
            finished = bool(job.get("finished")) if job is not None else not status.get("running")
            if finished:
                if job is not None and job.get("failed"):
                    result.update(failed=True, job=job, status=status,
                                  msg=f"{host}: the NIAH run failed: {job.get('msg')}")
                    return result
                if job is not None:  # the run may have ended after the status above was read
                    status = self._status(output_dir, task_vars)
                summary = status.get("summary")
                if not summary:
                    result.update(failed=True, status=status,
                                  msg=f"{host}: the NIAH run in {output_dir} ended without a summary (niah.json)")
                    return result
                result.update(changed=False, summary=summary, elapsed_s=round(elapsed, 1),
                              msg=f"NIAH {summary.get('status')}: {summary.get('pass_count')}/{summary.get('total')} "
                                  f"passed, ran {summary.get('ran')}, resumed {summary.get('resumed')}")
                return result
            if elapsed >= budget:
                result.update(failed=True, status=status,
                              msg=f"TIMEOUT {host}: the NIAH run in {output_dir} did not finish within {budget:.0f} s; "
                                  "it keeps running on the head - run the playbook again to wait for it")
                return result
            line = _progress_line(status, elapsed)
            moved = ((status.get("progress") or {}).get("depth"), len(status.get("rows_done") or []))
            if moved != last_line or elapsed - last_print >= every:
                last_line, last_print = moved, elapsed
                if stepwise:
                    _WAITS[key] = (start, last_line, last_print)
                    result.update(changed=False, msg=line, elapsed_s=round(elapsed, 1),
                                  **{P.WAITING: True, P.KEY: P.line_record(line)})
                    return result
                display.display(f"[{host}] {line}")
            time.sleep(interval)
