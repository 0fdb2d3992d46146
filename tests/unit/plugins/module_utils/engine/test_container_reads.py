# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What runs inside the engine container: the gate (through ``docker exec``) and the fleet audit
(through the engine's exec API) run exactly the same argv."""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _container_reads as cr
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate as rg
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_identity as rg_identity
from tests.unit.plugins.module_utils.gate.test_runtime_gate import PIN, FakeRank, config

# The code as the gate ran it before it moved to _container_reads, character for character.
PID1_ENV_CODE = ("import json,sys;"
                 "p=tuple(a.encode() for a in sys.argv[1:]);"
                 "e=open('/proc/1/environ','rb').read().split(b'\\0');"
                 "print(json.dumps([x.decode('utf-8','replace') for x in e if x.startswith(p)]))")
SHA256_CODE = ("import hashlib,sys;"
               "print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())")


def test_the_gate_names_the_same_code():
    assert (rg.PYTHON, rg.PID1_ENV_CODE, rg.SHA256_CODE) == (cr.PYTHON, cr.PID1_ENV_CODE, cr.SHA256_CODE)
    assert (cr.PYTHON, cr.PID1_ENV_CODE, cr.SHA256_CODE) == ("/usr/bin/python3", PID1_ENV_CODE, SHA256_CODE)


def test_argv_helpers():
    assert cr.pid1_env_argv(["A=", "B="]) == ["/usr/bin/python3", "-c", PID1_ENV_CODE, "A=", "B="]
    assert cr.pid1_env_argv(("A=",)) == ["/usr/bin/python3", "-c", PID1_ENV_CODE, "A="]
    assert cr.sha256_argv("/opt/m.json") == ["/usr/bin/python3", "-c", SHA256_CODE, "/opt/m.json"]


def test_argv_helpers_are_what_collect_identity_runs():
    rank = FakeRank()
    rg_identity.collect_identity("head", rank, config())
    execs = [argv for argv in rank.calls if argv[:2] == ["docker", "exec"]]
    expected_before = [
        ["docker", "exec", "dspark_vllm", "/usr/bin/python3", "-c", PID1_ENV_CODE,
         "VLLM_USE_BREAKABLE_CUDAGRAPH=", "VLLM_DSV4_ENABLE_MULTI_STREAM="],
        ["docker", "exec", "dspark_vllm", "/usr/bin/python3", "-c", SHA256_CODE, PIN["runtime_manifest_path"]],
    ]
    assert execs == expected_before
    assert execs == [["docker", "exec", "dspark_vllm", *cr.pid1_env_argv([rg_identity.LEGACY_SELECTOR, rg_identity.MULTI_STREAM])],
                     ["docker", "exec", "dspark_vllm", *cr.sha256_argv(PIN["runtime_manifest_path"])]]
