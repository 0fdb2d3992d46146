"""The engine configuration of one rank, built from the parsed command line and environment.

KV cache capacity in tokens (one DGX Spark = one GB10 with 128 GiB of unified memory):

* ``--kv-cache-memory-bytes B``: ``B // 12766`` (12,766 bytes per token of nvfp4_ds_mla KV);
* else ``(floor(gpu_memory_utilization * 128 GiB) - 98,763,000,000) // 12766``, where the
  constant stands for weights, activations, graphs and the drafter of one rank; 0.835 gives
  1,253,213 tokens, the long-context figure of the real package;
* ``DSPARK_SIM_KV_TOKENS`` overrides both.

If the capacity is below ``--max-model-len`` the engine fails at start (``check_kv_capacity``).
"""
import math
import os
from dataclasses import dataclass, field

from . import VERSION
from .cudagraph import COMPILE_MODES, MODE_VALUES, resolve

MODEL_MAX_LEN = 1048576          # max_position_embeddings of DeepSeek-V4-Flash
KV_BYTES_PER_TOKEN = 12766
UMA_TOTAL_BYTES = 128 * 2 ** 30
NON_KV_BYTES = 98_763_000_000
GPUS_PER_NODE = 1
GIB = 2 ** 30


def worker_process_name(tp, pp, node_rank):
    """Name of a rank's GPU worker process (one GPU per node: global rank == node rank)."""
    if pp == 1:
        return f"Worker_TP{node_rank % tp}"
    return f"Worker_PP{node_rank // tp}_TP{node_rank % tp}"


class ConfigError(ValueError):
    """A configuration the real engine would reject at start-up (ValueError, exit 1)."""


def kv_capacity_tokens(gpu_memory_utilization, kv_cache_memory_bytes=None, override=None):
    if override is not None:
        return override
    if kv_cache_memory_bytes is not None:
        return kv_cache_memory_bytes // KV_BYTES_PER_TOKEN
    return max(0, math.floor(gpu_memory_utilization * UMA_TOTAL_BYTES) - NON_KV_BYTES) // KV_BYTES_PER_TOKEN


class _Repr:
    """An object whose repr is a fixed text (enum members in the config dict)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


@dataclass
class EngineConfig:
    model: str
    served_names: list
    host: str
    port: int
    tp: int
    pp: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    headless: bool
    kv_cache_dtype: str
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_memory_bytes: int
    enable_prefix_caching: bool
    speculative: dict
    compilation: dict
    optimization_level: int
    performance_mode: str
    enforce_eager: bool
    tokenizer_mode: str
    trust_remote_code: bool
    load_format: str
    backend: str
    moe_backend: str
    tool_call_parser: str
    enable_auto_tool_choice: bool
    reasoning_parser: str
    default_chat_template_kwargs: dict
    enable_flashinfer_autotune: bool
    api_key: str
    kv_tokens: int
    cudagraph: object = None
    non_default_args: dict = field(default_factory=dict)

    @property
    def world_size(self):
        return self.tp * self.pp

    @property
    def served_name(self):
        return self.served_names[0]

    @property
    def is_head(self):
        return self.node_rank == 0

    @property
    def tp_rank(self):
        return self.node_rank % self.tp

    @property
    def spec_method(self):
        return (self.speculative or {}).get("method")

    @property
    def num_spec_tokens(self):
        return int((self.speculative or {}).get("num_speculative_tokens", 0))

    @property
    def is_dspark(self):
        return self.spec_method == "dspark"

    def fingerprint(self):
        """What both ranks must agree on (sent in the join handshake)."""
        return {"version": VERSION, "nnodes": self.nnodes, "world_size": self.world_size, "tp": self.tp,
                "pp": self.pp, "max_model_len": self.max_model_len, "kv_cache_dtype": self.kv_cache_dtype,
                "speculative_config": self.speculative, "compilation_config": self.compilation}

    def capture_sizes(self):
        tokens_per_step = self.max_num_seqs * (1 + self.num_spec_tokens)
        cap = min(512, max(8, -(-tokens_per_step // 8) * 8))
        return [1, 2, 4] + list(range(8, cap + 1, 8))

    def compilation_repr(self):
        rt = self.cudagraph
        sizes = self.capture_sizes()
        shown = {
            "level": None, "mode": _Repr(f"<CompilationMode.{COMPILE_MODES[rt.compile_mode]}: {rt.compile_mode}>"),
            "debug_dump_path": None, "cache_dir": "", "backend": "inductor", "custom_ops": ["none"],
            "splitting_ops": [], "use_inductor_graph_partition": False,
            "pass_config": {"fuse_norm_quant": False, "fuse_act_quant": False, "fuse_attn_quant": False,
                            "enable_sp": False, "fuse_gemm_comms": False, "fuse_allreduce_rms": False},
            "max_cudagraph_capture_size": sizes[-1],
            "cudagraph_mode": _Repr(f"<CUDAGraphMode.{rt.mode}: {MODE_VALUES[rt.mode]}>"),
            "cudagraph_implementation": rt.requested, "cudagraph_strict": rt.strict,
            "cudagraph_num_of_warmups": 1, "cudagraph_capture_sizes": sizes, "cudagraph_copy_inputs": False,
            "full_cuda_graph": False, "local_cache_dir": None,
        }
        for key, value in self.compilation.items():
            shown.setdefault(key, value)
        return repr(shown)

    def engine_config_line(self):
        spec = "None"
        if self.speculative:
            spec = (f"SpeculativeConfig(method={self.spec_method!r}, model={self.model!r}, "
                    f"num_spec_tokens={self.num_spec_tokens})")
        names = self.served_names[0] if len(self.served_names) == 1 else self.served_names
        return (
            f"Initializing a V1 LLM engine (v{VERSION}) with config: model={self.model!r}, "
            f"speculative_config={spec}, tokenizer={self.model!r}, skip_tokenizer_init=False, "
            f"tokenizer_mode={self.tokenizer_mode}, revision=None, tokenizer_revision=None, "
            f"trust_remote_code={self.trust_remote_code}, dtype=torch.bfloat16, max_seq_len={self.max_model_len}, "
            f"download_dir=None, load_format={self.load_format}, tensor_parallel_size={self.tp}, "
            f"pipeline_parallel_size={self.pp}, data_parallel_size=1, disable_custom_all_reduce=False, "
            f"quantization=deepseek_v4_fp8, enforce_eager={self.enforce_eager}, kv_cache_dtype={self.kv_cache_dtype}, "
            f"device_config=cuda, structured_outputs_config=StructuredOutputsConfig(backend='auto', "
            f"disable_fallback=False, disable_any_whitespace=False, disable_additional_properties=False, "
            f"reasoning_parser={self.reasoning_parser or ''!r}), observability_config=ObservabilityConfig("
            f"show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, collect_detailed_traces=None), "
            f"seed=0, served_model_name={names}, enable_prefix_caching={self.enable_prefix_caching}, "
            f"enable_chunked_prefill=True, pooler_config=None, compilation_config={self.compilation_repr()}"
        )

    def check_kv_capacity(self):
        """ValueError text of vLLM's kv_cache_utils when one max-length request does not fit."""
        if self.kv_tokens >= self.max_model_len:
            return
        needed = self.max_model_len * KV_BYTES_PER_TOKEN / GIB
        available = self.kv_tokens * KV_BYTES_PER_TOKEN / GIB
        raise ConfigError(
            f"To serve at least one request with the models's max seq len ({self.max_model_len}), "
            f"({needed:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({available:.2f} GiB). Based on the available memory, the estimated maximum model length is "
            f"{self.kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            f"initializing the engine.")


def _check_topology(tp, pp, nnodes, backend):
    world = tp * pp
    if world > nnodes * GPUS_PER_NODE:
        local = -(-world // nnodes)
        raise ConfigError(f"World size ({local}) is larger than the number of available GPUs "
                          f"({GPUS_PER_NODE}) in this node.")
    if world < nnodes:
        raise ConfigError(f"nnodes ({nnodes}) is larger than the world size ({world} = tensor_parallel_size {tp} "
                          f"x pipeline_parallel_size {pp}); every DGX Spark node holds one GPU.")
    if backend == "ray":
        raise ConfigError("Failed to import Ray: No module named 'ray'. Please install Ray with `pip install ray`.")
    if backend in ("uni", "external_launcher") and world > 1:
        raise ConfigError(f"distributed_executor_backend={backend} does not support a world size of {world}.")


def from_args(args, env=None, kv_tokens_override=None):
    """EngineConfig of parsed ``vllm serve`` arguments; ConfigError like the real start-up."""
    env = os.environ if env is None else env
    _check_topology(args.tensor_parallel_size, args.pipeline_parallel_size, args.nnodes,
                    args.distributed_executor_backend)
    if args.model.startswith(("/", ".")) and not os.path.isdir(args.model):
        raise ConfigError(f"Invalid repository ID or local directory specified: '{args.model}'. Please verify "
                          "the following requirements: 1. Provide a valid Hugging Face repository ID. "
                          "2. Specify a local directory that contains a recognized configuration file.")
    max_model_len = MODEL_MAX_LEN if args.max_model_len in (None, -1) else args.max_model_len
    if max_model_len > MODEL_MAX_LEN and env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1":
        raise ConfigError(f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
                          f"(max_position_embeddings={MODEL_MAX_LEN} or model_max_length=None in model's "
                          "config.json). To allow overriding this maximum, set the env var "
                          "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")
    compilation = args.compilation_config or {}
    cudagraph = resolve(compilation, args.optimization_level, args.enforce_eager, env)
    kv_tokens = kv_capacity_tokens(args.gpu_memory_utilization, args.kv_cache_memory_bytes, kv_tokens_override)
    return EngineConfig(
        model=args.model, served_names=args.served_model_name or [args.model], host=args.host, port=args.port,
        tp=args.tensor_parallel_size, pp=args.pipeline_parallel_size, nnodes=args.nnodes, node_rank=args.node_rank,
        master_addr=args.master_addr, master_port=args.master_port, headless=args.headless,
        kv_cache_dtype=args.kv_cache_dtype, block_size=args.block_size or 16, max_model_len=max_model_len,
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization, kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        enable_prefix_caching=bool(args.enable_prefix_caching), speculative=args.speculative_config,
        compilation=compilation, optimization_level=args.optimization_level,
        performance_mode=args.performance_mode, enforce_eager=bool(args.enforce_eager),
        tokenizer_mode=args.tokenizer_mode, trust_remote_code=bool(args.trust_remote_code),
        load_format=args.load_format, backend=args.distributed_executor_backend or "mp",
        moe_backend=args.moe_backend, tool_call_parser=args.tool_call_parser,
        enable_auto_tool_choice=bool(args.enable_auto_tool_choice), reasoning_parser=args.reasoning_parser,
        default_chat_template_kwargs=args.default_chat_template_kwargs or {},
        enable_flashinfer_autotune=bool(args.enable_flashinfer_autotune),
        api_key=args.api_key or env.get("VLLM_API_KEY") or None, kv_tokens=kv_tokens, cudagraph=cudagraph,
        non_default_args=getattr(args, "non_default", {}),
    )
