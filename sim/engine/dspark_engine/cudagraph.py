"""CUDA-graph runtime selection of the DSpark vLLM patch (docs/wrapper-reference.md §5.5).

* implementation: explicit ``cudagraph_implementation`` (auto|regular|breakable, any case; auto
  means "not explicit") -> legacy env ``VLLM_USE_BREAKABLE_CUDAGRAPH`` (exactly "0" -> regular
  or "1" -> breakable, else ValueError; conflicting with an explicit choice raises) -> the
  architecture default, ``breakable`` for DeepseekV4.  The stand-in has no capability
  downgrade, so resolved == requested.
* ``cudagraph_mode``: explicit value, else by optimization level: -O0 NONE, -O1 PIECEWISE,
  -O2/-O3 FULL_AND_PIECEWISE.  ``--enforce-eager`` forces NONE.
* decode_mode: FULL for FULL, FULL_DECODE_ONLY and FULL_AND_PIECEWISE; PIECEWISE for
  PIECEWISE; NONE for NONE (so also under eager).
* strict (``cudagraph_strict``): start-up fails if resolved != requested, eager is on, or the
  decode mode is NONE.
* compile ``mode`` (legacy ``level``): explicit, else 0 at -O0 and 3 (VLLM_COMPILE) otherwise;
  a non-zero mode is forced to 0 with a warning unless ``VLLM_DSV4_ENABLE_TORCH_COMPILE=1``.
* auxiliary line: under the breakable runner with mode PIECEWISE the DSpark (DFlash) draft cannot
  be captured piecewise and runs eagerly; the patch warns ``CUDA_GRAPH_AUXILIARY
  implementation=breakable component=dflash mode=eager reason=piecewise_unsupported``. The regular
  runner never logs it (the gate forbids its regular form), nor does any mode with full graphs.
"""
from dataclasses import dataclass

IMPLEMENTATIONS = ("auto", "regular", "breakable")
MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
MODE_VALUES = {"NONE": "0", "PIECEWISE": "1", "FULL": "2", "FULL_DECODE_ONLY": "(2, 0)",
               "FULL_AND_PIECEWISE": "(2, 1)"}
COMPILE_MODES = {0: "NONE", 1: "STOCK_TORCH_COMPILE", 2: "DYNAMO_TRACE_ONCE", 3: "VLLM_COMPILE"}
ARCHITECTURE_DEFAULT = "breakable"     # DeepseekV4ForCausalLM / DeepSeekV4MTPModel
_LEVEL_MODE = {0: "NONE", 1: "PIECEWISE", 2: "FULL_AND_PIECEWISE", 3: "FULL_AND_PIECEWISE"}
_LEGACY_ENV = "VLLM_USE_BREAKABLE_CUDAGRAPH"


def normalize_compilation_config(cc):
    """Validate and normalise the known keys of a ``--compilation-config`` object (ValueError)."""
    out = dict(cc)
    for key in ("mode", "level"):
        if key in out and out[key] is not None:
            value = out[key]
            if isinstance(value, bool) or not isinstance(value, int) or value not in COMPILE_MODES:
                raise ValueError(f"{key} must be one of 0, 1, 2, 3 (got {value!r})")
    if "cudagraph_mode" in out and out["cudagraph_mode"] is not None:
        value = out["cudagraph_mode"]
        if not isinstance(value, str) or value.upper() not in MODES:
            raise ValueError(f"cudagraph_mode must be one of {', '.join(MODES)} (got {value!r})")
        out["cudagraph_mode"] = value.upper()
    if "cudagraph_implementation" in out and out["cudagraph_implementation"] is not None:
        value = out["cudagraph_implementation"]
        if not isinstance(value, str) or value.lower() not in IMPLEMENTATIONS:
            raise ValueError(f"cudagraph_implementation must be one of {', '.join(IMPLEMENTATIONS)} (got {value!r})")
        out["cudagraph_implementation"] = value.lower()
    if "cudagraph_strict" in out and not isinstance(out["cudagraph_strict"], bool):
        raise ValueError(f"cudagraph_strict must be a boolean (got {out['cudagraph_strict']!r})")
    return out


@dataclass(frozen=True)
class CudaGraphRuntime:
    requested: str
    resolved: str
    mode: str
    decode_mode: str
    enforce_eager: bool
    strict: bool
    compile_mode: int
    warnings: tuple = ()

    @property
    def breakable(self):
        return self.resolved == "breakable"

    @property
    def graphs_enabled(self):
        return self.decode_mode != "NONE"

    def line(self, mode=None):
        """The ``CUDA_GRAPH_RUNTIME`` marker; ``mode`` overrides the reported mode (fault)."""
        mode = mode or self.mode
        return (f"CUDA_GRAPH_RUNTIME requested={self.requested} resolved={self.resolved} mode={mode} "
                f"decode_mode={decode_mode_of(mode, self.enforce_eager)} "
                f"breakable={str(self.breakable).lower()} enforce_eager={str(self.enforce_eager).lower()} "
                f"strict={str(self.strict).lower()}")

    def auxiliary_line(self, mode=None, draft=True):
        """The ``CUDA_GRAPH_AUXILIARY`` warning of a draft model (``draft``) that runs eagerly
        beside the graphs, or None; ``mode`` overrides the reported mode as in :meth:`line`."""
        mode = mode or self.mode
        if not draft or not self.breakable or self.enforce_eager or mode != "PIECEWISE":
            return None
        return (f"CUDA_GRAPH_AUXILIARY implementation={self.resolved} component=dflash mode=eager "
                "reason=piecewise_unsupported")

    def strict_violations(self):
        if not self.strict:
            return []
        problems = []
        if self.resolved != self.requested:
            problems.append(f"resolved implementation {self.resolved} differs from requested {self.requested}")
        if self.enforce_eager:
            problems.append("enforce_eager is enabled")
        if self.decode_mode == "NONE":
            problems.append("decode cudagraph mode is NONE")
        return problems


def decode_mode_of(mode, enforce_eager=False):
    if enforce_eager or mode == "NONE":
        return "NONE"
    return "PIECEWISE" if mode == "PIECEWISE" else "FULL"


def resolve(cc, optimization_level=2, enforce_eager=False, env=None):
    """The CudaGraphRuntime of a normalised compilation config; ValueError on bad selectors."""
    env = env or {}
    warnings = []
    explicit = cc.get("cudagraph_implementation")
    explicit = None if explicit in (None, "auto") else explicit
    requested = explicit
    if _LEGACY_ENV in env:
        raw = env[_LEGACY_ENV]
        if raw not in ("0", "1"):
            raise ValueError(f"{_LEGACY_ENV} must be exactly 0 or 1, got {raw!r}")
        from_env = "breakable" if raw == "1" else "regular"
        if explicit and explicit != from_env:
            raise ValueError(f"{_LEGACY_ENV}={raw} conflicts with compilation_config.cudagraph_implementation="
                             f"{explicit!r}")
        warnings.append(f"{_LEGACY_ENV} is deprecated; set compilation_config.cudagraph_implementation instead.")
        requested = requested or from_env
    requested = requested or ARCHITECTURE_DEFAULT
    mode = cc.get("cudagraph_mode") or _LEVEL_MODE[optimization_level]
    if enforce_eager:
        mode = "NONE"
    compile_mode = cc.get("mode", cc.get("level"))
    compile_mode = (0 if optimization_level == 0 else 3) if compile_mode is None else compile_mode
    if compile_mode != 0 and env.get("VLLM_DSV4_ENABLE_TORCH_COMPILE") != "1":
        warnings.append(f"DeepseekV4: forcing compilation mode {COMPILE_MODES[compile_mode]} -> NONE "
                        "(torch.compile was observed to serve garbled content on SM12x dual-GB10 with DSpark); "
                        "set VLLM_DSV4_ENABLE_TORCH_COMPILE=1 to keep it.")
        compile_mode = 0
    return CudaGraphRuntime(requested=requested, resolved=requested, mode=mode,
                            decode_mode=decode_mode_of(mode, enforce_eager), enforce_eager=enforce_eager,
                            strict=bool(cc.get("cudagraph_strict", False)), compile_mode=compile_mode,
                            warnings=tuple(warnings))
