"""Where an engine is in its start-up, read from vLLM's own log lines: the furthest phase any line
reaches whatever the order of the lines, the largest n/N of a counted phase, the KV cache size, the
last error line, and the progress bar."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.engine._startup import PHASES, Phase, phase_of, progress_bar

API = "(APIServer pid=1) INFO 12-04 18:50:{s:02d} [{src}] {text}"
CORE = "(EngineCore_DP0 pid=211) INFO 12-04 18:50:{s:02d} [{src}] {text}"
WORKER = "(Worker pid=312) INFO 12-04 18:50:{s:02d} [{src}] {text}"

HEAD_VERSION = API.format(s=1, src="api_server.py:1896", text="vLLM API server version 0.32.0")
NON_DEFAULT = API.format(s=1, src="utils.py:328", text="non-default args: {'model': '/model', 'port': 8888}")
CONFIGURED = CORE.format(s=3, src="core.py:77", text="Initializing a V1 LLM engine (v0.32.0) with config: model='/model', "
                         "speculative_config=None, tokenizer='/model', skip_tokenizer_init=False")
JOINED = WORKER.format(s=5, src="parallel_state.py:1208", text="world_size=2 rank=0 local_rank=0 "
                       "distributed_init_method=tcp://10.0.0.1:25000 backend=nccl")
NCCL = "spark-a-head:312:312 [0] NCCL INFO ncclCommInitRankConfig comm 0x5b3c rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE"
LOADING = WORKER.format(s=6, src="gpu_model_runner.py:2338", text="Starting to load model /model...")
SHARDS = "Loading safetensors checkpoint shards:  {pct}% Completed | {n}/48 [00:03<00:03, 7.10it/s]"
LOADED = WORKER.format(s=20, src="gpu_model_runner.py:2397", text="Model loading took 71.2345 GiB and 12.310000 seconds")
KV = CORE.format(s=30, src="kv_cache_utils.py:1087", text="GPU KV cache size: 425,424 tokens, "
                 "Maximum concurrency for 65,536 tokens per request: 6.49x")
GRAPHS = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  {pct}%|####      | {n}/67 [00:02<00:03, 11.2it/s]"
CAPTURED = WORKER.format(s=40, src="gpu_model_runner.py:3480", text="Graph capturing finished in 7 secs, took 0.95 GiB")
EAGER = CORE.format(s=40, src="gpu_model_runner.py:3500", text="Cudagraph is disabled under eager mode")
INITIALISED = CORE.format(s=41, src="core.py:210", text="init engine (profile, create kv cache, warmup model) took 25.99 seconds")
API_STARTING = API.format(s=42, src="api_server.py:1930", text="Starting vLLM API server 0 on http://0.0.0.0:8888")
API_UP = "INFO:     Application startup complete."
HEADLESS = ("(APIServer pid=1) INFO 12-04 18:50:01 [serve.py:88] Launching vLLM (v0.32.0) headless multiproc executor, "
            "with head node address 10.0.0.1:25000 for torch.distributed process group.")
DP_HEADLESS = "INFO 12-04 18:50:01 [serve.py:90] Launching 2 data parallel engine(s) in headless mode"

UNRELATED = [
    API.format(s=2, src="api_server.py:1897", text="args: Namespace(subparser='serve')"),
    WORKER.format(s=7, src="cuda.py:398", text="Using FLASH_ATTN backend."),
    "INFO:     127.0.0.1:40312 - \"GET /v1/models HTTP/1.1\" 200 OK",
    "",
    "   ",
]

# Each phase but "starting", with one log line that reaches it.
REACHED_BY = {
    "launched": [HEAD_VERSION, NON_DEFAULT, HEADLESS, DP_HEADLESS],
    "configured": [CONFIGURED],
    "joined": [JOINED, NCCL],
    "loading": [LOADING],
    "weights": [SHARDS.format(pct=50, n=24)],
    "loaded": [LOADED],
    "kv_cache": [KV],
    "graphs": [GRAPHS.format(pct=40, n=27)],
    "captured": [CAPTURED, EAGER],
    "initialised": [INITIALISED],
    "api_starting": [API_STARTING],
    "api_up": [API_UP],
}


def test_no_lines_is_starting():
    assert phase_of([]) == Phase("starting", "starting", None, None, None, None)
    assert phase_of([]).text() == "starting"


def test_unrelated_lines_are_ignored():
    assert phase_of(UNRELATED) == Phase("starting", "starting", None, None, None, None)
    assert phase_of(UNRELATED + [LOADING] + UNRELATED).key == "loading"


def test_phases_are_in_start_up_order_and_all_have_a_line():
    assert PHASES[0] == "starting"
    assert list(PHASES[1:]) == list(REACHED_BY)


@pytest.mark.parametrize(("key", "line"), [(key, line) for key, lines in REACHED_BY.items() for line in lines])
def test_every_phase_is_reachable(key, line):
    phase = phase_of([line])
    assert phase.key == key
    assert phase.error is None
    assert phase.text().startswith(phase.label)


def test_labels_read_for_the_operator():
    assert phase_of([LOADING]).text() == "loading the model"
    assert phase_of([LOADED]).text() == "model loaded"
    assert phase_of([API_UP]).text() == "API up"
    assert phase_of([HEADLESS]).label == "launched"


def test_furthest_phase_wins_whatever_the_order():
    lines = [HEAD_VERSION, CONFIGURED, JOINED, LOADING, SHARDS.format(pct=100, n=48), LOADED, KV]
    assert phase_of(lines).key == "kv_cache"
    assert phase_of(lines[::-1]).key == "kv_cache"
    assert phase_of([KV, HEAD_VERSION]).key == "kv_cache"


def test_stdout_then_stderr_progress_bars_concatenated():
    """vLLM writes its lines to stdout and its bars to stderr: a tail joining the two puts the bars
    last, though the engine's stdout may be further on."""
    stdout = [HEAD_VERSION, CONFIGURED, JOINED, LOADING, LOADED, KV]
    stderr = [SHARDS.format(pct=p, n=n) for p, n in ((0, 0), (50, 24), (100, 48))]
    stderr += [GRAPHS.format(pct=p, n=n) for p, n in ((0, 0), (40, 27))]
    phase = phase_of(stdout + stderr)
    assert phase.key == "graphs" and (phase.done, phase.total) == (27, 67)
    assert phase.text() == "capturing CUDA graphs 27/67"
    # the bars of a phase the stdout lines have already passed do not pull it back
    assert phase_of([HEAD_VERSION, LOADED] + stderr[:3]).key == "loaded"
    assert phase_of([HEAD_VERSION, LOADED] + stderr[:3]).total is None


def test_the_latest_bar_is_shown_so_a_second_capture_pass_counts_from_its_start():
    shards = [SHARDS.format(pct=p, n=n) for p, n in ((50, 24), (100, 48))]
    phase = phase_of(shards)
    assert phase.key == "weights" and (phase.done, phase.total) == (48, 48)
    assert phase.text() == "loading weights 48/48"
    piecewise = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67 [00:05<00:00, 12.1it/s]"
    full = "Capturing CUDA graphs (decode, FULL):  40%|####      | 14/35 [00:01<00:01, 11.0it/s]"
    assert phase_of([piecewise, full]).text() == "capturing CUDA graphs 14/35"
    assert phase_of([LOADING, piecewise]).text() == "capturing CUDA graphs 67/67"


def test_count_of_a_phase_passed_is_not_shown():
    phase = phase_of([SHARDS.format(pct=50, n=24), LOADED])
    assert phase.key == "loaded" and phase.done is None and phase.total is None
    assert phase.text() == "model loaded"


def test_kv_cache_detail():
    phase = phase_of([LOADED, KV])
    assert phase.key == "kv_cache" and phase.detail == "425,424 tokens"
    assert phase.text() == "KV cache sized (425,424 tokens)"
    assert "425,424 tokens" in phase.text()
    assert phase_of([KV, GRAPHS.format(pct=40, n=27)]).detail is None  # a later phase has no detail


def test_error_line_is_reported_and_the_phase_stays():
    error = ("(EngineCore_DP0 pid=211) ERROR 12-04 18:51:02 [core.py:708] EngineCore failed to start.")
    phase = phase_of([HEAD_VERSION, LOADING, SHARDS.format(pct=50, n=24), error])
    assert phase.key == "weights" and (phase.done, phase.total) == (24, 48)
    assert phase.error == error
    assert phase.text() == "loading weights 24/48"  # the error is not part of the phase text


@pytest.mark.parametrize("line", [
    "Traceback (most recent call last):",
    "ERROR 12-04 18:51:02 [core.py:708] EngineCore failed to start.",
    "(Worker pid=312) ERROR 12-04 18:51:02 [multiproc_executor.py:511] WorkerProc failed to start.",
    "  (APIServer pid=1) ERROR 12-04 18:51:02 [api_server.py:1900] bad",
    "Error: engine core initialisation failed",
])
def test_error_lines(line):
    assert phase_of([LOADING, line]).error == line.strip()
    assert phase_of([LOADING, line]).key == "loading"


def test_last_error_line_wins_and_is_cut():
    long = "ERROR " + "x" * 400
    phase = phase_of(["Traceback (most recent call last):", LOADED, long])
    assert phase.key == "loaded" and phase.error == long[:200]


@pytest.mark.parametrize("line", [
    API.format(s=1, src="x.py:1", text="no ERROR here, just a word"),
    WORKER.format(s=1, src="x.py:1", text="error_count=0"),
    "WARNING 12-04 18:50:01 [x.py:1] errors are logged elsewhere",
])
def test_lines_that_only_mention_errors_are_not_errors(line):
    assert phase_of([line]).error is None


def test_traceback_still_places_the_phase():
    lines = [HEAD_VERSION, CONFIGURED, "Traceback (most recent call last):", '  File "x.py", line 1, in <module>']
    phase = phase_of(lines)
    assert phase.key == "configured" and phase.error == "Traceback (most recent call last):"


@pytest.mark.parametrize(("done", "total", "want"), [
    (12, 48, "[" + "#" * 5 + "-" * 15 + "]"),
    (24, 48, "[" + "#" * 10 + "-" * 10 + "]"),
    (48, 48, "[" + "#" * 20 + "]"),
    (0, 67, "[" + "-" * 20 + "]"),
    (27, 67, "[" + "#" * 8 + "-" * 12 + "]"),
    (60, 48, "[" + "#" * 20 + "]"),  # never past full
    (-3, 48, "[" + "-" * 20 + "]"),  # never below empty
])
def test_bar(done, total, want):
    assert progress_bar(done, total) == want
    assert len(progress_bar(done, total)) == 22


def test_bar_width():
    assert progress_bar(1, 2, width=10) == "[#####-----]"
    assert progress_bar(3, 3, width=4) == "[####]"


@pytest.mark.parametrize(("done", "total"), [(None, None), (5, None), (5, 0), (None, 48)])
def test_bar_is_empty_without_a_count(done, total):
    assert progress_bar(done, total) == ""


def test_bar_of_a_phase():
    phase = phase_of([SHARDS.format(pct=25, n=12)])
    assert progress_bar(phase.done, phase.total) == "[#####---------------]"
    assert progress_bar(phase_of([LOADED]).done, phase_of([LOADED]).total) == ""
