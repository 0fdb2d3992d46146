# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
name: pair_summary
type: aggregate
short_description: The end of a run, per pair - the phase reached, the verdict and the reason
version_added: 0.1.0
description:
  - A fleet is a set of independent pairs; a run goes on for every pair whose ranks did not fail. At the end of
    the run this callback prints one line per pair (C(PASS), C(FAILED), C(UNREACHABLE), or C(NOT STARTED) when the
    failure budget kept a batch from starting), with the phase reached and, for a pair that did not pass, the
    reason given by the rank that failed first (never the other rank, which its pair's barrier then stopped).
  - It writes the same as JSON into the evidence folder of the run (C(<dspark_evidence_dir>/runs/), one file per
    run), except in check mode, which writes nothing.
  - The pairs are the topology's (C(dspark_play_pairs)); the phases are the prefixes of the collection's task names.
  - A message of a task marked C(no_log) is never shown or written.
  - A rollout (C(playbooks/rollout.yml), whose plays set C(dspark_rollout_step)) also gets a per-wave report from the
    same rows - each step (the canary, the staging, each wave) with its pairs, its start and end times and the
    verdict it gave each pair - printed after the summary and written to C(<dspark_evidence_dir>/runs/) as
    C(<stamp>-rollout-waves-<pid>.json); the summary file (O(summary_file), C(pairs.json) in a C(dspark) run folder) has it as C(rollout).
  - A run in which a play sets C(dspark_pair_summary=false) (the fleet audit, whose report is its per-pair verdict;
    or C(-e dspark_pair_summary=false)) prints and writes no summary.
options:
  summary_file:
    description:
      - Also write the summary (the same JSON) to this file, in check mode too; C(dspark) sets it to its run
        folder's C(pairs.json) and prints it with C(--json).
    type: path
    env:
      - name: DSPARK_PAIR_SUMMARY_FILE
    ini:
      - section: callback_pair_summary
        key: summary_file
requirements:
  - enable it in ansible.cfg (C(callbacks_enabled = gb10.dspark.pair_summary)); the repository's ansible.cfg and
    C(dspark) do.
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

import datetime
import json
import os
import time

from ansible import context
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.callback import CallbackBase

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _rollout as R
from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _run_summary as S

EVIDENCE_VAR = "dspark_evidence_dir"
SWITCH_VAR = "dspark_pair_summary"  # false in a play's vars (or -e): no summary for the run
STEP_VAR = "dspark_rollout_step"  # a rollout's play: canary, stage or wave (one step per serial batch)
PLAN_FACT = "dspark_rollout_plan"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gb10.dspark.pair_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._recorder = S.Recorder()
        self._playbook = ""
        self._evidence_dir = None
        self._started = time.gmtime()
        self._play_hosts = []
        self._off = False
        self._steps = []  # a rollout's steps, one per batch of its canary, stage and wave plays
        self._step = None
        self._plan = None

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.basename(getattr(playbook, "_file_name", "") or "")

    def v2_playbook_on_play_start(self, play):
        manager = play.get_variable_manager()
        if not boolean(manager.get_vars(play=play).get(SWITCH_VAR, True), strict=False):
            self._off = True  # the fleet audit: its report is the per-pair verdict
        inventory = getattr(manager, "_inventory", None)
        hosts = inventory.get_hosts(play.hosts) if inventory is not None else []
        self._play_hosts = [h.get_name() for h in hosts]
        self._end_step()
        step = (play.vars or {}).get(STEP_VAR) if isinstance(play.vars, dict) else None
        if step in (R.CANARY, R.STAGE, R.WAVE):  # the batch's hosts (Ansible restricts the inventory to it)
            self._step = {"kind": step, "hosts": list(self._play_hosts), "started": _now(), "ended": None,
                          "failed": {}}
            self._steps.append(self._step)
        # where the run's summary goes: the evidence folder the inventory names (read once, from the play's first host)
        if hosts and not self._evidence_dir:
            value = manager.get_vars(play=play, host=hosts[0]).get(EVIDENCE_VAR)
            if isinstance(value, str) and value and "{" not in value:
                self._evidence_dir = value

    def v2_runner_on_ok(self, result):
        facts = result._result.get("ansible_facts") if isinstance(result._result, dict) else None
        self._recorder.ran(result._host.get_name(), result._task.get_name(), facts)
        if isinstance(facts, dict) and isinstance(facts.get(PLAN_FACT), dict):
            self._plan = facts[PLAN_FACT]

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if ignore_errors:
            return
        data = result._result if isinstance(result._result, dict) else {}
        self._recorder.failed(result._host.get_name(), result._task.get_name(), S.result_message(data),
                              not_started=bool(data.get("not_started")))
        self._step_failed(result._host.get_name())
        task = result._task
        if boolean(task.run_once, strict=False) or boolean(task.any_errors_fatal, strict=False):  # every host ends
            self._recorder.failed_everywhere(self._play_hosts, task.get_name(), S.result_message(data))
            for host in self._play_hosts:
                self._step_failed(host)

    def v2_runner_on_unreachable(self, result):
        self._recorder.unreachable(result._host.get_name(), result._task.get_name(),
                                   S.result_message(result._result if isinstance(result._result, dict) else {}))
        self._step_failed(result._host.get_name())

    def _step_failed(self, host: str) -> None:
        if self._step is not None:
            self._step["failed"][str(host)] = True

    def _end_step(self) -> None:
        if self._step is not None:
            self._step["ended"] = _now()
            self._step = None

    def v2_playbook_on_stats(self, stats):
        failed = [h for h in stats.processed if stats.failures.get(h)]
        unreachable = [h for h in stats.processed if stats.dark.get(h)]
        summary = S.rows(self._recorder, failed, unreachable)
        if not summary or self._off:
            return
        self._display.display(S.table(summary, self._playbook))
        stamp = time.strftime("%Y%m%dT%H%M%SZ", self._started)
        doc = {"playbook": self._playbook, "started": stamp, "check": bool(context.CLIARGS.get("check")),
               "pairs": summary}
        self._end_step()
        waves = R.report(self._steps, summary, self._plan) if self._steps or self._plan else None
        if waves is not None:
            self._display.display(R.table(waves))
            doc["rollout"] = waves
        wanted = self.get_option("summary_file")
        if wanted:
            self._write(os.path.abspath(wanted), doc)
        if context.CLIARGS.get("check") or not self._evidence_dir:
            return
        name = f"{stamp}-{os.path.splitext(self._playbook)[0] or 'run'}-{os.getpid()}.json"
        self._write(os.path.join(self._evidence_dir, "runs", name), doc)
        if waves is not None:
            self._write(os.path.join(self._evidence_dir, "runs", f"{stamp}-rollout-waves-{os.getpid()}.json"),
                        {"playbook": self._playbook, "started": stamp, **waves})

    def _write(self, path: str, doc: dict) -> None:
        folder = os.path.dirname(path)
        try:
            os.makedirs(folder, mode=0o750, exist_ok=True)
            tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp")
            with open(tmp, "w", encoding="utf-8") as out:
                json.dump(doc, out, indent=1)
            os.replace(tmp, path)
        except OSError as exc:
            self._display.warning(f"the run's pair summary could not be written to {path}: {exc}")
