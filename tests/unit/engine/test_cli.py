"""Command line: accepted launch form, argparse errors (exit 2), start-up config errors (exit 1)."""
import subprocess
import sys

import pytest

from dspark_engine import VERSION, config
from dspark_engine.cli import parse_args

from .conftest import PRODUCTION_CC, VLLM, production_args


def parse(argv):
    return parse_args(["serve", *argv])


def usage_error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_production_argv_parses_for_both_ranks(model_dir):
    head = parse(production_args(model_dir, port=8888, master_port=25000))
    assert head.served_model_name == ["deepseek-v4-flash-dspark"]
    assert (head.tensor_parallel_size, head.nnodes, head.node_rank, head.headless) == (2, 2, 0, False)
    assert head.compilation_config == {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY",
                                       "cudagraph_implementation": "regular", "cudagraph_strict": True}
    assert head.speculative_config == {"method": "dspark", "num_speculative_tokens": 6}
    assert head.kv_cache_memory_bytes == 15998753178 and head.optimization_level == 2
    worker = parse(production_args(model_dir, port=8888, master_port=25000, node_rank=1))
    assert worker.headless and worker.node_rank == 1


def test_defaults_follow_vllm():
    args = parse(["/model"])
    assert (args.host, args.port, args.master_addr, args.master_port) == ("0.0.0.0", 8000, "127.0.0.1", 29501)
    assert args.served_model_name is None and args.nnodes == 1 and args.kv_cache_dtype == "auto"


def test_short_and_underscore_spellings():
    args = parse(["/m", "-tp", "2", "-pp", "1", "-n", "2", "-r", "1", "--headless", "-O3", "--max_model_len", "4096",
                  "--kv_cache_dtype=nvfp4_ds_mla"])
    assert (args.tensor_parallel_size, args.nnodes, args.node_rank, args.optimization_level) == (2, 2, 1, 3)
    assert args.max_model_len == 4096 and args.kv_cache_dtype == "nvfp4_ds_mla"


def test_unknown_and_abbreviated_flags_are_rejected(capsys):
    assert "unrecognized arguments: --bogus" in usage_error(capsys, ["/m", "--bogus"])
    assert "unrecognized arguments" in usage_error(capsys, ["/m", "--max-model", "10"])


@pytest.mark.parametrize("flag", ["--speculative-config", "--compilation-config", "--reasoning-config",
                                  "--default-chat-template-kwargs"])
@pytest.mark.parametrize("value", ['{"a": 1, "a": 2}', '{"a": NaN}', '{"a": Infinity}', '[1]', '{bad', '{"a": 1e999}'])
def test_json_flags_are_strict(capsys, flag, value):
    assert "invalid JSON object" in usage_error(capsys, ["/m", flag, value])


def test_compilation_config_only_once(capsys):
    err = usage_error(capsys, ["/m", "--compilation-config", "{}", "-cc", '{"mode": 0}'])
    assert "argument --compilation-config: may only be given once" in err
    assert "usage:" in err


@pytest.mark.parametrize("value,message", [
    ('{"cudagraph_mode": "SOMETIMES"}', "cudagraph_mode must be one of"),
    ('{"cudagraph_implementation": "fancy"}', "cudagraph_implementation must be one of"),
    ('{"mode": 7}', "mode must be one of"),
    ('{"cudagraph_strict": "yes"}', "cudagraph_strict must be a boolean"),
])
def test_compilation_config_values_are_validated(capsys, value, message):
    assert message in usage_error(capsys, ["/m", "-cc", value])


def test_speculative_config_needs_positive_k(capsys):
    assert "num_speculative_tokens" in usage_error(capsys, ["/m", "--speculative-config", '{"method": "dspark"}'])


def test_rank_rules(capsys):
    assert "--headless requires --node-rank > 0" in usage_error(capsys, ["/m", "--nnodes", "2", "--headless"])
    assert "must be smaller than --nnodes" in usage_error(capsys, ["/m", "--nnodes", "2", "--node-rank", "2",
                                                                   "--headless"])
    assert "requires --headless" in usage_error(capsys, ["/m", "--nnodes", "2", "--node-rank", "1"])


@pytest.mark.parametrize("argv", [["/m", "--kv-cache-dtype", "int4"], ["/m", "--optimization-level", "4"],
                                  ["/m", "--performance-mode", "fast"], ["/m", "--gpu-memory-utilization", "1.5"],
                                  ["/m", "--distributed-executor-backend", "slurm"], ["/m", "--port", "70000"]])
def test_bad_values_exit_2(capsys, argv):
    assert "error:" in usage_error(capsys, argv)


def test_kv_capacity_formula():
    assert config.kv_capacity_tokens(0.835) == 1253213
    assert config.kv_capacity_tokens(0.835, 15998753178) == 15998753178 // 12766
    assert config.kv_capacity_tokens(0.5) == 0
    assert config.kv_capacity_tokens(0.835, 10**9, override=7) == 7


def test_config_errors_in_process(model_dir, monkeypatch):
    with pytest.raises(config.ConfigError, match=r"World size \(2\) is larger than the number of available GPUs"):
        config.from_args(parse([model_dir, "-tp", "2"]), {})
    with pytest.raises(config.ConfigError, match="nnodes"):
        config.from_args(parse([model_dir, "--nnodes", "2"]), {})
    with pytest.raises(config.ConfigError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        config.from_args(parse([model_dir, "--max-model-len", "2000000"]), {})
    assert config.from_args(parse([model_dir, "--max-model-len", "2000000"]),
                            {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}).max_model_len == 2000000
    with pytest.raises(config.ConfigError, match="Invalid repository ID or local directory"):
        config.from_args(parse([model_dir + "/missing"]), {})
    with pytest.raises(config.ConfigError, match="Ray"):
        config.from_args(parse([model_dir, "--distributed-executor-backend", "ray"]), {})


def test_worker_process_names():
    assert config.worker_process_name(2, 1, 0) == "Worker_TP0"
    assert config.worker_process_name(2, 1, 1) == "Worker_TP1"
    assert config.worker_process_name(1, 2, 1) == "Worker_PP1_TP0"


def test_served_name_defaults_to_model_path_and_api_key_env(model_dir):
    cfg = config.from_args(parse([model_dir]), {"VLLM_API_KEY": "k"})
    assert cfg.served_names == [model_dir] and cfg.api_key == "k"
    assert config.from_args(parse([model_dir, "--api-key", "x"]), {"VLLM_API_KEY": "k"}).api_key == "x"


def test_version_through_the_executable_wrapper():
    out = subprocess.run([VLLM, "--version"], capture_output=True, text=True, timeout=20, check=False)
    assert out.returncode == 0 and out.stdout.strip() == VERSION


def test_usage_error_through_the_wrapper():
    out = subprocess.run([sys.executable, VLLM, "serve", "/m", "-cc", "{}", "-cc", PRODUCTION_CC],
                         capture_output=True, text=True, timeout=20, check=False)
    assert out.returncode == 2
    assert "argument --compilation-config: may only be given once" in out.stderr


def test_world_size_error_exits_1_with_traceback(engines, model_dir):
    proc = engines([model_dir, "-tp", "2", "--port", "0"], name="ws")
    assert proc.wait_exit() == 1
    assert "ValueError: World size (2) is larger than the number of available GPUs (1) in this node." in proc.stderr()
    assert "Traceback (most recent call last):" in proc.stderr()
    assert "vLLM API server version" in proc.stdout()


def test_kv_capacity_error_exits_1(engines, model_dir):
    proc = engines([model_dir, "--max-model-len", "1048576", "--port", "0"], {"DSPARK_SIM_KV_TOKENS": "1000"},
                   name="kv")
    assert proc.wait_exit() == 1
    logs = proc.logs()
    assert "larger than the available KV cache memory" in logs
    assert "estimated maximum model length is 1000" in logs
    assert "Starting vLLM API server" not in logs


def test_kv_overcommit_starts_and_a_prompt_longer_than_the_cache_waits(engines, model_dir):
    from .conftest import free_port, metric
    port = free_port()
    proc = engines([model_dir, "--max-model-len", "4096", "--port", str(port), "--host", "127.0.0.1"],
                   {"DSPARK_SIM_KV_TOKENS": "1000", "DSPARK_SIM_KV_OVERCOMMIT": "1"}, name="kvo", port=port)
    proc.wait_ready()
    assert "The KV cache holds 1,000 tokens, fewer than max_model_len 4,096" in proc.logs()
    status, metrics = proc.get("/metrics")
    assert status == 200 and b'kv_cache_size_tokens="1000"' in metrics
    ok, body = proc.post("/v1/completions", {"model": model_dir, "prompt": "Compute 6 multiplied by 7.",
                                             "max_tokens": 8})
    assert ok == 200 and "42" in body["choices"][0]["text"]
    import http.client
    import json
    import select
    import time

    def waiting() -> float:
        return metric(proc, "vllm:num_requests_waiting")

    def until_waiting(value: float) -> float:
        deadline, seen = time.monotonic() + 10, None
        while time.monotonic() < deadline:
            seen = waiting()
            if seen == value:
                break
            time.sleep(0.05)
        return seen

    # 1,200 prompt tokens never fit a 1,000-token cache: the request waits, unanswered, while its client holds the
    # connection open (a client that gives up has its request aborted, as vLLM does, so the connection stays open
    # while the gauge is read)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({"model": model_dir, "prompt": list(range(100, 1300)),
                                                                 "max_tokens": 4}),
                     headers={"Content-Type": "application/json"})
        assert until_waiting(1.0) == 1.0
        assert select.select([conn.sock], [], [], 2)[0] == [], "a prompt longer than the cache was answered"
        assert waiting() == 1.0
    finally:
        conn.close()
    assert until_waiting(0.0) == 0.0  # its client gone, the request is aborted, not left waiting


def test_kv_overcommit_flag_is_strict():
    from dspark_engine import faults
    assert faults.load({"DSPARK_SIM_KV_OVERCOMMIT": "1"}).kv_overcommit is True
    assert faults.load({}).kv_overcommit is False
    with pytest.raises(faults.SettingsError, match="must be 0 or 1"):
        faults.load({"DSPARK_SIM_KV_OVERCOMMIT": "yes"})


def test_api_key_is_redacted_from_the_non_default_args_log():
    from dspark_engine.cli import parse_args

    args = parse_args(["serve", "/model", "--api-key", "sk-sim-secret-123"])
    assert args.api_key == "sk-sim-secret-123"
    assert "sk-sim-secret-123" not in repr(args.non_default)
    assert args.non_default["api_key"] == "<redacted>"
