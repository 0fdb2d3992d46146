"""The systems lanes: pure figures, the streaming reader, the external client, and whole suites
against the real engine stand-in (``sim/engine/bin/vllm serve``) run as a local process."""
from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support import standin

from ansible_collections.gb10.dspark.plugins.module_utils import _systems as S
from ansible_collections.gb10.dspark.plugins.module_utils._http import json_client
from ansible_collections.gb10.dspark.plugins.module_utils._identity import CheckError, IdentityError
from ansible_collections.gb10.dspark.plugins.module_utils._serving_guard import Expect

SERVED = standin.SERVED
TOKEN_DELAY = 0.02
SMALL = {"latency_reps": 3, "latency_max_tokens": 16, "concurrency_levels": (1, 2), "concurrency_reps": 2,
         "concurrency_max_tokens": 16, "decode_reps": 2, "decode_max_tokens": 32, "prefill_reps": 2,
         "prefill_prompt_tokens": 2000, "request_timeout": 30.0}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    proc, log, url = standin.start(tmp_path_factory.mktemp("engine"), {"DSPARK_SIM_TOKEN_DELAY_S": str(TOKEN_DELAY)})
    yield url
    standin.stop(proc, log)


@pytest.fixture(scope="module")
def wrong_usage_engine(tmp_path_factory):
    proc, log, url = standin.start(tmp_path_factory.mktemp("engine-wrong-usage"),
                                   {"DSPARK_SIM_TOKEN_DELAY_S": str(TOKEN_DELAY), "DSPARK_SIM_FAULT": "wrong_usage"})
    yield url
    standin.stop(proc, log)


def _settings(url: str, output_dir: Path, **kw) -> S.Settings:
    args = dict(SMALL)
    args.update(kw)
    return S.Settings(model=SERVED, output_dir=str(output_dir), base_url=url, **args)


def _run(url: str, output_dir: Path, **kw) -> dict:
    s = _settings(url, output_dir, **kw)
    return S.run(s, json_client(url, None), S.stream_client(url, None))


@pytest.fixture(scope="module")
def suite(engine, tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    return out, _run(engine, out)


def _row(report: dict, lane: str, level=None) -> dict:
    return next(r for r in report["rows"] if r["lane"] == lane and r["level"] == level)


# ---- pure figures ----------------------------------------------------------------------------------
def test_median_ignores_missing_values():
    assert S.median([3.0, None, 1.0, 2.0]) == 2.0
    assert S.median([4, 1, 3, 2]) == 2.5
    assert S.median([None, None]) is None


def test_itl_and_decode_rate_from_text_timestamps():
    # 9 gaps between 10 tokens over 0.9 s: 0.1 s per token, 10 tokens/s after the first
    assert S.itl_seconds(10.0, 10.9, 10) == pytest.approx(0.1)
    assert S.decode_rate(10.0, 10.9, 10) == pytest.approx(10.0)
    assert S.itl_seconds(5.0, 5.0, 10) is None and S.decode_rate(5.0, 5.0, 10) is None
    assert S.itl_seconds(1.0, 2.0, 1) is None


def test_rate_and_acceptance():
    assert S.rate(500, 2.0) == 250.0
    assert S.rate(None, 2.0) is None and S.rate(5, 0) is None
    rate, length = S.acceptance({"num_drafts": 10, "num_draft_tokens": 60, "num_accepted_tokens": 30})
    assert rate == pytest.approx(0.5) and length == pytest.approx(4.0)
    assert S.acceptance({"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}) == (None, None)


METRICS = """# HELP vllm:prompt_tokens_total x
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 20.0
vllm:prompt_tokens_total{engine="0",model_name="other"} 999.0
vllm:generation_tokens_total 7.0
"""


def test_counter_sums_samples_of_the_model():
    from ansible_collections.gb10.dspark.plugins.module_utils._engine_probe import parse_metrics
    metrics = parse_metrics(METRICS)
    assert S.counter(metrics, S.PROMPT_COUNTER, "m") == 120.0
    assert S.counter(metrics, S.GENERATION_COUNTER, "m") == 7.0
    assert S.counter(metrics, S.SPEC_COUNTERS["num_drafts"], "m") is None


def test_server_section_rates_and_a_decreasing_counter():
    before = {S.PROMPT_COUNTER: 100.0, S.GENERATION_COUNTER: 50.0}
    after = {S.PROMPT_COUNTER: 300.0, S.GENERATION_COUNTER: 450.0}
    sec = S.server_section(before, after, 4.0, [])
    assert (sec["prompt_tokens"], sec["generation_tokens"]) == (200, 400)
    assert (sec["prompt_tok_s"], sec["generation_tok_s"], sec["error"]) == (50.0, 100.0, None)
    sec = S.server_section(after, before, 4.0, [])
    assert sec["prompt_tok_s"] is None and "vllm:prompt_tokens_total went from 300 to 100" in sec["error"]
    sec = S.server_section({}, {}, 4.0, ["/metrics: HTTP status is 503, expected 200"])
    assert sec["generation_tok_s"] is None and sec["error"].startswith("/metrics: HTTP status is 503")


def test_spec_decode_section_absent_counters_are_an_error():
    present = {name: 0.0 for name in S.SPEC_COUNTERS.values()}
    later = {S.SPEC_COUNTERS["num_drafts"]: 4.0, S.SPEC_COUNTERS["num_draft_tokens"]: 24.0,
             S.SPEC_COUNTERS["num_accepted_tokens"]: 6.0}
    sec = S.spec_decode_section(present, None, later, None)
    assert sec["reasons"] == [] and sec["acceptance_rate"] == 0.25 and sec["mean_acceptance_length"] == 2.5
    assert sec["deltas"] == {"num_drafts": 4, "num_draft_tokens": 24, "num_accepted_tokens": 6}
    sec = S.spec_decode_section({}, None, {}, None)
    assert sec["acceptance_rate"] is None and sec["deltas"]["num_drafts"] is None
    assert "vllm:spec_decode_num_drafts_total is absent" in sec["reasons"][0]
    sec = S.spec_decode_section(present, None, present, None)
    assert "draft tokens during the suite is 0" in sec["reasons"][0]


def _sse(chunks: list[dict]) -> tuple[str, list[tuple[float, str]]]:
    payloads = [json.dumps(c) for c in chunks] + ["[DONE]"]
    return "".join(f"data: {p}\n\n" for p in payloads), [(float(i), p) for i, p in enumerate(payloads)]


def _chunks(texts: list[str], usage: dict) -> list[dict]:
    out = [{"model": "m", "choices": [{"index": 0, "text": t, "finish_reason": "length" if i == len(texts) - 1
                                       else None}]} for i, t in enumerate(texts)]
    return out + [{"model": "m", "choices": [], "usage": usage}]


def test_measure_takes_ttft_itl_e2e_from_arrival_times():
    raw, arrivals = _sse(_chunks(["a", "b", "", "c", "d"], {"prompt_tokens": 5, "completion_tokens": 4,
                                                            "total_tokens": 9}))
    streamed = S.Streamed(status=200, raw=raw, arrivals=arrivals, sent=-0.5, ended=7.0)
    m = S.measure("r1", streamed, Expect(served_model="m", max_tokens=4, prompt_tokens=5))
    assert m.ok, m.reasons
    # text chunks arrive at t=0, 1, 3, 4 (the empty one at t=2 carries no text)
    assert m.ttft == pytest.approx(0.5) and m.e2e == pytest.approx(7.5)
    assert m.itl == pytest.approx(4 / 3) and m.decode_tok_s == pytest.approx(3 / 4)
    assert m.text_chunks == 4


def test_measure_inconsistent_usage_names_the_field_and_has_no_figures():
    raw, arrivals = _sse(_chunks(["a", "b"], {"prompt_tokens": 6, "completion_tokens": 2, "total_tokens": 7}))
    m = S.measure("r2", S.Streamed(status=200, raw=raw, arrivals=arrivals, sent=0.0, ended=3.0),
                  Expect(served_model="m", max_tokens=2, prompt_tokens=5))
    assert not m.ok and m.ttft is None and m.itl is None
    assert any("usage.total_tokens is 7" in r for r in m.reasons)
    assert any("usage.prompt_tokens is 6" in r for r in m.reasons)


def test_measure_missing_usage_transport_and_http_errors():
    raw, arrivals = _sse(_chunks(["a", "b"], {})[:-1])
    m = S.measure("r3", S.Streamed(status=200, raw=raw, arrivals=arrivals), Expect(served_model="m", max_tokens=2))
    assert any("usage chunks is 0, expected 1" in r for r in m.reasons)
    m = S.measure("r4", S.Streamed(error="Connection refused"), Expect(served_model="m"))
    assert m.reasons == ['request r4: transport is "Connection refused", expected an HTTP answer']
    m = S.measure("r5", S.Streamed(status=400, error_body={"error": {"message": "too long"}}),
                  Expect(served_model="m"))
    assert m.reasons == ["request r5: HTTP status is 400, expected 200 (server: too long)"]


def test_measure_all_text_in_one_instant_has_no_itl():
    raw, _unused = _sse(_chunks(["a", "b"], {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}))
    payloads = [line[6:] for line in raw.split("\n\n") if line]
    m = S.measure("r6", S.Streamed(status=200, raw=raw, arrivals=[(1.0, p) for p in payloads], sent=0.0, ended=1.0),
                  Expect(served_model="m", max_tokens=2))
    assert m.itl is None and "text arrival span is 0.000000 s over 2 tokens" in m.reasons[0]


def test_finish_row_nulls_every_figure_of_an_error_row():
    row = S.new_row("latency")
    row["client"] = S._client(0.1, 0.02, 1.0, 50.0, "decode", reps=3, dropped_reps=[1])
    row["server"] = {"wall_s": 2.0, "prompt_tok_s": 10.0, "error": None}
    row["samples"] = [{"request": "latency-1", "dropped": True, "ttft_ms": 1.0, "usage": {}, "reasons": ["x"]}]
    row = S.error_row(row, ["x"])
    assert row["status"] == "ERROR" and row["reasons"] == ["x"]
    assert {k: v for k, v in row["client"].items() if v is not None} == {"tok_s_kind": "decode", "reps": 3,
                                                                         "dropped_reps": [1]}
    assert row["server"] == {"wall_s": None, "prompt_tok_s": None, "error": None}
    assert "ttft_ms" not in row["samples"][0] and row["samples"][0]["dropped"] is True


def test_validate_names_each_bad_option():
    s = S.Settings(model=SERVED, output_dir="/tmp/x", lanes=("canary", "bogus"), latency_reps=1,
                   concurrency_levels=(1, 0), prefill_prompt_tokens=10, request_timeout=0)
    messages = [m.message for m in S.validate(s)]
    assert "rank head: option latency_reps is 1, expected at least 2 (the first is a dropped warm-up)" in messages
    assert any(m.startswith("rank head: option lanes is [bogus], expected names among canary") for m in messages)
    assert "rank head: option concurrency_levels is [1, 0], expected levels of at least 1" in messages
    assert "rank head: option prefill_prompt_tokens is 10, expected at least 128" in messages
    assert "rank head: option request_timeout is 0, expected greater than 0" in messages
    assert S.validate(S.Settings(model=SERVED, output_dir="/tmp/x")) == []


def test_counts_status_and_markdown():
    rows = [dict(S.new_row("canary"), status="PASS"), dict(S.new_row("external", "bfcl_mt"),
                                                           status="NOT_IMPLEMENTED", reasons=[S.NO_EXTERNAL])]
    assert S.overall_status(rows) == "PASS"
    assert S.overall_status(rows + [dict(S.new_row("canary"), status="FAIL")]) == "FAIL"
    assert S.overall_status(rows + [dict(S.new_row("x"), status="FAIL"), dict(S.new_row("y"), status="ERROR")]) \
        == "ERROR"
    assert S.counts(rows) == {"PASS": 1, "FAIL": 0, "ERROR": 0, "NOT_IMPLEMENTED": 1, "total": 2}
    rows[0]["client"] = S._client(0.25, 0.02, 1.5, 49.5, "decode")
    md = S.markdown({"model": "m", "base_url": "u", "status": "PASS", "started": "a", "finished": "b",
                     "counts": S.counts(rows), "rows": rows})
    assert "| canary | - | PASS | 250.0 | 20.00 | 1.500 | 49.5 | - |  |" in md
    assert "| external | bfcl_mt | NOT_IMPLEMENTED | - | - | - | - | - | no external benchmark client configured |" in md


# ---- the streaming reader ------------------------------------------------------------------------
class _Slow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/bad":
            data = json.dumps({"error": {"message": "no such model", "code": 404}}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(3):
            time.sleep(0.15)
            data = f'data: {{"n": {i}}}\n\n'.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        data = b"data: [DONE]\n\n"
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
        self.wfile.flush()


@pytest.fixture
def slow_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_stream_client_timestamps_each_line_as_it_arrives(slow_server):
    got = S.stream_client(slow_server, None)("/v1/completions", {"stream": True}, 10)
    assert got.status == 200 and got.error is None
    assert [p for _unused, p in got.arrivals] == ['{"n": 0}', '{"n": 1}', '{"n": 2}', "[DONE]"]
    times = [t for t, _unused in got.arrivals]
    # the server sleeps 0.15 s before each of the first three events: read whole, they would share one time
    assert times[0] - got.sent >= 0.14
    assert all(b - a >= 0.12 for a, b in zip(times[:2], times[1:3]))
    assert got.raw.count("data: ") == 4 and got.ended >= times[-1]


def test_stream_client_http_error_and_refused(slow_server):
    got = S.stream_client(slow_server, "sk-x")("/bad", {"stream": True}, 5)
    assert got.status == 404 and got.error_body["error"]["message"] == "no such model" and got.error is None
    got = S.stream_client(f"http://127.0.0.1:{standin.free_port()}", None)("/v1/completions", {}, 2)
    assert got.status is None and got.error


# ---- the external client -------------------------------------------------------------------------
def test_external_env_passes_only_what_the_client_needs():
    environ = {"PATH": "/bin", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "nope", "VLLM_API_KEY": "nope",
               "LANG": "C.UTF-8"}
    env = S.external_env("sk-abc", environ)
    assert env == {"PATH": "/bin", "HOME": "/root", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
                   "OPENAI_API_KEY": "sk-abc"}
    assert "OPENAI_API_KEY" not in S.external_env(None, environ)


def test_external_rows_from_a_report():
    report = {"lanes": [{"lane_id": "bfcl_mt", "status": "PASS", "infra_errors": 0, "summary": {"score": 0.755}},
                        {"lane_id": "bfcl_ast", "status": "FAIL", "infra_errors": 0, "summary": {"score": 0.362}},
                        {"lane_id": "x_infra", "status": "PASS", "infra_errors": 2},
                        {"lane_id": "x_odd", "status": "WEIRD"},
                        {"lane_id": "x_skip", "status": "SKIP"}]}
    rows = S.external_rows(["bfcl_mt", "bfcl_ast", "x_infra", "x_odd", "x_skip", "x_missing"], report,
                           "/o/report.json", None)
    got = {r["level"]: r for r in rows}
    assert got["bfcl_mt"]["status"] == "PASS" and got["bfcl_mt"]["client"]["summary"] == {"score": 0.755}
    assert got["bfcl_ast"]["status"] == "FAIL"
    assert got["x_infra"]["status"] == "ERROR" and "infra_errors is 2, expected 0" in got["x_infra"]["reasons"][0]
    assert got["x_infra"]["client"]["summary"] is None
    assert got["x_odd"]["status"] == "ERROR" and 'status is "WEIRD"' in got["x_odd"]["reasons"][0]
    assert got["x_skip"]["status"] == "NOT_IMPLEMENTED"
    assert got["x_missing"]["status"] == "NOT_IMPLEMENTED"
    assert "absent from /o/report.json" in got["x_missing"]["reasons"][0]
    rows = S.external_rows(["bfcl_mt"], None, "/o/report.json", "report unreadable")
    assert rows[0]["status"] == "ERROR" and rows[0]["reasons"] == ["external bfcl_mt: report unreadable"]


def _external_settings(tmp_path: Path, **ext) -> S.Settings:
    checkout = tmp_path / "r0b0bench"
    checkout.mkdir(exist_ok=True)
    client = {"path": str(checkout), "python": sys.executable, "lanes": ["bfcl_mt", "bfcl_ast"], "timeout": 60.0}
    client.update(ext)
    return S.Settings(model=SERVED, output_dir=str(tmp_path / "out"), base_url="http://head:8888",
                      lanes=("external",), external_client=client)


def test_external_client_runs_with_a_clean_env_and_its_report_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_SECRET_TOKEN", "do-not-pass")
    calls = []

    def fake_run(argv, cwd, env, timeout):
        calls.append((argv, cwd, env, timeout))
        out = argv[argv.index("--output") + 1]
        run_dir = Path(out) / argv[argv.index("--run-id") + 1]
        run_dir.mkdir(parents=True)
        (run_dir / "report.json").write_text(json.dumps({"schema_version": 2, "lanes": [
            {"lane_id": "bfcl_mt", "status": "PASS", "infra_errors": 0, "summary": {"accuracy": 0.755}}]}))
        return 0, "report: ...", ""

    s = _external_settings(tmp_path)
    # nothing is listening at http://head:8888: the external lane alone sends no request itself
    result = S.run(s, call=None, post=None, api_key="sk-live", runner=fake_run)
    (argv, cwd, env, timeout), = calls
    out_root = str(tmp_path / "out" / "r0b0bench")
    assert argv[:13] == [sys.executable, "-m", "r0b0bench", "run", "--profile", "systems", "--base-url",
                         "http://head:8888/v1", "--model", SERVED, "--output", out_root, "--only"]
    assert argv[13] == "bfcl_mt,bfcl_ast" and argv[14] == "--run-id" and argv[15].startswith("systems-")
    assert cwd == str(tmp_path / "r0b0bench") and timeout == 60.0
    assert env["OPENAI_API_KEY"] == "sk-live" and "SOME_SECRET_TOKEN" not in env
    rows = result["report"]["rows"]
    assert [(r["level"], r["status"]) for r in rows] == [("bfcl_mt", "PASS"), ("bfcl_ast", "NOT_IMPLEMENTED")]
    assert rows[0]["client"]["report"] == os.path.join(out_root, argv[15], "report.json")
    assert rows[0]["client"]["summary"] == {"accuracy": 0.755}
    assert result["status"] == "PASS"
    assert "sk-live" not in (tmp_path / "out" / "systems.json").read_text()


def test_external_client_without_a_report_is_error_and_the_key_is_scrubbed(tmp_path):
    def fake_run(argv, cwd, env, timeout):
        return 2, "", "Traceback: connection refused with key sk-live"

    result = S.run(_external_settings(tmp_path), call=None, post=None, api_key="sk-live", runner=fake_run)
    rows = result["report"]["rows"]
    assert [r["status"] for r in rows] == ["ERROR", "ERROR"]
    assert "the client exited 2" in rows[0]["reasons"][0] and "********" in rows[0]["reasons"][0]
    assert "sk-live" not in json.dumps(result)


def test_external_client_paths_must_exist(tmp_path):
    s = _external_settings(tmp_path, python=str(tmp_path / "nope" / "python"))
    with pytest.raises(IdentityError, match=r"rank head: option external_client.python is .*nope/python, "
                                            r"expected an executable interpreter"):
        S.run(s, call=None, post=None, runner=lambda *a: pytest.fail("must not run"))
    assert not (tmp_path / "out").exists()


def test_unconfigured_external_lanes_are_not_implemented(tmp_path):
    s = S.Settings(model=SERVED, output_dir=str(tmp_path / "out"), lanes=("external",))
    result = S.run(s, call=None, post=None, runner=lambda *a: pytest.fail("must not run"))
    rows = result["report"]["rows"]
    assert [(r["level"], r["status"], r["reasons"]) for r in rows] == [
        ("bfcl_mt", "NOT_IMPLEMENTED", [S.NO_EXTERNAL]), ("bfcl_ast", "NOT_IMPLEMENTED", [S.NO_EXTERNAL])]
    assert all(r["client"]["tok_s"] is None for r in rows)
    assert result["status"] == "PASS" and result["report"]["counts"]["NOT_IMPLEMENTED"] == 2


# ---- setup problems ------------------------------------------------------------------------------
def test_output_dir_not_writable_fails_before_sending(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    s = S.Settings(model=SERVED, output_dir=str(blocker / "out"), lanes=("canary",))
    with pytest.raises(CheckError, match=r"^rank head: output_dir .*/file/out is not writable"):
        S.run(s, call=lambda *a: pytest.fail("must not send"), post=None)


def test_unreachable_engine_fails(tmp_path):
    url = f"http://127.0.0.1:{standin.free_port()}"
    s = S.Settings(model=SERVED, output_dir=str(tmp_path / "out"), base_url=url, lanes=("canary",))
    with pytest.raises(CheckError, match=r"^rank head: the engine's API is unreachable"):
        S.run(s, json_client(url, None), S.stream_client(url, None))
    assert not (tmp_path / "out" / S.JSON_FILE).exists()


def test_model_not_served_names_expected_and_actual(engine, tmp_path):
    s = S.Settings(model="other-model", output_dir=str(tmp_path / "out"), base_url=engine, lanes=("canary",))
    with pytest.raises(IdentityError) as info:
        S.run(s, json_client(engine, None), S.stream_client(engine, None))
    assert str(info.value) == (f"rank head: served models is [{SERVED}], expected other-model "
                               "(the model is not served)")


def test_plan_sends_nothing_and_lists_the_steps(tmp_path):
    s = _settings("http://127.0.0.1:9", tmp_path / "out")
    got = S.plan(s)
    assert got["changed"] is False and got["report"] is None and not (tmp_path / "out").exists()
    steps = [(x["lane"], x["level"], x.get("requests")) for x in got["plan"]["steps"]]
    assert steps == [("canary", None, 1), ("latency", None, 3), ("concurrency", 1, 2), ("concurrency", 2, 4),
                     ("throughput", "decode", 2), ("throughput", "prefill", 2), ("spec_decode", None, 0),
                     ("external", "bfcl_mt", None), ("external", "bfcl_ast", None)]


# ---- whole suites against the engine stand-in -------------------------------------------------
def test_suite_passes_and_writes_both_files(suite):
    out, result = suite
    report = result["report"]
    assert result["changed"] is True and result["status"] == "PASS" == report["status"]
    assert [(r["lane"], r["level"], r["status"]) for r in report["rows"]] == [
        ("canary", None, "PASS"), ("latency", None, "PASS"), ("concurrency", 1, "PASS"), ("concurrency", 2, "PASS"),
        ("throughput", "decode", "PASS"), ("throughput", "prefill", "PASS"), ("spec_decode", None, "PASS"),
        ("external", "bfcl_mt", "NOT_IMPLEMENTED"), ("external", "bfcl_ast", "NOT_IMPLEMENTED")]
    assert report["counts"] == {"PASS": 7, "FAIL": 0, "ERROR": 0, "NOT_IMPLEMENTED": 2, "total": 9}
    assert json.loads((out / "systems.json").read_text()) == report
    assert report["schema_version"] == 1 and report["started"] <= report["finished"]
    md = (out / "systems.md").read_text()
    assert md.count("\n| ") == 1 + len(report["rows"]) and "| concurrency | 2 | PASS |" in md
    assert _row(report, "canary")["client"]["answer"] == "133"


def test_suite_itl_matches_the_engine_token_delay(suite):
    # The stand-in sleeps DSPARK_SIM_TOKEN_DELAY_S (20 ms) before each token and time.sleep never
    # wakes early, so the mean gap cannot be much below 20 ms (0.9x leaves room for the first text
    # chunk being read late); 1.5x (30 ms) allows a busy shared CI machine 10 ms of scheduling delay
    # per token on average, far below what a wrong formula (e.g. e2e / tokens, or a per-chunk count off
    # by the first token) would give at these sizes.
    _unused, result = suite
    for lane, level in (("latency", None), ("concurrency", 1), ("concurrency", 2), ("throughput", "decode")):
        itl = _row(result["report"], lane, level)["client"]["itl_ms"]
        assert 0.9 * TOKEN_DELAY * 1000 <= itl <= 1.5 * TOKEN_DELAY * 1000, (lane, level, itl)
    decode = _row(result["report"], "throughput", "decode")["client"]["tok_s"]
    assert 1 / (1.5 * TOKEN_DELAY) <= decode <= 1 / (0.9 * TOKEN_DELAY)


def test_suite_latency_drops_the_first_rep(suite):
    _unused, result = suite
    row = _row(result["report"], "latency")
    assert [s["dropped"] for s in row["samples"]] == [True, False, False]
    assert row["client"]["dropped_reps"] == [1]
    kept = row["samples"][1:]
    assert row["client"]["ttft_ms"] == pytest.approx(statistics.median(s["ttft_ms"] for s in kept), abs=1e-3)
    assert row["client"]["e2e_s"] == pytest.approx(statistics.median(s["e2e_s"] for s in kept), abs=1e-3)
    assert all(s["usage"]["completion_tokens"] == 16 for s in row["samples"])


def test_suite_concurrency_aggregate_grows_with_the_level(suite):
    _unused, result = suite
    c1 = _row(result["report"], "concurrency", 1)["client"]
    c2 = _row(result["report"], "concurrency", 2)["client"]
    assert (c1["requests"], c2["requests"]) == (2, 4)
    assert (c1["completion_tokens"], c2["completion_tokens"]) == (32, 64)
    assert c2["tok_s"] > 1.5 * c1["tok_s"]
    assert c1["tok_s"] == pytest.approx(c1["completion_tokens"] / c1["wall_s"], rel=0.01)


def test_suite_prefill_prompt_tokens_are_exact(suite):
    _unused, result = suite
    row = _row(result["report"], "throughput", "prefill")
    assert row["client"]["prompt_tokens"] == 2000 and row["client"]["prompt_tokens_constructed"] == 2000
    assert [s["usage"]["prompt_tokens"] for s in row["samples"]] == [2000, 2000]
    assert all(s["usage"]["completion_tokens"] == S.PREFILL_OUTPUT_TOKENS for s in row["samples"])
    ttft = statistics.median(s["ttft_ms"] for s in row["samples"]) / 1000
    assert row["client"]["tok_s"] == pytest.approx(2000 / ttft, rel=0.05)
    # the server counted at least both prompts within the row's window (the nonce defeats the prefix cache)
    assert row["server"]["prompt_tokens"] >= 4000 and row["server"]["prompt_tok_s"] > 0


def test_suite_server_figures_are_kept_apart_from_client_figures(suite):
    _unused, result = suite
    row = _row(result["report"], "throughput", "decode")
    # two requests of 32 generated tokens inside the window
    assert row["server"]["generation_tokens"] == 64
    assert row["server"]["generation_tok_s"] == pytest.approx(64 / row["server"]["wall_s"], rel=0.01)
    assert set(row["client"]) >= {"ttft_ms", "itl_ms", "e2e_s", "tok_s"} and "generation_tok_s" not in row["client"]


def test_suite_spec_decode_acceptance(suite):
    _unused, result = suite
    spec = result["report"]["spec_decode"]
    assert spec["reasons"] == []
    assert 0 < spec["acceptance_rate"] <= 1
    d = spec["deltas"]
    assert d["num_draft_tokens"] == 6 * d["num_drafts"]  # num_speculative_tokens 6
    assert spec["acceptance_rate"] == pytest.approx(d["num_accepted_tokens"] / d["num_draft_tokens"], abs=1e-4)
    assert spec["mean_acceptance_length"] == pytest.approx(1 + d["num_accepted_tokens"] / d["num_drafts"], abs=1e-4)
    assert _row(result["report"], "spec_decode")["server"]["acceptance_rate"] == spec["acceptance_rate"]


def test_wrong_usage_gives_error_rows_without_figures(wrong_usage_engine, tmp_path):
    result = _run(wrong_usage_engine, tmp_path / "out", lanes=("canary", "latency", "concurrency", "throughput"),
                  concurrency_levels=(1,), latency_reps=2, decode_reps=1, prefill_reps=1)
    report = result["report"]
    assert result["status"] == "ERROR" and report["counts"]["ERROR"] == 5
    for row in report["rows"]:
        assert row["status"] == "ERROR", row
        assert any("usage.total_tokens" in r for r in row["reasons"]), row["reasons"]
        assert any("usage.prompt_tokens" in r for r in row["reasons"]), row["reasons"]
        for key in ("ttft_ms", "itl_ms", "e2e_s", "tok_s"):
            assert row["client"][key] is None, (row["lane"], key)
        assert all(v is None for k, v in row["server"].items() if k != "error")
        assert all("ttft_ms" not in s for s in row["samples"])
    md = (tmp_path / "out" / "systems.md").read_text()
    assert "| latency | - | ERROR | - | - | - | - | - | request latency-1: usage.total_tokens is" in md
