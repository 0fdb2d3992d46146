"""Runtime state of a serving head: admission, generation sessions, metrics, engine death.

A request is admitted when one of ``--max-num-seqs`` slots is free (until then it counts as
waiting).  Its output is computed up front by ``model.generate`` and then released token by
token, ``DSPARK_SIM_TOKEN_DELAY_S`` apart, so streaming, TTFT and the running/waiting gauges
behave like a real server.  The prefix cache is simulated with hashes of full blocks.
"""
import hashlib
import threading
import time
from array import array
from collections import OrderedDict

from . import model
from .faults import DEATH_GRACE_S, STALL_S
from .logs import traceback_text
from .metrics import Metrics

PREFIX_CACHE_MAX_BLOCKS = 200_000
PKG = "/usr/local/lib/python3.12/dist-packages/vllm"
DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


class EngineDead(Exception):
    def __init__(self):
        super().__init__(DEAD_MESSAGE)


class ClientGone(ConnectionResetError):
    """The client of a non-streamed request has gone: the request is aborted, as vLLM's API server does (its
    completion and chat handlers are wrapped in ``with_cancellation``, which cancels the handler, and so the
    request, when the connection closes). A streamed request ends the same way when a chunk finds no client."""


class Engine:
    def __init__(self, cfg, settings, procs, lifecycle):
        self.cfg, self.settings, self.procs, self.lifecycle = cfg, settings, procs, lifecycle
        self.metrics = Metrics(cfg)
        self.peers = []
        self.dead = False
        self.started = time.time()
        self._slots = threading.Semaphore(cfg.max_num_seqs)
        self._lock = threading.Lock()
        self._finished = 0
        self._replayed = False
        self._steps = 0
        self._prefix = OrderedDict()

    # ---- cross-rank ------------------------------------------------------------------------
    def broadcast(self, msg):
        for link in list(self.peers):
            link.send(msg)

    def log_replay(self):
        rt = self.cfg.cudagraph
        if rt.graphs_enabled:
            self.procs.worker.info("gpu_model_runner.py:4288",
                                   f"CUDA_GRAPH_REPLAY implementation={rt.resolved} status=observed")

    def _first_replay(self):
        with self._lock:
            if self._replayed:
                return
            self._replayed = True
        self.log_replay()
        self.broadcast({"type": "replay"})

    def step(self):
        """Start a generation request on every rank: one round trip (``step`` / ``step_done``), as
        vLLM's executor RPC is; returns once every peer has answered (see :meth:`wait_for_peers`)."""
        with self._lock:
            self._steps += 1
            step_id = self._steps
        self.broadcast({"type": "step", "id": step_id})
        self.wait_for_peers(step_id)

    def wait_for_peers(self, step_id=0):
        """A model step needs every rank (an all-reduce per layer): while a peer has not answered step
        ``step_id`` or has been silent for STALL_S, the step waits, as vLLM's does on a wedged NCCL peer;
        the API keeps answering. A step that has waited the execute timeout
        (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS) kills the engine with vLLM's TimeoutError. Raises EngineDead."""
        started = None
        while True:
            if self.dead:
                raise EngineDead()
            waiting = [link.peer_rank for link in list(self.peers)
                       if link.acked < step_id or link.silent_for() >= STALL_S]
            if not waiting:
                return
            now = time.monotonic()
            started = now if started is None else started
            if now - started >= self.settings.execute_timeout_s:
                self.die(f"RPC call to sample_tokens timed out after {self.settings.execute_timeout_s:g} s "
                         f"(no answer from rank(s) {waiting})", exception="TimeoutError")
                raise EngineDead()
            time.sleep(0.01)

    # ---- death -----------------------------------------------------------------------------
    def die(self, reason, grace_s=DEATH_GRACE_S, exception="RuntimeError"):
        """Mark the engine dead (/health 503), log vLLM's errors and exit 1 after ``grace_s``."""
        with self._lock:
            if self.dead:
                return
            self.dead = True
        self.procs.core.error("core.py:935", "EngineCore encountered a fatal error.\n" + traceback_text(
            [(f"{PKG}/v1/engine/core.py", 926, "run_engine_core", "engine_core.run_busy_loop()"),
             (f"{PKG}/v1/executor/multiproc_executor.py", 298, "collective_rpc", "raise RuntimeError(...)")],
            f"{exception}: {reason}"))
        self.procs.api.error("async_llm.py:480", "AsyncLLM output_handler failed.\n" + traceback_text(
            [(f"{PKG}/v1/engine/async_llm.py", 439, "output_handler", "outputs = await engine_core.get_output_async()"),
             (f"{PKG}/v1/engine/core_client.py", 668, "get_output_async", "raise self._format_exception(outputs)")],
            f"vllm.v1.engine.exceptions.EngineDeadError: {DEAD_MESSAGE}"))
        timer = threading.Timer(grace_s, self.lifecycle.request_exit, (1, reason))
        timer.daemon = True
        timer.start()

    def _count_finished(self):
        with self._lock:
            self._finished += 1
            reached = self._finished == self.settings.die_after_requests
        if reached and self.settings.has("die_after_requests"):
            self.die(f"simulated engine death after {self._finished} generation requests "
                     f"(DSPARK_SIM_FAULT=die_after_requests)")

    # ---- prefix cache ----------------------------------------------------------------------
    def _prefix_hits(self, ids):
        if not self.cfg.enable_prefix_caching:
            return 0
        bs = self.cfg.block_size
        digest = hashlib.sha256()
        keys = []
        for start in range(0, len(ids) - bs + 1, bs):
            digest.update(array("Q", ids[start:start + bs]).tobytes())
            keys.append(digest.digest())
        hits = 0
        with self._lock:
            for key in keys:
                if key not in self._prefix:
                    break
                hits += bs
            for key in keys:
                self._prefix[key] = None
                self._prefix.move_to_end(key)
            limit = min(PREFIX_CACHE_MAX_BLOCKS, max(1, self.cfg.kv_tokens // bs))
            while len(self._prefix) > limit:
                self._prefix.popitem(last=False)
        return min(hits, max(0, len(ids) - 1))

    # ---- generation ------------------------------------------------------------------------
    def generate(self, prompt_ids, prompt_text, sampling, chat=None):
        """A Generation (iterate it to receive the tokens); raises EngineDead."""
        if self.dead:
            raise EngineDead()
        output = model.generate(prompt_ids, prompt_text, sampling, chat, self.cfg.num_spec_tokens)
        return Generation(self, prompt_ids, output, self.settings.token_delay_for(prompt_text))


class Generation:
    """One admitted request; iterating yields ``model.Token``s with the simulated pace."""

    def __init__(self, engine, prompt_ids, output, token_delay_s=0.0):
        self.engine, self.prompt_ids, self.output = engine, prompt_ids, output
        self.token_delay_s = token_delay_s
        self.arrival = time.monotonic()
        self.client_gone = None  # () -> bool, asked before each token of a non-streamed request (api.py)

    def __iter__(self):
        eng, m = self.engine, self.engine.metrics
        with m.lock:
            m.waiting += 1
        if len(self.prompt_ids) > eng.cfg.kv_tokens:
            # never schedulable (only possible with DSPARK_SIM_KV_OVERCOMMIT=1): it waits, as in vLLM's
            # scheduler, until the engine dies or exits, or its client gives up (then it is aborted)
            gone = False
            while not eng.dead and not gone:
                time.sleep(0.5)
                gone = self.client_gone is not None and self.client_gone()
            with m.lock:
                m.waiting -= 1
            raise ClientGone("the client closed the connection") if gone else EngineDead()
        eng._slots.acquire()
        with m.lock:
            m.waiting -= 1
            m.running += 1
            m.tokens_in_use += len(self.prompt_ids)
        emitted, completed, ttft, cached = 0, False, None, 0
        try:
            eng.step()
            eng._first_replay()
            cached = eng._prefix_hits(self.prompt_ids)
            for token in self.output.tokens:
                if self.token_delay_s:
                    time.sleep(self.token_delay_s)
                if self.client_gone is not None and self.client_gone():
                    raise ClientGone("the client closed the connection")
                eng.wait_for_peers()
                if ttft is None:
                    ttft = time.monotonic() - self.arrival
                emitted += 1
                with m.lock:
                    m.tokens_in_use += 1
                yield token
            completed = True
        finally:
            with m.lock:
                m.running -= 1
                m.tokens_in_use -= len(self.prompt_ids) + emitted
            eng._slots.release()
            reason = self.output.engine_finish_reason if completed else "abort"
            m.record_finish(len(self.prompt_ids), emitted, reason, self.output.spec if completed else None,
                            ttft, time.monotonic() - self.arrival, cached)
            if completed:
                eng._count_finished()
