"""Start and stop the lane's servers: the real vLLM (one process group) and the engine stand-in pair.

Every server is started in a new session (its own process group) and stopped by that group:
SIGTERM, then SIGKILL after a grace period. Each start registers the server with an ``atexit``
hook, so an interpreter that ends without the pytest finalizers (an error in a fixture, a
KeyboardInterrupt) still stops what it started; :func:`lane_processes` lists whatever still runs
from the lane's virtualenv, for the check that nothing is left.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tools.vllm_lane import install

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODEL_SCRIPT = HERE / "model.py"
WRAPPER = HERE / "vllm_main.py"
STANDIN_VLLM = REPO / "sim" / "engine" / "bin" / "vllm"
ENGINE_CONFTEST = REPO / "tests" / "unit" / "engine" / "conftest.py"

SERVED = "deepseek-v4-flash-dspark"  # the production name, so both servers echo the same model
MAX_MODEL_LEN = 4096
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
TOOL_PARSER = "hermes"
KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE: plenty for a 2-layer model, and small beside the simulator
STARTUP_TIMEOUT = 420.0  # below pytest's 600 s per test, so the log's tail is shown
STOP_GRACE = 20.0
# The stand-in's environment on a production pair (tests/fixtures/README.md).
STANDIN_ENV = {"VLLM_DSV4_ENABLE_MULTI_STREAM": "0", "NCCL_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_IB_HCA": "rocep1s0f0"}

_LIVE: list[Server] = []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def model_key() -> str:
    return hashlib.sha256(MODEL_SCRIPT.read_bytes()).hexdigest()[:16]


def ensure_model(venv: install.Venv, root: Path | None = None) -> tuple[Path, dict, float]:
    """(the model folder, its shape, seconds this call took): made with the lane's venv when the
    cache has no folder for the generator's current content. The folder appears only complete."""
    started = time.monotonic()
    root = root or install.cache_root()
    path = root / f"model-{model_key()}"
    if not (path / "lane-model.json").is_file():
        tmp = root / f"{path.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        done = subprocess.run([str(venv.python), "-P", str(MODEL_SCRIPT), str(tmp)], capture_output=True, text=True,
                              timeout=600, check=False)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"making the lane model exited {done.returncode}:\n{done.stderr[-3000:]}")
        shutil.rmtree(path, ignore_errors=True)
        os.rename(tmp, path)
    shape = json.loads((path / "lane-model.json").read_text())
    return path, shape, time.monotonic() - started


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DSPARK_", "NCCL_"))}
    env.update(extra)
    return env


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Server:
    """One started process (group) with its log, answering HTTP on ``url``."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    port: int
    proc: subprocess.Popen | None = None
    startup_s: float | None = None
    stopped: bool = False
    extra: list[Server] = field(default_factory=list)  # processes stopped after this one (a stand-in worker)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> Server:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        _LIVE.append(self)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, paths=("/health",), timeout: float = STARTUP_TIMEOUT) -> float:
        """Seconds from start until every path answered 200; RuntimeError with the log's tail if the
        process exits or the time runs out first."""
        started = time.monotonic()
        deadline = started + timeout
        pending = list(paths)
        while pending:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode} before it was ready:\n"
                                   f"{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} was not ready within {timeout:.0f} s:\n{self.log()[-4000:]}")
            if _status(self.url + pending[0]) == 200:
                pending.pop(0)
                continue
            time.sleep(0.25)
        self.startup_s = time.monotonic() - started
        return self.startup_s

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL to what is left after the grace period; then the
        processes stopped after it (a worker)."""
        if self.proc is not None and not self.stopped:
            pgid = self.proc.pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE
            while time.monotonic() < deadline and (self.proc.poll() is None or _group_alive(pgid)):
                time.sleep(0.1)
            if _group_alive(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.stopped = True
        for other in self.extra:
            other.stop()
        _LIVE[:] = [live for live in _LIVE if live is not self]


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - 127.0.0.1 only
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


atexit.register(stop_all)


def vllm_argv(venv: install.Venv, model: Path, port: int, api_key: str | None = None) -> list[str]:
    # -P: this folder is not put on sys.path, so its modules (server, model, report, ...) cannot shadow
    # anything vLLM imports
    argv = [str(venv.python), "-P", str(WRAPPER), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", SERVED, "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "bfloat16",
            "--speculative-config", json.dumps(SPECULATIVE, separators=(",", ":")),
            "--enable-auto-tool-choice", "--tool-call-parser", TOOL_PARSER]
    return argv + (["--api-key", api_key] if api_key else [])


def start_vllm(venv: install.Venv, model: Path, workdir: Path, name: str = "vllm",
               api_key: str | None = None) -> Server:
    """The real server, started and ready (``/health`` and ``/v1/models`` answered 200)."""
    port = free_port()
    env = _clean_env({"VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB), "VLLM_NO_USAGE_STATS": "1",
                      "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                      "PYTHONUNBUFFERED": "1"})
    server = Server(name, vllm_argv(venv, model, port, api_key), env, workdir / f"{name}.log", port).start()
    try:
        server.wait_ready(("/health", "/v1/models") if not api_key else ("/health",))
    except BaseException:
        server.stop()
        raise
    return server


def production_args():
    """``production_args`` of the stand-in tests (tests/unit/engine/conftest.py), loaded by path."""
    spec = importlib.util.spec_from_file_location("_dspark_engine_conftest", ENGINE_CONFTEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.production_args


def start_standin(workdir: Path, max_model_len: int = MAX_MODEL_LEN, env_extra: dict | None = None) -> Server:
    """The stand-in pair as two local processes (head, then headless worker) with the production
    argv; the returned head stops its worker after itself."""
    args = production_args()
    model = workdir / "standin-model"
    model.mkdir(parents=True, exist_ok=True)
    port, master = free_port(), free_port()
    env = _clean_env({**STANDIN_ENV, **(env_extra or {})})
    head = Server("stand-in head", [sys.executable, str(STANDIN_VLLM), "serve",
                                    *args(str(model), port=port, master_port=master, max_model_len=max_model_len)],
                  env, workdir / "standin-head.log", port)
    worker = Server("stand-in worker", [sys.executable, str(STANDIN_VLLM), "serve",
                                        *args(str(model), port=free_port(), master_port=master, node_rank=1,
                                              max_model_len=max_model_len)],
                    env, workdir / "standin-worker.log", 0)
    head.extra.append(worker)
    head.start()
    worker.start()
    try:
        head.wait_ready(("/health", "/v1/models"), timeout=60)
    except BaseException:
        head.stop()
        raise
    return head


def lane_processes(venv_path: Path) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose interpreter is the lane venv's python."""
    prefix = str(venv_path) + os.sep
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path("/proc", entry, "cmdline").read_bytes()
        except OSError:
            continue
        argv = raw.split(b"\0")
        if argv and argv[0].decode(errors="replace").startswith(prefix):
            found.append((int(entry), raw.replace(b"\0", b" ").decode(errors="replace").strip()))
    return found
