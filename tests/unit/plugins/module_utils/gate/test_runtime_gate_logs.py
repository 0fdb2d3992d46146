# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _runtime_gate_logs: the log markers per implementation, the engine's echo left out, the
authoritative runtime line."""
from __future__ import annotations

import pytest
from tests.unit.plugins.module_utils.gate.test_runtime_gate import (
    ARGS_ECHO,
    FakeRank,
    _assess,
    _echo_lines,
    breakable_config,
    config,
    log_fixture,
)

from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_logs as rg_logs
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_base as rg_base


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


# Under PIECEWISE the breakable runner runs the DSpark (DFlash) draft eagerly and says so
# (docs/wrapper-reference.md §5.5); the stand-in logs it on both ranks.
BREAKABLE_AUXILIARY = ("CUDA_GRAPH_AUXILIARY implementation=breakable component=dflash mode=eager "
                       "reason=piecewise_unsupported")


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


def test_markers_are_case_insensitive_substrings():
    hits = rg_logs.marker_hits("... using the MARLIN kernel; Fallback To Eager ...", ["Marlin", "fallback to eager", "B12X"])
    assert hits == {"Marlin": True, "fallback to eager": True, "B12X": False}


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


def test_logs_join_stdout_and_stderr():
    assert rg_logs.join_logs("a\n", "b\n") == "a\nb\n"
    assert rg_logs.join_logs("a", "b") == "a\nb"
    assert rg_logs.join_logs("", "b") == "b"
    rank = FakeRank("only stdout\n", stderr_logs="Capturing model for DSpark speculator...\n")
    section, _unused = rg_logs.collect_logs("head", rank, config())
    assert section["required"]["Capturing model for DSpark speculator..."]
    with pytest.raises(rg_base.GateError, match="head docker logs failed"):
        rg_logs.collect_logs("head", FakeRank(fail={"docker logs": (1, "", "no such container")}), config())
