"""CUDA-graph runtime selection (wrapper spec 5.5) and its start-up markers."""
import pytest

from dspark_engine.cudagraph import normalize_compilation_config, resolve

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
