"""The pair_ready action: the head's and the worker's waits run at once, each probing its own engine
(a scripted fake of the engine_probe module), and share their reports in a folder on the control node:
both succeed when the head's API serves, both fail within a few intervals when one rank's engine exits,
each goes on alone when the other's wait never runs, and the shared folder goes at the end."""
from __future__ import annotations

import os
import re
import threading
import time
from types import SimpleNamespace

import pytest
from ansible import constants as C
from ansible.errors import AnsibleActionFail

from ansible_collections.gb10.dspark.plugins.action import pair_ready as action
from ansible_collections.gb10.dspark.plugins.callback import progress as callback
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _progress as P
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _pair_wait as W
from ansible_collections.gb10.dspark.plugins.module_utils.engine._engine_probe import WAIT_ARGUMENT_SPEC
from tests.unit.plugins.action._plugin import make_plugin

MODEL = "deepseek-v4-flash-dspark"
PAIR = "spark-a"
HEAD_HOST, WORKER_HOST = "spark-a-head", "spark-a-worker"
INTERVAL = 0.05
ARGS = {"pair": PAIR, "model": MODEL, "interval": INTERVAL, "progress_every": 0.2}

HEAD_LOGS = [
    "(APIServer pid=1) INFO 12-04 18:50:01 [api_server.py:1896] vLLM API server version 0.32.0",
    "(EngineCore_DP0 pid=211) INFO 12-04 18:50:03 [core.py:77] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='/model', speculative_config=None",
    "(Worker pid=312) INFO 12-04 18:50:05 [parallel_state.py:1208] world_size=2 rank=0 local_rank=0 "
    "distributed_init_method=tcp://10.0.0.1:25000 backend=nccl",
    "(Worker pid=312) INFO 12-04 18:50:06 [gpu_model_runner.py:2338] Starting to load model /model...",
    "(Worker pid=312) INFO 12-04 18:50:20 [gpu_model_runner.py:2397] Model loading took 71.2345 GiB and 12.310000 seconds",
    "(EngineCore_DP0 pid=211) INFO 12-04 18:50:30 [kv_cache_utils.py:1087] GPU KV cache size: 425,424 tokens, "
    "Maximum concurrency for 65,536 tokens per request: 6.49x",
    "(Worker pid=312) INFO 12-04 18:50:40 [gpu_model_runner.py:3480] Graph capturing finished in 7 secs, took 0.95 GiB",
    "(EngineCore_DP0 pid=211) INFO 12-04 18:50:41 [core.py:210] init engine (profile, create kv cache, warmup model) "
    "took 25.99 seconds",
    "(APIServer pid=1) INFO 12-04 18:50:42 [api_server.py:1930] Starting vLLM API server 0 on http://0.0.0.0:8888",
    "INFO:     Application startup complete.",
]
SHARDS = "Loading safetensors checkpoint shards:  50% Completed | 24/48 [00:03<00:03, 7.10it/s]"
GRAPHS = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  40%|####      | 27/67 [00:02<00:03, 11.2it/s]"
WORKER_LOGS = [
    "(APIServer pid=1) INFO 12-04 18:50:01 [serve.py:88] Launching vLLM (v0.32.0) headless multiproc executor, with "
    "head node address 10.0.0.1:25000 for torch.distributed process group.",
    "(Worker pid=412) INFO 12-04 18:50:05 [parallel_state.py:1208] world_size=2 rank=1 local_rank=0 "
    "distributed_init_method=tcp://10.0.0.1:25000 backend=nccl",
    "(Worker pid=412) INFO 12-04 18:50:06 [gpu_model_runner.py:2338] Starting to load model /model...",
]
WORKER_DEATH = [
    "(Worker pid=412) ERROR 12-04 18:50:09 [multiproc_executor.py:511] WorkerProc hit an exception.",
    "(Worker pid=412) ERROR 12-04 18:50:09 [multiproc_executor.py:511] torch.OutOfMemoryError: CUDA out of memory.",
]

NOT_SERVING = {"ready": False, "status": None, "models": [], "max_model_len": None, "error": "[Errno 111] Connection refused",
               "kv_cache_size_tokens": None, "num_requests_running": None, "metrics_error": "connection refused"}
SERVING = {"ready": True, "status": 200, "models": [MODEL], "max_model_len": 65536, "error": None,
           "kv_cache_size_tokens": 425424, "num_requests_running": 0, "metrics_error": None}
NO_API = dict(NOT_SERVING, error="API not read (read_api=false)", metrics_error="API not read (read_api=false)")


def probe(logs, api=None, running=True, code=0):
    container = {"exists": True, "running": running, "status": "running" if running else "exited", "exit_code": code,
                 "id": "c0ffee", "logs": list(logs)}
    api = api or NOT_SERVING
    return {"container": container, "api": api, "ready": bool(api["ready"]) and running}


# The head's probes: its log advances through the phases, and the third probe serves.
HEAD_STEPS = [probe(HEAD_LOGS[:2]), probe(HEAD_LOGS[:4] + [SHARDS]), probe(HEAD_LOGS, SERVING)]
WORKER_STEPS = [probe(WORKER_LOGS[:2], NO_API), probe(WORKER_LOGS + [GRAPHS], NO_API)]


@pytest.fixture(name="local_tmp")
def _local_tmp(tmp_path, monkeypatch):
    """The run's own temporary folder on the control node."""
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path))
    return tmp_path


@pytest.fixture(name="shown")
def _shown(monkeypatch):
    """What the action shows the operator: (kind, text)."""
    lines: list[tuple[str, str]] = []
    lock = threading.Lock()

    class _Display:
        def display(self, msg, *args, **kw):
            with lock:
                lines.append(("display", msg))

        def warning(self, msg, *args, **kw):
            with lock:
                lines.append(("warning", msg))

    monkeypatch.setattr(action, "display", _Display())
    return lines


def folder() -> str:
    return W.folder_for(C.DEFAULT_LOCAL_TMP, "t1", PAIR)


def make(role: str, steps: list, check_mode: bool = False, before=None, calls=None, **args):
    """The action for ``role``, whose n-th probe answers ``steps[n]`` (the last one from then on).
    ``before(n)`` runs before the n-th answer (0-based), to hold a probe until the other rank moved.
    ``calls``: the probes so far, shared by the handlers of one task's retries."""
    plugin = make_plugin(action.ActionModule, "gb10.dspark.pair_ready", dict(ARGS, role=role, **args), check_mode)
    plugin._task._uuid = "t1"
    plugin.calls = [] if calls is None else calls

    def execute(module_name, module_args, task_vars):
        index = len(plugin.calls)
        plugin.calls.append((module_name, dict(module_args), task_vars))
        if before is not None:
            before(index)
        step = steps[min(index, len(steps) - 1)]
        return step if "failed" in step else {"changed": False, "probe": step}

    plugin._execute_module = execute
    return plugin


def wait_for_file(path: str, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def run_one(plugin, host: str) -> dict:
    return plugin.run(task_vars={"inventory_hostname": host})


def run_both(head, worker, timeout: float = 5.0) -> tuple[dict, dict, float]:
    """Both ranks' waits at once, as two forks would run them; their results and the time taken."""
    results: dict[str, object] = {}

    def go(name, plugin, host):
        try:
            results[name] = run_one(plugin, host)
        except BaseException as exc:  # handed to the test
            results[name] = exc

    threads = [threading.Thread(target=go, args=("head", head, HEAD_HOST)),
               threading.Thread(target=go, args=("worker", worker, WORKER_HOST))]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    took = time.monotonic() - start
    assert not any(thread.is_alive() for thread in threads), "a wait did not end"
    for name in ("head", "worker"):
        if isinstance(results[name], BaseException):
            raise results[name]
    return results["head"], results["worker"], took


def head_waits_for_the_worker(index: int) -> None:
    """Hold the head's second probe until the worker has reported once, so the progress line of that probe and
    everything after it has seen both ranks (a worker thread that starts late on a busy machine once left every
    progress line without the worker's phase)."""
    if index == 1:
        wait_for_file(os.path.join(folder(), "worker.json"))


def test_both_ranks_succeed_when_the_head_serves(local_tmp, shown):
    head = make("head", HEAD_STEPS, before=head_waits_for_the_worker)
    worker = make("worker", WORKER_STEPS)
    res_head, res_worker, took = run_both(head, worker)
    assert took < 3

    assert not res_head.get("failed"), res_head
    assert res_head["msg"].startswith(f"READY served={MODEL} kv_cache_size_tokens=425424 after ")
    assert res_head["kv_cache_size_tokens"] == 425424 and res_head["max_model_len"] == 65536
    assert res_head["changed"] is False and res_head["role"] == "head" and res_head["probe"]["ready"] is True
    assert res_head["phases"]["head"] == "API up"
    assert res_head["phases"]["worker"] in ("process group formed", "capturing CUDA graphs 27/67")
    assert len(head.calls) == 3

    assert not res_worker.get("failed"), res_worker
    assert res_worker["msg"] == f"the head {HEAD_HOST} serves; this worker's engine runs"
    assert res_worker["role"] == "worker" and res_worker["phases"]["head"] == "API up"
    assert res_worker["phases"]["worker"] in ("process group formed", "capturing CUDA graphs 27/67")
    assert "kv_cache_size_tokens" not in res_worker

    assert not os.path.exists(folder())
    assert os.listdir(local_tmp) == []

    displayed = [text for kind, text in shown if kind == "display"]
    assert displayed[-1] == f"[{HEAD_HOST}] {res_head['msg']}"
    progress = [text for text in displayed if "waited " in text]
    assert progress and all(text.startswith(f"[{HEAD_HOST}] ") for text in progress)
    assert any("head loading weights 24/48" in text for text in progress)
    assert any("; worker process group formed" in text or "; worker capturing CUDA graphs 27/67" in text
               for text in progress)
    assert not [text for kind, text in shown if kind == "warning"]


def test_probe_arguments(local_tmp, shown):
    head = make("head", HEAD_STEPS, before=head_waits_for_the_worker, container="engine-x", api_key="sekret")
    worker = make("worker", WORKER_STEPS, container="engine-x", api_key="sekret")
    run_both(head, worker)
    name, margs, task_vars = head.calls[0]
    assert name == "gb10.dspark.engine_probe" and task_vars == {"inventory_hostname": HEAD_HOST}
    assert margs["read_api"] is True and margs["rank"] == HEAD_HOST and margs["log_lines"] == action.PHASE_LOG_LINES
    assert margs["model"] == MODEL and margs["container"] == "engine-x" and margs["api_key"] == "sekret"
    assert not set(WAIT_ARGUMENT_SPEC) & set(margs)  # the wait's own options are not the probe's
    wname, wargs, wvars = worker.calls[0]
    assert wname == name and wvars == {"inventory_hostname": WORKER_HOST}
    assert wargs["read_api"] is False and wargs["rank"] == WORKER_HOST
    assert set(wargs) == set(margs)


def test_a_worker_whose_engine_exits_fails_both_fast(local_tmp, shown):
    head = make("head", [probe(HEAD_LOGS[:4] + [SHARDS])])  # never serves
    worker = make("worker", [probe(WORKER_LOGS, NO_API), probe(WORKER_LOGS + WORKER_DEATH, running=False, code=1)])
    res_head, res_worker, took = run_both(head, worker)
    assert took < 2

    assert res_head["failed"] is True
    assert f"rank {WORKER_HOST}: the pair's engine exited on worker (exit 1)" in res_head["msg"]
    assert f"--- worker {WORKER_HOST} (exited, exit 1), last 30 log lines:" in res_head["msg"]
    for line in WORKER_LOGS + WORKER_DEATH:
        assert line in res_head["msg"]
    assert f"--- head {HEAD_HOST} (running, exit 0)" in res_head["msg"]
    assert "kv_cache_size_tokens" not in res_head

    assert res_worker["failed"] is True
    assert res_worker["msg"].startswith(f"rank {WORKER_HOST}: the pair's engine exited on worker (exit 1)")
    assert len(worker.calls) == 2
    assert not os.path.exists(folder())


def test_a_head_whose_engine_exits_fails_both_fast(local_tmp, shown):
    head = make("head", [probe(HEAD_LOGS[:2]), probe(HEAD_LOGS[:2] + ["Traceback (most recent call last):"],
                                                     running=False, code=137)])
    worker = make("worker", [probe(WORKER_LOGS, NO_API)])
    res_head, res_worker, took = run_both(head, worker)
    assert took < 2
    assert res_head["failed"] is True
    assert res_head["msg"].startswith(f"rank {HEAD_HOST}: the pair's engine exited on head (exit 137)")
    assert res_worker["failed"] is True
    assert res_worker["msg"] == ("the pair did not serve; the head's wait failed: "
                                 + res_head["msg"].splitlines()[0])
    assert not os.path.exists(folder())


def test_check_mode_skips(local_tmp, shown):
    for role in ("head", "worker"):
        plugin = make(role, HEAD_STEPS, check_mode=True)
        res = run_one(plugin, HEAD_HOST)
        assert res["skipped"] is True and res["changed"] is False and not res.get("failed")
        assert res["msg"] == "check mode: the pair is not started, nothing to wait for"
        assert plugin.calls == []
    assert os.listdir(local_tmp) == []


def test_head_alone_then_worker_alone(local_tmp, shown):
    """Too few forks: the head's wait runs alone and judges the pair by its API; the worker's wait,
    run after, ends with the READY the head left for it, and removes the folder."""
    head = make("head", HEAD_STEPS, peer_grace=0.1)
    res_head = run_one(head, HEAD_HOST)
    assert not res_head.get("failed") and res_head["msg"].startswith("READY served=")
    assert res_head["phases"] == {"head": "API up", "worker": None}
    assert len(head.calls) == 3
    assert any("worker: its wait has not reported yet" in text for kind, text in shown)
    left = W.read_report(folder(), W.HEAD)
    assert left is not None and left["final"] == W.READY  # kept for the worker's wait

    worker = make("worker", WORKER_STEPS, peer_grace=0.1)
    start = time.monotonic()
    res_worker = run_one(worker, WORKER_HOST)
    assert time.monotonic() - start < 1
    assert not res_worker.get("failed"), res_worker
    assert res_worker["msg"] == f"the head {HEAD_HOST} serves; this worker's engine runs"
    assert len(worker.calls) == 1
    assert not os.path.exists(folder())


def test_worker_alone_goes_on_after_peer_grace_then_head_alone(local_tmp, shown):
    """Too few forks, the worker first: its wait leaves after peer_grace (not failed, a warning), and
    the head's wait, run after, ignores it and judges the pair by its API."""
    worker = make("worker", WORKER_STEPS, peer_grace=0.2)
    start = time.monotonic()
    res_worker = run_one(worker, WORKER_HOST)
    took = time.monotonic() - start
    assert 0.2 <= took < 1.5
    assert not res_worker.get("failed"), res_worker
    assert res_worker["msg"].startswith("the head's wait had not started after ")
    assert res_worker["phases"] == {"head": None, "worker": "capturing CUDA graphs 27/67"}
    assert ("warning", f"[{WORKER_HOST}] {res_worker['msg']}") in shown
    assert W.read_report(folder(), W.WORKER)["final"] == W.LEFT

    head = make("head", HEAD_STEPS, peer_grace=0.2)
    res_head = run_one(head, HEAD_HOST)
    assert not res_head.get("failed") and res_head["msg"].startswith("READY served=")
    assert res_head["phases"]["worker"] == "capturing CUDA graphs 27/67"
    assert not os.path.exists(folder())


def test_worker_alone_with_a_head_gone_quiet_fails(local_tmp, shown):
    """A head's report that stopped moving (its wait killed without a verdict) fails the worker."""
    W.write_report(folder(), W.HEAD, W.make_report(W.HEAD, HEAD_HOST, probe(HEAD_LOGS[:2])["container"],
                                                   action.phase_of(HEAD_LOGS[:2]), time.time() - 60, 30))
    res = run_one(make("worker", WORKER_STEPS, peer_grace=0.2), WORKER_HOST)
    assert res["failed"] is True and res["msg"].startswith("the head's wait stopped reporting ")


def test_head_alone_times_out(local_tmp, shown):
    res = run_one(make("head", [probe(HEAD_LOGS[:4] + [SHARDS])], budget=0.15, peer_grace=0.1), HEAD_HOST)
    assert res["failed"] is True
    assert res["msg"].startswith(f"TIMEOUT rank {HEAD_HOST}: the pair did not serve {MODEL} within 0 s "
                                 "(API: [Errno 111] Connection refused)")
    assert res["phases"] == {"head": "loading weights 24/48", "worker": None}
    # the verdict stays for a worker's wait that may still come
    assert W.read_report(folder(), W.HEAD)["final"] == W.FAILED


def test_a_failed_probe_stops_the_wait_and_tells_the_other_rank(local_tmp, shown):
    head = make("head", [{"failed": True, "msg": "cannot reach the Docker engine"}])
    with pytest.raises(RuntimeError, match="probing the engine failed: cannot reach the Docker engine"):
        run_one(head, HEAD_HOST)
    report = W.read_report(folder(), W.HEAD)
    assert report["final"] == W.FAILED
    assert report["msg"] == (f"the wait on {HEAD_HOST} stopped: RuntimeError: probing the engine failed: "
                             "cannot reach the Docker engine")
    res = run_one(make("worker", WORKER_STEPS), WORKER_HOST)
    assert res["failed"] is True
    assert res["msg"] == f"the pair did not serve; the head's wait failed: {report['msg']}"
    assert not os.path.exists(folder())


def test_bad_arguments_are_refused(local_tmp, shown):
    with pytest.raises(AnsibleActionFail):
        run_one(make("tail", HEAD_STEPS), HEAD_HOST)
    plugin = make_plugin(action.ActionModule, "gb10.dspark.pair_ready", {"pair": PAIR, "role": "head"})
    with pytest.raises(AnsibleActionFail, match="model"):
        plugin.run(task_vars={"inventory_hostname": HEAD_HOST})
    with pytest.raises(AnsibleActionFail, match="Invalid options"):
        run_one(make("head", HEAD_STEPS, delay=3), HEAD_HOST)


def run_retried(role: str, steps: list, host: str, before=None, **args) -> tuple[list[dict], list]:
    """The task as the task executor runs it with ``until``: a new handler per retry, in one process,
    until a result is no longer ``waiting``; every result, and the probes made."""
    calls: list = []
    results = []
    for _attempt in range(50):
        res = run_one(make(role, steps, before=before, calls=calls, progress_results=True, **args), host)
        results.append(res)
        if not res.get(P.WAITING):
            return results, calls
    raise AssertionError("the wait never ended")


def test_progress_results_hand_each_report_to_the_callback(local_tmp, shown):
    """With progress_results the head's wait returns at each report and goes on at the next retry: the
    retries are the callback's events, its lines are the phase lines and the READY line, and the wait's
    course and verdict are those of one run (three probes, both ranks ready, the folder gone)."""
    got: dict[str, tuple] = {}

    def go(role, steps, host, before=None):
        got[role] = run_retried(role, steps, host, before=before)

    threads = [threading.Thread(target=go, args=("head", HEAD_STEPS, HEAD_HOST, head_waits_for_the_worker)),
               threading.Thread(target=go, args=("worker", WORKER_STEPS, WORKER_HOST))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert set(got) == {"head", "worker"}
    head_results, head_calls = got["head"]
    worker_results, _calls = got["worker"]

    final = head_results[-1]
    assert not final.get("failed") and final["msg"].startswith(f"READY served={MODEL} kv_cache_size_tokens=425424 ")
    assert final["kv_cache_size_tokens"] == 425424 and final["phases"]["head"] == "API up"
    assert len(head_calls) == 3  # one wait across the retries, not one per retry
    steps = head_results[:-1]
    assert steps and all(res[P.WAITING] is True and not res.get("failed") and res["changed"] is False for res in steps)
    assert len(worker_results) == 1 and worker_results[0]["msg"] == f"the head {HEAD_HOST} serves; this worker's engine runs"
    assert P.KEY not in worker_results[0]
    assert not os.path.exists(folder()) and action._WATCHES == {}
    assert [text for kind, text in shown if kind == "display"] == []  # the action prints nothing itself

    display = SimpleNamespace(verbosity=0, shown=[])
    display.display = lambda msg, *a, **kw: display.shown.append(msg)
    cb = callback.CallbackModule(display=display)
    for res in steps:
        cb.v2_runner_retry(SimpleNamespace(host=SimpleNamespace(get_name=lambda: HEAD_HOST), result=res))
    cb.v2_runner_on_ok(SimpleNamespace(host=SimpleNamespace(get_name=lambda: HEAD_HOST), result=final))
    printed = display.shown
    assert printed[-1] == f"[{HEAD_HOST}] {final['msg']}"
    phase = re.compile(rf"^\[{HEAD_HOST}\] \d\d:\d\d:\d\d waited \d+/3600 s; head .+; worker[: ].+$")  # "worker: its wait has not reported yet" when the head reports first
    assert printed[:-1] and all(phase.match(line) for line in printed[:-1]), printed
    assert any("head loading weights 24/48" in line for line in printed)
    assert [res["msg"] for res in steps] == [line.split("] ", 1)[1] for line in printed[:-1]]


def test_progress_results_fail_a_wait_whose_task_does_not_retry(local_tmp, shown):
    plugin = make("head", HEAD_STEPS, progress_results=True)
    plugin._task.until = []
    with pytest.raises(AnsibleActionFail, match="progress_results needs the task's until"):
        run_one(plugin, HEAD_HOST)
    assert plugin.calls == []
