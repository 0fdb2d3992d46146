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


def test_api_key_values_are_redacted():
    """The gate redacts its command tokens by the collection's one variable rule (``_secrets``)."""
    assert rg.redact_document is _secrets.redact_document and not hasattr(rg, "redact_tokens")
    tokens = ["vllm", "--api-key", SECRET, f"--api_key={SECRET}", f"VLLM_API_KEY={SECRET}", "--port", "8888"]
    out = rg.redact_document(tokens)
    assert SECRET not in " ".join(out)
    assert out == ["vllm", "--api-key", rg.REDACTED, f"--api_key={rg.REDACTED}", f"VLLM_API_KEY={rg.REDACTED}",
                   "--port", "8888"]
    assert tokens[2] == SECRET  # the input is not changed


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


def test_missing_replay_and_missing_native_backend():
    text = "\n".join(line for line in log_fixture("worker-regular").splitlines()
                     if "CUDA_GRAPH_REPLAY" not in line and "NET/IB" not in line)
    errors = _assess("worker", text, config())[1]
    assert errors == ["worker required runtime marker missing: CUDA_GRAPH_REPLAY implementation=regular status=observed",
                      "worker required runtime marker missing: NET/IB"]


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


def test_real_fixture_logs_record_their_echo_lines():
    for name in ("head-regular", "worker-regular", "head-breakable", "worker-breakable"):
        text = log_fixture(name)
        cfg = breakable_config() if "breakable" in name else config()
        section, errors = _assess(name.split("-", maxsplit=1)[0], text, cfg)
        assert errors == [], name
        assert section["echo_lines_excluded"] == len(_echo_lines(text)) == 3, name
        assert section["log_bytes"] == len(text.encode()), "the evidence still covers the whole log"


def test_missing_authoritative_line_is_an_error():
    text = "\n".join(line for line in log_fixture("head-regular").splitlines()
                     if not ("Worker_TP" in line and "CUDA_GRAPH_RUNTIME" in line))
    section, errors = _assess("head", text, config())
    assert section["authoritative_cuda_graph_runtime"] is None
    assert errors == ["head authoritative CUDA_GRAPH_RUNTIME line missing: no Worker_TP line reports the resolved "
                      "CUDA-graph runtime"]


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
    """A run by hand reads the key from the operator's file (left as it is); the action's run gets it in memory."""
    key_file = tmp_path / "api-key"
    key_file.write_text(f"{SECRET}\n")
    assert suite_conftest.read_api_key(str(key_file)) == SECRET
    assert key_file.read_text() == f"{SECRET}\n"  # the operator's file is theirs
    assert suite_conftest.read_api_key(None) is None
    key_file.write_text("\n")
    assert suite_conftest.read_api_key(str(key_file)) is None
    with pytest.raises(pytest.UsageError, match="cannot read the API key file"):
        suite_conftest.read_api_key(str(tmp_path / "missing"))
    monkeypatch.setenv("DSPARK_GATE_API_KEY", SECRET)  # the old variable is not read any more
    monkeypatch.delenv("DSPARK_GATE_API_KEY_FILE", raising=False)
    assert suite_conftest.GateState(str(tmp_path / "cfg.json")).api_key is None
    monkeypatch.setenv("DSPARK_GATE_API_KEY_FILE", str(key_file))
    given = type("Given", (), {"api_key": "sk-in-memory-0123456789", "config": {}, "hosts": {}})()
    assert suite_conftest.GateState(None, given).api_key == "sk-in-memory-0123456789"  # never the file's
