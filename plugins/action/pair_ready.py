# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for a pair to serve, run on both ranks at once: each rank reads its own engine through its
own connection, the two waits share their reports on the control node (module_utils/engine/_pair_wait.py),
the head reports both ranks' start-up phases and the READY line.

With ``progress_results`` the head's wait returns at each report (``waiting: true``, the report
under engine/_progress.py's key) and its task's ``until`` runs it again: the retries of a task run
in one worker process, so the wait goes on where it stopped (``_WATCHES``), and each report reaches
the callbacks as a ``v2_runner_retry`` event, which the gb10.dspark.progress callback prints (and
AWX records). Without it the wait prints its reports itself through Display."""
from __future__ import annotations

import shutil
import sys
import time

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _pair_wait as W
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _progress as P
from ansible_collections.gb10.dspark.plugins.module_utils.engine._engine_probe import ARGUMENT_SPEC, WAIT_ARGUMENT_SPEC
from ansible_collections.gb10.dspark.plugins.module_utils.engine._startup import phase_of

display = Display()

# Log lines read per probe to place the engine in its start-up (the failure message shows fewer).
PHASE_LOG_LINES = 200
SPEC = {**ARGUMENT_SPEC, **WAIT_ARGUMENT_SPEC}
# The waits of this worker process that returned a progress report, by (task, host): the task's
# next retry, run by the same worker process, goes on with the same wait.
_WATCHES: dict[tuple[str, str], "_Watch"] = {}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _unused, args = self.validate_argument_spec(argument_spec=SPEC)
        host = task_vars.get("inventory_hostname", "?")
        pair, role = args["pair"], args["role"]
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: the pair is not started, nothing to wait for")
            return result
        folder = W.folder_for(C.DEFAULT_LOCAL_TMP, self._task._uuid, pair)
        stepwise = bool(args["progress_results"])
        if stepwise and not self._task.until:
            raise AnsibleActionFail(f"{host}: progress_results needs the task's until (for example "
                                    f"until: not (result.{P.WAITING} | default(false))) and enough retries")
        key = (str(self._task._uuid), host)
        watch = _WATCHES.pop(key, None) if stepwise else None
        if watch is None:
            watch = _Watch(self, task_vars, args, host, role, folder)
        else:
            watch.action, watch.task_vars = self, task_vars  # this retry's handler
        try:
            outcome = watch.run(stepwise)
        except BaseException as exc:
            watch.report_final(W.FAILED, f"the wait on {host} stopped: {type(exc).__name__}: {exc}")
            raise
        if isinstance(outcome, dict):  # a progress report: the task's until runs the wait again
            _WATCHES[key] = watch
            result.update(changed=False, role=role, msg=P.texts({P.KEY: outcome})[0],
                          elapsed_s=round(outcome["elapsed"], 1),
                          phases={W.HEAD: watch.phase_text(W.HEAD), W.WORKER: watch.phase_text(W.WORKER)},
                          **{P.WAITING: True, P.KEY: outcome})
            return result
        verdict, elapsed, probe = outcome
        watch.report_final(verdict.final, verdict.msg)
        watch.tidy()
        result.update(changed=False, elapsed_s=round(elapsed, 1), probe=probe, role=role, msg=verdict.msg,
                      phases={W.HEAD: watch.phase_text(W.HEAD), W.WORKER: watch.phase_text(W.WORKER)})
        if verdict.final == W.FAILED:
            result["failed"] = True
        elif role == W.HEAD:
            result.update(kv_cache_size_tokens=probe["api"]["kv_cache_size_tokens"],
                          max_model_len=probe["api"]["max_model_len"])
            if stepwise:
                result[P.KEY] = P.line_record(verdict.msg)
            else:
                display.display(f"[{host}] {verdict.msg}")
        elif verdict.final == W.LEFT:
            display.warning(f"[{host}] {verdict.msg}")
        return result


class _Watch:
    """One rank's side of the wait."""

    def __init__(self, action: ActionModule, task_vars: dict, args: dict, host: str, role: str, folder: str):
        self.action, self.task_vars, self.args = action, task_vars, args
        self.host, self.role, self.folder = host, role, folder
        self.peer = W.WORKER if role == W.HEAD else W.HEAD
        self.fail_lines = max(0, args["fail_log_lines"])
        self.last: dict = {}
        self.probe_args = {key: args[key] for key in ARGUMENT_SPEC if args.get(key) is not None}
        self.probe_args.update(log_lines=max(PHASE_LOG_LINES, self.fail_lines, args["log_lines"]),
                               read_api=role == W.HEAD, rank=host)
        self.final_written = False
        self.peer_report: dict | None = None
        self.start: float | None = None
        self.last_print, self.last_phases = -args["progress_every"], None
        self.progress = W.Progress()

    def _probe(self) -> dict:
        res = self.action._execute_module(module_name="gb10.dspark.engine_probe", module_args=self.probe_args,
                                          task_vars=self.task_vars)
        if res.get("failed") or "probe" not in res:
            raise RuntimeError(f"probing the engine failed: {res.get('msg')}")
        return res["probe"]

    def run(self, stepwise: bool = False):
        """Probe until a verdict: (verdict, elapsed, probe); with ``stepwise``, a head's progress report
        (a record) ends this run instead of being printed, and the next run goes on from there."""
        args = self.args
        budget, interval, every = args["budget"], args["interval"], args["progress_every"]
        show_bar = sys.stdout.isatty()
        if self.start is None:
            self.start = time.monotonic()
        else:
            self._pause(interval)  # a retry after a report: the next probe is one interval after the last
        while True:
            probe = self._probe()
            elapsed = time.monotonic() - self.start
            container = probe["container"]
            mine = W.make_report(self.role, self.host, container, phase_of(container.get("logs") or []), time.time(),
                                 self.fail_lines)
            self.last = mine
            W.write_report(self.folder, self.role, mine)
            theirs = W.read_report(self.folder, self.peer)
            record = None
            if self.role == W.HEAD:
                now = time.monotonic()
                self.progress.see(W.HEAD, mine, now)
                self.progress.see(W.WORKER, theirs, now)
                quiet = {W.HEAD: self.progress.quiet_for(W.HEAD, now), W.WORKER: self.progress.quiet_for(W.WORKER, now)}
                verdict = W.head_verdict(mine, theirs, probe["api"], elapsed, budget, args["model"], self.fail_lines,
                                         quiet=quiet, stall_timeout=args["stall_timeout"])
                phases = (W.phase_key(mine), W.phase_key(theirs))  # a phase, or its n/N, moved
                if verdict.final is None and (phases != self.last_phases or elapsed - self.last_print >= every):
                    record = W.progress_record(elapsed, budget, mine, theirs, time.time())
                    self.last_print, self.last_phases = elapsed, phases
            else:
                verdict = W.worker_verdict(mine, theirs, time.time(), elapsed, budget, args["peer_grace"],
                                           self.fail_lines)
            self.peer_report = theirs
            if verdict.final is not None:
                return verdict, elapsed, probe
            if record is not None:
                if stepwise:
                    return record
                display.display(f"[{self.host}] {W.record_text(record, show_bar)}")
            self._pause(interval)

    def _pause(self, interval: float) -> None:
        """Sleep until the next probe; the worker's wait ends as soon as the head's verdict lands."""
        until = time.monotonic() + interval
        while time.monotonic() < until:
            time.sleep(min(0.5, max(0.0, until - time.monotonic())))
            if self.role == W.WORKER:
                head = W.read_report(self.folder, W.HEAD)
                if head is not None and head.get("final"):
                    return

    def phase_text(self, role: str) -> str | None:
        rep = self.last if role == self.role else self.peer_report
        return rep.get("phase_text") if rep else None

    def report_final(self, final: str | None, msg: str | None) -> None:
        """The verdict, for the other rank's wait; written once, even when this wait never probed."""
        if self.final_written:
            return
        last = self.last or W.make_report(self.role, self.host, {}, phase_of([]), time.time(), 0)
        W.write_report(self.folder, self.role, dict(last, final=final, msg=msg, t=time.time()))
        self.final_written = True

    def tidy(self) -> None:
        """The second wait to end removes the shared folder (the run's own temporary folder, which
        holds it, goes when the run ends anyway)."""
        peer = W.read_report(self.folder, self.peer)
        if peer is not None and peer.get("final"):
            shutil.rmtree(self.folder, ignore_errors=True)
