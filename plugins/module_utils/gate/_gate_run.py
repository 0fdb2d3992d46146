# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run of the runtime gate suite for one pair, on the control node (the ``gb10.dspark.runtime_gate`` action).

The gate role hands the action what the play knows (the pair, the gate config, the ranks' connection
settings); this file writes the config and the suite's inventory into the pair's evidence folder, forgets the
previous result, puts the API key (if any) in a private file for the suite's run only, runs the pytest-testinfra
suite (roles/gate/files/runtime_gate), and returns its verdict: the schema-3 document the suite wrote, or a
failure naming the suite's last words when it wrote none. Every decision about the pair is the suite's
(``_runtime_gate.Gate``); nothing here judges a rank.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Callable

from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic, write_text_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import redact
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate

CONFIG_FILE = "runtime-gate-config.json"
OUTPUT_FILE = "runtime-gate.json"
INVENTORY_FILE = "runtime-gate-inventory.yml"
KEY_FILE_ENV = "DSPARK_GATE_API_KEY_FILE"
KEY_FOLDER_SUFFIX = ".dspark-gate"  # the suite deletes a key folder with this suffix as soon as it has read the key
LAST_WORDS = 15  # lines of the suite's stdout and of its stderr shown when it wrote no result
# The options of gb10.dspark.runtime_gate: the action validates them, the module's doc stub declares them.
ARGUMENT_SPEC = {
    "pair": {"type": "str", "required": True},
    "folder": {"type": "path", "required": True},
    "config": {"type": "dict", "required": True},
    "hosts": {"type": "dict", "default": {}},
    "inventory": {"type": "str", "default": ""},
    "suite": {"type": "path", "required": True},
    "python": {"type": "path", "required": True},
    "ansible_config": {"type": "str", "default": ""},
    "collections_path": {"type": "str", "default": ""},
}


def paths(folder: str) -> dict:
    return {"config": os.path.join(folder, CONFIG_FILE), "output": os.path.join(folder, OUTPUT_FILE),
            "inventory": os.path.join(folder, INVENTORY_FILE)}


def inventory_text(hosts: dict) -> str:
    """The suite's inventory: each rank's connection settings only (the role passes no password)."""
    return json.dumps({"all": {"hosts": hosts}}, indent=2, sort_keys=True) + "\n"  # JSON is YAML


def suite_argv(python: str, suite: str, config_file: str) -> list[str]:
    return [python, "-m", "pytest", suite, "-q", "-p", "no:cacheprovider", "--gate-config", config_file]


def last_words(stdout: str, stderr: str) -> str:
    return " | ".join(stdout.splitlines()[-LAST_WORDS:] + stderr.splitlines()[-LAST_WORDS:])


def summary_line(pair: str, document: dict, output: str) -> str:
    """The suite's own RUNTIME_GATE line, for the pair (a document missing its keys still gets one)."""
    shown = {"status": document.get("status"), "errors": document.get("errors") or []}
    return f"pair {pair}: {_runtime_gate.summary_line(shown, output)}"


def passed(document: dict) -> bool:
    return (document.get("schema_version") == _runtime_gate.SCHEMA_VERSION and document.get("status") == "PASS"
            and not document.get("errors"))


def run(pair: str, folder: str, config: dict, *, hosts: dict | None, inventory: str, python: str, suite: str,
        env: dict, api_key: str | None = None, runner: Callable | None = None) -> dict:
    """Run the suite once and return ``{failed, passed, msg, line, document, output, config_file, rc}``: ``failed``
    when the suite wrote no readable result, else the verdict in ``passed`` (a FAIL is a result, which the
    evidence pack keeps, and the role fails the pair on it afterwards).

    ``hosts`` (host -> connection settings) is written as the suite's inventory unless ``inventory``
    names one already; ``env`` is the suite's environment (the key file's variable is added here)."""
    where = paths(folder)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    try:
        os.unlink(where["output"])  # a stale PASS must never be read
    except FileNotFoundError:
        pass
    if not inventory:
        write_text_atomic(where["inventory"], inventory_text(hosts or {}))
        inventory = where["inventory"]
    write_json_atomic(where["config"], {**config, "inventory": inventory, "output": where["output"]})
    key_dir = None
    suite_env = dict(env)
    suite_env.pop(KEY_FILE_ENV, None)
    try:
        if api_key:
            key_dir = tempfile.mkdtemp(suffix=KEY_FOLDER_SUFFIX)
            key_file = os.path.join(key_dir, "api-key")
            with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
                handle.write(api_key + "\n")
            suite_env[KEY_FILE_ENV] = key_file
        proc = (runner or subprocess.run)(suite_argv(python, suite, where["config"]), env=suite_env, capture_output=True,
                                          text=True, check=False, stdin=subprocess.DEVNULL)
    finally:
        if key_dir:
            shutil.rmtree(key_dir, ignore_errors=True)
    secrets = [api_key] if api_key else []
    base = {"output": where["output"], "config_file": where["config"], "rc": proc.returncode, "line": None}
    try:
        with open(where["output"], encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        words = redact(last_words(proc.stdout or "", proc.stderr or ""), secrets)
        return {**base, "failed": True, "passed": False, "document": None,
                "msg": f"pair {pair}: the runtime gate wrote no {where['output']} (exit {proc.returncode}): {words}"}
    except (OSError, ValueError) as exc:
        return {**base, "failed": True, "passed": False, "document": None,
                "msg": f"pair {pair}: the runtime gate's result {where['output']} cannot be read: {exc}"}
    document = document if isinstance(document, dict) else {"status": "FAIL", "errors": ["the result is not a mapping"]}
    line = summary_line(pair, document, where["output"])
    base["line"] = line
    if passed(document):
        return {**base, "failed": False, "passed": True, "document": document, "msg": line}
    errors = [str(e) for e in (document.get("errors") or [])] or [f"status {document.get('status')}"]
    return {**base, "failed": False, "passed": False, "document": document,
            "msg": redact("\n".join([line, f"pair {pair}: runtime gate FAIL", *errors]), secrets)}
