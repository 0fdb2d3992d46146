"""The runtime_gate action: skipped in check mode, the key taken from the task's variables (never an option) and
handed to the suite in memory, and the suite's document recorded for the evidence pack whether it says PASS or FAIL."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ansible_collections.gb10.dspark.plugins.action import runtime_gate as action
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _gate_run as G
from tests.unit.plugins.action._plugin import make_plugin

KEY = "sk-action-gate-0123456789"


def run(tmp_path, monkeypatch, document, task_vars=None, check_mode=False):
    seen = {}

    def suite(where, given):
        seen.update(key=given.api_key, hosts=given.hosts, suite=where,
                    env={k: action.os.environ.get(k) for k in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH")})
        Path(given.config["output"]).write_text(json.dumps(document))  # the suite's evidence file
        given.document = document
        return 0, ""

    monkeypatch.setattr(G, "run_suite", suite)
    monkeypatch.setattr(action.os, "environ", dict(os.environ))  # the worker's environment, not this process's
    args = {"pair": "sim01", "folder": str(tmp_path / "sim01"), "config": {"pair": "sim01"},
            "hosts": {"sim01-head": {"ansible_host": "10.0.0.1"}}, "suite": "/suite",
            "ansible_config": "/cfg/ansible.cfg", "collections_path": "/collections"}
    plugin = make_plugin(action.ActionModule, "gb10.dspark.runtime_gate", args, check_mode)
    plugin._templar.template.side_effect = lambda value, *a, **kw: value
    plugin.validate_argument_spec = lambda argument_spec: (None, {**{k: v.get("default") for k, v in argument_spec.items()}, **args})
    return plugin.run(task_vars={"inventory_hostname": "sim01-head", **(task_vars or {})}), seen


def test_check_mode_runs_nothing(tmp_path, monkeypatch):
    res, seen = run(tmp_path, monkeypatch, {}, check_mode=True)
    assert res["skipped"] and seen == {} and not (tmp_path / "sim01").exists()


def test_a_pass_records_the_document_and_the_config(tmp_path, monkeypatch):
    res, seen = run(tmp_path, monkeypatch, {"schema_version": 3, "status": "PASS", "errors": []})
    assert res["passed"] is True and not res.get("failed") and res["changed"] is False
    names = [f["name"] for f in res["ansible_facts"]["dspark_evidence_run_files"]]
    assert names == ["runtime-gate-config.json", "runtime-gate.json"]
    assert seen["key"] is None and seen["hosts"] == {"sim01-head": {"ansible_host": "10.0.0.1"}}
    assert seen["env"] == {"ANSIBLE_CONFIG": "/cfg/ansible.cfg", "ANSIBLE_COLLECTIONS_PATH": "/collections"}


def test_a_fail_is_recorded_too_and_the_key_comes_from_the_variables(tmp_path, monkeypatch):
    doc = {"schema_version": 3, "status": "FAIL", "errors": ["head: 401"]}
    res, seen = run(tmp_path, monkeypatch, doc, task_vars={"dspark_api_key": KEY})
    assert res["passed"] is False and not res.get("failed"), res
    assert "runtime-gate.json" in [f["name"] for f in res["ansible_facts"]["dspark_evidence_run_files"]]
    assert seen["key"] == KEY
    assert KEY not in json.dumps(res)
    assert all(KEY not in p.read_text() for p in (tmp_path / "sim01").iterdir())
