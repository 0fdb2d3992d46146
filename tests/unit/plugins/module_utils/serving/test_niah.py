"""The NIAH client against a real local HTTP server that tokenizes, renders and answers like the stand-in.

``FakeEngine`` is a ThreadingHTTPServer with the stand-in engine's own tokenizer, chat template and
answer rule (sim/engine/dspark_engine), so prompts, marker search and needle detection are the ones
the simulator sees; the test controls the window, the KV size, failures, delays and wrong answers,
and counts every request it receives.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.serving import _niah
from ansible_collections.gb10.dspark.plugins.module_utils.common._http import json_client
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError
from tests.unit.plugins.conftest import REPO

_ENGINE = str(REPO / "sim" / "engine")
if _ENGINE not in sys.path:
    sys.path.insert(0, _ENGINE)

from dspark_engine import model as sim_model  # noqa: E402
from dspark_engine import template as sim_template  # noqa: E402
from dspark_engine import tokenizer as tok  # noqa: E402

SERVED = "deepseek-v4-flash-dspark"
SMALL = 8192
SMALL_DEPTHS = [2032, 4064, 7315]  # int(8128 * f) for 0.25, 0.5, 0.9


class FakeEngine:
    """The engine's HTTP surface for the NIAH client; every request is recorded in ``seen``."""

    def __init__(self, max_model_len: int = SMALL, kv: int | None = 1_253_213, kv_as_label: bool = False,
                 api_key: str | None = None):
        self.max_model_len, self.kv, self.kv_as_label, self.api_key = max_model_len, kv, kv_as_label, api_key
        self.served = [SERVED]
        self.answer = "model"           # "model": the stand-in's answer rule; otherwise this literal text
        self.fail_depths: dict[int, int] = {}   # prompt length -> HTTP status to answer
        self.delay_depths: dict[int, float] = {}
        self.default_thinking = True     # as the production profile's --default-chat-template-kwargs
        self.seen: list[tuple] = []       # (method, path, body or None)
        self.on_completion = None        # callback(ids) run before answering
        self.prompt_tokens_skew = 0      # added to usage.prompt_tokens (the stand-in's wrong_usage fault)
        self._lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, obj, ctype="application/json"):
                data = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self):
                return not engine.api_key or self.headers.get("Authorization") == f"Bearer {engine.api_key}"

            def do_GET(self):
                engine.record("GET", self.path, None)
                if not self._authorized():
                    return self._send(401, {"error": {"message": "Unauthorized"}})
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [
                        {"id": name, "object": "model", "max_model_len": engine.max_model_len}
                        for name in engine.served]})
                if self.path == "/metrics":
                    return self._send(200, engine.metrics(), "text/plain; version=0.0.4")
                return self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.record("POST", self.path, body)
                if not self._authorized():
                    return self._send(401, {"error": {"message": "Unauthorized"}})
                if body.get("model") not in engine.served:
                    return self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
                if self.path == "/tokenize":
                    return self._send(200, engine.tokenize(body))
                if self.path == "/v1/completions":
                    status, doc = engine.complete(body)
                    return self._send(status, doc)
                return self._send(404, {"detail": "Not Found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def record(self, method, path, body):
        with self._lock:
            self.seen.append((method, path, body))

    def metrics(self) -> str:
        lines = ["# HELP vllm:num_requests_running running", 'vllm:num_requests_running{engine="0"} 0.0']
        if self.kv is not None and self.kv_as_label:
            lines.append(f'vllm:cache_config_info{{block_size="256",kv_cache_size_tokens="{self.kv}"}} 1.0')
        elif self.kv is not None:
            lines.append(f'vllm:kv_cache_size_tokens{{engine="0",model_name="{SERVED}"}} {self.kv}')
        return "\n".join(lines) + "\n"

    def tokenize(self, body):
        if "messages" in body:
            kwargs = {"thinking": self.default_thinking, **(body.get("chat_template_kwargs") or {})}
            ids = sim_template.render_ids(body["messages"], None, body.get("add_generation_prompt", True),
                                          bool(kwargs["thinking"]))
        else:
            ids = tok.encode(body["prompt"], add_bos=body.get("add_special_tokens", True))
        return {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids}

    def complete(self, body):
        ids = body["prompt"]
        if self.on_completion:
            self.on_completion(ids)
        if len(ids) + body["max_tokens"] > self.max_model_len:
            return 400, {"error": {"message": "This model's maximum context length is exceeded", "code": 400}}
        if len(ids) in self.delay_depths:
            time.sleep(self.delay_depths[len(ids)])
        if len(ids) in self.fail_depths:
            return self.fail_depths[len(ids)], {"error": {"message": "EngineCore encountered an issue.",
                                                          "type": "InternalServerError"}}
        text = tok.decode(ids)
        if self.answer == "model":
            answer = sim_model.answer_text(text, text) or "the spark node orbit."
        else:
            answer = self.answer
        completion = len(tok.encode(answer)) + 1
        return 200, {"id": "cmpl-1", "object": "text_completion", "model": SERVED,
                     "choices": [{"index": 0, "text": answer, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": len(ids) + self.prompt_tokens_skew, "completion_tokens": completion,
                               "total_tokens": len(ids) + completion}}

    def completions(self) -> list[list[int]]:
        return [body["prompt"] for method, path, body in self.seen if path == "/v1/completions"]

    def completion_lengths(self) -> list[int]:
        return [len(ids) for ids in self.completions()]


@pytest.fixture(name="engine")
def _engine():
    engine = FakeEngine()
    yield engine
    engine.stop()


def settings(tmp_path, **kw) -> _niah.Settings:
    base = {"model": SERVED, "output_dir": str(tmp_path / "niah"), "run_key": "run-a", "rank": "spark-01"}
    base.update(kw)
    return _niah.Settings(**base)


def client(engine):
    return json_client(engine.url, engine.api_key)


def read(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


# ---- depths, options, prompts (no HTTP) -------------------------------------------------------
def test_depths_at_one_million_tokens():
    ladder = _niah.depth_ladder(1_048_576, 64, [0.25, 0.5, 0.9], 1024)
    assert [depth for depth, _unused in ladder] == [262128, 524256, 943660]
    assert [fraction for _unused, fraction in ladder] == [0.25, 0.5, 0.9]


def test_depths_are_clamped_and_deduplicated():
    assert _niah.depth_ladder(8192, 64, [0.01, 1.0], 1024) == [(1024, 0.01), (8128, 1.0)]
    # a window smaller than min_depth: the usable window wins, and the shared depth appears once
    assert _niah.depth_ladder(1000, 64, [0.25, 0.5], 1024) == [(936, 0.25)]


@pytest.mark.parametrize("change, text", [
    ({"fractions": (0.5, 1.5)}, "fractions must lie in (0, 1], got 1.5"),
    ({"fractions": (0.0,)}, "fractions must lie in (0, 1], got 0.0"),
    ({"fractions": ()}, "fractions must not be empty"),
    ({"reserve": 0}, "reserve must be at least 1, got 0"),
    ({"request_timeout": 0.0}, "request_timeout must be greater than 0, got 0.0"),
    ({"needle_fraction": 1.2}, "needle_fraction must lie in [0, 1], got 1.2"),
    ({"code": "two words"}, "code must be a non-empty word without whitespace"),
    ({"run_key": " "}, "run_key must not be empty"),
])
def test_invalid_options_are_named(tmp_path, change, text):
    errors = _niah.validate(settings(tmp_path, **change))
    assert any(text in error for error in errors), errors
    assert _niah.validate(settings(tmp_path)) == []


PARTS = _niah.PromptParts(prefix=[0, 2, 100, 101], suffix=[200, 201, 3, 5], needle=[900, 901, 902],
                          filler=[10, 11, 12, 13, 14])


@pytest.mark.parametrize("depth", [11, 12, 40, 1024, 4097])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.5, 1.0])
def test_prompt_has_exactly_depth_ids_and_the_needle_where_asked(depth, fraction):
    ids, effective = _niah.build_prompt(PARTS, depth, fraction)
    assert len(ids) == depth
    assert ids[:4] == PARTS.prefix and ids[-4:] == PARTS.suffix
    starts = [i for i in range(len(ids) - 2) if ids[i:i + 3] == PARTS.needle]
    assert len(starts) == 1
    filler_total = depth - 4 - 4 - 3
    before = starts[0] - 4
    assert abs(before - fraction * filler_total) <= 0.5
    assert effective == (round(before / filler_total, 6) if filler_total else 0.0)
    # the filler is the unit repeated without a gap across the needle
    filler = ids[4:starts[0]] + ids[starts[0] + 3:-4]
    assert filler == (PARTS.filler * depth)[:filler_total]


def test_prompt_shorter_than_the_template_is_refused():
    with pytest.raises(ValueError, match="depth 10 is shorter than the template and the needle"):
        _niah.build_prompt(PARTS, 10, 0.5)


def test_prompt_sha256_is_over_the_comma_joined_ids():
    assert _niah.prompt_sha256([0, 17, 123456]) == hashlib.sha256(b"0,17,123456").hexdigest()
    assert _niah.prompt_sha256([1, 2]) != _niah.prompt_sha256([12])


def test_marker_must_be_found_exactly_once():
    encode = tok.encode
    rendered = tok.encode("intro\n" + _niah.MARKER + "\nquestion")
    parts = _niah.prompt_parts(rendered, encode, "C0DE-1", "spark-01")
    assert tok.decode(parts.prefix) == "intro\n" and tok.decode(parts.suffix) == "\nquestion"
    assert tok.decode(parts.needle) == "\nSECRET VERIFICATION CODE: C0DE-1\n"
    with pytest.raises(CheckError, match=r"rank spark-01: the marker DSPARK_NIAH_SLOT is not in the rendered "
                                         r"template .*expected exactly once"):
        _niah.prompt_parts(tok.encode("no slot here"), encode, "C0DE-1", "spark-01")
    with pytest.raises(CheckError, match="is 2 times"):
        _niah.prompt_parts(rendered + rendered, encode, "C0DE-1", "spark-01")


def _fake_library(calls):
    class Tokenizer:
        @staticmethod
        def from_file(path):
            calls.append(path)
            return Tokenizer()

        def encode(self, text, add_special_tokens=True):
            calls.append((text, add_special_tokens))
            return SimpleNamespace(ids=tuple(tok.encode(text)))
    return SimpleNamespace(Tokenizer=Tokenizer)


def test_tokenizer_choice(tmp_path):
    def server(text):
        return [42]

    assert _niah.choose_encoder(None, server, lambda: pytest.fail("library loaded")) == (server, "server:/tokenize", [])
    encode, label, warnings = _niah.choose_encoder(str(tmp_path / "missing.json"), server, lambda: None)
    assert (encode, label) == (server, "server:/tokenize") and "does not exist" in warnings[0]
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    encode, label, warnings = _niah.choose_encoder(str(path), server, lambda: None)
    assert (encode, label) == (server, "server:/tokenize") and "tokenizers library is not installed" in warnings[0]
    calls = []
    encode, label, warnings = _niah.choose_encoder(str(path), server, lambda: _fake_library(calls))
    assert label == "file:tokenizer.json" and warnings == []
    assert encode("Hello") == tok.encode("Hello") and isinstance(encode("Hi"), list)
    assert calls[0] == str(path) and calls[1] == ("Hello", False)


# ---- runs against the HTTP engine --------------------------------------------------------------
def test_three_depths_pass(tmp_path, engine):
    s = settings(tmp_path)
    result = _niah.run(client(engine), s)
    summary = result["summary"]
    assert result["changed"] is True and result["ran"] == SMALL_DEPTHS and result["resumed"] == []
    assert summary["status"] == "PASS" and summary["all_passed"] is True
    assert (summary["pass_count"], summary["fail_count"], summary["error_count"], summary["total"]) == (3, 0, 0, 3)
    assert summary["depths"] == SMALL_DEPTHS and summary["max_model_len"] == SMALL
    assert summary["kv_cache_size_tokens"] == 1_253_213 and summary["kv_below_window"] is False
    assert summary["tokenizer"] == "server:/tokenize" and summary["template_source"] == "server:/tokenize"
    assert summary["depth_policy"] == "frac_of_max_context" and summary["marker"] == "DSPARK_NIAH_SLOT"
    assert engine.completion_lengths() == SMALL_DEPTHS
    for row, ids in zip(summary["rows"], engine.completions()):
        assert row["status"] == "PASS" and row["passed"] is True and row["kind"] is None
        assert row["response_text"] == "GB10-NIAH-7Q4K" and row["http_status"] == 200
        assert row["prompt_tokens_constructed"] == len(ids) == row["depth"]
        assert row["prompt_sha256"] == hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
        assert row["usage"]["prompt_tokens"] == row["depth"] and row["run_key"] == "run-a"
        assert read(tmp_path / "niah" / f"depth-{row['depth']}.json") == row
    # what was sent: max_tokens = reserve, greedy, special tokens skipped, a token-id prompt
    body = [b for m, p, b in engine.seen if p == "/v1/completions"][0]
    assert (body["max_tokens"], body["temperature"], body["skip_special_tokens"]) == (64, 0, True)
    assert read(tmp_path / "niah" / "niah.json") == summary
    progress = read(tmp_path / "niah" / "progress.json")
    assert progress["state"] == "finished" and progress["pid"] == os.getpid()
    assert (progress["index"], progress["total"], progress["rows_done"]) == (3, 3, 3)
    assert oct(os.stat(tmp_path / "niah").st_mode & 0o777) == "0o750"


def test_prompt_is_the_rendered_template_with_the_needle_in_the_middle(tmp_path, engine):
    _niah.run(client(engine), settings(tmp_path, fractions=(0.5,)))
    (ids,) = engine.completions()
    assert len(ids) == 4064
    text = tok.decode(ids, skip_special_tokens=False)
    # the server's own rendering, thinking off, marker replaced by the haystack
    assert ids[0] == tok.BOS_ID and ids[-2:] == [tok.ASSISTANT_ID, tok.THINK_END_ID]
    assert _niah.MARKER not in text
    assert text.endswith(_niah.QUESTION + "<｜Assistant｜></think>")
    needle = tok.encode("\nSECRET VERIFICATION CODE: GB10-NIAH-7Q4K\n")
    starts = [i for i in range(len(ids)) if ids[i:i + len(needle)] == needle]
    assert len(starts) == 1
    rendered = engine.tokenize({"messages": [{"role": "user", "content": _niah.TEMPLATE}],
                                "chat_template_kwargs": {"thinking": False}})["tokens"]
    marker_at = _niah.find_sequence(rendered, tok.encode(_niah.MARKER))[0]
    prefix, suffix = rendered[:marker_at], rendered[marker_at + len(tok.encode(_niah.MARKER)):]
    assert ids[:len(prefix)] == prefix and ids[-len(suffix):] == suffix
    filler = len(ids) - len(prefix) - len(suffix) - len(needle)
    assert starts[0] - len(prefix) == int(filler * 0.5 + 0.5)


def test_answer_without_the_code_is_a_model_fail(tmp_path, engine):
    engine.answer = "I could not find any code in the record."
    result = _niah.run(client(engine), settings(tmp_path))
    summary = result["summary"]
    assert summary["status"] == "FAIL" and summary["all_passed"] is False
    assert (summary["pass_count"], summary["fail_count"], summary["error_count"]) == (0, 3, 0)
    assert all(r["kind"] == "model" and r["passed"] is False and r["http_status"] == 200 for r in summary["rows"])
    assert "does not contain the code GB10-NIAH-7Q4K" in summary["rows"][0]["reason"]
    assert engine.completion_lengths() == SMALL_DEPTHS


def test_wrong_prompt_accounting_is_an_error_row_not_a_pass(tmp_path, engine):
    engine.prompt_tokens_skew = 1
    summary = _niah.run(client(engine), settings(tmp_path))["summary"]
    assert summary["status"] == "ERROR" and summary["pass_count"] == 0
    row = summary["rows"][0]
    assert row["kind"] == "accounting" and row["status"] == "ERROR"
    assert row["reason"] == f"usage.prompt_tokens is {row['depth'] + 1}, the prompt has {row['depth']} tokens"


def test_capacity_boundary():
    assert _niah.capacity_problem(7315, 64, 7379) is None
    assert _niah.capacity_problem(7315, 64, 7378) == "KV cache holds 7378 tokens, depth 7315 + reserve 64 does not fit"
    assert _niah.capacity_problem(7315, 64, None) is None


def test_kv_below_depth_is_a_capacity_error_without_a_request(tmp_path, engine):
    engine.kv = 7350  # holds the 7315-id prompt, but not with the 64 tokens of the answer
    engine.kv_as_label = True  # the cache_config_info label form
    summary = _niah.run(client(engine), settings(tmp_path))["summary"]
    assert engine.completion_lengths() == [2032, 4064]  # nothing sent for 7315
    row = summary["rows"][2]
    assert (row["status"], row["kind"], row["http_status"], row["infra_errors"]) == ("ERROR", "capacity", None, [])
    assert row["reason"] == "KV cache holds 7350 tokens, depth 7315 + reserve 64 does not fit"
    assert summary["status"] == "ERROR" and summary["kv_below_window"] is True
    assert (summary["error_count"], summary["infra_error_count"], summary["ran"]) == (1, 0, [2032, 4064])


def test_infra_error_stops_the_ladder(tmp_path, engine):
    engine.fail_depths = {4064: 500}
    result = _niah.run(client(engine), settings(tmp_path))
    rows = result["summary"]["rows"]
    assert engine.completion_lengths() == [2032, 4064]
    assert [r["status"] for r in rows] == ["PASS", "ERROR", "ERROR"]
    assert rows[1]["kind"] == "infra" and rows[1]["http_status"] == 500
    assert rows[1]["infra_errors"] == ["HTTP 500 (EngineCore encountered an issue.)"]
    assert rows[2]["kind"] == "infra" and rows[2]["infra_errors"] == []
    assert rows[2]["reason"] == "not run: ladder stopped after an infra error at depth 4064"
    assert result["summary"]["status"] == "ERROR" and result["summary"]["infra_error_count"] == 1
    assert result["ran"] == [2032, 4064]


def test_infra_error_does_not_stop_when_told(tmp_path, engine):
    engine.fail_depths = {2032: 503}
    summary = _niah.run(client(engine), settings(tmp_path, stop_on_infra_error=False))["summary"]
    assert engine.completion_lengths() == SMALL_DEPTHS
    assert [r["status"] for r in summary["rows"]] == ["ERROR", "PASS", "PASS"]
    assert summary["status"] == "ERROR"


def test_timeout_is_an_infra_error(tmp_path, engine):
    engine.delay_depths = {2032: 1.5}
    summary = _niah.run(client(engine), settings(tmp_path, fractions=(0.25, 0.5), request_timeout=0.3))["summary"]
    first, second = summary["rows"]
    assert first["status"] == "ERROR" and first["kind"] == "infra" and first["http_status"] is None
    assert first["infra_errors"][0].startswith("no answer within 0.3 s")
    assert second["reason"].startswith("not run")


def test_each_row_is_on_disk_before_the_next_depth_starts(tmp_path, engine):
    out = tmp_path / "niah"
    snapshots = []

    def look(ids):
        snapshots.append((len(ids), sorted(p.name for p in out.iterdir()), read(out / "progress.json")))
    engine.on_completion = look
    _niah.run(client(engine), settings(tmp_path))
    assert [s[0] for s in snapshots] == SMALL_DEPTHS
    for index, (depth, files, progress) in enumerate(snapshots):
        assert [f for f in files if f.startswith("depth-")] == sorted(f"depth-{d}.json" for d in SMALL_DEPTHS[:index])
        assert progress["state"] == "running" and progress["depth"] == depth and progress["index"] == index + 1
        assert progress["rows_done"] == index and progress["total"] == 3 and progress["run_key"] == "run-a"
        assert progress["current_started"] >= progress["started"]
        assert "niah.json" not in files


def test_resume_skips_finished_rows_and_reruns_errors(tmp_path, engine):
    engine.fail_depths = {4064: 500}
    _niah.run(client(engine), settings(tmp_path))
    assert engine.completion_lengths() == [2032, 4064]
    first_row = read(tmp_path / "niah" / "depth-2032.json")
    engine.fail_depths = {}
    engine.seen.clear()
    result = _niah.run(client(engine), settings(tmp_path))
    assert engine.completion_lengths() == [4064, 7315]
    assert result["resumed"] == [2032] and result["ran"] == [4064, 7315] and result["changed"] is True
    assert result["summary"]["status"] == "PASS" and result["summary"]["rows"][0] == first_row
    engine.seen.clear()
    again = _niah.run(client(engine), settings(tmp_path))
    assert engine.completion_lengths() == []
    assert again["changed"] is False and again["resumed"] == SMALL_DEPTHS and again["summary"]["status"] == "PASS"


def test_fail_rows_are_kept_but_a_changed_prompt_runs_again(tmp_path, engine):
    engine.answer = "nothing"
    _niah.run(client(engine), settings(tmp_path))
    engine.answer = "model"
    engine.seen.clear()
    kept = _niah.run(client(engine), settings(tmp_path))
    assert engine.completion_lengths() == [] and kept["summary"]["status"] == "FAIL"
    changed = _niah.run(client(engine), settings(tmp_path, code="OTHER-CODE-1"))
    assert engine.completion_lengths() == SMALL_DEPTHS and changed["summary"]["status"] == "PASS"


@pytest.mark.parametrize("name", ["depth-2032.json", "niah.json"])
def test_directory_of_another_run_is_refused_and_left_alone(tmp_path, engine, name):
    out = tmp_path / "niah"
    out.mkdir()
    (out / name).write_text(json.dumps({"run_key": "run-old", "status": "PASS"}))
    with pytest.raises(CheckError) as err:
        _niah.run(client(engine), settings(tmp_path))
    assert str(err.value) == f"rank spark-01: {out} holds the rows of run run-old, this run is run-a"
    assert [p.name for p in out.iterdir()] == [name]
    assert engine.seen == []


def test_held_lock_refuses_a_second_run(tmp_path, engine):
    out = tmp_path / "niah"
    out.mkdir()
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(CheckError, match=f"rank spark-01: a NIAH run is already in progress in {out}$"):
            _niah.run(client(engine), settings(tmp_path))
        assert _niah.status(str(out), "spark-01")["running"] is True
    finally:
        os.close(fd)
    assert engine.completion_lengths() == [] and sorted(p.name for p in out.iterdir()) == [".lock"]
    assert _niah.status(str(out), "spark-01")["running"] is False


def test_busy_lists_only_the_run_folders_whose_ladder_holds_its_lock(tmp_path, engine):
    work = tmp_path / "work"
    assert _niah.busy(str(work)) == {"changed": False, "running_dirs": []}  # no work folder: nothing runs
    _niah.run(client(engine), settings(tmp_path))  # a finished run: progress.json, lock free
    work.mkdir()
    (tmp_path / "niah").rename(work / "finished")
    running = work / "nested" / "long-1m"
    running.mkdir(parents=True)
    (running / _niah.PROGRESS_FILE).write_text(json.dumps({"state": "running"}))
    (work / "stray").mkdir()  # a lock held, but no progress file: not a run folder
    held = [os.open(running / ".lock", os.O_RDWR | os.O_CREAT), os.open(work / "stray" / ".lock", os.O_RDWR | os.O_CREAT)]
    for fd in held:
        fcntl.flock(fd, fcntl.LOCK_EX)
    seen = len(engine.seen)
    try:
        assert _niah.busy(str(work)) == {"changed": False, "running_dirs": [str(running)]}
    finally:
        for fd in held:
            os.close(fd)
    assert _niah.busy(str(work))["running_dirs"] == []  # the ladder ended: its folder is free again
    assert len(engine.seen) == seen  # no HTTP


def test_status_reports_a_directory(tmp_path, engine):
    missing = _niah.status(str(tmp_path / "nothing"), "spark-01")
    assert missing == {"changed": False, "running": False, "progress": None, "summary": None, "rows_done": []}
    result = _niah.run(client(engine), settings(tmp_path))
    seen = len(engine.seen)
    status = _niah.status(str(tmp_path / "niah"), "spark-01")
    assert len(engine.seen) == seen  # no HTTP
    assert status["running"] is False and status["rows_done"] == SMALL_DEPTHS
    assert status["summary"] == result["summary"] and status["progress"]["state"] == "finished"


def test_check_run_plans_without_sending_or_writing(tmp_path, engine):
    engine.kv = 6000
    plan = _niah.check_run(client(engine), settings(tmp_path))
    assert not (tmp_path / "niah").exists() and engine.completion_lengths() == []
    assert [(step["depth"], step["action"]) for step in plan["plan"]] == [
        (2032, "run"), (4064, "run"), (7315, "capacity_error")]
    assert plan["changed"] is True and plan["ran"] == [2032, 4064] and plan["summary"] is None
    _niah.run(client(engine), settings(tmp_path))
    engine.seen.clear()
    again = _niah.check_run(client(engine), settings(tmp_path))
    assert [step["action"] for step in again["plan"]] == ["resume", "resume", "capacity_error"]
    assert again["changed"] is False and again["resumed"] == [2032, 4064]
    assert again["diff"]["before"]["depth-7315"] == "ERROR" and again["diff"]["after"]["depth-2032"] == "PASS"
    assert engine.completion_lengths() == []


def test_model_not_served_names_both(tmp_path, engine):
    engine.served = ["other-model", "second"]
    with pytest.raises(CheckError) as err:
        _niah.run(client(engine), settings(tmp_path))
    assert str(err.value) == f"rank spark-01: served model is [other-model, second], expected {SERVED}"
    assert not (tmp_path / "niah").exists()


def test_unreachable_engine_is_a_setup_failure(tmp_path, engine):
    url = engine.url
    engine.stop()
    with pytest.raises(CheckError, match=r"rank spark-01: GET /v1/models failed: GET http://127\.0\.0\.1:\d+/v1/models "
                                         r"refused the connection: nothing listens there"):
        _niah.run(json_client(url, None), settings(tmp_path))
    assert not (tmp_path / "niah").exists()


def test_missing_kv_size_sends_every_depth_with_a_warning(tmp_path, engine):
    engine.kv = None
    result = _niah.run(client(engine), settings(tmp_path, fractions=(0.25,)))
    assert result["summary"]["kv_cache_size_tokens"] is None and result["summary"]["kv_below_window"] is None
    assert engine.completion_lengths() == [2032]
    assert any("KV cache size unknown" in w for w in result["warnings"])


def test_tokenizer_file_tokenizes_locally(tmp_path, engine):
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    calls = []
    result = _niah.run(client(engine), settings(tmp_path, tokenizer_file=str(path)), lambda: _fake_library(calls))
    assert result["summary"]["tokenizer"] == "file:tokenizer.json" and result["summary"]["status"] == "PASS"
    tokenize = [body for m, p, body in engine.seen if p == "/tokenize"]
    assert len(tokenize) == 1 and "messages" in tokenize[0]  # only the template went to the server
    assert {text for text, _unused in calls[1:]} == {_niah.MARKER, _niah.FILLER, _niah.NEEDLE.format(code="GB10-NIAH-7Q4K")}


def test_api_key_goes_only_into_the_header(tmp_path):
    engine = FakeEngine(api_key="sk-very-secret")
    try:
        with pytest.raises(CheckError, match="HTTP 401"):
            _niah.run(json_client(engine.url, None), settings(tmp_path))
        result = _niah.run(json_client(engine.url, "sk-very-secret"), settings(tmp_path))
    finally:
        engine.stop()
    assert result["summary"]["status"] == "PASS"
    assert "sk-very-secret" not in json.dumps(result)
    for path in (tmp_path / "niah").iterdir():
        assert "sk-very-secret" not in path.read_text()
