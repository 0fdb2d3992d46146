# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for a pair to serve, printing progress, failing within seconds when a rank exits."""
from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gb10.dspark.plugins.module_utils._engine_probe import ARGUMENT_SPEC, WAIT_ARGUMENT_SPEC

display = Display()

PROBE_ARGS = tuple(ARGUMENT_SPEC)


def _tail(state: dict | None, n: int) -> list[str]:
    return list((state or {}).get("logs") or [])[-n:]


def _last_line(state: dict | None) -> str:
    lines = [ln for ln in _tail(state, 20) if ln.strip()]
    return lines[-1][:160] if lines else "(no log yet)"


def _logs_text(probe: dict, n: int) -> str:
    parts = []
    for rank in ("head", "worker"):
        state = probe.get(rank)
        if state is None:
            continue
        parts.append(f"--- {rank} ({state.get('status')}, exit {state.get('exit_code')}), last {n} log lines:")
        parts += _tail(state, n) or ["(none)"]
    return "\n".join(parts)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(PROBE_ARGS + tuple(WAIT_ARGUMENT_SPEC))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        budget = float(args.get("budget", 3600))
        interval = float(args.get("interval", 5))
        every = float(args.get("progress_every", 30))
        fail_lines = int(args.get("fail_log_lines", 30))
        probe_args = {k: args[k] for k in PROBE_ARGS if k in args}
        probe_args["log_lines"] = max(int(probe_args.get("log_lines", 20)), fail_lines)
        host = task_vars.get("inventory_hostname") if task_vars else "?"
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: the pair is not started, nothing to wait for")
            return result
        start = time.monotonic()
        last_print = -every
        while True:
            res = self._execute_module(module_name="gb10.dspark.engine_probe", module_args=probe_args,
                                       task_vars=task_vars)
            elapsed = time.monotonic() - start
            if res.get("failed"):
                result.update(failed=True, msg=f"{host}: probing the pair failed: {res.get('msg')}")
                return result
            probe = res["probe"]
            api = probe["api"]
            if probe["ready"]:
                result.update(changed=False, elapsed_s=round(elapsed, 1), kv_cache_size_tokens=api["kv_cache_size_tokens"],
                              max_model_len=api["max_model_len"], probe=probe,
                              msg=f"READY served={args.get('model')} kv_cache_size_tokens={api['kv_cache_size_tokens']} "
                                  f"after {elapsed:.0f} s")
                return result
            if probe["exited"]:
                result.update(failed=True, elapsed_s=round(elapsed, 1), probe=probe,
                              msg=f"{host}: the pair's engine exited on {', '.join(probe['exited'])} after {elapsed:.0f} s "
                                  f"before serving\n{_logs_text(probe, fail_lines)}")
                return result
            missing = [r for r in ("head", "worker") if probe.get(r) is not None and not probe[r].get("exists")]
            if missing:
                result.update(failed=True, probe=probe,
                              msg=f"{host}: no engine container on {', '.join(missing)}; nothing to wait for")
                return result
            if elapsed >= budget:
                result.update(failed=True, elapsed_s=round(elapsed, 1), probe=probe,
                              msg=f"TIMEOUT {host}: the pair did not serve {args.get('model')} within {budget:.0f} s "
                                  f"(API: {api.get('error') or api.get('status')})\n{_logs_text(probe, fail_lines)}")
                return result
            if elapsed - last_print >= every:
                display.display(f"[{host}] waiting for the pair: {elapsed:.0f}/{budget:.0f} s; "
                                f"head {probe['head'].get('status')}, worker {(probe.get('worker') or {}).get('status')}; "
                                f"head log: {_last_line(probe['head'])}")
                last_print = elapsed
            time.sleep(interval)
