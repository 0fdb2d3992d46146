# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet audit runs on the ranks: it must not pull in the runtime gate (a 1000-line module of
another feature) for three small helpers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

COLLECTIONS = Path(__file__).resolve().parents[5] / "collections"
PACKAGE = "ansible_collections.gb10.dspark.plugins.module_utils"


def imported_after(module: str) -> list[str]:
    """The collection's module_utils a fresh interpreter holds after importing ``module``."""
    code = ("import importlib, json, sys; importlib.import_module(sys.argv[1]); "
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({PACKAGE + '.'!r}))))")
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    done = subprocess.run([sys.executable, "-c", code, f"{PACKAGE}.{module}"], env=env, capture_output=True,
                          text=True, check=True, timeout=60)
    return json.loads(done.stdout)


def test_audit_does_not_import_the_runtime_gate():
    loaded = imported_after("fleet._audit")
    assert f"{PACKAGE}.fleet._audit" in loaded
    assert f"{PACKAGE}.gate._runtime_gate" not in loaded


def test_the_check_would_see_the_gate():
    assert f"{PACKAGE}.gate._runtime_gate" in imported_after("gate._runtime_gate")
