# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The schema-3 runtime gate's decision logic, against real stand-in engine output where it matters.

The logs and API answers under tests/fixtures/standin-{logs,api} were produced by running the
simulator's engine stand-in locally (tests/fixtures/README.md says how).
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate as rg
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_api as rg_api
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_logs as rg_logs
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_identity as rg_identity
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_base as rg_base
from ansible_collections.gb10.dspark.plugins.module_utils.common import _secrets

REPO = Path(__file__).resolve().parents[5]
COLLECTIONS = REPO / "collections"
FIXTURES = REPO / "tests" / "fixtures"
LOGS = FIXTURES / "standin-logs"
API = FIXTURES / "standin-api"
SUITE = REPO / "roles" / "gate" / "files" / "runtime_gate"

PIN = {
    "release": "test-v026",
    "image_tag": "dspark-r0b0tlab:production-v026",
    "image_id": "sha256:" + "a" * 64,
    "image_manifest_digest": None,
    "image_architecture": "arm64",
    "vllm_version": "0.26.0+dspark.sm121.3",
    "integrated_vllm_commit": "fbad93432ebf60c8345397b3032fe03bf5d239cc",
    "source_revision": "866b41006bb272ea893bd8288400ebbea8bfbc37",
    "cudagraph_selector": "native-v1",
    "model_id": "deepseek-ai/DeepSeek-V4-Flash-0731",
    "model_revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
    "model_revision_marker": ".r0b0tlab-model-revision",
    "model_shard_count": 48,
    "model_config": {"model_type": "deepseek_v4"},
    "runtime_manifest_path": "/opt/r0b0tlab/runtime-manifest.json",
    "runtime_manifest_sha256": "b" * 64,
    "kv_cache_dtype": "nvfp4_ds_mla",
    "speculative_method": "dspark",
    "speculative_tokens": 6,
    "gpu_compute_capability": "12.1",
}
LABELS = {
    "org.opencontainers.image.revision": PIN["source_revision"],
    "io.r0b0tlab.model.revision": PIN["model_revision"],
    "io.r0b0tlab.vllm.package.version": PIN["vllm_version"],
    "io.r0b0tlab.vllm.integrated.commit": PIN["integrated_vllm_commit"],
    "io.r0b0tlab.cudagraph.selector": "native-v1",
    "io.r0b0tlab.kv-cache.dtype": "nvfp4_ds_mla",
    "io.r0b0tlab.speculative.method": "dspark",
    "io.r0b0tlab.speculative.tokens": "6",
}
PROD_CC = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_implementation": "regular",
           "cudagraph_strict": True}
PROD_CC_TEXT = json.dumps(PROD_CC, separators=(",", ":"))
SECRET = "sk-gate-test-7f3a9c"

SPEC_IDENTITY_KEYS = {
    "container_id", "image_id", "image_architecture", "source_revision", "model_revision", "vllm_version",
    "integrated_vllm_commit", "cudagraph_implementation", "cudagraph_mode_expected", "enforce_eager",
    "serialized_compilation_config", "command_sha256", "compilation_config_present", "optimization_level",
    "optimization_level_present", "performance_mode", "performance_mode_present", "legacy_selector_pid1_entries",
    "dsv4_multi_stream_pid1_entries", "runtime_audit_manifest_sha256", "runtime_audit_manifest_read_only",
    "label_mismatches", "cudagraph_mode",
}


def _bare(errors: list[str]) -> list[str]:
    """Errors without the offending log line they quote (asserted separately)."""
    return [e.split(" (log: ")[0] for e in errors]


def _assess(rank: str, text: str, cfg: dict) -> tuple[dict, list[str]]:
    section, errors = rg_logs.assess_logs(rank, text, cfg)
    for e in errors:
        if " (log: " in e:
            quoted = e.split(" (log: ", 1)[1].rstrip(")")
            assert quoted in text or quoted == "?", f"quoted log line not from the log: {quoted!r}"
    return section, _bare(errors)


def raw_config(**changes) -> dict:
    cfg = {
        "pair": "p01", "head": "p01-head", "worker": "p01-worker", "inventory": "/inv/hosts.yml",
        "container": "dspark_vllm", "base_url": "http://10.0.0.1:8888", "model": "deepseek-v4-flash-dspark",
        "pin": copy.deepcopy(PIN), "profile": "production", "expected_cudagraph_implementation": "regular",
        "expected_cudagraph_mode": "FULL_DECODE_ONLY", "expected_compilation_config": dict(PROD_CC),
        "optimization_level": 2, "performance_mode": "balanced", "manifest_path": PIN["runtime_manifest_path"],
        "manifest_sha256": PIN["runtime_manifest_sha256"], "check_architecture": True,
        "output": "/evidence/p01/runtime-gate.json",
    }
    cfg.update(changes)
    return cfg


def config(**changes) -> dict:
    return rg.check_config(raw_config(**changes))


def serve_argv(rank: int = 0, cc: str = PROD_CC_TEXT, extra: tuple = ()) -> list[str]:
    argv = ["vllm", "serve", "/model", "--served-model-name", "deepseek-v4-flash-dspark", "--tensor-parallel-size", "2",
            "--kv-cache-dtype", "nvfp4_ds_mla", "--speculative-config", '{"method":"dspark","num_speculative_tokens":6}',
            "--compilation-config", cc, "--optimization-level", "2", "--performance-mode", "balanced",
            "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "10.0.1.1", "--master-port", "25000"]
    return argv + (["--headless"] if rank else ["--host", "0.0.0.0", "--port", "8888"]) + list(extra)


def container(**changes) -> dict:
    obj = {
        "Id": "c" * 64, "Image": PIN["image_id"], "State": {"Running": True, "Status": "running"},
        "Path": "/usr/local/bin/dspark-entrypoint.sh", "Args": serve_argv(),
        "Mounts": [{"Destination": "/model", "RW": False},
                   {"Destination": PIN["runtime_manifest_path"], "RW": False}],
    }
    obj.update(changes)
    return obj


def image(**changes) -> dict:
    obj = {"Id": PIN["image_id"], "Architecture": "arm64", "Config": {"Labels": dict(LABELS)}}
    obj.update(changes)
    return obj


class FakeRank:
    """A rank's ``run(argv)``: answers the gate's docker commands and records them."""

    def __init__(self, logs: str = "", *, container_obj=None, image_obj=None, environ=None,
                 manifest_sha=PIN["runtime_manifest_sha256"], fail: dict | None = None, stderr_logs: str = ""):
        self.container = container_obj if container_obj is not None else container()
        self.image = image_obj if image_obj is not None else image()
        self.environ = environ if environ is not None else ["PATH=/usr/bin", "VLLM_DSV4_ENABLE_MULTI_STREAM=0",
                                                            f"VLLM_API_KEY={SECRET}"]
        self.manifest_sha = manifest_sha
        self.logs, self.stderr_logs = logs, stderr_logs
        self.fail = fail or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        assert all(isinstance(a, str) for a in argv)
        key = " ".join(argv[:2])
        if key in self.fail:
            return self.fail[key]
        if argv[:3] == ["docker", "container", "inspect"]:
            return 0, json.dumps([self.container]), ""
        if argv[:3] == ["docker", "image", "inspect"]:
            return 0, json.dumps([self.image] if isinstance(self.image, dict) else self.image), ""
        if argv[:2] == ["docker", "exec"]:
            assert argv[3] == rg.PYTHON and argv[4] == "-c"
            if argv[5] == rg.PID1_ENV_CODE:
                prefixes = tuple(argv[6:])
                return 0, json.dumps([e for e in self.environ if e.startswith(prefixes)]), ""
            assert argv[5] == rg.SHA256_CODE and argv[6] == PIN["runtime_manifest_path"]
            return 0, self.manifest_sha + "\n", ""
        if argv[:2] == ["docker", "logs"]:
            assert argv[2:4] == ["--tail", "20000"]
            return 0, self.logs, self.stderr_logs
        raise AssertionError(f"unexpected command {argv}")


def api_fixture(name: str) -> dict:
    return json.loads((API / f"{name}.json").read_text())


def log_fixture(name: str) -> str:
    return (LOGS / f"{name}.log").read_text(encoding="utf-8")


class FakeApi:
    """The head's API answering from the captured stand-in answers."""

    def __init__(self, prefix: str = "regular", status: int = 200, overrides: dict | None = None):
        self.prefix, self.status, self.overrides = prefix, status, overrides or {}
        self.calls: list[tuple[str, str, dict | None, float]] = []

    def __call__(self, method, path, body, timeout):
        request = json.loads(body) if body is not None else None
        self.calls.append((method, path, request, timeout))
        if path == "/v1/models":
            name = "models"
        else:
            content = request["messages"][0]["content"]
            name = "tool" if "tools" in request else "retrieval" if rg_api.RETRIEVAL_NEEDLE in content else "semantic"
        if name in self.overrides:
            return self.overrides[name]
        return self.status, json.dumps(api_fixture(f"{self.prefix}-{name}")).encode()


def passing_gate(**kw) -> rg.Gate:
    head = kw.pop("head", None) or FakeRank(log_fixture("head-regular"))
    worker = kw.pop("worker", None) or FakeRank(log_fixture("worker-regular"),
                                                container_obj=container(Args=serve_argv(1)))
    return rg.Gate(kw.pop("config", None) or config(), {"head": head, "worker": worker}, kw.pop("fetch", None) or FakeApi(),
                   **kw)


# ================================================================================================
# configuration
# ================================================================================================
def test_config_fills_defaults_and_keeps_values():
    cfg = config()
    assert (cfg["command_timeout"], cfg["api_timeout"], cfg["retrieval_timeout"], cfg["log_tail"]) == (60, 300, 600,
                                                                                                       20000)
    assert cfg["expected_compilation_config"] == PROD_CC and cfg["collections_path"] is None


def test_config_lists_every_problem():
    raw = raw_config(optimization_level=True, check_architecture="yes", extra=1)
    del raw["model"]
    with pytest.raises(rg.ConfigError) as err:
        rg.check_config(raw)
    text = str(err.value)
    for part in ("model is missing", "optimization_level must be a int", "check_architecture must be a bool",
                 "unknown keys: extra"):
        assert part in text


@pytest.mark.parametrize("changes, message", [
    ({"expected_cudagraph_implementation": "auto"}, "expected_cudagraph_implementation 'auto'"),
    ({"expected_cudagraph_mode": "NONE"}, "expected_cudagraph_mode 'NONE'"),
    ({"optimization_level": 1}, "optimization_level 1 is not one of 2, 3"),
    ({"performance_mode": "fast"}, "performance_mode 'fast'"),
    ({"manifest_sha256": "B" * 64}, "manifest_sha256 must be 64 lowercase hex"),
    ({"manifest_path": "opt/x.json"}, "manifest_path must be absolute"),
    ({"api_timeout": 0}, "api_timeout must be a positive integer"),
    ({"expected_compilation_config": dict(PROD_CC, cudagraph_mode="PIECEWISE")},
     "expected_compilation_config.cudagraph_mode is 'PIECEWISE' but expected_cudagraph_mode is 'FULL_DECODE_ONLY'"),
    ({"expected_cudagraph_implementation": "breakable"},
     "expected_compilation_config.cudagraph_implementation is 'regular' but expected_cudagraph_implementation"),
    ({"pin": dict(PIN, image_id="latest")}, "dspark_pin.image_id"),
])
def test_config_refuses_bad_values(changes, message):
    with pytest.raises(rg.ConfigError) as err:
        config(**changes)
    assert message in str(err.value)


def test_load_config_is_strict_json():
    good = json.dumps(raw_config())
    assert rg.load_config(good)["pair"] == "p01"
    with pytest.raises(rg.ConfigError, match="duplicate key"):
        rg.load_config(good[:-1] + ', "pair": "p02"}')
    with pytest.raises(rg.ConfigError, match="not a finite number"):
        rg.load_config(good[:-1] + ', "api_timeout": NaN}')


# ================================================================================================
# the command
# ================================================================================================
def test_command_tokens_keep_a_direct_argv_intact():
    tokens = rg_identity.command_tokens("/entry.sh", serve_argv())
    assert tokens[0] == "/entry.sh" and PROD_CC_TEXT in tokens
    assert rg_identity.parse_compilation_config(tokens) == PROD_CC
    # the spec's space-joined record of the command
    assert rg_identity.command_string("/entry.sh", ["a", "b c"]) == "/entry.sh a b c"


def test_command_tokens_split_a_bash_script_shell_style():
    script = ('export CUDA_HOME=/usr/local/cuda; VLLM_BIN=/usr/local/bin/vllm; exec "$VLLM_BIN" serve /model '
              f"--compilation-config '{PROD_CC_TEXT}' --optimization-level 2 --performance-mode balanced")
    tokens = rg_identity.command_tokens("/usr/local/bin/dspark-entrypoint.sh", ["bash", "-lc", script])
    assert tokens[:3] == ["/usr/local/bin/dspark-entrypoint.sh", "bash", "-lc"]
    assert rg_identity.parse_compilation_config(tokens) == PROD_CC
    assert rg_identity.flag_check(tokens, "--optimization-level", "-O", 2) == (2, True)
    with pytest.raises(rg_base.GateError, match="cannot be tokenised"):
        rg_identity.command_tokens("/bin/sh", ["-c", "vllm serve --compilation-config '{\"mode\":0}"])


def test_bash_without_c_is_not_a_script():
    tokens = rg_identity.command_tokens("bash", ["-l", "/run.sh", "--flag"])
    assert tokens == ["bash", "-l", "/run.sh", "--flag"]


@pytest.mark.parametrize("args, message", [
    (["serve"], "no --compilation-config"),
    (["--compilation-config", PROD_CC_TEXT, "--compilation-config", PROD_CC_TEXT], "2 times"),
    (["--compilation-config", PROD_CC_TEXT, "-cc", PROD_CC_TEXT], "2 times"),
    (["--compilation_config", PROD_CC_TEXT, "--compilation-config=" + PROD_CC_TEXT], "2 times"),
    (["--compilation-config", PROD_CC_TEXT, "-cc.cudagraph_mode=FULL"], "2 times"),
    (["--compilation-config"], "has no value"),
    (["--compilation-config", "--optimization-level", "2"], "has no value"),
    (["-cc.cudagraph_mode=FULL_DECODE_ONLY"], "dotted key=value form"),
    (["--compilation-config", '{"mode":0,"mode":3}'], "duplicate key"),
    (["--compilation-config", '{"mode":NaN}'], "not a finite number"),
    (["--compilation-config", "[1]"], "not a JSON object"),
    (["--compilation-config", "{mode:0}"], "not strict JSON"),
])
def test_compilation_config_must_appear_exactly_once_as_strict_json(args, message):
    with pytest.raises(rg_base.GateError, match=re.escape(message)):
        rg_identity.parse_compilation_config(["vllm", *args])


@pytest.mark.parametrize("args", [
    ["--compilation-config", PROD_CC_TEXT], ["--compilation-config=" + PROD_CC_TEXT],
    ["--compilation_config", PROD_CC_TEXT], ["-cc", PROD_CC_TEXT], ["-cc=" + PROD_CC_TEXT],
])
def test_compilation_config_spellings(args):
    assert rg_identity.parse_compilation_config(["vllm", "serve", *args]) == PROD_CC


def test_config_covers_allows_a_superset_only():
    assert rg_identity.config_covers(PROD_CC, PROD_CC)
    assert rg_identity.config_covers(dict(PROD_CC, max_cudagraph_capture_size=112), PROD_CC)
    assert not rg_identity.config_covers({k: v for k, v in PROD_CC.items() if k != "cudagraph_strict"}, PROD_CC)
    assert not rg_identity.config_covers(dict(PROD_CC, cudagraph_mode="PIECEWISE"), PROD_CC)
    assert not rg_identity.config_covers(dict(PROD_CC, cudagraph_strict=1), PROD_CC)  # true is not 1
    assert rg_identity.config_covers(dict(PROD_CC, mode=0.0), PROD_CC)  # 0 == 0.0 as JSON numbers


@pytest.mark.parametrize("args, expected", [
    (["--optimization-level", "2"], (2, True)),
    (["--optimization-level=2"], (2, True)),
    (["--optimization_level", "2"], (2, True)),
    (["-O2"], (2, True)),
    (["-O", "2"], (2, True)),
    (["-O=2"], (2, True)),
    (["--optimization-level", "3"], (3, False)),
    (["--optimization-level", "2", "-O3"], (3, False)),
    (["--optimization-level", "23"], (23, False)),
    ([], (None, False)),
    (["--optimization-level"], (None, False)),
])
def test_optimization_level(args, expected):
    assert rg_identity.flag_check(["vllm", "serve", *args, "--x"], "--optimization-level", "-O", 2) == expected


def test_performance_mode():
    assert rg_identity.flag_check(["--performance-mode", "balanced"], "--performance-mode", None, "balanced") == ("balanced",
                                                                                                         True)
    assert rg_identity.flag_check(["--performance-mode", "throughput"], "--performance-mode", None, "balanced") == (
        "throughput", False)
    assert rg_identity.flag_check(["--performance-mode-x", "balanced"], "--performance-mode", None, "balanced") == (None,
                                                                                                           False)


def test_enforce_eager_is_the_last_word():
    assert rg_identity.enforce_eager_of(["--enforce-eager"]) is True
    assert rg_identity.enforce_eager_of(["--enforce-eager", "--no-enforce-eager"]) is False
    assert rg_identity.enforce_eager_of(["--enforce_eager"]) is True
    assert rg_identity.enforce_eager_of(["serve"]) is False


def test_api_key_values_are_redacted():
    """The gate redacts its command tokens by the collection's one variable rule (``_secrets``)."""
    assert rg.redact_document is _secrets.redact_document and not hasattr(rg, "redact_tokens")
    tokens = ["vllm", "--api-key", SECRET, f"--api_key={SECRET}", f"VLLM_API_KEY={SECRET}", "--port", "8888"]
    out = rg.redact_document(tokens)
    assert SECRET not in " ".join(out)
    assert out == ["vllm", "--api-key", rg.REDACTED, f"--api_key={rg.REDACTED}", f"VLLM_API_KEY={rg.REDACTED}",
                   "--port", "8888"]
    assert tokens[2] == SECRET  # the input is not changed


# ================================================================================================
# identity pieces
# ================================================================================================
def test_label_mismatches_against_the_pin():
    assert rg_identity.label_mismatches(LABELS, PIN) == {}
    labels = dict(LABELS, **{"io.r0b0tlab.speculative.tokens": "7"})
    del labels["io.r0b0tlab.cudagraph.selector"]
    assert rg_identity.label_mismatches(labels, PIN) == {
        "io.r0b0tlab.speculative.tokens": {"expected": "6", "actual": "7"},
        "io.r0b0tlab.cudagraph.selector": {"expected": "native-v1", "actual": None},
    }
    assert len(rg_identity.label_mismatches(None, PIN)) == 8


def test_pid1_rules():
    legacy, multi = rg_identity.pid1_env_entries(["A=1", "VLLM_DSV4_ENABLE_MULTI_STREAM=0"])
    assert (legacy, multi) == ([], ["VLLM_DSV4_ENABLE_MULTI_STREAM=0"])
    assert rg_identity.pid1_errors("head", legacy, multi) == []
    legacy, multi = rg_identity.pid1_env_entries(["VLLM_USE_BREAKABLE_CUDAGRAPH=0", "VLLM_DSV4_ENABLE_MULTI_STREAM=0"])
    assert rg_identity.pid1_errors("worker", legacy, multi) == [
        "worker PID 1 retains legacy CUDA-graph selector: VLLM_USE_BREAKABLE_CUDAGRAPH=0"]
    for entries in ([], ["VLLM_DSV4_ENABLE_MULTI_STREAM=1"], ["VLLM_DSV4_ENABLE_MULTI_STREAM="],
                    ["VLLM_DSV4_ENABLE_MULTI_STREAM=0", "VLLM_DSV4_ENABLE_MULTI_STREAM=0"]):
        errors = rg_identity.pid1_errors("head", *rg_identity.pid1_env_entries(entries))
        assert len(errors) == 1 and errors[0].startswith("head PID 1 does not pin compile-safe DSV4 streams")
    # a lookalike name is not the selector
    assert rg_identity.pid1_env_entries(["XVLLM_USE_BREAKABLE_CUDAGRAPH=1", "VLLM_USE_BREAKABLE_CUDAGRAPHX=1"])[0] == []


def test_pid1_answer_is_a_strict_list_of_strings():
    assert rg_identity.parse_pid1_answer('["A=1"]\n') == ["A=1"]
    for bad in ('{"A": 1}', "[1]", "not json"):
        with pytest.raises(rg_base.GateError):
            rg_identity.parse_pid1_answer(bad)


def test_pid1_code_prints_only_the_asked_entries(tmp_path):
    environ = tmp_path / "environ"
    environ.write_bytes(b"\0".join([b"PATH=/bin", f"VLLM_API_KEY={SECRET}".encode(), b"VLLM_DSV4_ENABLE_MULTI_STREAM=0",
                                    b"VLLM_USE_BREAKABLE_CUDAGRAPH=1"]) + b"\0")
    code = rg.PID1_ENV_CODE.replace("/proc/1/environ", str(environ))
    out = subprocess.run([sys.executable, "-c", code, rg_identity.LEGACY_SELECTOR, rg_identity.MULTI_STREAM], capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == ["VLLM_DSV4_ENABLE_MULTI_STREAM=0", "VLLM_USE_BREAKABLE_CUDAGRAPH=1"]
    assert SECRET not in out


def test_sha256_code(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_bytes(b'{"a": 1}\n')
    out = subprocess.run([sys.executable, "-c", rg.SHA256_CODE, str(target)], capture_output=True, text=True,
                         check=True).stdout
    assert rg_identity.parse_sha256_answer(out) == hashlib.sha256(b'{"a": 1}\n').hexdigest()
    with pytest.raises(rg_base.GateError):
        rg_identity.parse_sha256_answer("No such file")


@pytest.mark.parametrize("mounts, ok", [
    ([{"Destination": "/m.json", "RW": False}], True),
    ([{"Destination": "/m.json", "RW": True}], False),
    ([{"Destination": "/m.json"}], False),
    ([{"Destination": "/m.json", "RW": 0}], False),
    ([{"Destination": "/m.json", "RW": False}, {"Destination": "/m.json", "RW": False}], False),
    ([{"Destination": "/other", "RW": False}], False),
    (None, False),
])
def test_manifest_mount_rule(mounts, ok):
    assert rg_identity.manifest_mount_read_only(mounts, "/m.json")[0] is ok


def test_inspect_must_answer_one_object():
    assert rg_identity.one_inspect('[{"Id": "x"}]', "inspect") == {"Id": "x"}
    for bad in ("[]", '[{"Id": 1}, {"Id": 2}]', "{}", '["x"]', "garbage"):
        with pytest.raises(rg_base.GateError):
            rg_identity.one_inspect(bad, "inspect")


def test_identity_of_a_correct_rank():
    rank = FakeRank()
    identity, errors = rg_identity.collect_identity("head", rank, config())
    assert errors == []
    assert set(identity) == SPEC_IDENTITY_KEYS
    assert identity["image_id"] == PIN["image_id"] and identity["image_architecture"] == "arm64"
    assert identity["compilation_config_present"] and identity["serialized_compilation_config"] == rg_identity.canonical_json(
        PROD_CC)
    assert identity["cudagraph_implementation"] == "regular" and identity["enforce_eager"] is False
    assert (identity["optimization_level"], identity["optimization_level_present"]) == (2, True)
    assert (identity["performance_mode"], identity["performance_mode_present"]) == ("balanced", True)
    assert identity["legacy_selector_pid1_entries"] == []
    assert identity["dsv4_multi_stream_pid1_entries"] == ["VLLM_DSV4_ENABLE_MULTI_STREAM=0"]
    assert identity["runtime_audit_manifest_sha256"] == PIN["runtime_manifest_sha256"]
    assert identity["runtime_audit_manifest_read_only"] is True and identity["label_mismatches"] == {}
    expected_command = " ".join(["/usr/local/bin/dspark-entrypoint.sh", *serve_argv()])
    assert identity["command_sha256"] == hashlib.sha256(expected_command.encode()).hexdigest()
    assert ["docker", "image", "inspect", PIN["image_id"]] in rank.calls


def test_identity_reports_every_mismatch_with_the_spec_strings():
    cc = json.dumps(dict(PROD_CC, cudagraph_mode="PIECEWISE"))
    rank = FakeRank(
        container_obj=container(Image="sha256:" + "e" * 64, State={"Running": False, "Status": "exited"},
                                Args=serve_argv(1, cc=cc, extra=("--performance-mode", "throughput", "-O3",
                                                                 "--enforce-eager")),
                                Mounts=[{"Destination": PIN["runtime_manifest_path"], "RW": True}]),
        image_obj=image(Id="sha256:" + "e" * 64, Architecture="amd64",
                        Config={"Labels": dict(LABELS, **{"io.r0b0tlab.kv-cache.dtype": "fp8"})}),
        environ=["VLLM_USE_BREAKABLE_CUDAGRAPH=1"], manifest_sha="d" * 64)
    identity, errors = rg_identity.collect_identity("worker", rank, config())
    expected = [
        "worker container dspark_vllm is not running (status exited)",
        f"worker image ID mismatch: expected {PIN['image_id']}, got sha256:{'e' * 64}",
        "worker runtime audit manifest is not mounted read-only exactly once",
        "worker command enables --enforce-eager",
        "worker compilation config mismatch: expected ",
        "worker optimization level mismatch: expected --optimization-level 2, got 3",
        "worker performance mode mismatch: expected --performance-mode balanced, got throughput",
        "worker image architecture mismatch: expected arm64, got amd64",
        "worker image label mismatch: io.r0b0tlab.kv-cache.dtype expected nvfp4_ds_mla, got fp8",
        "worker PID 1 retains legacy CUDA-graph selector",
        "worker PID 1 does not pin compile-safe DSV4 streams",
        f"worker runtime audit manifest checksum mismatch: expected {'b' * 64}, got {'d' * 64}",
    ]
    assert len(errors) == len(expected)
    for error, prefix in zip(errors, expected):
        assert error.startswith(prefix), (error, prefix)
    assert identity["label_mismatches"] == {"io.r0b0tlab.kv-cache.dtype": {"expected": "nvfp4_ds_mla", "actual": "fp8"}}
    assert identity["runtime_audit_manifest_read_only"] is False and identity["enforce_eager"] is True


def test_architecture_is_not_checked_when_switched_off():
    rank = FakeRank(image_obj=image(Architecture="amd64"))
    identity, errors = rg_identity.collect_identity("head", rank, config(check_architecture=False))
    assert errors == [] and identity["image_architecture"] == "amd64"


def test_a_failed_read_leaves_the_other_checks_running():
    rank = FakeRank(fail={"docker container": (1, "", "Error: No such container: dspark_vllm")},
                    environ=["VLLM_DSV4_ENABLE_MULTI_STREAM=1"])
    identity, errors = rg_identity.collect_identity("head", rank, config())
    assert errors[0] == "head docker container inspect failed (exit 1): Error: No such container: dspark_vllm"
    assert errors[1].startswith("head PID 1 does not pin compile-safe DSV4 streams")
    assert len(errors) == 2
    assert identity["container_id"] is None and identity["runtime_audit_manifest_sha256"] == PIN[
        "runtime_manifest_sha256"]

    rank = FakeRank(image_obj=[image(), image()], fail={"docker exec": (126, "", "OCI runtime exec failed")})
    identity, errors = rg_identity.collect_identity("worker", rank, config())
    assert errors == ["worker docker image inspect did not return exactly one object (got 2)",
                      "worker reading the PID 1 environment failed (exit 126): OCI runtime exec failed",
                      "worker hashing the runtime audit manifest failed (exit 126): OCI runtime exec failed"]
    assert identity["image_id"] == PIN["image_id"] and identity["label_mismatches"] is None


def test_cross_rank_checks():
    head, _unused = rg_identity.collect_identity("head", FakeRank(), config())
    worker, _unused = rg_identity.collect_identity("worker", FakeRank(), config())
    assert rg_identity.cross_rank_errors(head, worker) == []
    other = dict(worker, image_id="sha256:" + "f" * 64)
    assert rg_identity.cross_rank_errors(head, other) == [f"rank image IDs disagree: head {PIN['image_id']}, worker sha256:{'f' * 64}"]
    other = dict(worker, serialized_compilation_config='{"mode":0}')
    assert rg_identity.cross_rank_errors(head, other)[0].startswith("rank compilation configs disagree")
    assert rg_identity.cross_rank_errors(dict(head, image_id=None), dict(worker, image_id=None))[0].startswith(
        "rank image IDs disagree")
    assert rg_identity.cross_rank_errors(None, worker)[0].startswith("rank image IDs disagree")


# ---- image stores: a Docker engine on the containerd image store reports an image's manifest
# digest as its ID (the pin's image_manifest_digest); a classic store reports the config digest
# (the pin's image_id). The image role resolves which one per rank; the gate expects that one.
MANIFEST = "sha256:" + "9" * 64
PIN_WITH_MANIFEST = dict(PIN, image_manifest_digest=MANIFEST)


def store_config(head=("classic", PIN["image_id"]), worker=("containerd", MANIFEST), pin=None, **changes) -> dict:
    return config(pin=copy.deepcopy(pin or PIN_WITH_MANIFEST), image_stores={"head": head[0], "worker": worker[0]},
                  expected_image_ids={"head": head[1], "worker": worker[1]}, **changes)


def containerd_rank(logs: str = "", rank: int = 0) -> FakeRank:
    """A rank whose engine keeps images in the containerd store: inspect answers with the manifest digest."""
    return FakeRank(logs, container_obj=container(Image=MANIFEST, Args=serve_argv(rank)), image_obj=image(Id=MANIFEST))


def test_config_expects_the_pinned_image_id_on_both_ranks_by_default():
    cfg = config()
    assert cfg["expected_image_ids"] == {"head": PIN["image_id"], "worker": PIN["image_id"]}
    assert cfg["image_stores"] == {"head": None, "worker": None}
    assert store_config()["expected_image_ids"] == {"head": PIN["image_id"], "worker": MANIFEST}


def test_a_containerd_rank_passes_with_the_manifest_digest():
    rank = containerd_rank(rank=1)
    identity, errors = rg_identity.collect_identity("worker", rank, store_config())
    assert errors == []
    assert identity["image_id"] == MANIFEST
    # docker image inspect <manifest digest> on a containerd store answers with Id = that digest
    assert ["docker", "image", "inspect", MANIFEST] in rank.calls
    assert identity["label_mismatches"] == {} and identity["image_architecture"] == "arm64"
    # a containerd rank whose pin names the image the same way on both stores is the usual case
    both = store_config(head=("containerd", MANIFEST))
    assert rg_identity.collect_identity("head", containerd_rank(), both)[1] == []


def test_a_classic_rank_running_the_manifest_digest_fails():
    _identity, errors = rg_identity.collect_identity("head", containerd_rank(), store_config())
    assert errors == [f"head image ID mismatch: expected {PIN['image_id']}, got {MANIFEST}"]
    # and a containerd rank running the config digest fails the same way
    _identity, errors = rg_identity.collect_identity("worker", FakeRank(container_obj=container(Args=serve_argv(1))),
                                            store_config())
    assert errors == [f"worker image ID mismatch: expected {MANIFEST}, got {PIN['image_id']}"]


@pytest.mark.parametrize("changes, message", [
    ({"expected_image_ids": {"head": PIN["image_id"], "worker": "sha256:" + "f" * 64}},
     f"expected_image_ids.worker sha256:{'f' * 64} is neither the pin's image_id {PIN['image_id']} nor its "
     f"image_manifest_digest {MANIFEST}"),
    ({"expected_image_ids": {"head": "latest", "worker": PIN["image_id"]}}, "expected_image_ids.head latest is neither"),
    ({"expected_image_ids": {"head": PIN["image_id"]}}, "expected_image_ids must map exactly head and worker"),
    ({"expected_image_ids": {"head": PIN["image_id"], "worker": PIN["image_id"], "x": PIN["image_id"]}},
     "expected_image_ids must map exactly head and worker"),
    ({"expected_image_ids": [PIN["image_id"]]}, "expected_image_ids must map exactly head and worker"),
    ({"expected_image_ids": {"head": PIN["image_id"], "worker": 1}}, "expected_image_ids.worker 1 is neither"),
    ({"image_stores": {"head": "overlay2", "worker": None}}, "image_stores.head must be classic, containerd or null"),
    ({"image_stores": {"head": None, "worker": None, "x": None}}, "image_stores must map exactly head and worker"),
    # the store and the expected ID must agree
    ({"image_stores": {"head": "classic", "worker": "containerd"},
      "expected_image_ids": {"head": MANIFEST, "worker": MANIFEST}},
     f"expected_image_ids.head is {MANIFEST}, but a classic image store names the pinned image by the pin's "
     f"image_id {PIN['image_id']}"),
    ({"image_stores": {"head": "containerd", "worker": "containerd"},
      "expected_image_ids": {"head": MANIFEST, "worker": PIN["image_id"]}},
     f"expected_image_ids.worker is {PIN['image_id']}, but a containerd image store names the pinned image by the "
     f"pin's image_manifest_digest {MANIFEST}"),
])
def test_expected_image_ids_must_be_the_pinned_values(changes, message):
    with pytest.raises(rg.ConfigError) as err:
        config(pin=copy.deepcopy(PIN_WITH_MANIFEST), **changes)
    assert message in str(err.value)


def test_the_manifest_digest_is_refused_when_the_pin_has_none():
    with pytest.raises(rg.ConfigError) as err:
        config(expected_image_ids={"head": PIN["image_id"], "worker": MANIFEST})
    assert f"expected_image_ids.worker {MANIFEST} is neither the pin's image_id {PIN['image_id']} nor its " \
           "image_manifest_digest (the pin has none)" in str(err.value)


def test_a_containerd_rank_without_a_pinned_manifest_digest_fails_closed():
    # the image role could not resolve an ID (it refuses the same pin), so the gate role fell back
    # to the pin's image_id; the store it reported still says containerd
    raw = raw_config(image_stores={"head": "classic", "worker": "containerd"},
                     expected_image_ids={"head": PIN["image_id"], "worker": PIN["image_id"]})
    with pytest.raises(rg.ConfigError) as err:
        rg.check_config(raw)
    assert ("image_stores.worker is containerd, where Docker reports an image's manifest digest as its ID, but the "
            "pin has no image_manifest_digest: pin it, or serve from a classic image store") in str(err.value)
    doc = rg.failure_document([f"gate config: {p}" for p in err.value.problems], "production", "regular")
    assert doc["status"] == "FAIL" and any("pin has no image_manifest_digest" in e for e in doc["errors"])


def test_cross_rank_on_different_image_stores():
    cfg = store_config()
    head, _unused = rg_identity.collect_identity("head", FakeRank(), cfg)
    worker, _unused = rg_identity.collect_identity("worker", containerd_rank(rank=1), cfg)
    expected = cfg["expected_image_ids"]
    # different IDs, but each is the pinned image as its rank's store names it
    assert rg_identity.cross_rank_errors(head, worker, expected) == []
    # each rank is held to its own store's name for the pinned image
    swapped = (dict(head, image_id=MANIFEST), dict(worker, image_id=PIN["image_id"]))
    errors = rg_identity.cross_rank_errors(*swapped, expected)
    assert errors == [f"rank image IDs disagree: head {MANIFEST}, worker {PIN['image_id']} (the ranks use different "
                      f"image stores; each must run the pinned image: head {PIN['image_id']}, worker {MANIFEST})"]
    assert rg_identity.cross_rank_errors(head, dict(worker, image_id="sha256:" + "f" * 64), expected)[0].startswith(
        f"rank image IDs disagree: head {PIN['image_id']}, worker sha256:{'f' * 64} (the ranks use different")
    assert rg_identity.cross_rank_errors(head, dict(worker, image_id=None), expected)[0].startswith("rank image IDs disagree")
    # on one store the two ranks must report the identical ID, as before
    same = {"head": MANIFEST, "worker": MANIFEST}
    assert rg_identity.cross_rank_errors(dict(head, image_id=MANIFEST), worker, same) == []
    assert rg_identity.cross_rank_errors(head, worker, same) == [
        f"rank image IDs disagree: head {PIN['image_id']}, worker {MANIFEST}"]


def test_gate_passes_on_a_pair_whose_worker_uses_the_containerd_store():
    cfg = store_config()
    worker = containerd_rank(log_fixture("worker-regular"), rank=1)
    gate = passing_gate(config=cfg, worker=worker)
    gate.run_all()
    doc = gate.document()
    assert doc["status"] == "PASS", doc["errors"]
    assert doc["evidence"]["runtime_identity"]["worker"]["image_id"] == MANIFEST
    assert doc["evidence"]["runtime_identity"]["head"]["image_id"] == PIN["image_id"]
    # the same worker, when the image role found a classic store there, fails identity and cross-rank
    gate = passing_gate(config=store_config(worker=("classic", PIN["image_id"])),
                        worker=containerd_rank(log_fixture("worker-regular"), rank=1))
    gate.run_all()
    errors = gate.document()["errors"]
    assert f"worker image ID mismatch: expected {PIN['image_id']}, got {MANIFEST}" in errors
    assert f"rank image IDs disagree: head {PIN['image_id']}, worker {MANIFEST}" in errors


# ================================================================================================
# logs (real stand-in output)
# ================================================================================================
@pytest.mark.parametrize("rank", ["head", "worker"])
def test_regular_standin_logs_pass(rank):
    section, errors = _assess(rank, log_fixture(f"{rank}-regular"), config())
    assert errors == []
    assert all(section["required"].values()) and set(section["required"]) == set(rg_logs.REQUIRED["regular"]) | set(
        rg_logs.ALWAYS_REQUIRED)
    assert not any(section["forbidden"].values()) and set(section["forbidden"]) == set(rg_logs.FORBIDDEN["regular"])
    assert section["authoritative_cuda_graph_runtime"] == {
        "requested": "regular", "resolved": "regular", "mode": "FULL_DECODE_ONLY", "decode_mode": "FULL",
        "breakable": False, "enforce_eager": False, "strict": True}
    text = log_fixture(f"{rank}-regular")
    assert section["log_bytes"] == len(text.encode()) and section["log_sha256"] == rg_logs.sha256_text(text)


def test_wrong_cudagraph_mode_standin_log_fails_on_the_worker_line_only():
    text = log_fixture("head-wrong_cudagraph_mode")
    # the EngineCore line still reports the requested mode; only the Worker_TP line is the truth
    assert "(EngineCore_DP0" in text and "mode=FULL_DECODE_ONLY decode_mode=FULL" in text
    section, errors = _assess("head", text, config())
    assert errors == ["head resolved CUDA-graph mode mismatch: expected FULL_DECODE_ONLY, got PIECEWISE"]
    assert section["authoritative_cuda_graph_runtime"]["mode"] == "PIECEWISE"


def test_forbidden_marker_standin_log():
    section, errors = _assess("worker", log_fixture("worker-forbidden_marker"), config())
    assert sorted(errors) == ["worker forbidden runtime marker present: Marlin",
                              "worker forbidden runtime marker present: fallback to eager"]
    assert section["forbidden"]["Marlin"] and section["forbidden"]["fallback to eager"]


# The breakable-ab profile (roles/profile/vars/main.yml): PIECEWISE with the breakable runner.
BREAKABLE_CC = dict(PROD_CC, cudagraph_implementation="breakable", cudagraph_mode="PIECEWISE")
# Under PIECEWISE the breakable runner runs the DSpark (DFlash) draft eagerly and says so
# (docs/wrapper-reference.md §5.5); the stand-in logs it on both ranks.
BREAKABLE_AUXILIARY = ("CUDA_GRAPH_AUXILIARY implementation=breakable component=dflash mode=eager "
                       "reason=piecewise_unsupported")


def breakable_config() -> dict:
    return config(expected_cudagraph_implementation="breakable", expected_cudagraph_mode="PIECEWISE",
                  expected_compilation_config=dict(BREAKABLE_CC))


@pytest.mark.parametrize("rank", ["head", "worker"])
def test_breakable_marker_set(rank):
    section, errors = _assess(rank, log_fixture(f"{rank}-breakable"), breakable_config())
    assert errors == []
    assert section["authoritative_cuda_graph_runtime"] == {
        "requested": "breakable", "resolved": "breakable", "mode": "PIECEWISE", "decode_mode": "PIECEWISE",
        "breakable": True, "enforce_eager": False, "strict": True}
    errors = _assess(rank, log_fixture(f"{rank}-regular"), breakable_config())[1]
    for expected in (f"{rank} required runtime marker missing: Breakable CUDA graph enabled",
                     f"{rank} required runtime marker missing: CUDA_GRAPH_REPLAY implementation=breakable status=observed",
                     f"{rank} forbidden runtime marker present: resolved=regular",
                     f"{rank} resolved CUDA-graph mode mismatch: expected PIECEWISE, got FULL_DECODE_ONLY",
                     f"{rank} resolved CUDA-graph implementation mismatch: expected breakable, got regular"):
        assert expected in errors
    # and the other way round: breakable output under the regular expectation
    errors = _assess(rank, log_fixture(f"{rank}-breakable"), config())[1]
    assert f"{rank} forbidden runtime marker present: Breakable CUDA graph enabled" in errors
    assert f"{rank} required runtime marker missing: resolved=regular" in errors
    assert f"{rank} resolved CUDA-graph mode mismatch: expected FULL_DECODE_ONLY, got PIECEWISE" in errors


@pytest.mark.parametrize("rank", ["head", "worker"])
def test_the_breakable_draft_may_run_eagerly_under_piecewise(rank):
    text = log_fixture(f"{rank}-breakable")
    auxiliary = [ln for ln in text.splitlines() if "CUDA_GRAPH_AUXILIARY" in ln]
    assert len(auxiliary) == 1 and auxiliary[0].endswith(BREAKABLE_AUXILIARY) and "(Worker_TP" in auxiliary[0]
    # no breakable forbidden marker matches the draft's eager line, so the breakable gate passes with it
    assert not any(rg_logs.marker_hits(auxiliary[0], rg_logs.FORBIDDEN["breakable"]).values())
    section, errors = _assess(rank, text, breakable_config())
    assert errors == [] and not any(section["forbidden"].values())
    # the regular runner's form of the same line is what the regular gate forbids
    regular_aux = BREAKABLE_AUXILIARY.replace("implementation=breakable", "implementation=regular")
    assert rg_logs.marker_hits(regular_aux, rg_logs.FORBIDDEN["regular"])[
        "CUDA_GRAPH_AUXILIARY implementation=regular component=dflash mode=eager"]
    errors = _assess(rank, log_fixture(f"{rank}-regular") + f"(Worker_TP0 pid=1) WARNING 12-02 12:23:23 "
                     f"[gpu_model_runner.py:1] {regular_aux}\n", config())[1]
    assert errors == [f"{rank} forbidden runtime marker present: CUDA_GRAPH_AUXILIARY implementation=regular "
                      "component=dflash mode=eager"]
    # and the regular stand-in never logs one
    assert "CUDA_GRAPH_AUXILIARY" not in log_fixture(f"{rank}-regular")


def test_missing_replay_and_missing_native_backend():
    text = "\n".join(line for line in log_fixture("worker-regular").splitlines()
                     if "CUDA_GRAPH_REPLAY" not in line and "NET/IB" not in line)
    errors = _assess("worker", text, config())[1]
    assert errors == ["worker required runtime marker missing: CUDA_GRAPH_REPLAY implementation=regular status=observed",
                      "worker required runtime marker missing: NET/IB"]


def test_markers_are_case_insensitive_substrings():
    hits = rg_logs.marker_hits("... using the MARLIN kernel; Fallback To Eager ...", ["Marlin", "fallback to eager", "B12X"])
    assert hits == {"Marlin": True, "fallback to eager": True, "B12X": False}


# The engine echoes its own arguments and configuration at start-up; those echoes repeat what the
# operator asked for (the served name "deepseek-v4-flash-dspark", the compilation config), so they
# prove nothing about what the engine did. Markers are looked for only in the other lines.
ARGS_ECHO = "non-default args: {"
CONFIG_ECHO = ") with config: "


def _echo_lines(text: str) -> list[str]:
    """The fixture's echo lines, found by their literal text (independent of the gate's rule)."""
    return [ln for ln in text.splitlines() if ARGS_ECHO in ln or (" LLM engine (" in ln and CONFIG_ECHO in ln)
            or "vLLM API server version " in ln or "Launching vLLM (v" in ln]


@pytest.mark.parametrize("rank", ["head", "worker"])
def test_dspark_only_in_the_engine_echo_is_missing(rank):
    real = log_fixture(f"{rank}-regular")
    echoes = _echo_lines(real)
    assert len(echoes) == 3 and sum("deepseek-v4-flash-dspark" in ln for ln in echoes) == 2
    assert any("+dspark." in ln for ln in echoes)  # the version banner names the build, not the speculator
    # every runtime line that says dspark goes; the argument and config echoes stay
    text = "\n".join(ln for ln in real.splitlines() if ln in echoes or "dspark" not in ln.lower()) + "\n"
    assert "dspark" in text.lower()
    section, errors = _assess(rank, text, config())
    assert f"{rank} required runtime marker missing: DSpark" in errors
    assert section["required"]["DSpark"] is False
    assert section["echo_lines_excluded"] == 3


@pytest.mark.parametrize("rank", ["head", "worker"])
def test_forbidden_markers_inside_the_echo_do_not_fail(rank):
    real = log_fixture(f"{rank}-regular")
    echoes = _echo_lines(real)
    forbidden = " ".join(rg_logs.FORBIDDEN["regular"])
    # e.g. a served name or a config value that happens to spell a forbidden marker
    text = "\n".join(ln.replace("'served_model_name': [", f"'note': '{forbidden}', 'served_model_name': [")
                     .replace("seed=0,", f"seed=0, note={forbidden},") if ln in echoes else ln
                     for ln in real.splitlines()) + "\n"
    assert all(marker in text for marker in rg_logs.FORBIDDEN["regular"]) and text != real
    section, errors = _assess(rank, text, config())
    assert errors == []
    assert not any(section["forbidden"].values())
    assert section["echo_lines_excluded"] == 3
    # the same markers on a runtime line of the engine still fail it
    errors = _assess(rank, text + f"(Worker_TP0 pid=1) WARNING 12-02 12:23:23 [x.py:1] {forbidden}\n", config())[1]
    assert sorted(errors) == sorted(f"{rank} forbidden runtime marker present: {m}" for m in rg_logs.FORBIDDEN["regular"])


def test_real_fixture_logs_record_their_echo_lines():
    for name in ("head-regular", "worker-regular", "head-breakable", "worker-breakable"):
        text = log_fixture(name)
        cfg = breakable_config() if "breakable" in name else config()
        section, errors = _assess(name.split("-", maxsplit=1)[0], text, cfg)
        assert errors == [], name
        assert section["echo_lines_excluded"] == len(_echo_lines(text)) == 3, name
        assert section["log_bytes"] == len(text.encode()), "the evidence still covers the whole log"


def test_the_error_quotes_the_runtime_line_not_the_echo():
    real = log_fixture("worker-forbidden_marker")
    text = real.replace("'served_model_name': [", "'moe_backend_hint': 'Marlin', 'served_model_name': [", 1)
    first_marlin = next(ln for ln in text.splitlines() if "marlin" in ln.lower())
    assert ARGS_ECHO in first_marlin  # the echo comes first in the log
    errors = rg_logs.assess_logs("worker", text, config())[1]
    quoted = [e for e in errors if e.startswith("worker forbidden runtime marker present: Marlin (log: ")]
    assert len(quoted) == 1 and ARGS_ECHO not in quoted[0] and "Marlin kernel" in quoted[0]
    assert rg_logs._first_line_with(text, "Marlin").startswith("(Worker_TP")  # pylint: disable=protected-access


@pytest.mark.parametrize("line", [
    # vLLM 0.2x/0.3x (APIServer and EngineCore process tags; the headless worker has none)
    "(APIServer pid=7) INFO 12-03 10:00:00 [utils.py:233] non-default args: {'model_tag': 'm', "
    "'served_model_name': ['x-dspark'], 'compilation_config': {'cudagraph_mode': 'PIECEWISE'}}",
    "INFO 12-02 12:23:24 [utils.py:326] non-default args: {'model_tag': '/m', 'headless': True}",
    "(EngineCore_DP0 pid=9) INFO 12-03 10:00:01 [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='m', enforce_eager=True, served_model_name=x-dspark",
    "(EngineCore pid=9) INFO 12-03 10:00:01 [core.py:93] Initializing a V1 LLM engine (v0.9.2) with config: model='m'",
    # older engines and API servers
    "INFO 03-02 23:59:21 llm_engine.py:87] Initializing an LLM engine (v0.3.3) with config: model='m', "
    "enforce_eager=True",
    "INFO 01-05 10:00:00 llm_engine.py:72] Initializing an LLM engine with config: model='m'",
    "INFO 03-02 23:59:21 api_server.py:241] args: Namespace(host='0.0.0.0', served_model_name='x-dspark')",
    "INFO 05-01 08:00:00 [api_server.py:1044] args: Namespace(subparser='serve', model_tag='m')",
    "INFO 03-02 23:59:21 api_server.py:240] vLLM API server version 0.3.3 args: Namespace(model='m')",
    # the version banners: the build's identity ("+dspark" in the version), not a runtime report
    "(APIServer pid=1) INFO 12-02 12:23:23 [api_server.py:1896] vLLM API server version 0.26.0+dspark.sm121.3",
    "INFO 12-02 12:23:24 [serve.py:88] Launching vLLM (v0.26.0+dspark.sm121.3) headless multiproc executor, "
    "with head node address 127.0.0.1:51857 for torch.distributed process group.",
    # docker logs --timestamps, and a Ray worker's tag
    "2026-12-03T10:00:00.123456789Z (APIServer pid=7) INFO 12-03 10:00:00 [utils.py:233] non-default args: {}",
    "(RayWorkerWrapper pid=5, ip=10.0.0.2) INFO 12-03 10:00:00 [core.py:93] Initializing a V1 LLM engine (v0.9.2) "
    "with config: model='m'",
])
def test_echo_lines_are_recognised(line):
    assert rg_logs.is_echo_line(line)
    assert rg_logs.split_echo(line + "\nB12X\n") == ("B12X", 1)


@pytest.mark.parametrize("line", [
    "(Worker_TP0 pid=1) INFO 12-02 12:23:23 [dspark.py:88] Loading DSpark speculator (method=dspark, "
    "num_speculative_tokens=6)",
    # an echo's words later in a runtime line do not turn it into an echo
    "(Worker_TP0 pid=1) WARNING 12-02 12:23:23 [x.py:1] Marlin fallback to eager; non-default args: {}",
    "(Worker_TP0 pid=1) WARNING 12-02 12:23:23 [x.py:1] emulation with config: args: Namespace(",
    "(EngineCore_DP0 pid=2) INFO 12-02 12:23:23 [core.py:77] Initializing a V1 LLM engine",
    "(Worker_TP0 pid=1) Capturing CUDA graphs (decode, FULL): 100%",
    "",
])
def test_runtime_lines_are_not_echo_lines(line):
    assert not rg_logs.is_echo_line(line)


def test_authoritative_line_is_the_last_worker_line():
    line = ("CUDA_GRAPH_RUNTIME requested=regular resolved=regular mode={} decode_mode=FULL breakable=false "
            "enforce_eager=false strict={}")
    text = "\n".join([
        "(Worker_TP0 pid=1) INFO " + line.format("FULL", "true"),
        "(EngineCore_DP0 pid=2) INFO " + line.format("FULL_DECODE_ONLY", "true"),
        "(Worker_TP0 pid=1) INFO " + line.format("PIECEWISE", "false"),
        "(APIServer pid=3) INFO " + line.format("FULL_DECODE_ONLY", "true"),
    ])
    assert rg_logs.authoritative_runtime(text)["mode"] == "PIECEWISE"
    assert rg_logs.authoritative_runtime(text)["strict"] is False
    assert rg_logs.authoritative_runtime("(EngineCore_DP0 pid=2) " + line.format("FULL", "true")) is None
    errors = _assess("head", text, config())[1]
    assert "head resolved CUDA-graph mode mismatch: expected FULL_DECODE_ONLY, got PIECEWISE" in errors
    assert "head CUDA-graph strict flag mismatch: expected true, got false" in errors


def test_missing_authoritative_line_is_an_error():
    text = "\n".join(line for line in log_fixture("head-regular").splitlines()
                     if not ("Worker_TP" in line and "CUDA_GRAPH_RUNTIME" in line))
    section, errors = _assess("head", text, config())
    assert section["authoritative_cuda_graph_runtime"] is None
    assert errors == ["head authoritative CUDA_GRAPH_RUNTIME line missing: no Worker_TP line reports the resolved "
                      "CUDA-graph runtime"]


def test_logs_join_stdout_and_stderr():
    assert rg_logs.join_logs("a\n", "b\n") == "a\nb\n"
    assert rg_logs.join_logs("a", "b") == "a\nb"
    assert rg_logs.join_logs("", "b") == "b"
    rank = FakeRank("only stdout\n", stderr_logs="Capturing model for DSpark speculator...\n")
    section, _unused = rg_logs.collect_logs("head", rank, config())
    assert section["required"]["Capturing model for DSpark speculator..."]
    with pytest.raises(rg_base.GateError, match="head docker logs failed"):
        rg_logs.collect_logs("head", FakeRank(fail={"docker logs": (1, "", "no such container")}), config())


# ================================================================================================
# API canaries (real stand-in answers)
# ================================================================================================
def test_canary_requests():
    semantic = rg_api.semantic_request("m")
    assert semantic["messages"][0]["content"] == "Compute 7 multiplied by 19. Reply with only the number."
    assert (semantic["temperature"], semantic["max_tokens"], semantic["chat_template_kwargs"]) == (0, 64,
                                                                                                   {"thinking": False})
    tool = rg_api.tool_request("m")
    assert tool["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert tool["tools"][0]["function"]["parameters"]["required"] == ["city"]
    prompt = rg_api.retrieval_request("m")["messages"][0]["content"]
    assert prompt.count(rg_api.RETRIEVAL_FILLER) == 1800 and prompt.count("Secret code: R0B0TLAB-DSVF-NVFP4-7319") == 1
    assert prompt.endswith("Reply with the secret code only.") and rg_api.retrieval_request("m")["max_tokens"] == 48


def test_standin_answers_pass_every_canary():
    assert rg_api.evaluate_models(api_fixture("regular-models"), "deepseek-v4-flash-dspark")[1] == []
    assert rg_api.evaluate_semantic(api_fixture("regular-semantic")) == (
        {"content": "133", "finish_reason": "stop", "pass": True}, [])
    assert rg_api.evaluate_tool(api_fixture("regular-tool")) == ({"names": ["get_weather"], "pass": True}, [])
    section, errors = rg_api.evaluate_retrieval(api_fixture("regular-retrieval"))
    assert errors == [] and section["pass"] and section["usage"] == api_fixture("regular-retrieval")["usage"]
    for name in ("semantic", "tool", "retrieval"):
        assert rg_api.usage_errors(name, api_fixture(f"regular-{name}")) == []


def test_models_must_list_the_model():
    section, errors = rg_api.evaluate_models(api_fixture("regular-models"), "other-model")
    assert section["ids"] == ["deepseek-v4-flash-dspark"]
    assert errors == ["head API does not serve model other-model: served ids ['deepseek-v4-flash-dspark']"]
    with pytest.raises(rg_base.GateError):
        rg_api.evaluate_models({"object": "list"}, "m")


def with_message(name: str, finish=None, **message) -> dict:
    body = api_fixture(name)
    body["choices"][0]["message"].update(message)
    if finish is not None:
        body["choices"][0]["finish_reason"] = finish
    return body


@pytest.mark.parametrize("content, finish, ok", [
    ("133", "stop", True), (" 133\n", "stop", True), ("133.", "stop", False), ("1330", "stop", False),
    ("133", "length", False), (None, "stop", False), ("The answer is 133", "stop", False),
])
def test_semantic_canary(content, finish, ok):
    section, errors = rg_api.evaluate_semantic(with_message("regular-semantic", finish, content=content))
    assert section["pass"] is ok and (errors == []) is ok
    if not ok:
        assert errors[0].startswith("head semantic canary failed: expected content 133 with finish_reason stop")


def test_tool_canary_needs_get_weather():
    section, errors = rg_api.evaluate_tool(with_message("regular-tool", tool_calls=[]))
    assert section == {"names": [], "pass": False} and errors == ["head tool canary did not call get_weather: got tool calls []"]
    other = [{"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]
    assert rg_api.evaluate_tool(with_message("regular-tool", tool_calls=other))[0] == {"names": ["get_time"], "pass": False}
    assert rg_api.evaluate_tool(with_message("regular-tool", tool_calls=None))[0]["pass"] is False
    with pytest.raises(rg_base.GateError, match="no choices"):
        rg_api.evaluate_tool({"choices": []})


def test_tool_canary_judges_the_call_not_the_finish_reason():
    # the gate names the function (tool_choice {"type": "function", ...}); a real vLLM server ends such an
    # answer with finish_reason stop (only auto/required give tool_calls), older stand-ins said tool_calls
    assert rg_api.tool_request("m")["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert api_fixture("regular-tool")["choices"][0]["finish_reason"] == "stop"
    for finish in ("stop", "tool_calls"):
        assert rg_api.evaluate_tool(with_message("regular-tool", finish)) == ({"names": ["get_weather"], "pass": True}, [])
    # a message without any call has no tool_calls key at all on a real server: a failed canary, not a crash
    body = api_fixture("regular-semantic")
    assert "tool_calls" not in body["choices"][0]["message"]
    assert rg_api.evaluate_tool(body) == ({"names": [], "pass": False},
                                      ["head tool canary did not call get_weather: got tool calls []"])


@pytest.mark.parametrize("content, finish, ok", [
    ("R0B0TLAB-DSVF-NVFP4-7319", "stop", True), ("The code is R0B0TLAB-DSVF-NVFP4-7319.", "stop", True),
    ("R0B0TLAB-DSVF-NVFP4-7318", "stop", False), ("R0B0TLAB-DSVF-NVFP4-7319", "length", False), (None, "stop", False),
])
def test_retrieval_canary(content, finish, ok):
    section, errors = rg_api.evaluate_retrieval(with_message("regular-retrieval", finish, content=content))
    assert section["pass"] is ok and (errors == []) is ok
    if not ok:
        assert errors[0].startswith("head retrieval canary did not return the exact code naturally")


def test_wrong_usage_standin_answers_are_caught():
    body = api_fixture("wrong_usage-semantic")
    usage = body["usage"]
    assert rg_api.evaluate_semantic(body)[0]["pass"]  # the answer itself is right
    assert rg_api.usage_errors("semantic", body) == [
        f"head API usage is inconsistent: semantic canary prompt_tokens {usage['prompt_tokens']} + completion_tokens "
        f"{usage['completion_tokens']} != total_tokens {usage['total_tokens']}"]


@pytest.mark.parametrize("usage, fragment", [
    (None, "answered no usage object"),
    ({"prompt_tokens": -1, "completion_tokens": 1, "total_tokens": 0}, "usage.prompt_tokens is -1"),
    ({"prompt_tokens": 1.0, "completion_tokens": 1, "total_tokens": 2}, "usage.prompt_tokens is 1.0"),
    ({"prompt_tokens": True, "completion_tokens": 1, "total_tokens": 2}, "usage.prompt_tokens is true"),
    ({"prompt_tokens": 1, "completion_tokens": 1}, "usage.total_tokens is absent"),
])
def test_usage_must_be_non_negative_integers(usage, fragment):
    errors = rg_api.usage_errors("tool", {"usage": usage})
    assert len(errors) == 1 and errors[0].startswith("head API usage is inconsistent: tool canary")
    assert fragment in errors[0]


def test_api_call_needs_200_and_strict_json():
    assert rg_api.api_call(lambda *a: (200, b'{"a": 1}'), "GET", "/x", None, 1) == {"a": 1}
    with pytest.raises(rg_base.GateError, match=r"head semantic canary: POST /v1/chat/completions answered HTTP 401: denied"):
        rg_api.api_call(lambda *a: (401, b"denied"), "POST", "/v1/chat/completions", {}, 1, "semantic canary")
    with pytest.raises(rg_base.GateError, match="invalid JSON.*not a finite number"):
        rg_api.api_call(lambda *a: (200, b'{"a": NaN}'), "GET", "/x", None, 1)
    seen = []
    rg_api.api_call(lambda *a: seen.append(a) or (200, b"{}"), "POST", "/p", {"k": 1}, 7.5)
    assert seen == [("POST", "/p", b'{"k": 1}', 7.5)]


# ================================================================================================
# the gate and its document
# ================================================================================================
def test_gate_passes_on_the_standin_pair_and_has_the_spec_shape():
    gate = passing_gate()
    gate.run_all()
    doc = gate.document()
    assert doc["schema_version"] == 3 and doc["status"] == "PASS" and doc["errors"] == []
    assert set(doc) == {"schema_version", "status", "evidence", "errors"}
    evidence = doc["evidence"]
    assert set(evidence) == {"profile", "expected_cudagraph_implementation", "runtime_identity", "models", "semantic",
                             "tool_call", "retrieval", "runtime_logs"}
    assert (evidence["profile"], evidence["expected_cudagraph_implementation"]) == ("production", "regular")
    assert set(evidence["runtime_identity"]) == {"head", "worker"}
    for rank in ("head", "worker"):
        assert set(evidence["runtime_identity"][rank]) == SPEC_IDENTITY_KEYS
        assert evidence["runtime_identity"][rank]["cudagraph_mode"] == "FULL_DECODE_ONLY"  # from the logs
        # the spec's keys, plus how many echo lines (arguments, config) the markers were not matched in
        assert set(evidence["runtime_logs"][rank]) == {"required", "forbidden", "authoritative_cuda_graph_runtime",
                                                       "echo_lines_excluded", "log_bytes", "log_sha256"}
        assert evidence["runtime_logs"][rank]["echo_lines_excluded"] == 3
    assert set(evidence["models"]) == {"ids", "entries"}
    assert set(evidence["semantic"]) == {"content", "finish_reason", "pass"}
    assert set(evidence["tool_call"]) == {"names", "pass"}
    assert set(evidence["retrieval"]) == {"content", "finish_reason", "usage", "pass"}
    json.dumps(doc, allow_nan=False)


def test_logs_are_read_only_after_identity_and_the_api_canaries():
    events = []
    head = FakeRank(log_fixture("head-regular"))
    worker = FakeRank(log_fixture("worker-regular"), container_obj=container(Args=serve_argv(1)))
    fetch = FakeApi()

    def recording(name, target):
        def call(*args):
            events.append((name, args[0][1] if name != "api" else args[1]))
            return target(*args)
        return call

    gate = rg.Gate(config(), {"head": recording("head", head), "worker": recording("worker", worker)},
                   recording("api", fetch))
    assert gate.step("logs:worker") == []  # asked first, runs last
    kinds = list(events)
    first_log = next(i for i, e in enumerate(kinds) if e[1] == "logs")
    assert [e for e in kinds[first_log:] if e[0] == "api"] == []
    assert {"/v1/models", "/v1/chat/completions"} <= {e[1] for e in kinds[:first_log] if e[0] == "api"}
    assert {("head", "container"), ("worker", "container")} <= set(kinds[:first_log])
    assert len(fetch.calls) == 4
    gate.step("semantic")  # steps run once
    assert len(fetch.calls) == 4


def test_a_step_that_throws_has_a_null_section_and_the_rest_still_runs():
    def broken_fetch(*_):
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    gate = passing_gate(fetch=broken_fetch)
    gate.run_all()
    doc = gate.document()
    assert doc["status"] == "FAIL"
    for name in ("models", "semantic", "tool_call", "retrieval"):
        assert doc["evidence"][name] is None
        assert f"{name} step failed: ConnectionRefusedError: [Errno 111] Connection refused" in doc["errors"]
    assert "head API usage could not be checked: no canary answered" in doc["errors"]
    assert doc["evidence"]["runtime_identity"]["head"]["image_id"] == PIN["image_id"]
    assert doc["evidence"]["runtime_logs"]["worker"]["log_sha256"]


def test_a_rank_whose_logs_cannot_be_read():
    head = FakeRank(log_fixture("head-regular"), fail={"docker logs": (255, "", "ssh: connect to host: timed out")})
    gate = passing_gate(head=head)
    gate.run_all()
    doc = gate.document()
    assert doc["evidence"]["runtime_logs"]["head"] is None and doc["evidence"]["runtime_logs"]["worker"] is not None
    assert doc["evidence"]["runtime_identity"]["head"]["cudagraph_mode"] is None
    assert doc["errors"] == ["head docker logs failed (exit 255): ssh: connect to host: timed out"]


def test_the_faulted_standin_pair_fails_with_every_reason():
    head = FakeRank(log_fixture("head-wrong_cudagraph_mode"))
    worker = FakeRank(log_fixture("worker-forbidden_marker"), container_obj=container(Args=serve_argv(1)),
                      image_obj=image(Id="sha256:" + "e" * 64), )
    worker.container["Image"] = "sha256:" + "e" * 64
    gate = rg.Gate(config(), {"head": head, "worker": worker}, FakeApi("wrong_usage"))
    gate.run_all()
    doc = gate.document()
    assert doc["status"] == "FAIL"
    errors = doc["errors"]
    assert errors[0] == f"worker image ID mismatch: expected {PIN['image_id']}, got sha256:{'e' * 64}"
    assert f"rank image IDs disagree: head {PIN['image_id']}, worker sha256:{'e' * 64}" in errors
    assert sum(e.startswith("head API usage is inconsistent") for e in errors) == 3
    assert "head resolved CUDA-graph mode mismatch: expected FULL_DECODE_ONLY, got PIECEWISE" in _bare(errors)
    assert "worker forbidden runtime marker present: Marlin" in _bare(errors)
    assert any(e.startswith("worker forbidden runtime marker present: Marlin (log: ") and "Marlin kernel" in e
               for e in errors), "the error shows the offending log line"
    assert doc["evidence"]["runtime_identity"]["head"]["cudagraph_mode"] == "PIECEWISE"
    assert doc["evidence"]["semantic"]["pass"] is True


def test_steps_that_never_ran_fail_the_gate():
    gate = passing_gate()
    gate.step("identity:head")
    doc = gate.document()
    assert doc["status"] == "FAIL"
    assert "identity:worker was not checked" in doc["errors"] and "logs:worker was not checked" in doc["errors"]
    assert doc["evidence"]["runtime_identity"]["worker"] is None and doc["evidence"]["runtime_logs"] is None
    with pytest.raises(KeyError):
        gate.step("bogus")


def test_no_api_key_reaches_the_document():
    head_args = serve_argv(extra=("--api-key", SECRET))
    head = FakeRank(log_fixture("head-regular"), container_obj=container(Args=head_args))
    worker = FakeRank(log_fixture("worker-regular") + f"\nnon-default args: {{'api_key': '{SECRET}'}}\n",
                      container_obj=container(Args=serve_argv(1)))
    echo = (401, json.dumps({"error": {"message": f"bad key {SECRET}"}}).encode())
    gate = rg.Gate(config(), {"head": head, "worker": worker}, FakeApi(overrides={"tool": echo}), secrets=[SECRET])
    gate.run_all()
    doc = gate.document()
    text = json.dumps(doc)
    assert SECRET not in text and rg.REDACTED in text  # the echoed key was scrubbed from the error
    assert any("tool canary: POST /v1/chat/completions answered HTTP 401" in e for e in doc["errors"])
    assert SECRET not in "".join(gate.errors())
    # the command is recorded as a sha256 only, over the real command
    expected = " ".join(["/usr/local/bin/dspark-entrypoint.sh", *head_args])
    assert doc["evidence"]["runtime_identity"]["head"]["command_sha256"] == hashlib.sha256(
        expected.encode()).hexdigest()


def test_the_gate_scrubs_with_the_collections_one_redaction():
    assert rg.redact is _secrets.redact and rg.REDACTED == _secrets.REDACTED == "<redacted>"
    assert rg.redact({f"k{SECRET}": [SECRET, ("x", f"a{SECRET}b")], "n": 1}, [SECRET, ""]) == {
        f"k{rg.REDACTED}": [rg.REDACTED, ["x", f"a{rg.REDACTED}b"]], "n": 1}
    assert rg.redact({"a": "b"}, []) == {"a": "b"}
    # the scrub reaches every string of a failure document, errors included
    doc = rg.failure_document([f"boom {SECRET}"], secrets=[SECRET])
    assert SECRET not in json.dumps(doc) and doc["errors"] == [f"boom {rg.REDACTED}"]


def test_failure_document_and_summary_line():
    doc = rg.failure_document(["gate config: pair is missing"], "production", "regular", secrets=[SECRET])
    assert doc["status"] == "FAIL" and doc["schema_version"] == 3
    assert all(doc["evidence"][k] is None for k in ("runtime_identity", "models", "semantic", "tool_call", "retrieval",
                                                    "runtime_logs"))
    assert rg.failure_document([])["errors"] == ["the runtime gate did not run"]
    assert rg.summary_line(doc, "/e/p/runtime-gate.json") == "RUNTIME_GATE status=FAIL errors=1 output=/e/p/runtime-gate.json"
    assert rg.make_document({}, [])["status"] == "PASS"


# ================================================================================================
# the testinfra suite: importable, collect-only clean, writes a FAIL document on a bad config,
# and its HTTP client sends the key only as a bearer token and follows no redirect
# ================================================================================================
def run_suite(tmp_path, cfg: dict, *extra: str) -> subprocess.CompletedProcess:
    path = tmp_path / "gate-config.json"
    path.write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_COLLECTIONS_PATH", "DSPARK_GATE_API_KEY_FILE")}
    key_file = tmp_path / "api-key"
    key_file.write_text(SECRET + "\n")
    key_file.chmod(0o600)
    env["DSPARK_GATE_API_KEY_FILE"] = str(key_file)
    return subprocess.run([sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider", "--gate-config",
                           str(path), *extra], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)


def test_suite_collects_cleanly(tmp_path):
    cfg = raw_config(output=str(tmp_path / "out.json"), collections_path=str(COLLECTIONS))
    result = run_suite(tmp_path, cfg, "--collect-only")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "10 tests collected" in result.stdout
    for name in ("test_rank_identity[head]", "test_ranks_agree", "test_retrieval_canary", "test_runtime_logs[worker]"):
        assert name in result.stdout
    assert not (tmp_path / "out.json").exists()  # collecting writes no evidence


def test_suite_with_a_bad_config_writes_a_fail_document(tmp_path):
    cfg = raw_config(output=str(tmp_path / "out.json"), collections_path=str(COLLECTIONS), optimization_level=7)
    result = run_suite(tmp_path, cfg)
    assert result.returncode == 1
    out = tmp_path / "out.json"
    assert f"RUNTIME_GATE status=FAIL errors=1 output={out}" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["status"] == "FAIL" and doc["errors"] == ["gate config: optimization_level 7 is not one of 2, 3"]
    assert doc["evidence"]["profile"] == "production" and doc["evidence"]["runtime_identity"] is None
    assert "10 errors" in result.stdout


def test_suite_fails_closed_on_a_containerd_rank_without_a_pinned_manifest_digest(tmp_path):
    # what the gate role writes when the worker's dspark_image fact says containerd but the pin has
    # no image_manifest_digest (so the expected ID fell back to the pin's image_id)
    cfg = raw_config(output=str(tmp_path / "out.json"), collections_path=str(COLLECTIONS),
                     expected_image_ids={"head": PIN["image_id"], "worker": PIN["image_id"]},
                     image_stores={"head": "classic", "worker": "containerd"})
    result = run_suite(tmp_path, cfg)
    assert result.returncode == 1
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["status"] == "FAIL" and len(doc["errors"]) == 1
    assert doc["errors"][0].startswith("gate config: image_stores.worker is containerd, where Docker reports an "
                                       "image's manifest digest as its ID, but the pin has no image_manifest_digest")


def test_suite_needs_a_gate_config(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert result.returncode == 4 and "--gate-config <json> is required" in result.stderr


@pytest.fixture(name="suite_conftest")
def _suite_conftest():
    spec = importlib.util.spec_from_file_location("runtime_gate_suite_conftest", SUITE / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(name="http_server")
def _http_server():
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append((self.path, self.headers.get("Authorization")))
            if self.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", "/v1/models")
                self.end_headers()
                return
            body = b'{"data": []}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_suite_fetch_sends_the_key_only_as_a_bearer_token(suite_conftest, http_server):
    base, seen = http_server
    assert suite_conftest.make_fetch(base + "/", SECRET)("GET", "/v1/models", None, 5) == (200, b'{"data": []}')
    assert suite_conftest.make_fetch(base, None)("GET", "/v1/models", None, 5)[0] == 200
    assert seen == [("/v1/models", f"Bearer {SECRET}"), ("/v1/models", None)]
    status, _unused = suite_conftest.make_fetch(base, SECRET)("GET", "/redirect", None, 5)
    assert status == 302 and seen[-1][0] == "/redirect"  # not followed


def test_suite_fetch_is_the_collections_one_http_client(suite_conftest, http_server):
    """The suite speaks to the head through _http (no urllib of its own): a key that cannot be a header is a
    failed step naming dspark_api_key, never the value (urllib printed "Invalid header value b'Bearer KEY\\n'"),
    and a refused head is the step's ConnectionRefusedError (urllib wrapped it in a URLError)."""
    import socket
    base, seen = http_server
    bad_key = f"{SECRET}\n"
    gate = passing_gate(fetch=suite_conftest.make_fetch(base, bad_key))
    errors = gate.step("models")
    assert len(errors) == 1 and errors[0].startswith("models step failed: RequestNotSent: dspark_api_key holds a line "
                                                     "feed"), errors
    assert SECRET not in errors[0]
    assert seen == []
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    errors = passing_gate(fetch=suite_conftest.make_fetch(closed, None)).step("models")
    assert errors == ["models step failed: ConnectionRefusedError: [Errno 111] Connection refused"]


def test_suite_finds_the_collection(suite_conftest, monkeypatch, tmp_path):
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", f"{tmp_path}{os.pathsep}{COLLECTIONS}")
    assert str(COLLECTIONS) in suite_conftest._collection_candidates({})
    module = suite_conftest._import_gate_module({"collections_path": str(tmp_path)})
    assert module.SCHEMA_VERSION == 3
    monkeypatch.delenv("ANSIBLE_COLLECTIONS_PATH")
    assert suite_conftest._collection_candidates({"collections_path": "/x"})[0] == "/x"
    assert Path(suite_conftest.__file__).name == "conftest.py"


def test_suite_reads_the_key_from_a_file_never_from_the_environment(suite_conftest, tmp_path, monkeypatch):
    key_file = tmp_path / "api-key"
    key_file.write_text(f"{SECRET}\n")
    assert suite_conftest.read_api_key(str(key_file)) == SECRET
    assert not key_file.exists(), "the key outlived its read (Ctrl-C skips the role's cleanup)"
    assert suite_conftest.read_api_key(None) is None
    key_file.write_text("\n")
    assert suite_conftest.read_api_key(str(key_file)) is None
    with pytest.raises(pytest.UsageError, match="cannot read the API key file"):
        suite_conftest.read_api_key(str(tmp_path / "missing"))
    private = tmp_path / "tmpab12cd.dspark-gate"  # the role's private folder goes with the key
    private.mkdir()
    (private / "api-key").write_text(f"{SECRET}\n")
    assert suite_conftest.read_api_key(str(private / "api-key")) == SECRET
    assert not private.exists()
    monkeypatch.setenv("DSPARK_GATE_API_KEY", SECRET)  # the old variable is not read any more
    monkeypatch.delenv("DSPARK_GATE_API_KEY_FILE", raising=False)
    assert suite_conftest.GateState(str(tmp_path / "cfg.json")).api_key is None
