"""The gb10.dspark.progress callback: fed the events it handles (a wait's retries and its last result),
it prints each progress report as ``[host] text`` in the wait's one format, beside the stdout callback;
results without a report, of no_log tasks, or with a report it cannot read print nothing."""
from __future__ import annotations

import time
from types import SimpleNamespace

from ansible.plugins.callback import CallbackBase

from ansible_collections.gb10.dspark.plugins.callback import progress as plugin
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _pair_wait as W
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _progress as P

HOST = "sim02-head"
T = time.mktime((2026, 12, 5, 12, 34, 56, 0, 0, -1))  # 12:34:56 local time, as the wait's clock shows it


class _Display:
    verbosity = 0

    def __init__(self):
        self.shown: list[str] = []

    def display(self, msg, *args, **kw):
        self.shown.append(msg)


def result(res: dict, host: str = HOST):
    """What a callback receives: a CallbackTaskResult's host and result."""
    return SimpleNamespace(host=SimpleNamespace(get_name=lambda: host), result=res)


def report(phase_text, done=None, total=None, final=None, log_error=None):
    return {"phase_text": phase_text, "done": done, "total": total, "final": final, "log_error": log_error,
            "logs": ["never shown"], "role": "x"}


def callback():
    display = _Display()
    cb = plugin.CallbackModule(display=display)
    return cb, display.shown


def wait_record():
    return W.progress_record(5.2, 600, report("loading weights 3/48", 3, 48), report("process group formed"), T)


def test_an_aggregate_callback_that_must_be_enabled():
    assert issubclass(plugin.CallbackModule, CallbackBase)
    assert plugin.CallbackModule.CALLBACK_TYPE == "aggregate"  # beside the stdout callback, never instead of it
    assert plugin.CallbackModule.CALLBACK_NEEDS_ENABLED is True
    assert plugin.CallbackModule.CALLBACK_NAME == "gb10.dspark.progress"


def test_a_retry_carrying_a_wait_report_prints_the_phase_line():
    cb, shown = callback()
    cb.v2_runner_retry(result({"waiting": True, "attempts": 3, "retries": 723, P.KEY: wait_record()}))
    assert shown == [f"[{HOST}] 12:34:56 waited 5/600 s; head loading weights 3/48; worker process group formed"]


def test_the_last_result_prints_the_ready_line():
    cb, shown = callback()
    cb.v2_runner_on_ok(result({"msg": "READY served=m kv_cache_size_tokens=4096 after 41 s",
                               P.KEY: P.line_record("READY served=m kv_cache_size_tokens=4096 after 41 s")}))
    assert shown == [f"[{HOST}] READY served=m kv_cache_size_tokens=4096 after 41 s"]


def test_a_worker_not_yet_reported_and_a_rank_gone_alone():
    rec = W.progress_record(61, 3600, report("launched", final=W.LEFT, log_error="NCCL WARN x"), None, T)
    cb, shown = callback()
    cb.v2_runner_retry(result({P.KEY: rec}))
    assert shown == [f"[{HOST}] 12:34:56 waited 61/3600 s; head launched (its wait went on alone); "
                     "last error line: NCCL WARN x; worker: its wait has not reported yet"]


def test_nothing_for_other_results():
    cb, shown = callback()
    cb.v2_runner_on_ok(result({"changed": True, "msg": "[sim02-head] 12:34:56 waited 5/600 s; not a report"}))
    cb.v2_runner_retry(result({"failed": True, "msg": "no report"}))
    cb.v2_runner_on_ok(result({"_ansible_no_log": True, P.KEY: P.line_record("READY hidden")}))
    cb.v2_runner_on_ok(result({P.KEY: {"kind": "pair_wait", "t": T}}))  # unreadable: no line, no error
    cb.v2_runner_on_ok(result({P.KEY: {"kind": "something new", "text": "x"}}))
    cb.v2_runner_on_ok(result({P.KEY: "READY as a string"}))
    cb.v2_runner_on_ok(result(None))
    assert shown == []


def test_one_format_for_the_callback_and_dspark():
    """``texts`` is what dspark prints (with its pair in front); ``lines`` what the callback prints."""
    res = {P.KEY: wait_record()}
    assert plugin.texts(res) == ["12:34:56 waited 5/600 s; head loading weights 3/48; worker process group formed"]
    assert plugin.lines(HOST, res) == [f"[{HOST}] {plugin.texts(res)[0]}"]
    assert "[" in plugin.texts(res, show_bar=True)[0]  # a bar on a terminal


def test_a_report_carries_what_the_line_shows_and_no_log_lines():
    long_error = "NCCL WARN " + "x" * 500
    rec = W.progress_record(1, 10, dict(report("launched", log_error=long_error), logs=["a log line"]), None, T)
    assert set(rec[W.HEAD]) == {"phase_text", "done", "total", "final", "log_error"}
    assert rec[W.HEAD]["log_error"] == long_error[:W.ERROR_SHOWN] and rec[W.WORKER] is None
