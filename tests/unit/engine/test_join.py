"""Two-rank join: readiness only after the join, handshake checks, heartbeats, peer loss, shutdown."""
import signal
import time

from dspark_engine import VERSION

from .conftest import free_port, production_args


class Pair:
    def __init__(self, engines, model_dir):
        self.engines, self.model_dir = engines, model_dir
        self.port, self.master_port = free_port(), free_port()

    def head(self, env=None, extra=()):
        args = production_args(self.model_dir, port=self.port, master_port=self.master_port) + list(extra)
        return self.engines(args, env, name="head", port=self.port)

    def worker(self, env=None, extra=()):
        args = production_args(self.model_dir, port=self.port, master_port=self.master_port, node_rank=1)
        return self.engines(args + list(extra), env, name="worker")


def test_head_serves_only_after_join_and_dies_with_its_worker(engines, model_dir):
    pair = Pair(engines, model_dir)
    head = pair.head({"DSPARK_SIM_STARTUP_DELAY_S": "0.6"})
    head.wait_for("Waiting for 1 remote node(s) to join")
    time.sleep(0.2)
    assert not head.listening()
    worker = pair.worker({"DSPARK_SIM_STARTUP_DELAY_S": "0.6"})
    head.wait_for("Node rank 1 joined")
    assert not head.listening()                     # start-up delay still running
    head.wait_ready()
    status, models = head.get("/v1/models")
    assert status == 200 and models["data"][0]["id"] == "deepseek-v4-flash-dspark"
    assert head.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})[0] == 200
    worker.wait_for("(Worker_TP1 pid=")
    worker.wait_for("CUDA_GRAPH_REPLAY implementation=regular status=observed")
    head.wait_for("CUDA_GRAPH_REPLAY implementation=regular status=observed")
    wlogs = worker.logs()
    assert (f"Launching vLLM (v{VERSION}) headless multiproc executor, with head node address "
            f"127.0.0.1:{pair.master_port} for torch.distributed process group.") in wlogs
    for marker in ("NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0/GDRDMA", "B12X", "DSpark",
                   "nvfp4_ds_mla", "CUDA_GRAPH_RUNTIME requested=regular resolved=regular mode=FULL_DECODE_ONLY",
                   "CUDA_GRAPH_CAPTURE implementation=regular status=complete",
                   "Capturing model for DSpark speculator..."):
        assert marker in wlogs, marker
    assert "Starting vLLM API server" not in wlogs and "(APIServer" not in wlogs
    assert "NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA" in head.logs()
    worker.signal(signal.SIGKILL)
    started = time.monotonic()
    assert head.wait_exit(5) != 0
    assert time.monotonic() - started < 3
    assert "peer rank 1 disconnected" in head.logs() and "EngineDeadError" in head.logs()


def test_worker_first_then_sigterm_on_head_stops_both(engines, model_dir):
    pair = Pair(engines, model_dir)
    worker = pair.worker()
    worker.wait_for("Waiting for the head node")
    head = pair.head().wait_ready()
    head.signal(signal.SIGTERM)
    assert head.wait_exit(5) == 0
    assert worker.wait_exit(5) == 0
    assert "Application shutdown complete." in head.stderr()
    assert "head node shut down" in worker.logs()


def test_worker_exits_when_head_is_killed(engines, model_dir):
    pair = Pair(engines, model_dir)
    head = pair.head()
    worker = pair.worker()
    head.wait_ready()
    head.signal(signal.SIGKILL)
    assert worker.wait_exit(5) == 1
    assert "Process group watchdog thread terminated" in worker.logs()
    assert "peer rank 0 disconnected" in worker.logs()


def test_heartbeat_loss_is_detected(engines, model_dir):
    pair = Pair(engines, model_dir)
    env = {"DSPARK_SIM_HEARTBEAT_TIMEOUT_S": "1"}
    head = pair.head(env)
    worker = pair.worker(env)
    head.wait_ready()
    worker.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        assert head.wait_exit(5) == 1
        assert time.monotonic() - started < 4
        assert "no heartbeat for" in head.logs()
    finally:
        worker.signal(signal.SIGCONT)
    assert worker.wait_exit(5) == 1


def test_socket_transport_when_ib_disabled(engines, model_dir):
    pair = Pair(engines, model_dir)
    env = {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}
    head = pair.head(env)
    worker = pair.worker(env)
    head.wait_ready()
    worker.wait_for("CUDA_GRAPH_CAPTURE")
    for proc in (head, worker):
        logs = proc.logs()
        assert "[send] via NET/Socket/0" in logs and "NET/IB" not in logs
        assert "NCCL INFO Bootstrap: Using enp1s0f1np1:" in logs


def test_configuration_mismatch_fails_both(engines, model_dir):
    pair = Pair(engines, model_dir)
    head = pair.head()
    worker = pair.worker(extra=["--max-model-len", "1048576"])
    assert head.wait_exit(10) == 1
    assert worker.wait_exit(10) == 1
    for proc in (head, worker):
        assert "configuration mismatch between head (rank 0) and node rank 1" in proc.logs()
        assert "max_model_len: head=327680 worker=1048576" in proc.logs()
    assert not head.listening()


def test_join_timeouts(engines, model_dir):
    pair = Pair(engines, model_dir)
    head = pair.head({"DSPARK_SIM_JOIN_TIMEOUT_S": "0.5"})
    assert head.wait_exit(10) == 1
    assert "Timed out after 0.5 seconds waiting for clients. 1/2 clients joined." in head.logs()
    other = Pair(engines, model_dir)
    worker = other.worker({"DSPARK_SIM_JOIN_TIMEOUT_S": "0.5"})
    assert worker.wait_exit(10) == 1
    assert "The client socket has timed out after 0.5s" in worker.logs()


def test_sigterm_while_waiting_for_the_worker(engines, model_dir):
    head = Pair(engines, model_dir).head()
    head.wait_for("Waiting for 1 remote node(s) to join")
    head.signal(signal.SIGTERM)
    assert head.wait_exit(5) == 0


def test_head_failure_after_join_takes_the_worker_down(engines, model_dir):
    pair = Pair(engines, model_dir)
    head = pair.head({"DSPARK_SIM_KV_TOKENS": "1000"})
    worker = pair.worker()
    assert head.wait_exit(10) == 1
    assert worker.wait_exit(10) == 1
    assert "larger than the available KV cache memory" in head.logs()
    assert "Node rank 0 failed" in worker.logs()


def _post_in_background(head, body, timeout):
    import threading

    out = {}

    def run():
        try:
            out["answer"] = head.post("/v1/completions", body, timeout=timeout)
        except OSError as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_stopped_worker_hangs_the_pair_until_the_execute_timeout(engines, model_dir):
    """As vLLM on a wedged peer: a stopped worker does not end the head; its API keeps answering, a
    generation request stalls, and only a step that has waited VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS kills
    the engine with vLLM's timeout."""
    pair = Pair(engines, model_dir)
    head = pair.head({"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "3"})
    worker = pair.worker()
    head.wait_ready()
    assert head.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})[0] == 200
    worker.signal(signal.SIGSTOP)
    try:
        time.sleep(4)  # idle: nothing waits on the worker, so nothing times out
        assert head.proc.poll() is None
        for path in ("/health", "/v1/models", "/metrics"):
            assert head.request("GET", path)[0] == 200, path
        started = time.monotonic()
        thread, out = _post_in_background(head, {"prompt": "hi", "max_tokens": 2}, timeout=20)
        thread.join(2)
        assert thread.is_alive(), f"the request finished against a stopped worker: {out}"
        assert head.wait_exit(8) == 1
        assert 3 <= time.monotonic() - started < 8
        thread.join(5)
        logs = head.logs()
        assert "TimeoutError: RPC call to sample_tokens timed out after 3 s (no answer from rank(s) [1])" in logs
        assert "no heartbeat" not in logs
    finally:
        worker.signal(signal.SIGCONT)


def test_the_worker_hang_fault_stalls_the_request_after_the_nth(engines, model_dir):
    pair = Pair(engines, model_dir)
    head = pair.head({"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "30"})
    worker = pair.worker({"DSPARK_SIM_FAULT": "worker_hangs_after_requests", "DSPARK_SIM_HANG_AFTER_REQUESTS": "2"})
    head.wait_ready()
    assert head.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})[0] == 200
    thread, out = _post_in_background(head, {"prompt": "hi", "max_tokens": 2}, timeout=30)
    thread.join(3)
    assert thread.is_alive(), f"the second request, which the worker stalled on, finished: {out}"
    assert head.get("/health")[0] == 200 and worker.proc.poll() is None and head.proc.poll() is None
    assert "EngineDeadError" not in head.logs()
