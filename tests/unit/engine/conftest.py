"""Fixtures for the engine stand-in tests: sys.path, free ports, engine processes, HTTP helpers.

Engines run as real processes (``sim/engine/bin/vllm serve ...``) on 127.0.0.1 with free
ports; every process started by a test is stopped (SIGTERM, then SIGKILL) by its fixture.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

ENGINE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "sim", "engine"))
if ENGINE_DIR not in sys.path:
    sys.path.insert(0, ENGINE_DIR)

VLLM = os.path.join(ENGINE_DIR, "bin", "vllm")
ENTRYPOINT = os.path.join(ENGINE_DIR, "bin", "dspark-entrypoint.sh")
SERVED = "deepseek-v4-flash-dspark"
PRODUCTION_CC = '{"mode":0,"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_implementation":"regular","cudagraph_strict":true}'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(engine, name, labels=""):
    """The value of one sample of ``name`` (whose labels include ``labels``) on the engine's /metrics."""
    status, body = engine.get("/metrics")
    assert status == 200
    match = re.search(rf"^{re.escape(name)}\{{[^}}]*{re.escape(labels)}[^}}]*\}} (\S+)$", body.decode(), re.M)
    assert match, f"{name}{{{labels}}} missing"
    return float(match.group(1))


def production_args(model_dir, *, port, master_port, nnodes=2, node_rank=0, max_model_len=327680):
    """The v026 production argv (docs/wrapper-reference.md §3.3) with a local host/port and model dir."""
    args = [model_dir, "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port),
            "--trust-remote-code", "--tensor-parallel-size", str(nnodes), "--pipeline-parallel-size", "1",
            "--kv-cache-dtype", "nvfp4_ds_mla", "--block-size", "256", "--max-model-len", str(max_model_len),
            "--max-num-seqs", "16", "--max-num-batched-tokens", "16384", "--gpu-memory-utilization", "0.835",
            "--enable-prefix-caching", "--speculative-config", '{"method":"dspark","num_speculative_tokens":6}',
            "--tokenizer-mode", "deepseek_v4", "--distributed-executor-backend", "mp",
            "--tool-call-parser", "deepseek_v4", "--enable-auto-tool-choice", "--reasoning-parser", "deepseek_v4",
            "--reasoning-config",
            '{"reasoning_parser":"deepseek_v4","reasoning_start_str":"<think>","reasoning_end_str":"</think>"}',
            "--default-chat-template-kwargs", '{"thinking":true}', "--enable-flashinfer-autotune",
            "--moe-backend", "flashinfer_b12x", "--compilation-config", PRODUCTION_CC,
            "--optimization-level", "2", "--performance-mode", "balanced", "--jit-monitor-mode", "error",
            "--kv-cache-memory-bytes", "15998753178", "--nnodes", str(nnodes), "--node-rank", str(node_rank),
            "--master-addr", "127.0.0.1", "--master-port", str(master_port)]
    return args + (["--headless"] if node_rank else [])


class EngineProc:
    """A running ``vllm serve`` stand-in with its output captured to files."""

    def __init__(self, args, env, workdir, name, port=None):
        self.port, self.name = port, name
        self.out_path = os.path.join(workdir, f"{name}.out")
        self.err_path = os.path.join(workdir, f"{name}.err")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("DSPARK_", "VLLM_", "NCCL_"))}
        full_env.update(env or {})
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, VLLM, "serve", *args], stdout=out, stderr=err,
                                         env=full_env, start_new_session=True)

    # ---- process -----------------------------------------------------------------------------
    @property
    def pid(self):
        return self.proc.pid

    def stdout(self):
        with open(self.out_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stderr(self):
        with open(self.err_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def logs(self):
        return self.stdout() + self.stderr()

    def wait_for(self, needle, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.logs():
                return
            if self.proc.poll() is not None and needle not in self.logs():
                raise AssertionError(f"{self.name} exited {self.proc.returncode} before logging {needle!r}:\n"
                                     f"{self.logs()[-3000:]}")
            time.sleep(0.02)
        raise AssertionError(f"{self.name} did not log {needle!r} within {timeout} s:\n{self.logs()[-3000:]}")

    def wait_exit(self, timeout=10.0):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout} s:\n{self.logs()[-3000:]}") from None

    def signal(self, signum):
        self.proc.send_signal(signum)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    # ---- HTTP --------------------------------------------------------------------------------
    def listening(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def wait_ready(self, timeout=10.0):
        self.wait_for("Application startup complete.", timeout)
        return self

    def request(self, method, path, body=None, headers=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        return resp.status, dict(resp.getheaders()), payload

    def get(self, path, **kw):
        status, _unused, payload = self.request("GET", path, **kw)
        return status, (json.loads(payload) if payload and payload[:1] in b"[{" else payload)

    def post(self, path, body, **kw):
        status, _unused, payload = self.request("POST", path, body, **kw)
        return status, json.loads(payload) if payload else None

    def stream(self, path, body, **kw):
        """SSE events of a streaming request, as parsed JSON (``"[DONE]"`` kept as a string)."""
        status, headers, payload = self.request("POST", path, body, **kw)
        assert status == 200, payload
        assert headers.get("content-type", "").startswith("text/event-stream")
        text = payload.decode()
        assert text.endswith("\n\n")
        events = []
        for block in text.split("\n\n")[:-1]:
            assert block.startswith("data: "), block
            data = block[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
        return events


@pytest.fixture
def engines(tmp_path):
    """Factory: ``engines(args, env=None, name="head", port=None)`` -> a started EngineProc."""
    started = []

    def start(args, env=None, name="engine", port=None):
        proc = EngineProc(args, env, str(tmp_path), name, port)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    return str(path)
