"""The engine stand-in (sim/engine) as a plain local process on 127.0.0.1, for unit tests of the
API clients (systems lanes). Not the simulator: no namespaces, no docker."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VLLM = REPO / "sim" / "engine" / "bin" / "vllm"
SERVED = "deepseek-v4-flash-dspark"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(workdir: Path, env_extra: dict[str, str], extra_args: tuple[str, ...] = (),
          speculative: bool = True) -> tuple[subprocess.Popen, object, str]:
    """Start the stand-in serving SERVED (with DSpark speculative decoding unless ``speculative`` is false,
    and ``extra_args`` such as ``--max-model-len``); returns (process, log, url)."""
    model = workdir / "model"
    model.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSPARK_", "VLLM_", "NCCL_"))}
    env.update(env_extra)
    log = open(workdir / "engine.log", "wb")  # noqa: SIM115 - closed by stop()
    spec = ["--speculative-config", '{"method":"dspark","num_speculative_tokens":6}'] if speculative else []
    proc = subprocess.Popen([sys.executable, str(VLLM), "serve", str(model), "--port", str(port), "--host",
                             "127.0.0.1", "--served-model-name", SERVED, *spec, *extra_args],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.close()
            raise AssertionError((workdir / "engine.log").read_text(errors="replace")[-2000:])
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=1) as resp:
                if resp.status == 200:
                    return proc, log, url
        except OSError:
            time.sleep(0.1)
    stop(proc, log)
    raise AssertionError("the engine stand-in did not come up within 30 s")


def stop(proc: subprocess.Popen, log) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    log.close()
