"""Prometheus metrics of the head (``GET /metrics``), named and labelled like vLLM V1.

The text is what prometheus_client (0.22+) writes for vLLM's registry, as a real vLLM server
was seen to serve it: every series has the labels ``engine="0"`` and ``model_name="<first served
name>"``, except ``vllm:cache_config_info``, whose labels are the cache configuration (no
``model_name``).  The KV cache size is only there, in its ``kv_cache_size_tokens`` label: there is
no ``vllm:kv_cache_size_tokens`` series.  A counter family is declared under its ``_total`` name
(``# TYPE vllm:prompt_tokens_total counter``), values as Python floats ("12.0"); each counter and
histogram also has a ``<name>_created`` gauge (the start time, in Go's float format).
Spec-decode counters exist only with a speculative config.  A ``StatsLogger`` thread logs vLLM's
periodic stats lines.
"""
import re
import threading
import time

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
FINISH_REASONS = ("stop", "length", "abort")
_LE = re.compile(r',le="[^"]*"')


class Histogram:
    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, value):
        self.count += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


class Metrics:
    def __init__(self, cfg):
        self.cfg = cfg
        self.lock = threading.Lock()
        self.running = self.waiting = 0
        self.tokens_in_use = 0
        self.prompt_tokens = self.generation_tokens = 0
        self.success = dict.fromkeys(FINISH_REASONS, 0)
        self.prefix_queries = self.prefix_hits = 0
        self.drafts = self.draft_tokens = self.accepted = 0
        self.accepted_per_pos = [0] * cfg.num_spec_tokens
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.created = time.time()

    def kv_usage(self):
        return min(1.0, self.tokens_in_use / self.cfg.kv_tokens) if self.cfg.kv_tokens else 0.0

    def record_finish(self, prompt_tokens, output_tokens, reason, spec, ttft, e2e, cached_tokens):
        with self.lock:
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += output_tokens
            self.success[reason] += 1
            self.prefix_queries += prompt_tokens
            self.prefix_hits += cached_tokens
            if spec is not None:
                self.drafts += spec.drafts
                self.draft_tokens += spec.draft_tokens
                self.accepted += spec.accepted
                for pos, n in enumerate(spec.per_position[:len(self.accepted_per_pos)]):
                    self.accepted_per_pos[pos] += n
            if ttft is not None:
                self.ttft.observe(ttft)
            self.e2e.observe(e2e)

    def render(self):
        cfg = self.cfg
        base = f'engine="0",model_name="{_escape(cfg.served_name)}"'
        out = []

        def family(name, kind, helptext, samples, own_labels=False):
            declared = name + "_total" if kind == "counter" else name
            out.append(f"# HELP {declared} {helptext}")
            out.append(f"# TYPE {declared} {kind}")
            label_sets = []
            for suffix, labels, value in samples:
                label_text = labels if own_labels else base + ("," + labels if labels else "")
                out.append(f"{name}{suffix}{{{label_text}}} {value}")
                series = _LE.sub("", label_text)
                if series not in label_sets:
                    label_sets.append(series)
            if kind in ("counter", "histogram"):
                out.append(f"# HELP {name}_created {helptext}")
                out.append(f"# TYPE {name}_created gauge")
                out.extend(f"{name}_created{{{series}}} {_go_float(self.created)}" for series in label_sets)

        with self.lock:
            family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                   [("", "", float(self.running))])
            family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                   [("", "", float(self.waiting))])
            family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
                   [("", "", float(self.kv_usage()))])
            info = {"block_size": cfg.block_size, "cache_dtype": cfg.kv_cache_dtype,
                    "enable_prefix_caching": cfg.enable_prefix_caching,
                    "gpu_memory_utilization": cfg.gpu_memory_utilization,
                    "kv_cache_memory_bytes": cfg.kv_cache_memory_bytes,
                    "kv_cache_size_tokens": cfg.kv_tokens, "num_gpu_blocks": cfg.kv_tokens // cfg.block_size,
                    "num_cpu_blocks": None}
            info["engine"] = "0"
            info_labels = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(info.items()))
            family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
                   [("", info_labels, 1.0)], own_labels=True)
            family("vllm:num_preemptions", "counter", "Cumulative number of preemptions from the engine.",
                   [("_total", "", 0.0)])
            family("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.",
                   [("_total", "", float(self.prompt_tokens))])
            family("vllm:generation_tokens", "counter", "Number of generation tokens processed.",
                   [("_total", "", float(self.generation_tokens))])
            family("vllm:request_success", "counter", "Count of successfully processed requests.",
                   [("_total", f'finished_reason="{r}"', float(n)) for r, n in self.success.items()])
            if cfg.enable_prefix_caching:
                family("vllm:prefix_cache_queries", "counter", "Prefix cache queries, in terms of number of "
                       "queried tokens.", [("_total", "", float(self.prefix_queries))])
                family("vllm:prefix_cache_hits", "counter", "Prefix cache hits, in terms of number of cached "
                       "tokens.", [("_total", "", float(self.prefix_hits))])
            if cfg.speculative:
                family("vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts.",
                       [("_total", "", float(self.drafts))])
                family("vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.",
                       [("_total", "", float(self.draft_tokens))])
                family("vllm:spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.",
                       [("_total", "", float(self.accepted))])
                family("vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
                       "Accepted tokens per draft position.",
                       [("_total", f'position="{i}"', float(n)) for i, n in enumerate(self.accepted_per_pos)])
            for name, helptext, hist in (
                    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
                    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e)):
                samples = [("_bucket", f'le="{b}"', float(c)) for b, c in zip(hist.buckets, hist.counts)]
                samples += [("_bucket", 'le="+Inf"', float(hist.count)), ("_count", "", float(hist.count)),
                            ("_sum", "", float(hist.sum))]
                family(name, "histogram", helptext, samples)
        return "\n".join(out) + "\n"

    def snapshot(self):
        with self.lock:
            return (self.prompt_tokens, self.generation_tokens, self.running, self.waiting, self.kv_usage(),
                    self.prefix_queries, self.prefix_hits, self.drafts, self.draft_tokens, self.accepted,
                    list(self.accepted_per_pos))


def _go_float(value):
    """A float as prometheus_client prints it (Go's format): a million or more in exponent form with
    the shortest digits, 1764770000.5 -> 1.7647700005e+09; smaller values as Python writes them."""
    text = repr(float(value))
    if value < 1e6 or "e" in text:
        return text
    whole, fraction = text.split(".", 1)
    digits = (whole + fraction).rstrip("0")
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{mantissa}e+{len(whole) - 1:02d}"


def _escape(text):
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class StatsLogger(threading.Thread):
    """vLLM's periodic ``Engine 000: Avg prompt throughput ...`` lines, only when not idle."""

    def __init__(self, metrics, log, interval=5.0):
        super().__init__(name="stats-logger", daemon=True)
        self.metrics, self.log, self.interval = metrics, log, interval

    def run(self):
        last, last_t = self.metrics.snapshot(), time.monotonic()
        while True:
            time.sleep(self.interval)
            now, now_t = self.metrics.snapshot(), time.monotonic()
            if now[:4] == last[:4] and now[2] == 0:
                last, last_t = now, now_t
                continue
            dt = max(now_t - last_t, 1e-9)
            queries, hits = now[5] - last[5], now[6] - last[6]
            self.log.info("loggers.py:236",
                          f"Engine 000: Avg prompt throughput: {(now[0] - last[0]) / dt:.1f} tokens/s, "
                          f"Avg generation throughput: {(now[1] - last[1]) / dt:.1f} tokens/s, Running: {now[2]} "
                          f"reqs, Waiting: {now[3]} reqs, GPU KV cache usage: {now[4] * 100:.1f}%, Prefix cache "
                          f"hit rate: {100.0 * hits / queries if queries else 0.0:.1f}%")
            drafts, drafted, accepted = now[7] - last[7], now[8] - last[8], now[9] - last[9]
            if drafts:
                per_pos = [round((a - b) / drafts, 3) for a, b in zip(now[10], last[10])]
                self.log.info("metrics.py:96",
                              f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
                              f"Accepted throughput: {accepted / dt:.2f} tokens/s, Drafted throughput: "
                              f"{drafted / dt:.2f} tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} "
                              f"tokens, Per-position acceptance rate: {', '.join(f'{p:.3f}' for p in per_pos)}, "
                              f"Avg Draft acceptance rate: {100.0 * accepted / drafted:.1f}%")
            last, last_t = now, now_t
