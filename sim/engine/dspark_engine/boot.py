"""Start-up sequence and lifecycle of one rank (``vllm serve`` after argument parsing).

Head (rank 0): version and args lines -> engine config -> wait for the workers (TCP join) ->
NCCL, model loading, KV cache and CUDA-graph capture lines (``DSPARK_SIM_STARTUP_DELAY_S``
is spent while "loading weights") -> wait for every worker's ``ready`` -> bind the API port
and log the API server lines.  Its HTTP port does not listen before that.
Headless worker (rank >= 1): "Launching vLLM ... headless" -> connect to the head -> the same
worker lines -> ``ready`` -> idle.

Exit codes: 0 after SIGTERM/SIGINT (or, on a worker, after the head's orderly shutdown); 1
for start-up errors, a lost peer, a join timeout and engine death; unknown DSPARK_SIM_*
settings exit 1 before anything else.  Usage errors exit 2 in cli.py.
"""
import glob
import os
import signal
import socket
import sys
import time

from . import VERSION, config, faults, join, logs, server
from .engine import PKG, Engine
from .lifecycle import ExitRequested, Lifecycle
from .logs import Procs, traceback_text
from .metrics import StatsLogger

CONFIG_FRAMES = [
    ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    (f"{PKG}/entrypoints/cli/main.py", 73, "main", "args.dispatch_function(args)"),
    (f"{PKG}/entrypoints/cli/serve.py", 60, "cmd", "uvloop.run(run_server(args))"),
    (f"{PKG}/engine/arg_utils.py", 1421, "create_engine_config", "config = VllmConfig("),
]
CORE_FRAMES = [
    (f"{PKG}/v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
    (f"{PKG}/v1/engine/core.py", 498, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
    (f"{PKG}/v1/engine/core.py", 92, "__init__", "self._initialize_kv_caches(vllm_config)"),
]
WORKER_FRAMES = [
    (f"{PKG}/v1/executor/multiproc_executor.py", 571, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
    (f"{PKG}/v1/worker/gpu_worker.py", 384, "compile_or_warm_up_model", "self.model_runner.capture_model()"),
]
JOIN_FRAMES = [
    (f"{PKG}/distributed/parallel_state.py", 1180, "init_distributed_environment",
     "torch.distributed.init_process_group("),
    ("/usr/local/lib/python3.12/dist-packages/torch/distributed/rendezvous.py", 269, "_tcp_rendezvous_handler",
     "store = _create_c10d_store("),
]
NCCL_VERSION = "2.30.4+cuda13.0"
MODEL_GIB = 77.71


def _local_ip(addr, port):
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((addr, port))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class Boot:
    def __init__(self, args, settings):
        self.args, self.settings = args, settings
        self.lc = Lifecycle()
        self.procs = Procs(args.headless, config.worker_process_name(
            args.tensor_parallel_size, args.pipeline_parallel_size, args.node_rank))
        self.cfg = self.engine = self.http = None
        self.ready = set()
        self.steps = 0  # generation requests the head has started (a worker counts them)

    # ---- failure and exit ------------------------------------------------------------------
    def _fail(self, proc, where, headline, frames, exception):
        """Log a start-up failure the vLLM way, tell the peers, and exit 1."""
        proc.error(where, headline + "\n" + traceback_text(frames, exception))
        if not self.args.headless and proc is not self.procs.api:
            self.procs.api.raw(traceback_text(CONFIG_FRAMES[:3], "RuntimeError: Engine core initialization failed. "
                                              "See root cause above. Failed core proc(s): {}"), stderr=True)
        if self.engine:
            self.engine.broadcast({"type": "error", "message": exception})
        raise ExitRequested(1, exception)

    def _exit(self, code, reason):
        if code == 0:
            if self.http:
                api = self.procs.api
                api.info("launcher.py:99", "Shutting down FastAPI HTTP server.")
                for line in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
                             f"Finished server process [{os.getpid()}]"):
                    api.uvicorn(line)
            if self.engine and self.cfg.is_head:
                self.engine.broadcast({"type": "shutdown"})
        links = self.engine.peers if self.engine else []
        for link in links:  # after the last message (error or shutdown): a clean close, never a reset
            link.finish()
        deadline = time.monotonic() + 1.0
        for link in links:
            link.wait_ended(max(0.0, deadline - time.monotonic()))
        logs.flush()
        os._exit(code)

    # ---- peers -----------------------------------------------------------------------------
    def _on_message(self, link, msg):
        kind = msg["type"]
        if kind == "ready":
            self.ready.add(link.peer_rank)
        elif kind == "replay":
            self.engine.log_replay()
        elif kind == "step":
            self.steps += 1
            if self.settings.has("worker_hangs_after_requests") and self.steps >= self.settings.hang_after_requests:
                link.frozen = True  # stalled: no answer, no heartbeat, no log line; the process lives on
            else:
                link.send({"type": "step_done", "id": msg.get("id")})
        elif kind == "step_done":
            link.acked = max(link.acked, int(msg.get("id") or 0))
        elif kind == "error":
            link.closing = True
            self.procs.core.error("multiproc_executor.py:246",
                                  f"Node rank {link.peer_rank} failed: {msg.get('message')}; shutting down.")
            self.lc.request_exit(1, f"peer rank {link.peer_rank} failed")
        elif kind == "shutdown":
            link.closing = True
            self.procs.core.info("multiproc_executor.py:252", "The head node shut down; shutting down the worker.")
            self.lc.request_exit(0, "head shutdown")

    def _on_lost(self, link, reason):
        me, peer = self.cfg.node_rank, link.peer_rank
        net = "NET/Socket" if os.environ.get("NCCL_IB_DISABLE") == "1" else "NET/IB"
        stamp = time.strftime("%m%d %H:%M:%S") + f".{int(time.time() * 1e6) % 1000000:06d}"
        self.procs.worker.raw(
            f"[rank{me}]:[E{stamp} {self.procs.worker.pid} ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) "
            f"Rank {me}] Process group watchdog thread terminated with exception: NCCL error: remote process exited "
            f"or there was a network error, NCCL version {NCCL_VERSION}\n"
            f"ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
            f"prematurely.\nLast error:\n{net} : peer rank {peer} disconnected ({reason})", stderr=True)
        if self.cfg.is_head:
            self.engine.die(f"peer rank {peer} disconnected ({reason})", grace_s=0)
        else:
            self.procs.core.error("multiproc_executor.py:246", f"Worker lost peer rank {peer} ({reason}); "
                                                               "shutting down.")
            self.lc.request_exit(1, f"peer rank {peer} disconnected")

    def _link(self, channel, rank):
        link = join.PeerLink(channel, rank, self.settings.heartbeat_interval_s, self.settings.heartbeat_timeout_s,
                             self._on_message, self._on_lost)
        self.engine.peers.append(link)
        link.start()

    # ---- start-up phases -------------------------------------------------------------------
    def _configure(self):
        api, args = self.procs.api, self.args
        if args.headless:
            api.info("serve.py:88", f"Launching vLLM (v{VERSION}) headless multiproc executor, with head node address "
                                    f"{args.master_addr}:{args.master_port} for torch.distributed process group.")
        else:
            api.info("api_server.py:1896", f"vLLM API server version {VERSION}")
        api.info("utils.py:326", f"non-default args: {args.non_default}")
        try:
            self.cfg = config.from_args(args, os.environ, self.settings.kv_tokens)
        except ValueError as exc:
            api.raw(traceback_text(CONFIG_FRAMES, f"ValueError: {exc}"), stderr=True)
            raise ExitRequested(1, str(exc)) from None
        self.engine = Engine(self.cfg, self.settings, self.procs, self.lc)
        core = self.procs.core
        for warning in self.cfg.cudagraph.warnings:
            core.warning("compilation.py:612", warning)
        if self.cfg.is_head and self.settings.has("worker_never_joins"):
            core.warning("faults.py:1", "DSPARK_SIM_FAULT=worker_never_joins only applies to a headless worker")
        core.info("core.py:77", self.cfg.engine_config_line())
        if self.settings.has("crash_on_start"):
            self._fail(core if self.cfg.is_head else self.procs.worker, "core.py:708", "EngineCore failed to start.",
                       CORE_FRAMES[:1], "RuntimeError: CUDA error: an illegal memory access was encountered "
                                        "(DSPARK_SIM_FAULT=crash_on_start)")

    def _join(self):
        cfg, timeout = self.cfg, self.settings.join_timeout_s
        if cfg.nnodes == 1:
            return
        try:
            if cfg.is_head:
                for rank, channel in sorted(join.accept_workers(cfg, self.procs.core, self.lc, timeout).items()):
                    self._link(channel, rank)
            else:
                if self.settings.has("worker_never_joins"):
                    self.lc.sleep(float("inf"))
                self._link(join.connect_to_head(cfg, self.procs.api, self.lc, timeout), 0)
        except join.JoinError as exc:
            self._fail(self.procs.core if cfg.is_head else self.procs.worker, "parallel_state.py:1180",
                       "Failed to initialize the torch.distributed process group.", JOIN_FRAMES, str(exc))

    def _nccl(self):
        cfg, w, env = self.cfg, self.procs.worker, os.environ
        ib = env.get("NCCL_IB_DISABLE", "0") != "1"
        ifname = env.get("NCCL_SOCKET_IFNAME", "eth0").split(",")[0].lstrip("=^") or "eth0"
        ip = _local_ip(cfg.master_addr, cfg.master_port)
        me, ws = cfg.node_rank, cfg.world_size
        w.nccl(f"Bootstrap: Using {ifname}:{ip}<0>")
        w.nccl(f"NCCL version {NCCL_VERSION}")
        if ib:
            hca = env.get("NCCL_IB_HCA", "rocep1s0f1").split(",")[0].lstrip("=^") or "rocep1s0f1"
            w.nccl(f"NET/IB : Using [0]{hca}:1/RoCE [RO]; OOB {ifname}:{ip}<0>")
            w.nccl("Using network IB")
        else:
            w.nccl(f"NET/Socket : Using [0]{ifname}:{ip}<0>")
            w.nccl("Using network Socket")
        via = "NET/IB/0/GDRDMA" if ib else "NET/Socket/0"
        for channel in (0, 1):
            w.nccl(f"Channel {channel:02d}/0 : {me}[0] -> {(me + 1) % ws}[0] [send] via {via}")
            w.nccl(f"Channel {channel:02d}/0 : {(me - 1) % ws}[0] -> {me}[0] [receive] via {via}")
        w.nccl(f"Connected all rings, use ring PXN 0 GDR {1 if ib else 0}")
        w.nccl(f"ncclCommInitRankConfig comm 0x{0x5600_0000 + me:x} rank {me} nranks {ws} cudaDev 0 nvmlDev 0 "
               f"busId f01000 commId 0x7d3a9c41e2b05f18 - Init COMPLETE")

    def _load_model(self):
        cfg, w = self.cfg, self.procs.worker
        w.info("parallel_state.py:1208", f"world_size={cfg.world_size} rank={cfg.node_rank} local_rank=0 "
                                         f"distributed_init_method=tcp://{cfg.master_addr}:{cfg.master_port} "
                                         f"backend=nccl")
        if cfg.world_size > 1:
            self._nccl()
        w.info("parallel_state.py:1411", f"rank {cfg.node_rank} in world size {cfg.world_size} is assigned as DP "
                                         f"rank 0, PP rank {cfg.node_rank // cfg.tp}, TP rank {cfg.tp_rank}")
        w.info("gpu_model_runner.py:2338", f"Starting to load model {cfg.model}...")
        w.info("cuda.py:362", f"Using FLASHINFER_MLA_SPARSE_DSV4 attention backend (kv_cache_dtype="
                              f"{cfg.kv_cache_dtype}).")
        if cfg.moe_backend in (None, "auto", "flashinfer_b12x"):
            w.info("deepseek_v4.py:214", "Using B12X MoE backend (flashinfer_b12x, w4a16, fp4_e8m0_k32) for "
                                         "DeepseekV4 MoE layers")
        else:
            w.info("deepseek_v4.py:214", f"Using {cfg.moe_backend} MoE backend for DeepseekV4 MoE layers")
        if cfg.is_dspark:
            w.info("dspark.py:88", f"Loading DSpark speculator (method=dspark, num_speculative_tokens="
                                   f"{cfg.num_spec_tokens})")
            w.info("dspark.py:131", "Resolved DSpark draft architecture: DeepSeekV4DSparkModel")
        elif cfg.speculative:
            w.info("eagle.py:940", f"Loading speculator (method={cfg.spec_method}, num_speculative_tokens="
                                   f"{cfg.num_spec_tokens})")
        if self.settings.has("forbidden_marker"):
            w.warning("marlin_utils_fp4.py:201", "Your GPU does not have native support for FP4 computation; "
                                                 "weight-only FP4 compression will use the Marlin kernel. DSpark "
                                                 "drafter: fallback to eager for unsupported shapes.")
        start = time.monotonic()
        self._load_shards()
        elapsed = time.monotonic() - start
        w.info("default_loader.py:267", f"Loading weights took {elapsed:.2f} seconds")
        w.info("gpu_model_runner.py:2397", f"Model loading took {MODEL_GIB:.4f} GiB and {elapsed + 0.31:.6f} seconds")

    def _load_shards(self):
        """vLLM's shard progress bar (stderr, one line per update), spread over the start-up delay."""
        shards = len(glob.glob(os.path.join(self.cfg.model, "*.safetensors"))) or 1
        steps = min(shards, 8)
        start = time.monotonic()
        for step in range(steps + 1):
            done = shards * step // steps
            spent = time.monotonic() - start
            rate = f"{done / spent:5.2f}it/s" if spent > 0 and done else "?it/s"
            self.procs.worker.raw(f"Loading safetensors checkpoint shards: {100 * done // shards:3d}% Completed | "
                                  f"{done}/{shards} [00:{int(spent):02d}<00:00, {rate}]", stderr=True)
            if step < steps:
                self.lc.sleep(self.settings.startup_delay_s / steps)

    def _kv_cache(self):
        cfg, w = self.cfg, self.procs.worker
        gib = cfg.kv_tokens * config.KV_BYTES_PER_TOKEN / config.GIB
        if cfg.kv_cache_memory_bytes is not None:
            w.info("gpu_worker.py:280", f"reserved {cfg.kv_cache_memory_bytes / config.GIB:.1f} GiB for KV Cache as "
                                        "specified by kv_cache_memory_bytes config and skipped memory profiling. "
                                        "This does not respect the gpu_memory_utilization config.")
        else:
            w.info("gpu_worker.py:298", f"Available KV cache memory: {gib:.2f} GiB")
        if not cfg.is_head:
            return
        try:
            if self.settings.kv_overcommit and cfg.kv_tokens < cfg.max_model_len:
                self.procs.core.warning("kv_cache_utils.py:1081", f"The KV cache holds {cfg.kv_tokens:,} tokens, fewer "
                                        f"than max_model_len {cfg.max_model_len:,}; a request whose prompt does not "
                                        "fit stays waiting (DSPARK_SIM_KV_OVERCOMMIT=1).")
            else:
                cfg.check_kv_capacity()
        except config.ConfigError as exc:
            self._fail(self.procs.core, "core.py:708", "EngineCore failed to start.", CORE_FRAMES,
                       f"ValueError: {exc}")
        self.procs.core.info("kv_cache_utils.py:1087", f"GPU KV cache size: {cfg.kv_tokens:,} tokens, Maximum "
                                                       f"concurrency for {cfg.max_model_len:,} tokens per request: "
                                                       f"{cfg.kv_tokens / cfg.max_model_len:.2f}x")

    def _capture(self):
        cfg, rt, w = self.cfg, self.cfg.cudagraph, self.procs.worker
        if cfg.is_head:
            self.procs.core.info("vllm.py:611", rt.line())
        if rt.enforce_eager:
            self.procs.core.info("vllm.py:640", "Cudagraph is disabled under eager mode")
        mode = "PIECEWISE" if self.settings.has("wrong_cudagraph_mode") else rt.mode
        w.info("gpu_model_runner.py:4120", rt.line(mode))
        problems = rt.strict_violations()
        if problems:
            self._fail(w, "gpu_model_runner.py:4125", "CUDA graph runtime does not satisfy cudagraph_strict.",
                       WORKER_FRAMES, f"RuntimeError: cudagraph_strict: {'; '.join(problems)}")
        if not rt.graphs_enabled:
            return
        if rt.breakable:
            w.info("breakable_cudagraph.py:57", "Breakable CUDA graph enabled")
        if cfg.is_dspark:
            w.info("dspark.py:214", "Capturing model for DSpark speculator...")
        auxiliary = rt.auxiliary_line(mode, draft=cfg.is_dspark)
        if auxiliary:
            w.warning("breakable_cudagraph.py:131", auxiliary)
        n = len(cfg.capture_sizes())
        bars = {"PIECEWISE": ["mixed prefill-decode, PIECEWISE"], "FULL": ["mixed prefill-decode, FULL"],
                "FULL_DECODE_ONLY": ["decode, FULL"],
                "FULL_AND_PIECEWISE": ["mixed prefill-decode, PIECEWISE", "decode, FULL"]}[mode]
        for bar_label in bars:
            w.raw(f"Capturing CUDA graphs ({bar_label}): 100%|██████████| {n}/{n} [00:02<00:00, {n / 2:.2f}it/s]",
                  stderr=True)
        w.info("gpu_model_runner.py:4211", f"CUDA_GRAPH_CAPTURE implementation={rt.resolved} status=complete")
        w.info("gpu_model_runner.py:4230", "Graph capturing finished in 3 secs, took 0.95 GiB")

    def _wait_ready(self):
        expected = set(range(1, self.cfg.nnodes))
        deadline = time.monotonic() + self.settings.join_timeout_s
        while not expected <= self.ready:
            if time.monotonic() > deadline:
                self._fail(self.procs.core, "core.py:708", "EngineCore failed to start.", CORE_FRAMES,
                           f"TimeoutError: remote node(s) {sorted(expected - self.ready)} did not finish start-up")
            self.lc.sleep(0.02)

    def _serve(self):
        cfg, api = self.cfg, self.procs.api
        try:
            self.http = server.start(self.engine)
        except OSError as exc:
            self._fail(api, "api_server.py:1930", "Failed to start the API server.", CONFIG_FRAMES[:3],
                       f"OSError: [Errno {exc.errno}] {exc.strerror}")
        host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        api.info("api_server.py:1930", f"Starting vLLM API server 0 on http://{host}:{cfg.port}")
        api.info("launcher.py:37", "Available routes are:")
        for path, (methods, _unused) in server.ROUTES.items():
            api.info("launcher.py:45", f"Route: {path}, Methods: {', '.join(methods)}")
        api.uvicorn(f"Started server process [{os.getpid()}]")
        api.uvicorn("Waiting for application startup.")
        api.uvicorn("Application startup complete.")
        StatsLogger(self.engine.metrics, api).start()

    def start(self):
        self._configure()
        self._join()
        started = time.monotonic()
        self._load_model()
        self._kv_cache()
        self._capture()
        self.procs.core.info("core.py:210", f"init engine (profile, create kv cache, warmup model) took "
                                            f"{time.monotonic() - started + 1.5:.2f} seconds")
        if self.cfg.is_head:
            self._wait_ready()
            self._serve()
        else:
            self.engine.broadcast({"type": "ready"})
            if self.settings.has("worker_hangs_after_requests") and self.settings.hang_after_requests == 0:
                for link in self.engine.peers:  # stalls as soon as it has started: a pair hung while idle
                    link.frozen = True

    def run(self):
        signal.signal(signal.SIGTERM, self.lc.on_signal)
        signal.signal(signal.SIGINT, self.lc.on_signal)
        try:
            self.start()
            self.lc.sleep(float("inf"))
        except ExitRequested as exc:
            self._exit(exc.code, exc.reason)


def run(args):
    """Run ``vllm serve`` for parsed ``args``; never returns normally (exits the process)."""
    try:
        sys.stdout.reconfigure(errors="backslashreplace")
        sys.stderr.reconfigure(errors="backslashreplace")
    except (AttributeError, ValueError):
        pass
    try:
        settings = faults.load()
    except faults.SettingsError as exc:
        print(f"ERROR: refusing to start: {exc}", file=sys.stderr, flush=True)
        return 1
    Boot(args, settings).run()
    return 1
