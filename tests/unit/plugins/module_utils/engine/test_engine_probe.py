"""The engine probe: metrics parsing, container state, and a whole probe against fakes."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _engine_probe as ep
from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import EngineError

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="deepseek-v4-flash-dspark"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="deepseek-v4-flash-dspark"} 0.0
vllm:cache_config_info{block_size="256",kv_cache_size_tokens="1253231",num_gpu_blocks="4895"} 1.0
vllm:kv_cache_size_tokens{engine="0"} 1253231.0
"""


def test_parse_metrics_reads_labels_and_values():
    m = ep.parse_metrics(METRICS)
    assert ep.requests_running(m) == 2
    assert ep.kv_cache_tokens(m) == 1253231
    only_info = ep.parse_metrics(METRICS.replace("vllm:kv_cache_size_tokens{", "other{"))
    assert ep.kv_cache_tokens(only_info) == 1253231
    assert ep.requests_running({}) is None and ep.kv_cache_tokens({}) is None


def test_container_state_fields():
    doc = {"Id": "c1", "Image": "sha256:x", "RestartCount": 0,
           "State": {"Status": "exited", "Running": False, "ExitCode": 1, "StartedAt": "t0", "FinishedAt": "t1"},
           "Config": {"Labels": {"io.gb10.dspark.rank": "1", "other": "x"}}}
    st = ep.container_state(doc)
    assert st["exists"] and not st["running"] and st["exit_code"] == 1
    assert st["labels"] == {"io.gb10.dspark.rank": "1"}
    assert ep.container_state(None)["status"] == "absent"


class _Api(BaseHTTPRequestHandler):
    metrics = METRICS

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/v1/models":
            body = json.dumps({"data": [{"id": "m", "max_model_len": 327680}]}).encode()
        elif self.path == "/metrics":
            body = self.metrics.encode()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(handler):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.fixture
def api():
    yield from _serve(_Api)


class FakeDocker:
    """The two reads a probe makes of the rank's Docker engine; ``state`` None: no such container."""

    def __init__(self, state: dict | None, log: bytes = b"line 1\nlast line\n", err: str | None = None):
        self.state, self.log, self.err = state, log, err
        self.calls: list[tuple] = []

    def inspect_container(self, name):
        self.calls.append(("inspect", name))
        if self.err:
            raise EngineError(self.err)
        if self.state is None:
            return None
        return {"Id": "c", "Image": "sha256:x", "State": self.state, "Config": {"Labels": {}, "Tty": False}}

    def log_text(self, name, tail, tty=False):
        self.calls.append(("logs", name, tail))
        return self.log


def test_probe_ready_head(api):
    docker = FakeDocker({"Status": "running", "Running": True})
    out = ep.probe(docker, "dspark_vllm", api, "m")
    assert out["ready"] and out["container"]["running"]
    assert out["api"]["kv_cache_size_tokens"] == 1253231 and out["api"]["num_requests_running"] == 2
    assert out["container"]["logs"][-1] == "last line"
    assert ("logs", "dspark_vllm", 20) in docker.calls


def test_probe_exited_container_is_not_ready_and_skips_the_api():
    out = ep.probe(FakeDocker({"Status": "exited", "Running": False, "ExitCode": 137}), "dspark_vllm",
                   "http://127.0.0.1:9", "m")
    assert not out["ready"] and out["container"]["exit_code"] == 137
    assert out["api"]["error"] == "container not running"


def test_probe_missing_container_wrong_model_and_unreadable_engine(api):
    out = ep.probe(FakeDocker(None), "dspark_vllm", api, "m")
    assert out["container"]["status"] == "absent" and out["container"]["running"] is False and not out["ready"]
    assert out["container"]["logs"] == []
    out = ep.probe(FakeDocker({"Status": "running", "Running": True}), "dspark_vllm", api, "other-model")
    assert not out["api"]["ready"] and not out["ready"]
    out = ep.probe(FakeDocker(None, err="cannot reach the Docker engine at /x: refused"), "dspark_vllm", api, "m")
    assert out["container"]["status"] == "unknown" and "refused" in out["container"]["error"]


class _StalledMetrics(_Api):
    def do_GET(self):
        if self.path == "/metrics":
            import time
            time.sleep(1.5)  # longer than the probe's timeout below
        super().do_GET()


@pytest.fixture
def stalled_api():
    yield from _serve(_StalledMetrics)


RUNNING = {"Status": "running", "Running": True}


def test_a_metrics_timeout_is_unknown_load_never_idle(stalled_api):
    out = ep.probe(FakeDocker(RUNNING), "dspark_vllm", stalled_api, "m", timeout=0.5)
    assert out["api"]["ready"] and out["api"]["num_requests_running"] is None
    assert "timed out" in out["api"]["metrics_error"]
    msg = ep.busy_message(out, "sim01-head")
    assert msg is not None and msg.startswith("rank sim01-head: cannot tell how many requests the head is serving")
    assert ("/metrics: took the request but sent no answer within 0.5 s: the engine is stalled (hung) (timed out)): "
            "running unknown, waiting unknown; expected both readable and 0") in msg
    assert "dspark_engine_force_replace=true" in msg


def test_busy_message_refuses_running_requests_and_missing_metrics(api):
    out = ep.probe(FakeDocker(RUNNING), "dspark_vllm", api, "m")
    assert out["api"]["num_requests_waiting"] == 0 and out["api"]["metrics_error"] is None
    assert ep.busy_message(out, "h") == ("rank h: the head has 2 request(s) in flight (running 2, waiting 0), expected "
                                         "0; stopping the engine would cut them off. Drain it, or set "
                                         "dspark_engine_force_replace=true")
    out["api"].update(num_requests_running=None, metrics_error="/metrics has no vllm:num_requests_running")
    assert "(/metrics has no vllm:num_requests_running)" in ep.busy_message(out, "h")
    out["api"].update(num_requests_running=0, metrics_error=None)
    assert ep.busy_message(out, "h") is None


def test_busy_message_lets_a_stopped_or_missing_head_go():
    for head in ({"Status": "exited", "Running": False, "ExitCode": 0}, None):
        out = ep.probe(FakeDocker(head), "dspark_vllm", "http://127.0.0.1:9", "m")
        assert ep.busy_message(out, "h") is None


def test_container_only_read_skips_the_api_and_the_logs():
    docker = FakeDocker(RUNNING)
    out = ep.probe(docker, "dspark_vllm", "http://127.0.0.1:9", "m", log_lines=0, read_api=False)
    assert out["container"]["running"] and out["container"]["logs"] == []
    assert out["api"]["error"] == "API not read (read_api=false)" and not out["ready"]
    assert [c[0] for c in docker.calls] == ["inspect"]


def test_the_probe_never_returns_the_containers_environment():
    secret = "sk-probe-leak-check-91c2"
    doc = {"Id": "c", "Image": "sha256:x", "State": RUNNING, "Path": "vllm", "Args": ["serve"],
           "Config": {"Env": [f"VLLM_API_KEY={secret}"], "Cmd": ["serve"], "Labels": {"io.gb10.dspark.rank": "0"}}}
    assert secret not in json.dumps(ep.container_state(doc))


def test_log_lines_lose_terminal_control_sequences():
    assert ep.printable("\x1b[31mERROR\x1b[0m boom\x07\x1b]0;owned\x07") == "ERROR boom??]0;owned?"
    assert ep.printable("tab\tkept") == "tab\tkept"
    assert ep.rank_state(FakeDocker(RUNNING, log=b"\x1b[2J\x1b[Hcleared screen\n"), "dspark_vllm", 5)["logs"] == [
        "cleared screen"]


def test_a_container_without_the_collections_labels_is_someone_elses():
    theirs = {"Id": "c", "Image": "sha256:abc", "State": {**RUNNING, "StartedAt": "2026-12-04T10:00:00Z"},
              "Config": {"Image": "postgres:16", "Labels": {"com.example.owner": "db-team"}}}

    class Docker(FakeDocker):
        def inspect_container(self, name):
            return theirs

    out = ep.probe(Docker(RUNNING), "dspark_vllm", "http://127.0.0.1:9", "m", log_lines=0, read_api=False)
    assert ep.foreign_message(out, "sim01-worker", "dspark_vllm") == (
        "rank sim01-worker: container dspark_vllm (image postgres:16 = sha256:abc, started 2026-12-04T10:00:00Z, "
        "running) was not made by gb10.dspark (no io.gb10.dspark.* labels), expected none or the collection's engine; "
        "nothing was changed. Move that workload away, or set dspark_engine_replace_foreign=true to replace it")
    theirs["Config"]["Labels"]["io.gb10.dspark.pair"] = "sim01"  # ours: replaced as usual
    out = ep.probe(Docker(RUNNING), "dspark_vllm", "http://127.0.0.1:9", "m", log_lines=0, read_api=False)
    assert ep.foreign_message(out, "sim01-worker", "dspark_vllm") is None
    none = ep.probe(FakeDocker(None), "dspark_vllm", "http://127.0.0.1:9", "m", log_lines=0, read_api=False)
    assert ep.foreign_message(none, "sim01-worker", "dspark_vllm") is None


def test_liveness_that_is_refused_or_answered_with_an_error_is_failing_not_stalled(api):
    import socket
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    refused = ep.liveness_state(closed, "m", 2)
    assert refused["ok"] is False and refused["stalled"] is False and refused["status"] is None
    assert refused["error"].startswith(f"a one-token completion failed: POST {closed}/v1/completions refused the "
                                       "connection: nothing listens there"), refused
    answered = ep.liveness_state(api, "m", 2)  # this fake API has no POST: HTTP 501
    assert answered == {"ok": False, "status": 501, "seconds": answered["seconds"],
                        "error": "a one-token completion answered HTTP 501", "stalled": False}


def test_a_key_with_a_newline_is_named_never_printed_in_the_probe_liveness_and_busy_texts(api):
    """http.client used to answer "Invalid header value b'Bearer KEY\\n'", and that text reached the probe's
    error, the liveness error, the readiness failure and the busy refusal (which ran on the probe's result)."""
    key = "sk-probe-0123456789abcdef\n"
    state = ep.api_state(api, "m", 2, key)
    live = ep.liveness_state(api, "m", 2, key)
    busy = ep.busy_message({"container": {"running": True}, "api": state}, "sim01-head")
    for text in (state["error"], state["metrics_error"], live["error"], busy):
        assert "dspark_api_key holds a line feed" in text, text
        assert "0123456789abcdef" not in text, text


# --- the busy check: unknown is never idle; busy is running plus waiting ---------------------------

def _head(running=0, waiting=0, **api) -> dict:
    return {"container": {"exists": True, "running": True, "status": "running"},
            "api": {"num_requests_running": running, "num_requests_waiting": waiting, "metrics_error": None, **api}}


def test_a_head_whose_docker_engine_cannot_be_read_is_not_taken_for_stopped():
    """rank_state says status unknown (running False) when the rank's Docker engine cannot be read: the
    head may well be serving, so the busy check refuses, naming the rank and why."""
    out = ep.probe(FakeDocker(None, err="cannot reach the Docker engine at unix:///run/docker.sock: refused"),
                   "dspark_vllm", "http://127.0.0.1:9", "m")
    assert out["container"]["status"] == "unknown"
    assert ep.busy_message(out, "sim01-head") == (
        "rank sim01-head: cannot tell whether the head's engine runs (its Docker engine cannot be read: cannot "
        "reach the Docker engine at unix:///run/docker.sock: refused); expected a readable container state before "
        "stopping its engine. Check the rank's Docker engine, or set dspark_engine_force_replace=true to stop it "
        "anyway")


def test_requests_waiting_make_a_head_busy():
    assert ep.busy_message(_head(running=0, waiting=3), "h") == (
        "rank h: the head has 3 request(s) in flight (running 0, waiting 3), expected 0; stopping the engine would "
        "cut them off. Drain it, or set dspark_engine_force_replace=true")
    assert ep.busy_message(_head(running=2, waiting=1), "h").startswith(
        "rank h: the head has 3 request(s) in flight (running 2, waiting 1), expected 0;")
    assert ep.busy_message(_head(running=0, waiting=0), "h") is None


class _NoWaiting(_Api):
    metrics = "\n".join(line for line in METRICS.splitlines() if "num_requests_waiting" not in line) + "\n"


@pytest.fixture
def no_waiting_api():
    yield from _serve(_NoWaiting)


def test_a_missing_waiting_count_is_unknown_not_idle(no_waiting_api):
    """vLLM always exports both gauges: /metrics with running but no waiting is not a vLLM we know (or a
    cut answer), so the load is unknown and the head is not stopped."""
    out = ep.probe(FakeDocker(RUNNING), "dspark_vllm", no_waiting_api, "m")
    assert out["api"]["num_requests_running"] == 2 and out["api"]["num_requests_waiting"] is None
    assert out["api"]["metrics_error"] == "/metrics has no vllm:num_requests_waiting"
    assert ep.busy_message(_head(running=0, waiting=None, metrics_error="/metrics has no vllm:num_requests_waiting"),
                           "h") == (
        "rank h: cannot tell how many requests the head is serving (/metrics has no vllm:num_requests_waiting): "
        "running 0, waiting unknown; expected both readable and 0 (vllm:num_requests_running, "
        "vllm:num_requests_waiting) before stopping its engine. Check the head's API, or set "
        "dspark_engine_force_replace=true to stop it anyway")


def test_requests_waiting_is_read_from_metrics_as_vllm_exports_it():
    text = METRICS.replace('model_name="deepseek-v4-flash-dspark"} 0.0', 'model_name="deepseek-v4-flash-dspark"} 4.0')
    text += 'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0\n'
    m = ep.parse_metrics(text)
    assert ep.requests_waiting(m) == 4 and ep.requests_running(m) == 2
    assert ep.requests_waiting(ep.parse_metrics(_NoWaiting.metrics)) is None


# ============================================================================================
# what the evidence, the orphan sweep and the simulator's smoke test read through the probe
# (the collection's one Docker client against a fake engine on a real socket)
# ============================================================================================
@pytest.fixture
def dockerd(tmp_path):
    from tests.support.fake_dockerd import FakeDockerd
    with FakeDockerd(str(tmp_path / "docker.sock")) as d:
        yield d


def _engine(dockerd):
    from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import Engine
    return Engine(dockerd.docker_host, timeout=10)


def test_inspect_returns_the_whole_record_only_when_asked(dockerd):
    record = {"Id": "c0ffee", "Image": "sha256:x", "State": RUNNING, "Path": "vllm", "Args": ["serve"],
              "Config": {"Env": ["VLLM_API_KEY=sk-kept-for-the-pack"], "Labels": {"io.gb10.dspark.rank": "0"}}}
    dockerd.state.containers["dspark_vllm"] = record
    plain = ep.probe(_engine(dockerd), "dspark_vllm", "http://127.0.0.1:9", "m", log_lines=0, read_api=False)
    assert "inspect" not in plain and "sk-kept" not in json.dumps(plain)
    asked = ep.probe(_engine(dockerd), "dspark_vllm", "http://127.0.0.1:9", "m", log_lines=0, read_api=False,
                     inspect=True)
    assert asked["inspect"] == record and "record" not in asked["container"]
    missing = ep.probe(_engine(dockerd), "nothing", "http://127.0.0.1:9", "m", log_lines=0, read_api=False,
                       inspect=True)
    assert missing["inspect"] is None and missing["container"]["status"] == "absent"


def test_labelled_lists_the_other_labelled_containers_running_or_not(dockerd):
    label = "io.gb10.dspark.pair"
    dockerd.state.containers["dspark_vllm"] = {"Id": "1", "State": RUNNING, "Config": {"Labels": {label: "p0"}}}
    dockerd.state.containers["dspark_vllm_old"] = {"Id": "2", "State": {"Running": False},
                                                   "Config": {"Labels": {label: "p0"}}}
    dockerd.state.containers["web/dspark_vllm_old"] = {"Id": "2", "State": {"Running": False},
                                                       "Config": {"Labels": {label: "p0"}}}  # a link alias
    dockerd.state.containers["theirs"] = {"Id": "3", "State": RUNNING, "Config": {"Labels": {}}}
    out = ep.probe(_engine(dockerd), "dspark_vllm", "http://127.0.0.1:9", "m", log_lines=0, read_api=False,
                   labelled=label)
    assert out["labelled"] == ["dspark_vllm_old"]


def test_engine_info_names_the_engine_and_an_unreachable_one_is_an_engine_error(dockerd, tmp_path):
    from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import Engine
    out = ep.probe(_engine(dockerd), "dspark_vllm", "http://127.0.0.1:9", "m", log_lines=0, read_api=False,
                   engine_info=True)
    assert out["engine"] == {"id": "FAKE-ENGINE", "name": "fake-rank", "image_store": "classic"}
    for kw in ({"engine_info": True}, {"labelled": "io.gb10.dspark.pair"}):
        with pytest.raises(EngineError, match="cannot reach the Docker engine"):
            ep.probe(Engine(f"unix://{tmp_path}/none.sock", timeout=5), "dspark_vllm", "http://127.0.0.1:9", "m",
                     log_lines=0, read_api=False, **kw)


def _busy_head(running, waiting=0, status="running"):
    return {"container": {"running": status == "running", "status": status},
            "api": {"num_requests_running": running, "num_requests_waiting": waiting}}


class _Clock:
    def __init__(self):
        self.now = 100.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_drain_waits_for_the_requests_in_flight_to_end_reading_the_metrics_and_cuts_nothing():
    reads = iter([_busy_head(1, 1), _busy_head(1, 0), _busy_head(0, 0)])
    clock = _Clock()
    result, busy, waited = ep.drain(lambda: next(reads), "sim01-head", timeout=30, interval=2, clock=clock,
                                    sleep=clock.sleep)
    assert busy is None
    assert result["api"]["num_requests_running"] == 0
    assert clock.slept == [2, 2] and waited == 4


def test_drain_refuses_at_the_timeout_naming_the_rank_the_requests_and_the_timeout():
    clock = _Clock()
    result, busy, waited = ep.drain(lambda: _busy_head(2, 1), "sim01-head", timeout=5, interval=2, clock=clock,
                                    sleep=clock.sleep)
    assert busy.startswith("rank sim01-head: the head still has 3 request(s) in flight (running 2, waiting 1) "
                           "after waiting 5 s")
    assert "no request was cut" in busy and "dspark_engine_drain_timeout" in busy
    assert clock.slept == [2, 2, 1] and waited == 5


def test_drain_without_a_timeout_refuses_at_once_as_before():
    clock = _Clock()
    first = _busy_head(1)
    result, busy, waited = ep.drain(lambda: pytest.fail("read again"), "h", timeout=0, first=first, clock=clock,
                                    sleep=clock.sleep)
    assert busy == ep.busy_message(first, "h") and "1 request(s) in flight" in busy
    assert clock.slept == [] and waited == 0


def test_drain_never_waits_on_a_load_or_container_it_cannot_read():
    for unknown in (_busy_head(None), _busy_head(0, None), {"container": {"status": "unknown", "error": "down"}, "api": {}}):
        clock = _Clock()
        _result, busy, _waited = ep.drain(lambda u=unknown: u, "h", timeout=60, clock=clock, sleep=clock.sleep)
        assert busy and busy.startswith("rank h: cannot tell")
        assert clock.slept == []


def test_drain_lets_an_idle_or_stopped_head_go_at_once():
    for head in (_busy_head(0), _busy_head(3, status="exited")):
        clock = _Clock()
        _result, busy, _waited = ep.drain(lambda h=head: h, "h", timeout=60, clock=clock, sleep=clock.sleep)
        assert busy is None and clock.slept == []
