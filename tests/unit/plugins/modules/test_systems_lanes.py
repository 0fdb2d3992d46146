"""gb10.dspark.systems_lanes end to end: the module's main() against the real engine stand-in
(``sim/engine/bin/vllm serve``, a plain local process), in run, check and diff mode."""
from __future__ import annotations

import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support import fake_r0b0bench, standin

from ansible_collections.gb10.dspark.plugins.modules import systems_lanes

SERVED = standin.SERVED
SMALL = {"latency_reps": 2, "latency_max_tokens": 8, "concurrency_levels": [1, 2], "concurrency_reps": 2,
         "concurrency_max_tokens": 8, "decode_reps": 2, "decode_max_tokens": 16, "prefill_reps": 2,
         "prefill_prompt_tokens": 2000, "request_timeout": 30}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The engine stand-in on a free port, 20 ms per generated token; stopped at the end."""
    proc, log, url = standin.start(tmp_path_factory.mktemp("engine"), {"DSPARK_SIM_TOKEN_DELAY_S": "0.02"})
    yield url
    standin.stop(proc, log)


def _args(url: str, out: Path, **kw) -> dict:
    args = {"base_url": url, "model": SERVED, "output_dir": str(out), **SMALL}
    args.update(kw)
    return args


def test_run_writes_the_report_and_returns_it(run_module, engine, tmp_path):
    out = tmp_path / "systems"
    result = run_module(systems_lanes, _args(engine, out, api_key="sk-not-needed"), diff=True)
    assert result["failed"] is False, result.get("msg")
    assert result["changed"] is True and result["status"] == "PASS"
    report = result["report"]
    assert json.loads((out / "systems.json").read_text()) == report
    assert (out / "systems.md").read_text().startswith(f"# Systems lanes: {SERVED}")
    assert oct(out.stat().st_mode & 0o777) == "0o750"
    statuses = [(r["lane"], r["level"], r["status"]) for r in report["rows"]]
    assert statuses[:7] == [("canary", None, "PASS"), ("latency", None, "PASS"), ("concurrency", 1, "PASS"),
                            ("concurrency", 2, "PASS"), ("throughput", "decode", "PASS"),
                            ("throughput", "prefill", "PASS"), ("spec_decode", None, "PASS")]
    assert statuses[7:] == [
        ("external", name, "NOT_IMPLEMENTED") for name in ("canary", "bfcl_mt", "bfcl_ast", "latency", "concurrency",
                                                           "throughput", "qa", "ifeval", "humaneval", "gsm8k")]
    assert report["client_kinds"] == ["openai_portable"] and report["reasons"] == []
    assert report["settings"]["concurrency_levels"] == [1, 2] and "api_key" not in json.dumps(report)
    assert "sk-not-needed" not in json.dumps(result)
    assert result["diff"] == {"before": {}, "after": {"status": "PASS", "finished": report["finished"],
                                                      "counts": report["counts"]}}
    assert "plan" not in result


def test_second_run_diff_shows_the_previous_report(run_module, engine, tmp_path):
    out = tmp_path / "systems"
    first = run_module(systems_lanes, _args(engine, out, lanes=["canary"]))
    second = run_module(systems_lanes, _args(engine, out, lanes=["canary", "spec_decode"]), diff=True)
    assert second["changed"] is True
    assert second["diff"]["before"] == {"status": "PASS", "finished": first["report"]["finished"],
                                        "counts": first["report"]["counts"]}
    assert second["diff"]["after"]["counts"]["total"] == 2
    assert "diff" not in first


WINDOW = 4096


def _start_windowed(workdir: Path, overlong: str):
    """The stand-in with a 4096-token window, in one of its two answers to an over-long request."""
    return standin.start(workdir, {"DSPARK_SIM_OVERLONG": overlong, "DSPARK_SIM_TOKEN_DELAY_S": "0.005"},
                         extra_args=("--max-model-len", str(WINDOW)), speculative=False)


@pytest.fixture(scope="module", params=["cap", "reject"])
def windowed(request, tmp_path_factory):
    """A 4096-token stand-in that caps an over-long request (as vLLM 0.32) or refuses it with 400."""
    proc, log, url = _start_windowed(tmp_path_factory.mktemp(f"windowed-{request.param}"), request.param)
    yield url
    standin.stop(proc, log)


def test_error_rows_do_not_fail_the_module(run_module, windowed, tmp_path):
    # a prompt that fills the whole window leaves no room for the answer: whatever the server would
    # do with it (a 400, a cap), nothing is sent; that row is ERROR, the module still succeeds
    out = tmp_path / "systems"
    result = run_module(systems_lanes, _args(windowed, out, lanes=["throughput"], prefill_reps=1,
                                             prefill_prompt_tokens=WINDOW))
    assert result["failed"] is False and result["status"] == "ERROR"
    decode, prefill = result["report"]["rows"]
    assert decode["status"] == "PASS" and prefill["status"] == "ERROR" and prefill["samples"] == []
    assert prefill["client"]["tok_s"] is None and prefill["client"]["ttft_ms"] is None
    assert prefill["reasons"] == [f"throughput prefill: prefill_prompt_tokens {WINDOW} leaves 0 of max_model_len "
                                  f"{WINDOW}, expected at least 2 for the answer"]
    assert prefill["client"]["max_model_len"] == WINDOW
    assert (out / "systems.json").exists()


def test_prefill_near_the_window_asks_only_for_the_room_left(run_module, windowed, tmp_path):
    # 16 output tokens would not fit after 4090 prompt tokens: the lane asks for the 6 that do, so a
    # server that caps and one that refuses answer the same, and exactly what was asked comes back
    out = tmp_path / "systems"
    result = run_module(systems_lanes, _args(windowed, out, lanes=["throughput"], prefill_reps=2,
                                             prefill_prompt_tokens=WINDOW - 6))
    assert result["failed"] is False and result["status"] == "PASS", result["report"]["rows"]
    prefill = result["report"]["rows"][1]
    assert prefill["status"] == "PASS" and prefill["client"]["max_tokens"] == 6
    assert [s["usage"]["completion_tokens"] for s in prefill["samples"]] == [6, 6]
    assert [s["usage"]["prompt_tokens"] for s in prefill["samples"]] == [WINDOW - 6] * 2
    assert prefill["client"]["tok_s"] > 0


class _Recorder(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.seen.append(("GET", self.path))
        self.send_error(500)

    def do_POST(self):
        self.seen.append(("POST", self.path))
        self.send_error(500)


def test_check_mode_sends_nothing_and_writes_nothing(run_module, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.seen = []
    try:
        out = tmp_path / "systems"
        result = run_module(systems_lanes, _args(f"http://127.0.0.1:{server.server_address[1]}", out),
                            check_mode=True, diff=True)
    finally:
        server.shutdown()
    assert result["failed"] is False and result["changed"] is False
    assert _Recorder.seen == [] and not out.exists()
    assert result["report"] is None and result["status"] is None
    lanes = [(s["lane"], s["level"]) for s in result["plan"]["steps"]]
    assert lanes[:4] == [("canary", None), ("latency", None), ("concurrency", 1), ("concurrency", 2)]
    assert result["plan"]["files"] == [str(out / "systems.json"), str(out / "systems.md")]
    assert result["diff"]["before"] == {} and result["diff"]["after"]["status"] == "(would run)"


def test_model_not_served_fails_naming_expected_and_actual(run_module, engine, tmp_path):
    result = run_module(systems_lanes, _args(engine, tmp_path / "systems", model="other-model"))
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == f"rank head: served models is [{SERVED}], expected other-model (the model is not served)"
    assert result["mismatches"][0]["expected"] == "other-model"
    assert not (tmp_path / "systems" / "systems.json").exists()


def test_output_dir_not_writable_fails(run_module, engine, tmp_path):
    (tmp_path / "file").write_text("x")
    result = run_module(systems_lanes, _args(engine, tmp_path / "file" / "systems"))
    assert result["failed"] is True
    assert result["msg"].startswith(f"rank head: output_dir {tmp_path}/file/systems is not writable")


def test_invalid_options_fail_in_check_mode_too(run_module, tmp_path):
    result = run_module(systems_lanes, _args("http://127.0.0.1:9", tmp_path / "s", latency_reps=1,
                                             concurrency_levels=[2, 2]), check_mode=True)
    assert result["failed"] is True
    assert "rank head: option latency_reps is 1, expected at least 2" in result["msg"]
    assert "rank head: option concurrency_levels is [2, 2], expected distinct levels" in result["msg"]


def test_external_lanes_not_implemented_without_a_client(run_module, tmp_path):
    # the external lane alone sends no request: nothing listens on the port
    result = run_module(systems_lanes, _args(f"http://127.0.0.1:{standin.free_port()}", tmp_path / "s",
                                             lanes=["external"]))
    assert result["failed"] is False and result["status"] == "PASS"
    rows = result["report"]["rows"]
    assert [(r["level"], r["status"], r["reasons"]) for r in rows[:6]] == [
        (name, "NOT_IMPLEMENTED", ["no external benchmark client configured"])
        for name in ("canary", "bfcl_mt", "bfcl_ast", "latency", "concurrency", "throughput")]
    assert [(r["level"], r["status"]) for r in rows[6:]] == [
        (name, "NOT_IMPLEMENTED") for name in ("qa", "ifeval", "humaneval", "gsm8k")]
    assert all(r["reasons"][0].startswith(f"quality pillar {r['level']}: ") for r in rows[6:])


def test_external_client_with_missing_checkout_fails(run_module, tmp_path):
    result = run_module(systems_lanes, _args("http://127.0.0.1:9", tmp_path / "s", lanes=["external"],
                                             external_client={"path": str(tmp_path / "nowhere"),
                                                              "python": sys.executable}))
    assert result["failed"] is True
    assert f"rank head: option external_client.path is {tmp_path}/nowhere, expected an existing checkout" \
        in result["msg"]


def _seed_client(tmp_path, **changes) -> dict:
    hf = tmp_path / "models" / "DeepSeek-V4-Flash-0731"
    hf.mkdir(parents=True, exist_ok=True)
    scripts = tmp_path / "dsv4-bfcl-scripts"
    scripts.mkdir(exist_ok=True)
    client = {"path": str(tmp_path / "r0b0bench"), "python": sys.executable, "tokenizer": str(hf),
              "aquila_scripts": str(scripts), "bfcl_python": sys.executable}
    client.update(changes)
    return client


def test_the_seed_options_reach_r0b0bench_and_the_key_is_never_shown(run_module, tmp_path):
    fake_r0b0bench.make_checkout(tmp_path / "r0b0bench")
    out = tmp_path / "s"
    client = _seed_client(tmp_path, bfcl_max_tokens=4096)
    result = run_module(systems_lanes, _args(f"http://127.0.0.1:{standin.free_port()}", out, lanes=["external"],
                                             api_key="sk-module-key-42", external_client=client))
    assert result["failed"] is False, result.get("msg")
    seen = fake_r0b0bench.seen(out / "r0b0bench")
    argv = seen["argv"]
    assert argv[argv.index("--tokenizer") + 1] == client["tokenizer"]
    assert argv[argv.index("--only") + 1] == "canary,bfcl_mt,bfcl_ast,latency,concurrency,throughput"
    env = seen["env"]
    assert (env["R0B0BENCH_AQUILA_SCRIPTS"], env["R0B0BENCH_BFCL_PYTHON"]) == (client["aquila_scripts"], sys.executable)
    assert (env["BFCL_NUM_THREADS"], env["BFCL_HTTP_TIMEOUT"], env["BFCL_MAX_TOKENS"]) == ("4", "3600", "4096")
    assert env["OPENAI_API_KEY"] == "sha256:" + hashlib.sha256(b"sk-module-key-42").hexdigest()
    report = result["report"]
    assert report["status"] == "PASS" and report["r0b0bench_version"] == "1.0.0rc2"
    pillars = [r["level"] for r in report["rows"] if r["status"] == "NOT_IMPLEMENTED"]
    assert pillars == ["qa", "ifeval", "humaneval", "gsm8k"]
    assert report["settings"]["external_client"]["bfcl_max_tokens"] == 4096
    assert "sk-module-key-42" not in json.dumps(result) + (out / "systems.md").read_text()


def test_an_older_r0b0bench_fails_the_module_in_check_mode_naming_both_versions(run_module, tmp_path):
    fake_r0b0bench.make_checkout(tmp_path / "r0b0bench", version="1.0.0rc1")
    result = run_module(systems_lanes, _args("http://127.0.0.1:9", tmp_path / "s", lanes=["external"],
                                             external_client=_seed_client(tmp_path)), check_mode=True)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("rank head: r0b0bench version is 1.0.0rc1, expected 1.0.0rc2 or newer")
    assert not (tmp_path / "s").exists()


def test_bad_bench_options_fail_before_anything_runs(run_module, tmp_path):
    fake_r0b0bench.make_checkout(tmp_path / "r0b0bench")
    result = run_module(systems_lanes, _args("http://127.0.0.1:9", tmp_path / "s", lanes=["external"],
                                             external_client=_seed_client(tmp_path, tokenizer="relative/hf",
                                                                          bfcl_num_threads=0)))
    assert result["failed"] is True
    assert "rank head: option external_client.tokenizer is relative/hf, expected an absolute path" in result["msg"]
    assert "rank head: option external_client.bfcl_num_threads is 0, expected a positive integer" in result["msg"]
    assert not (tmp_path / "s").exists()
