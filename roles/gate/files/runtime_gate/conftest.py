# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pytest-testinfra plumbing of the schema-3 runtime gate (docs/wrapper-reference.md §5).

The gate role's action (``gb10.dspark.runtime_gate``, ``plugins/module_utils/gate/_gate_run.py``) runs this suite
in its own process, once per pair, handing it what the play knows as a plugin object (found by its
``dspark_gate_input`` attribute): the gate config, each rank's connection settings and the API key, all in
memory. The suite leaves its schema-3 document on that object, which is the task's verdict. An operator can also
run it by hand against an inventory of their own:

    python -m pytest <this dir> -q -p no:cacheprovider --gate-config <pair>/runtime-gate-config.json

(the config names the inventory; the API key, if any, is read from the file that ``DSPARK_GATE_API_KEY_FILE``
names, never from argv or the environment itself).

This file only moves bytes: it reads each rank once, through testinfra's Ansible runner and the fleet audit's
own collector (``gb10.dspark.rank_audit`` with its ``runtime`` section) - over the play's connection settings,
given to that one call as extra variables with the rank as its one-host inventory, or through the operator's
inventory - the head's API through the collection's one HTTP client (``_http.fetch_client``: no proxy, no
redirect followed), and hands both to ``_runtime_gate.Gate``, where every decision is made. The key is sent
only as ``Authorization: Bearer``.

At the end of the session the schema-3 document is written atomically to the config's ``output`` (the evidence
file) and one line is printed: ``RUNTIME_GATE status=PASS|FAIL errors=N output=<path>``.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

API_KEY_FILE_ENV = "DSPARK_GATE_API_KEY_FILE"  # a run by hand only; the action hands the key in memory
INPUT_PLUGIN = "dspark_gate_input"  # the attribute of the action's plugin object (_gate_run.INPUT_PLUGIN)
MODULE = "ansible_collections.gb10.dspark.plugins.module_utils.gate._runtime_gate"
HTTP_MODULE = "ansible_collections.gb10.dspark.plugins.module_utils.common._http"
_STATE = pytest.StashKey()


def pytest_addoption(parser):
    group = parser.getgroup("runtime_gate", "gb10.dspark schema-3 runtime gate")
    group.addoption("--gate-config", action="store", default=None, metavar="JSON",
                    help="gate configuration written by the gb10.dspark.gate role")


# ---- finding the collection -------------------------------------------------------------------
def _collection_candidates(raw: dict) -> list[str]:
    out = []
    if isinstance(raw.get("collections_path"), str):
        out.append(raw["collections_path"])
    out += [p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) if p]
    for parent in Path(__file__).absolute().parents:  # installed: …/ansible_collections/gb10/dspark/roles/…
        if parent.name == "ansible_collections":
            out.append(str(parent.parent))
    return out


def _import_gate_module(raw: dict):
    if MODULE in sys.modules:  # run by the action: its process has the collection loaded already
        return sys.modules[MODULE]
    for candidate in _collection_candidates(raw):
        module_file = Path(candidate, "ansible_collections", "gb10", "dspark", "plugins", "module_utils",
                           "gate",
                           "_runtime_gate.py")
        if module_file.is_file():
            if candidate not in sys.path:
                sys.path.insert(0, candidate)
            return importlib.import_module(MODULE)
    raise pytest.UsageError("cannot find the gb10.dspark collection: set collections_path in the gate config or "
                            "ANSIBLE_COLLECTIONS_PATH")


# ---- I/O handed to the gate -------------------------------------------------------------------
def make_fetch(base_url: str, api_key: str | None):
    """The gate's ``fetch(method, path, body, timeout) -> (status, bytes)``: the collection's one HTTP client
    (``_http.fetch_client``), imported once the collection is found. A redirect is an answer, never followed (the
    bearer token never goes elsewhere); no proxy; the key goes only into ``Authorization: Bearer``, and a key that
    cannot be a header fails each API step naming ``dspark_api_key``, never the value."""
    return importlib.import_module(HTTP_MODULE).fetch_client(base_url, api_key)


def read_rank(hostname: str, inventory: str, config: dict, prefixes: list[str], connection: dict | None = None) -> dict:
    """One rank as the fleet audit reads it: one ``gb10.dspark.rank_audit`` call through testinfra's
    Ansible runner, with its ``runtime`` section - the engine container, its image, the PID 1 entries of
    ``prefixes``, the manifest's sha256 inside the container and the log tail. ``connection`` (the play's
    connection settings for the rank) goes with the call as extra variables, the rank being its one-host
    inventory; without it, ``inventory`` is the operator's. The answer is read as UTF-8, which is how Ansible
    writes it on this machine (testinfra would otherwise ask the rank for its locale over a connection of its
    own). A call that fails is a record of that failure, never an exception."""
    from testinfra.utils.ansible_runner import AnsibleRunner

    where = f"{hostname}," if connection is not None else inventory
    args = {"rank": hostname, "container": config["container"], "manifest_path": config["manifest_path"],
            "runtime": {"log_tail": config["log_tail"], "env_prefixes": list(prefixes)}}
    options = {"extra_vars": connection} if connection else {}
    try:
        # become: the engine's env file is root's (0600) and so is the Docker socket.
        result = AnsibleRunner.get_runner(where).run_module(hostname, "gb10.dspark.rank_audit", json.dumps(args),
                                                            get_encoding=lambda: "utf-8", check=False, become=True,
                                                            **options)
    except Exception as exc:  # the call itself broke (ansible missing, ssh refused): the rank is unread
        result = {"failed": True, "msg": f"{type(exc).__name__}: {exc}"}
    runtime = (result.get("audit") or {}).get("runtime") if isinstance(result, dict) else None
    if not isinstance(result, dict) or result.get("failed") or not isinstance(runtime, dict):
        why = str((result.get("msg") if isinstance(result, dict) else None) or "no runtime section in the answer").strip()
        return {"errors": {"call": f"gb10.dspark.rank_audit on {hostname} failed: {why}"}}
    return runtime


def make_runners(rg, config: dict, hosts: dict | None = None) -> dict:
    """``run(argv)`` per rank, answering the gate's reads from that rank's one-call record. The
    ranks are read at the first read of either (the gate reads them after its API canaries, so the
    log tail holds a graph replay), both at once in two threads, bounded by the command timeout."""
    from concurrent.futures import ThreadPoolExecutor

    prefixes = [rg.LEGACY_SELECTOR, rg.MULTI_STREAM]
    futures: dict = {}
    records: dict = {}

    def start() -> None:
        pool = ThreadPoolExecutor(max_workers=len(rg.RANKS))
        for name in rg.RANKS:
            host = config[name]
            connection = dict(hosts[host]) if hosts and host in hosts else None
            futures[name] = pool.submit(read_rank, host, config["inventory"], config, prefixes, connection)
        pool.shutdown(wait=False)

    def runner(rank: str):
        def run(argv: list[str]) -> tuple[int, str, str]:
            if not futures:
                start()
            if rank not in records:
                try:
                    records[rank] = futures[rank].result(timeout=config["command_timeout"])
                except Exception as exc:  # timed out or broke: every read of the rank fails with the reason
                    records[rank] = {"errors": {"call": f"reading {config[rank]} failed: {type(exc).__name__} {exc}"}}
            return rg.recorded_run(records[rank], config["container"])(argv)
        return run

    return {rank: runner(rank) for rank in rg.RANKS}


def read_api_key(path: str | None) -> str | None:
    """For a run by hand: the key in the file at ``path`` (one line; the operator's file, left as it is), or None
    without a path or with an empty file."""
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise pytest.UsageError(f"cannot read the API key file {path} ({API_KEY_FILE_ENV}): {exc.strerror}") from None
    return text.strip() or None


# ---- session state ----------------------------------------------------------------------------
class GateState:
    def __init__(self, path: str | None, given=None):
        self.path = path
        self.given = given  # the action's plugin object, or None for a run by hand
        self.module = None
        self.gate = None
        self.config_errors: list[str] = []
        self.output: str | None = None
        self.raw: dict = {}
        self.api_key = given.api_key if given is not None else read_api_key(os.environ.get(API_KEY_FILE_ENV))
        self.line: str | None = None

    def setup(self) -> None:
        if self.given is not None:
            text = json.dumps(self.given.config).encode()
        else:
            try:
                text = Path(self.path).read_bytes()
            except OSError as exc:
                raise pytest.UsageError(f"cannot read --gate-config {self.path}: {exc}") from None
        try:
            raw = json.loads(text)
        except ValueError:
            raw = {}
        self.raw = raw if isinstance(raw, dict) else {}
        self.output = self.raw.get("output") if isinstance(self.raw.get("output"), str) else None
        self.module = _import_gate_module(self.raw)
        rg = self.module
        try:
            config = rg.load_config(text)
        except rg.ConfigError as exc:
            self.config_errors = [f"gate config: {problem}" for problem in exc.problems]
            return
        if self.given is None and not config["inventory"]:
            self.config_errors = ["gate config: inventory is empty (a run by hand names the inventory its rank "
                                  "calls use)"]
            return
        # the rank calls' ansible must be the one of the interpreter running this suite
        bindir = os.path.dirname(sys.executable)
        if os.path.exists(os.path.join(bindir, "ansible")):
            os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
        hosts = self.given.hosts if self.given is not None else None
        self.gate = rg.Gate(config, make_runners(rg, config, hosts), make_fetch(config["base_url"], self.api_key),
                            secrets=[self.api_key] if self.api_key else [])

    def document(self, exitstatus: int) -> dict:
        rg = self.module
        secrets = [self.api_key] if self.api_key else []
        if self.gate is None:
            return rg.failure_document(self.config_errors, self.raw.get("profile"),
                                       self.raw.get("expected_cudagraph_implementation"), secrets)
        document = self.gate.document()
        if document["status"] == "PASS" and int(exitstatus) != 0:
            document = rg.make_document(document["evidence"], [f"pytest exited with status {int(exitstatus)}"])
        return document


def _given(config):
    return next((p for p in config.pluginmanager.get_plugins() if getattr(p, INPUT_PLUGIN, False) is True), None)


def pytest_configure(config):
    path = config.getoption("--gate-config")
    given = _given(config)
    if not path and given is None:
        raise pytest.UsageError("--gate-config <json> is required")
    state = GateState(path, given)
    config.stash[_STATE] = state
    state.setup()


def pytest_collection_modifyitems(config, items):
    """A per-test limit above the gate's own I/O timeouts, if pytest-timeout is installed."""
    state = config.stash.get(_STATE, None)
    if state is None or not config.pluginmanager.hasplugin("timeout"):
        return
    limits = [state.raw.get(k) for k in ("command_timeout", "api_timeout", "retrieval_timeout")]
    limit = max([v for v in limits if isinstance(v, int) and not isinstance(v, bool)] + [600]) * 2 + 60
    for item in items:
        item.add_marker(pytest.mark.timeout(limit))


@pytest.fixture(scope="session")
def gate(pytestconfig):
    state = pytestconfig.stash[_STATE]
    if state.gate is None:
        pytest.fail("\n".join(state.config_errors) or "the runtime gate is not configured", pytrace=False)
    return state.gate


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    state = config.stash.get(_STATE, None)
    if state is None or state.module is None or config.option.collectonly:
        return
    document = state.document(exitstatus)
    output = state.output or "none"
    note = ""
    if state.output:
        try:
            state.module.write_json_atomic(state.output, document)
        except (OSError, ValueError) as exc:
            note = f"RUNTIME_GATE could not write {state.output}: {exc}"
            document = state.module.make_document(document["evidence"], [*document["errors"], note])
    else:
        note = "RUNTIME_GATE has no output path: nothing was written"
    state.line = state.module.summary_line(document, output) + (f"\n{note}" if note else "")
    if state.given is not None:
        state.given.document = document  # the verdict, handed to the action
    if document["status"] != "PASS":
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not config.pluginmanager.hasplugin("terminalreporter"):
        sys.stdout.write(state.line + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = config.stash.get(_STATE, None)
    if state is not None and state.line:
        terminalreporter.write_line(state.line)
