# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run of the runtime gate suite for one pair, on the control node (the ``gb10.dspark.runtime_gate`` action).

The gate role hands the action what the play knows (the pair, the gate config, each rank's connection settings,
the API key); this file writes the config into the pair's evidence folder (the pack's record of what was
asked), forgets the previous result, and runs the pytest-testinfra suite (roles/gate/files/runtime_gate) in this
process, handing it the config, the connection settings and the key as a pytest plugin object
(:class:`GateInput`): no second inventory, no key file, no second Python. The suite reaches each rank once
(testinfra's Ansible runner, one ``gb10.dspark.rank_audit`` per rank, over the play's connection settings) and
the head's API, writes ``runtime-gate.json`` for the evidence pack, and leaves its schema-3 document on the plugin
object, which is the verdict returned here. Every decision about the pair is the suite's
(``_runtime_gate.Gate``); nothing here judges a rank.
"""
from __future__ import annotations

import contextlib
import io
import os
from typing import Callable

from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import redact
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate

CONFIG_FILE = "runtime-gate-config.json"
OUTPUT_FILE = "runtime-gate.json"
INPUT_PLUGIN = "dspark_gate_input"  # the attribute by which the suite's conftest finds the object among pytest's plugins
LAST_WORDS = 15  # lines of the suite's output shown when it gave no verdict
# The options of gb10.dspark.runtime_gate: the action validates them, the module's doc stub declares them.
ARGUMENT_SPEC = {
    "pair": {"type": "str", "required": True},
    "folder": {"type": "path", "required": True},
    "config": {"type": "dict", "required": True},
    "hosts": {"type": "dict", "default": {}},
    "inventory": {"type": "str", "default": ""},
    "suite": {"type": "path", "required": True},
    "ansible_config": {"type": "str", "default": ""},
    "collections_path": {"type": "str", "default": ""},
}


class GateInput:
    """What the play hands the suite, in memory: the config (as the suite would read it from
    ``--gate-config``), each rank's connection settings (host -> ``ansible_host``, ``ansible_user``, ...; never a
    password) and the API key. The suite's conftest finds it among pytest's plugins by its ``dspark_gate_input``
    attribute (:data:`INPUT_PLUGIN`) and leaves its schema-3 document in :attr:`document`."""

    dspark_gate_input = True

    def __init__(self, config: dict, hosts: dict, api_key: str | None):
        self.config = config
        self.hosts = hosts
        self.api_key = api_key
        self.document: dict | None = None


def suite_args(suite: str) -> list[str]:
    return [suite, "-q", "-p", "no:cacheprovider"]


def run_suite(suite: str, given: GateInput) -> tuple[int, str]:
    """pytest.main on the suite in this process, with ``given`` as a plugin; returns (exit code, its output)."""
    import pytest  # the control node's (ansible_playbook_python's) pytest, with pytest-testinfra

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = pytest.main(suite_args(suite), plugins=[given])
    return int(code), out.getvalue()


def paths(folder: str) -> dict:
    return {"config": os.path.join(folder, CONFIG_FILE), "output": os.path.join(folder, OUTPUT_FILE)}


def last_words(output: str) -> str:
    return " | ".join(output.splitlines()[-LAST_WORDS:])


def summary_line(pair: str, document: dict, output: str) -> str:
    """The suite's own RUNTIME_GATE line, for the pair (a document missing its keys still gets one)."""
    shown = {"status": document.get("status"), "errors": document.get("errors") or []}
    return f"pair {pair}: {_runtime_gate.summary_line(shown, output)}"


def passed(document: dict) -> bool:
    return (document.get("schema_version") == _runtime_gate.SCHEMA_VERSION and document.get("status") == "PASS"
            and not document.get("errors"))


def run(pair: str, folder: str, config: dict, *, hosts: dict | None, inventory: str, suite: str,
        api_key: str | None = None, runner: Callable | None = None) -> dict:
    """Run the suite once and return ``{failed, passed, msg, line, document, output, config_file, rc}``: ``failed``
    when the suite gave no verdict, else the verdict in ``passed`` (a FAIL is a result, which the evidence pack
    keeps, and the role fails the pair on it afterwards).

    The suite reaches the ranks over ``hosts`` (host -> connection settings), or through ``inventory`` when the
    operator names one (dspark_gate_inventory). ``runner(suite, given) -> (code, output)`` runs it
    (:func:`run_suite`)."""
    where = paths(folder)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    try:
        os.unlink(where["output"])  # the evidence file of this run, or none: never a stale PASS
    except FileNotFoundError:
        pass
    full = {**config, "inventory": inventory, "output": where["output"]}
    write_json_atomic(where["config"], full)
    given = GateInput(full, {} if inventory else dict(hosts or {}), api_key)
    code, output = (runner or run_suite)(suite, given)
    secrets = [api_key] if api_key else []
    base = {"output": where["output"], "config_file": where["config"], "rc": code, "line": None}
    document = given.document
    if document is None:
        words = redact(last_words(output or ""), secrets)
        return {**base, "failed": True, "passed": False, "document": None,
                "msg": f"pair {pair}: the runtime gate suite gave no verdict (exit {code}): {words}"}
    document = document if isinstance(document, dict) else {"status": "FAIL", "errors": ["the result is not a mapping"]}
    line = summary_line(pair, document, where["output"])
    base["line"] = line
    if passed(document):
        return {**base, "failed": False, "passed": True, "document": document, "msg": line}
    errors = [str(e) for e in (document.get("errors") or [])] or [f"status {document.get('status')}"]
    return {**base, "failed": False, "passed": False, "document": document,
            "msg": redact("\n".join([line, f"pair {pair}: runtime gate FAIL", *errors]), secrets)}
