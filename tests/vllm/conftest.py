"""The real-vLLM lane (``make test-vllm``): session fixtures that install the pinned vLLM CPU build
(cached), make the tiny model (cached), serve it on 127.0.0.1 and stop it at the end, and the
hooks that write ``artifacts/reports/VLLM.md`` when ``DSPARK_VLLM_REPORT`` names it.

Everything that installs, makes or serves lives in ``tools/vllm_lane``; these fixtures only call it.
Server logs are kept in ``artifacts/vllm-lane/`` for a look after a failure.
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT / "collections", ROOT):  # the collection, tools.vllm_lane and tests.support
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from tests.support.reliability import Observed, outcome_of  # noqa: E402
from tools.vllm_lane import install, report, server  # noqa: E402

LANE = report.Lane()
LOGS = ROOT / "artifacts" / "vllm-lane"
REPORT_ENV = "DSPARK_VLLM_REPORT"
GATE_CONFTEST = ROOT / "roles" / "gate" / "files" / "runtime_gate" / "conftest.py"
_STARTED = time.monotonic()


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass
class Real:
    """The running real server."""

    url: str
    model: str
    window: int
    model_dir: Path
    venv: install.Venv
    server: server.Server

    def log(self) -> str:
        return self.server.log()

    def logged_kv_tokens(self) -> int | None:
        """The KV cache size the engine logged at start-up (``CPU KV cache size: N tokens``)."""
        match = re.search(r"KV cache size: ([\d,]+) tokens", self.log())
        return int(match.group(1).replace(",", "")) if match else None


# ---- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="session", autouse=True)
def _no_process_left():
    """Last to finish: every server the lane started is stopped, and no process of the lane's
    virtualenv is left running (a leftover fails the session, after being killed)."""
    yield
    server.stop_all()
    venv_path = install.cache_root() / f"venv-{install.venv_key()}"
    left = server.lane_processes(venv_path)
    LANE.leftovers = [f"{pid} {cmd[:120]}" for pid, cmd in left]
    for pid, _unused in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes of the lane's vLLM were still running after the session: {left}"


@pytest.fixture(scope="session")
def lane_venv() -> install.Venv:
    venv = install.ensure(say=_say)
    LANE.versions = dict(venv.versions)
    LANE.install = {"path": str(venv.path), "fresh": venv.fresh, "seconds": venv.seconds,
                    "install_seconds": venv.install_seconds}
    return venv


@pytest.fixture(scope="session")
def lane_model(lane_venv) -> Path:
    path, shape, seconds = server.ensure_model(lane_venv)
    LANE.model = {"path": str(path), "shape": shape, "seconds": seconds}
    return path


@pytest.fixture(scope="session")
def real_started_early(request, lane_venv, lane_model):
    """The start of the session's real server (``real``), begun in a thread when a test of the session uses it: a
    fixture that starts another server (test_api_key's keyed one) asks for this first, so that the two cold starts
    (most of the lane's time) run side by side. ``real`` takes the started server; one it never took (the session
    stopped first) is stopped here."""
    pending: dict = {}
    if any("real" in item.fixturenames for item in request.session.items):
        pool = ThreadPoolExecutor(max_workers=1)
        pending["real"] = pool.submit(server.start_vllm, lane_venv, lane_model, LOGS, name="vllm")
        pool.shutdown(wait=False)
    yield pending
    left = pending.pop("real", None)
    if left is not None:
        try:
            left.result().stop()
        except Exception:  # noqa: BLE001 - its start failed: nothing runs
            pass


@pytest.fixture(scope="session")
def real(real_started_early, lane_venv, lane_model) -> Real:
    """The real vLLM server, without an API key, for the whole session."""
    srv = real_started_early.pop("real").result()
    found = Real(srv.url, server.SERVED, server.MAX_MODEL_LEN, lane_model, lane_venv, srv)
    LANE.servers["real vLLM server"] = {"argv": [Path(a).name if a.startswith("/") else a for a in srv.argv],
                                        "startup_s": srv.startup_s,
                                        "notes": f"KV cache {found.logged_kv_tokens()} tokens (its log)"}
    yield found
    srv.stop()


@pytest.fixture(scope="session")
def standin():
    """The engine stand-in pair (head and headless worker) as local processes, window 4096."""
    head = server.start_standin(LOGS)
    LANE.servers["stand-in pair"] = {"startup_s": head.startup_s,
                                     "notes": "sim/engine/bin/vllm serve, production argv, --max-model-len 4096"}
    yield head
    head.stop()


def _load_by_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def gate_fetch():
    """The gate role's own ``make_fetch(base_url, api_key)`` (roles/gate/files/runtime_gate/conftest.py)."""
    return _load_by_path("_dspark_gate_conftest", GATE_CONFTEST).make_fetch


@pytest.fixture(scope="session")
def lane() -> report.Lane:
    """What this run saw, for the report."""
    return LANE


@pytest.fixture(scope="session")
def lane_logs() -> Path:
    return LOGS


@pytest.fixture
def note(request):
    """``note(text)``: what the test saw, shown in the report's row."""
    return lambda text: LANE.note(request.node.nodeid, text)


# ---- the report ----------------------------------------------------------------------------------
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        function = getattr(item, "function", None)
        doc = (function.__doc__ or "").strip() if function is not None else ""
        LANE.docs[item.nodeid] = " ".join(doc.split("\n\n")[0].split())


def pytest_runtest_logreport(report):
    outcome = outcome_of(report)
    if outcome is None:
        return
    prior = next((o for o in LANE.outcomes if o.nodeid == report.nodeid), None)
    if prior is None:
        LANE.outcomes.append(Observed(report.nodeid, outcome, report.duration))
    elif outcome in ("failed", "error") and prior.outcome not in ("failed", "error"):
        prior.outcome = outcome


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get(REPORT_ENV)
    if not target or not LANE.outcomes:
        return
    LANE.session_s = time.monotonic() - _STARTED
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], text=True,
                            capture_output=True, check=False).stdout.strip() or "unknown"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(report.render(LANE, when=when, command="make test-vllm", commit=commit))
