# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the runtime gate and the fleet audit run inside the engine container.

Both read the container's PID 1 environment (only the entries they name) and hash a file inside
the container with the same few lines of Python: ``_audit.collect`` runs them through the engine's
exec API (``_docker_engine.Engine.exec_run``, the docker SDK), and the gate's checks, written as
``docker exec`` commands, are answered from that record (``_runtime_gate.recorded_run``). The argv
built here is the one run INSIDE the container. Standard library only.
"""
from __future__ import annotations

from collections.abc import Iterable

# --- what runs inside the engine container (argv-safe: the code is one argv element) ----------
PYTHON = "/usr/bin/python3"
# Prints, as JSON, only the PID 1 environment entries that start with one of argv[1:]: the rest
# of the environment (which may hold VLLM_API_KEY) never leaves the container.
PID1_ENV_CODE = ("import json,sys;"
                 "p=tuple(a.encode() for a in sys.argv[1:]);"
                 "e=open('/proc/1/environ','rb').read().split(b'\\0');"
                 "print(json.dumps([x.decode('utf-8','replace') for x in e if x.startswith(p)]))")
SHA256_CODE = ("import hashlib,sys;"
               "print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())")


def pid1_env_argv(prefixes: Iterable[str]) -> list[str]:
    """The in-container argv printing the PID 1 environment entries that start with one of ``prefixes``."""
    return [PYTHON, "-c", PID1_ENV_CODE, *prefixes]


def sha256_argv(path: str) -> list[str]:
    """The in-container argv printing the sha256 (hex) of the file at ``path``."""
    return [PYTHON, "-c", SHA256_CODE, path]
