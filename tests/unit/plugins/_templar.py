"""Render templates with Ansible's own templar and the collection's plugins, in a separate
interpreter (the collection loader Ansible installs is process-wide): one helper for the filter
and lookup tests."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.unit.plugins.conftest import COLLECTIONS

_SCRIPT = r"""
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
catch = sys.argv[2] == "catch"
out = []
for variables, template in json.load(sys.stdin):
    # variables from vars files are trusted templates, as in a play
    variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in variables.items()}
    templar = Templar(loader=DataLoader(), variables=variables)
    trusted = (trust_as_template(template) if isinstance(template, str)
               else {k: trust_as_template(v) for k, v in template.items()})
    if not catch:
        out.append(templar.template(trusted))
        continue
    try:
        out.append({"value": templar.template(trusted)})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print(json.dumps(out))
"""


def render(jobs: list, catch: bool = False) -> list:
    """Each (variables, template) rendered: its value; with ``catch``, ``{"value": ...}`` or
    ``{"error": <exception class>, "message": ...}`` per job instead of one failure for all."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(COLLECTIONS), "catch" if catch else "raise"],
                          input=json.dumps(jobs), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
