"""CUDA-graph runtime selection (docs/wrapper-reference.md §5.5) and its start-up markers."""
import json

import pytest

from dspark_engine.cudagraph import normalize_compilation_config, resolve

from .conftest import free_port, production_args

PRODUCTION = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_implementation": "regular",
              "cudagraph_strict": True}


def test_production_config():
    rt = resolve(PRODUCTION, 2, False, {})
    assert rt.line() == ("CUDA_GRAPH_RUNTIME requested=regular resolved=regular mode=FULL_DECODE_ONLY "
                         "decode_mode=FULL breakable=false enforce_eager=false strict=true")
    assert rt.strict_violations() == [] and rt.compile_mode == 0 and rt.warnings == ()


def test_architecture_default_is_breakable_full_and_piecewise_with_compile_forced_off():
    rt = resolve({}, 2, False, {})
    assert (rt.requested, rt.resolved, rt.mode, rt.decode_mode, rt.breakable) == (
        "breakable", "breakable", "FULL_AND_PIECEWISE", "FULL", True)
    assert rt.compile_mode == 0 and any("VLLM_COMPILE -> NONE" in w for w in rt.warnings)
    assert resolve({}, 2, False, {"VLLM_DSV4_ENABLE_TORCH_COMPILE": "1"}).compile_mode == 3


def test_optimization_levels():
    assert resolve({}, 0, False, {}).mode == "NONE"
    assert resolve({}, 0, False, {}).decode_mode == "NONE"
    assert resolve({"cudagraph_mode": "FULL"}, 0, False, {}).mode == "FULL"
    assert resolve({}, 1, False, {}).mode == "PIECEWISE"
    assert resolve({}, 1, False, {}).decode_mode == "PIECEWISE"
    assert resolve({}, 3, False, {}).mode == "FULL_AND_PIECEWISE"


def test_legacy_env_selector():
    rt = resolve({}, 2, False, {"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"})
    assert rt.requested == "regular" and any("deprecated" in w for w in rt.warnings)
    assert resolve({"cudagraph_implementation": "breakable"}, 2, False,
                   {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}).resolved == "breakable"
    with pytest.raises(ValueError, match="exactly 0 or 1"):
        resolve({}, 2, False, {"VLLM_USE_BREAKABLE_CUDAGRAPH": "true"})
    with pytest.raises(ValueError, match="conflicts"):
        resolve({"cudagraph_implementation": "regular"}, 2, False, {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"})


def test_enforce_eager_and_strict():
    rt = resolve(PRODUCTION, 2, True, {})
    assert "decode_mode=NONE" in rt.line() and "enforce_eager=true" in rt.line()
    assert any("enforce_eager" in p for p in rt.strict_violations())
    assert any("NONE" in p for p in resolve(dict(PRODUCTION, cudagraph_mode="NONE"), 2, False, {}).strict_violations())
    assert resolve(dict(PRODUCTION, cudagraph_strict=False), 2, True, {}).strict_violations() == []


def test_reported_mode_override_changes_decode_mode():
    rt = resolve(PRODUCTION, 2, False, {})
    assert "mode=PIECEWISE decode_mode=PIECEWISE" in rt.line("PIECEWISE")


def test_normalization_is_case_insensitive():
    cc = normalize_compilation_config({"cudagraph_mode": "full_decode_only", "cudagraph_implementation": "REGULAR"})
    assert cc == {"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_implementation": "regular"}


def test_strict_eager_start_fails(engines, model_dir):
    proc = engines([model_dir, "--port", "0", "-cc", '{"cudagraph_implementation":"regular","cudagraph_strict":true}',
                    "--enforce-eager"], name="strict")
    assert proc.wait_exit() == 1
    logs = proc.logs()
    assert "Cudagraph is disabled under eager mode" in logs
    assert "RuntimeError: cudagraph_strict: enforce_eager is enabled" in logs
    assert "Engine core initialization failed" in proc.stderr()


def test_bad_legacy_env_fails_start(engines, model_dir):
    proc = engines([model_dir, "--port", "0"], {"VLLM_USE_BREAKABLE_CUDAGRAPH": "yes"}, name="legacy")
    assert proc.wait_exit() == 1
    assert "ValueError: VLLM_USE_BREAKABLE_CUDAGRAPH must be exactly 0 or 1" in proc.stderr()


# ---- the DSpark (DFlash) draft's auxiliary line: under the breakable runner with cudagraph_mode
# PIECEWISE the draft cannot be captured piecewise and runs eagerly, which the v026 patch reports
# as a CUDA_GRAPH_AUXILIARY warning (docs/wrapper-reference.md §5.5). The regular runner never reports it.
BREAKABLE_PIECEWISE = dict(PRODUCTION, cudagraph_mode="PIECEWISE", cudagraph_implementation="breakable")
AUXILIARY = ("CUDA_GRAPH_AUXILIARY implementation=breakable component=dflash mode=eager "
             "reason=piecewise_unsupported")


def test_auxiliary_line_only_for_the_breakable_piecewise_draft():
    assert resolve(BREAKABLE_PIECEWISE, 2, False, {}).auxiliary_line() == AUXILIARY
    assert resolve(BREAKABLE_PIECEWISE, 2, False, {}).auxiliary_line(draft=False) is None
    for mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        assert resolve(dict(BREAKABLE_PIECEWISE, cudagraph_mode=mode), 2, False, {}).auxiliary_line() is None, mode
    for mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "PIECEWISE"):
        rt = resolve(dict(PRODUCTION, cudagraph_mode=mode), 2, False, {})
        assert rt.auxiliary_line() is None and rt.auxiliary_line("PIECEWISE") is None, mode
    # no graphs at all: nothing is auxiliary to them
    assert resolve(BREAKABLE_PIECEWISE, 2, True, {}).auxiliary_line() is None
    # the reported mode decides (the wrong_cudagraph_mode fault reports PIECEWISE)
    breakable_full = resolve(dict(BREAKABLE_PIECEWISE, cudagraph_mode="FULL_AND_PIECEWISE"), 2, False, {})
    assert breakable_full.auxiliary_line("PIECEWISE") == AUXILIARY


def _start_single(engines, model_dir, cc, name):
    port = free_port()
    args = production_args(model_dir, port=port, master_port=free_port(), nnodes=1, max_model_len=32768)
    args[args.index("--compilation-config") + 1] = cc
    return engines(args, name=name, port=port).wait_ready()


def test_breakable_piecewise_engine_logs_the_draft_running_eagerly(engines, model_dir):
    proc = _start_single(engines, model_dir, json.dumps(BREAKABLE_PIECEWISE), "breakable")
    lines = proc.logs().splitlines()
    aux = [ln for ln in lines if "CUDA_GRAPH_AUXILIARY" in ln]
    assert len(aux) == 1 and aux[0].startswith("(Worker_TP0 pid=") and " WARNING " in aux[0]
    assert aux[0].endswith(AUXILIARY)
    # logged with the capture, after the speculator's capture starts and before the capture completes
    order = [next(i for i, ln in enumerate(lines) if text in ln) for text in (
        "Capturing model for DSpark speculator...", "CUDA_GRAPH_AUXILIARY",
        "CUDA_GRAPH_CAPTURE implementation=breakable status=complete")]
    assert order == sorted(order)
    assert "mode=PIECEWISE decode_mode=PIECEWISE" in proc.logs()


def test_regular_engine_never_logs_an_auxiliary_line(engines, model_dir):
    for cc, name in ((PRODUCTION, "regular"), (dict(PRODUCTION, cudagraph_mode="PIECEWISE"), "regular-piecewise"),
                     (dict(BREAKABLE_PIECEWISE, cudagraph_mode="FULL_AND_PIECEWISE"), "breakable-full")):
        proc = _start_single(engines, model_dir, json.dumps(cc), name)
        assert proc.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})[0] == 200
        proc.wait_for("CUDA_GRAPH_REPLAY")
        logs = proc.logs()
        assert "CUDA_GRAPH_AUXILIARY" not in logs and "running the draft eagerly" not in logs, name
        proc.stop()
