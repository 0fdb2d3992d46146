"""The readiness wait of a pair, as pure functions of the two ranks' reports: the shared folder, the
report files, the head's and the worker's verdicts in every branch, and the operator's progress line."""
from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _pair_wait as W
from ansible_collections.gb10.dspark.plugins.module_utils.engine._startup import Phase, phase_of

MODEL = "deepseek-v4-flash-dspark"
NOW = 1_765_000_000.0
LINES = 3

HEAD_LOGS = ["(APIServer pid=1) INFO 12-04 18:50:01 [api_server.py:1896] vLLM API server version 0.32.0",
             "(Worker pid=312) INFO 12-04 18:50:06 [gpu_model_runner.py:2338] Starting to load model /model...",
             "Loading safetensors checkpoint shards:  50% Completed | 24/48 [00:03<00:03, 7.10it/s]"]
WORKER_LOGS = ["(APIServer pid=1) INFO 12-04 18:50:01 [serve.py:88] Launching vLLM (v0.32.0) headless multiproc executor, "
               "with head node address 10.0.0.1:25000 for torch.distributed process group.",
               "(Worker pid=412) INFO 12-04 18:50:05 [parallel_state.py:1208] world_size=2 rank=1 local_rank=0 "
               "distributed_init_method=tcp://10.0.0.1:25000 backend=nccl",
               "(Worker pid=412) ERROR 12-04 18:51:02 [multiproc_executor.py:511] WorkerProc hit an exception.",
               "torch.OutOfMemoryError: CUDA out of memory."]
STARTING = Phase("starting", "starting", None, None, None, None)


def running(logs=(), **kw):
    return dict({"exists": True, "running": True, "status": "running", "exit_code": 0, "logs": list(logs)}, **kw)


def exited(logs=(), code=1):
    return {"exists": True, "running": False, "status": "exited", "exit_code": code, "logs": list(logs)}


ABSENT = {"exists": False, "running": False, "status": "absent", "logs": []}
UNKNOWN = {"exists": False, "running": False, "status": "unknown", "error": "cannot reach /var/run/docker.sock", "logs": []}


def head(container=None, now=NOW, **kw):
    container = running(HEAD_LOGS) if container is None else container
    return W.make_report(W.HEAD, "spark-a-head", container, phase_of(container.get("logs") or []), now, LINES, **kw)


def worker(container=None, now=NOW, **kw):
    container = running(WORKER_LOGS[:2]) if container is None else container
    return W.make_report(W.WORKER, "spark-a-worker", container, phase_of(container.get("logs") or []), now, LINES, **kw)


def api(ready=False, kv=None, **kw):
    return dict({"ready": ready, "status": 200 if ready else None, "kv_cache_size_tokens": kv, "max_model_len": None,
                 "error": None if ready else "connection refused"}, **kw)


def hv(h, w, a=None, elapsed=10.0, budget=3600.0):
    return W.head_verdict(h, w, a or api(), elapsed, budget, MODEL, LINES)


def wv(w, h, now=NOW, elapsed=10.0, budget=3600.0, grace=120.0):
    return W.worker_verdict(w, h, now, elapsed, budget, grace, LINES)


# --- the shared folder and its reports ----------------------------------------------------------


def test_folder_for_is_one_folder_per_task_and_pair(tmp_path):
    base = str(tmp_path)
    assert W.folder_for(base, "0242ac11-0002-t1", "spark-a") == os.path.join(base, "pair-ready-spark-a-0242ac11-0002-t1")
    assert W.folder_for(base, "t1", "spark-a") != W.folder_for(base, "t2", "spark-a")
    assert W.folder_for(base, "t1", "spark-a") != W.folder_for(base, "t1", "spark-b")


@pytest.mark.parametrize("pair", ["../../etc", "/etc/passwd", "a b/c", "..", "spark a:1*?", "x\ny", "é/.."])
def test_folder_for_sanitises_and_stays_under_the_base(tmp_path, pair):
    base = str(tmp_path / "ansible-local-1")
    folder = W.folder_for(base, "t/../1", pair)
    assert os.path.dirname(folder) == base
    name = os.path.basename(folder)
    assert name.startswith("pair-ready-") and "/" not in name and name not in (".", "..")
    assert all(c.isalnum() and c.isascii() or c in "_.-" for c in name)
    assert os.path.realpath(folder).startswith(os.path.realpath(base) + os.sep)


def test_make_report_fields():
    phase = phase_of(HEAD_LOGS)
    rep = W.make_report(W.HEAD, "spark-a-head", running(HEAD_LOGS), phase, NOW, 2)
    assert len(rep.pop("progress")) == 16
    assert rep == {"role": "head", "host": "spark-a-head", "t": NOW, "status": "running", "exists": True, "running": True,
                   "exit_code": 0, "error": None, "phase": "weights", "phase_text": "loading weights 24/48",
                   "done": 24, "total": 48, "log_error": None, "logs": HEAD_LOGS[-2:], "final": None, "msg": None}
    final = W.make_report(W.WORKER, "w", exited(WORKER_LOGS), phase_of(WORKER_LOGS), NOW, 0, final=W.FAILED, msg="boom")
    assert final["logs"] == [] and final["final"] == "failed" and final["msg"] == "boom"
    assert final["log_error"] == WORKER_LOGS[3] and final["exit_code"] == 1  # the exception's own line, the last and final["running"] is False


def test_make_report_of_an_empty_container():
    rep = W.make_report(W.WORKER, "w", {}, STARTING, NOW, 30)
    assert rep["exists"] is False and rep["running"] is False and rep["status"] is None and rep["logs"] == []
    assert rep["phase"] == "starting" and rep["phase_text"] == "starting" and rep["total"] is None
    unknown = W.make_report(W.WORKER, "w", UNKNOWN, STARTING, NOW, 30)
    assert unknown["status"] == "unknown" and unknown["error"] == UNKNOWN["error"]


def test_report_round_trip(tmp_path):
    folder = W.folder_for(str(tmp_path), "t1", "spark-a")
    rep = head()
    W.write_report(folder, W.HEAD, rep)  # makes the folder
    assert W.read_report(folder, W.HEAD) == rep
    assert W.read_report(folder, W.WORKER) is None
    path = os.path.join(folder, "head.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    newer = dict(rep, final=W.READY, msg="READY", t=NOW + 5)
    W.write_report(folder, W.HEAD, newer)
    assert W.read_report(folder, W.HEAD) == newer
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(folder)) == ["head.json"]  # no temporary file left behind


def test_read_report_of_a_missing_folder(tmp_path):
    assert W.read_report(str(tmp_path / "nowhere"), W.HEAD) is None


@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]", b'"head"', b"null", b"\xff\xfe"])
def test_read_report_of_a_corrupt_file_is_none(tmp_path, content):
    (tmp_path / "worker.json").write_bytes(content)
    assert W.read_report(str(tmp_path), W.WORKER) is None


def test_read_report_of_a_huge_file_is_none(tmp_path):
    (tmp_path / "worker.json").write_text(json.dumps({"logs": ["x" * (1 << 20)]}))
    assert W.read_report(str(tmp_path), W.WORKER) is None


def test_write_report_refuses_what_json_cannot_hold(tmp_path):
    with pytest.raises(ValueError):
        W.write_report(str(tmp_path), W.HEAD, dict(head(), t=float("nan")))
    assert W.read_report(str(tmp_path), W.HEAD) is None


# --- the head's verdict -----------------------------------------------------------------------------


def test_head_keeps_waiting():
    assert hv(head(), worker()) == W.Verdict(None, None)
    assert hv(head(), None) == W.Verdict(None, None)


def test_head_container_missing():
    final, msg = hv(head(ABSENT), worker())
    assert final == W.FAILED
    assert msg == "rank spark-a-head: no engine container on the head; nothing to wait for"


def test_head_docker_unreadable():
    final, msg = hv(head(UNKNOWN), worker())
    assert final == W.FAILED
    assert msg.startswith("rank spark-a-head: its Docker engine cannot be read (cannot reach /var/run/docker.sock)")


def test_head_exited_shows_both_ranks_logs():
    final, msg = hv(head(exited(HEAD_LOGS, code=137)), worker(), elapsed=61.4)
    assert final == W.FAILED
    first, *rest = msg.splitlines()
    assert first == "rank spark-a-head: the pair's engine exited on head (exit 137) after 61 s before serving"
    assert "the pair's engine exited on head" in msg
    assert rest[0] == f"--- head spark-a-head (exited, exit 137), last {LINES} log lines:"
    assert rest[1:4] == HEAD_LOGS[-LINES:]
    assert rest[4] == f"--- worker spark-a-worker (running, exit 0), last {LINES} log lines:"
    assert rest[5:] == WORKER_LOGS[:2]


def test_head_exited_without_a_worker_report():
    final, msg = hv(head(exited([])), None)
    assert final == W.FAILED and "exited on head (exit 1)" in msg
    assert msg.splitlines()[1:] == [f"--- head spark-a-head (exited, exit 1), last {LINES} log lines:", "(none)"]


def test_head_exited_wins_over_api_ready():
    assert hv(head(exited(HEAD_LOGS)), worker(), api(True, 425424)).final == W.FAILED


def test_worker_exited_fails_the_head():
    w = worker(exited(WORKER_LOGS, code=1))
    final, msg = hv(head(), w, api(True, 425424), elapsed=30)
    assert final == W.FAILED
    assert msg.startswith("rank spark-a-worker: the pair's engine exited on worker (exit 1) after 30 s before serving\n")
    assert "--- head spark-a-head" in msg and "--- worker spark-a-worker (exited, exit 1)" in msg
    for line in WORKER_LOGS[-LINES:]:
        assert line in msg
    for line in HEAD_LOGS[-LINES:]:
        assert line in msg


def test_worker_exited_with_its_final_failed_fails_the_head_the_same():
    w = worker(exited(WORKER_LOGS), final=W.FAILED, msg="rank spark-a-worker: the pair's engine exited on worker ...")
    final, msg = hv(head(), w)
    assert final == W.FAILED and "the pair's engine exited on worker (exit 1)" in msg and WORKER_LOGS[-1] in msg


def test_worker_final_failed_without_container_passes_its_message():
    msg = "rank spark-a-worker: no engine container on the worker; nothing to wait for"
    assert hv(head(), worker(ABSENT, final=W.FAILED, msg=msg)) == W.Verdict(W.FAILED, msg)
    # without a message, the head says it itself
    assert hv(head(), worker(ABSENT, final=W.FAILED)) == W.Verdict(W.FAILED, msg)


def test_worker_final_failed_while_running_is_quoted():
    w = worker(final=W.FAILED, msg="the wait on spark-a-worker stopped: RuntimeError: probing the engine failed: x")
    assert hv(head(), w, api(True, 1)) == W.Verdict(
        W.FAILED, "rank spark-a-worker: the wait on spark-a-worker stopped: RuntimeError: probing the engine failed: x")


def test_worker_left_is_ignored_and_the_head_goes_on():
    left = worker(final=W.LEFT, msg="the head's wait had not started")
    assert hv(head(), left) == W.Verdict(None, None)
    assert hv(head(), left, api(True, 425424), elapsed=99.6).final == W.READY
    # what the worker's container did after its wait left is not this wait's business
    left_exited = worker(exited(WORKER_LOGS), final=W.LEFT, msg="left")
    assert hv(head(), left_exited, api(True, 425424)).final == W.READY


def test_worker_not_yet_final_and_unreadable_does_not_fail_the_head():
    assert hv(head(), worker(UNKNOWN)) == W.Verdict(None, None)


def test_api_ready():
    assert hv(head(), worker(), api(True, 425424), elapsed=742.4) == W.Verdict(
        W.READY, f"READY served={MODEL} kv_cache_size_tokens=425424 after 742 s")
    assert hv(head(), None, api(True, None), elapsed=1).msg == f"READY served={MODEL} kv_cache_size_tokens=None after 1 s"


def test_api_ready_wins_over_the_budget():
    assert hv(head(), worker(), api(True, 7), elapsed=4000, budget=3600).final == W.READY


def test_budget_spent():
    final, msg = hv(head(), worker(), api(False, error="[Errno 111] Connection refused"), elapsed=3600, budget=3600)
    assert final == W.FAILED
    assert msg.startswith(f"TIMEOUT rank spark-a-head: the pair did not serve {MODEL} within 3600 s "
                          "(API: [Errno 111] Connection refused)\n")
    assert "--- head spark-a-head" in msg and "--- worker spark-a-worker" in msg
    status_only = hv(head(), None, api(False, status=503, error=None), elapsed=10, budget=5).msg
    assert status_only.startswith("TIMEOUT") and "(API: 503)" in status_only and "--- worker" not in status_only


def test_budget_not_yet_spent():
    assert hv(head(), worker(), elapsed=3599.9, budget=3600) == W.Verdict(None, None)


# --- the worker's verdict ---------------------------------------------------------------------------


def test_worker_keeps_waiting():
    assert wv(worker(), None, elapsed=119) == W.Verdict(None, None)
    assert wv(worker(), head(now=NOW - 5), elapsed=500) == W.Verdict(None, None)


def test_worker_own_container_missing():
    assert wv(worker(ABSENT), head()) == W.Verdict(
        W.FAILED, "rank spark-a-worker: no engine container on the worker; nothing to wait for")
    assert wv(worker(UNKNOWN), None).msg.startswith("rank spark-a-worker: its Docker engine cannot be read")


def test_worker_own_container_exited():
    final, msg = wv(worker(exited(WORKER_LOGS, code=139)), head(), elapsed=45)
    assert final == W.FAILED
    assert msg.startswith("rank spark-a-worker: the pair's engine exited on worker (exit 139) after 45 s before serving\n")
    assert msg.index("--- head spark-a-head") < msg.index("--- worker spark-a-worker")  # head first
    assert WORKER_LOGS[-1] in msg and HEAD_LOGS[-1] in msg


def test_worker_own_exit_wins_over_the_heads_ready():
    assert wv(worker(exited(WORKER_LOGS)), head(final=W.READY, msg="READY")).final == W.FAILED


def test_head_ready_makes_the_worker_ready():
    assert wv(worker(), head(final=W.READY, msg="READY served=m")) == W.Verdict(
        W.READY, "the head spark-a-head serves; this worker's engine runs")
    # a READY head report is final, however old
    assert wv(worker(), head(now=NOW - 3600, final=W.READY), elapsed=4000, budget=10).final == W.READY


def test_head_failed_makes_the_worker_fail_quoting_its_first_line():
    msg = "rank spark-a-head: the pair's engine exited on head (exit 1) after 3 s before serving\n--- head ...\nlog"
    assert wv(worker(), head(final=W.FAILED, msg=msg)) == W.Verdict(
        W.FAILED, "the pair did not serve; the head's wait failed: "
                  "rank spark-a-head: the pair's engine exited on head (exit 1) after 3 s before serving")
    assert wv(worker(), head(final=W.FAILED)).msg == "the pair did not serve; the head's wait failed: no reason given"
    assert wv(worker(), head(final=W.FAILED, msg="")).msg.endswith("no reason given")


def test_no_head_report_after_peer_grace_leaves():
    final, msg = wv(worker(), None, elapsed=120, grace=120)
    assert final == W.LEFT
    assert msg.startswith("the head's wait had not started after 120 s")
    assert "the head's wait judges the pair alone" in msg


def test_stale_head_heartbeat_fails():
    final, msg = wv(worker(), head(now=NOW - 120), now=NOW, elapsed=500, grace=120)
    assert final == W.FAILED
    assert msg == "the head's wait stopped reporting 120 s ago; the pair's readiness is unknown"
    assert wv(worker(), head(now=NOW - 119.9), now=NOW, grace=120) == W.Verdict(None, None)
    assert wv(worker(), dict(head(), t=None), now=NOW).final == W.FAILED  # no heartbeat at all


def test_budget_and_grace_spent():
    h = head(now=NOW - 1)
    assert wv(worker(), h, elapsed=3719, budget=3600, grace=120) == W.Verdict(None, None)
    final, msg = wv(worker(), h, elapsed=3720, budget=3600, grace=120)
    assert final == W.FAILED and msg.startswith("TIMEOUT") and "within 3720 s" in msg


# --- the progress line ----------------------------------------------------------------------------------


def test_progress_line_both_ranks():
    line = W.progress_line(61.6, 3600, head(), worker())
    assert line == ("waited 62/3600 s; head loading weights 24/48; worker process group formed")


def test_progress_line_without_a_worker_report():
    line = W.progress_line(5, 3600, head(running([])), None)
    assert line == "waited 5/3600 s; head starting; worker: its wait has not reported yet"


def test_progress_line_bar_only_when_asked_and_counted():
    assert "[" not in W.progress_line(5, 60, head(), worker())
    line = W.progress_line(5, 60, head(), worker(), show_bar=True)
    assert "head loading weights 24/48 [##########----------]; worker process group formed" in line
    assert line.count("[") == 1  # the worker's phase has no count, so no bar


def test_progress_line_notes_a_worker_gone_alone_and_error_lines():
    w = worker(running(WORKER_LOGS[:3]), final=W.LEFT)
    line = W.progress_line(5, 60, head(), w)
    assert line.endswith("; worker process group formed (its wait went on alone); last error line: " + WORKER_LOGS[2])
    long_error = worker(running(["ERROR " + "y" * 300]))
    assert line.count("last error line") == 1
    tail = W.progress_line(5, 60, head(), long_error).split("last error line: ")[1]
    assert tail == ("ERROR " + "y" * 300)[:120]


def test_phase_key_moves_with_the_phase_and_its_count():
    assert W.phase_key(None) == ""
    assert W.phase_key(head()) == W.phase_key(head(now=NOW + 5))  # the same phase, the same count
    further = head(running(HEAD_LOGS + ["Loading safetensors checkpoint shards:  52% Completed | 25/48 [00:03<00:03]"]))
    assert W.phase_key(further) != W.phase_key(head())
    assert W.phase_key(head(running(HEAD_LOGS[:2]))) != W.phase_key(head())
    assert W.phase_key(head()) != W.phase_key(None)


def test_logs_text_skips_missing_reports():
    assert W.logs_text([None, None], 5) == ""
    text = W.logs_text([None, worker(running([]))], 5)
    assert text == "--- worker spark-a-worker (running, exit 0), last 5 log lines:\n(none)"


# --- a wedged pair: neither rank moves ----------------------------------------------------------------
def test_progress_marks_move_with_a_new_log_line_or_phase_and_not_otherwise():
    p = W.Progress()
    p.see(W.HEAD, head(), 100.0)
    p.see(W.HEAD, head(), 130.0)  # the same logs: no progress
    assert p.quiet_for(W.HEAD, 130.0) == 30.0
    p.see(W.HEAD, head(running(HEAD_LOGS + ["Loading safetensors checkpoint shards:  52% Completed | 25/48"])), 131.0)
    assert p.quiet_for(W.HEAD, 140.0) == 9.0
    assert p.quiet_for(W.WORKER, 140.0) == 0.0  # never seen: nothing to judge yet


def test_a_pair_where_neither_rank_moves_fails_as_stalled_naming_the_rank_quiet_first():
    final, msg = W.head_verdict(head(), worker(), api(), 700.0, 3600.0, MODEL, LINES,
                                quiet={W.HEAD: 600.0, W.WORKER: 640.0}, stall_timeout=600)
    assert final == W.FAILED
    first = msg.splitlines()[0]
    assert first.startswith("STALLED rank spark-a-worker: the pair made no progress (no new log line, no phase change "
                            "on either rank) for 600 s; the worker went quiet first (head spark-a-head in ")
    assert "quiet 600 s; worker spark-a-worker in" in first and first.endswith("quiet 640 s)")
    assert "--- head spark-a-head" in msg and "--- worker spark-a-worker" in msg


@pytest.mark.parametrize("quiet, stall, ready", [
    ({W.HEAD: 10.0, W.WORKER: 900.0}, 600, False),   # the head still moves (the worker may just be done)
    ({W.HEAD: 900.0, W.WORKER: 900.0}, 0, False),     # the check is off
    ({W.HEAD: 900.0, W.WORKER: 900.0}, 600, True),    # serving wins
])
def test_no_stall_while_a_rank_moves_when_off_or_once_serving(quiet, stall, ready):
    final, _msg = W.head_verdict(head(), worker(), api(ready), 950.0, 3600.0, MODEL, LINES, quiet=quiet,
                                 stall_timeout=stall)
    assert final == (W.READY if ready else None)
