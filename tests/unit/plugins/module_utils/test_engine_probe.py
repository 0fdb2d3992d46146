"""The engine probe: metrics parsing, container state, and a whole probe against fakes."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils import _engine_probe as ep

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="deepseek-v4-flash-dspark"} 2.0
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
    doc = [{"Id": "c1", "Image": "sha256:x", "RestartCount": 0,
            "State": {"Status": "exited", "Running": False, "ExitCode": 1, "StartedAt": "t0", "FinishedAt": "t1"},
            "Config": {"Labels": {"io.gb10.dspark.rank": "1", "other": "x"}}}]
    st = ep.container_state(json.dumps(doc))
    assert st["exists"] and not st["running"] and st["exit_code"] == 1
    assert st["labels"] == {"io.gb10.dspark.rank": "1"}
    assert ep.container_state("[]")["status"] == "absent"


class _Api(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/v1/models":
            body = json.dumps({"data": [{"id": "m", "max_model_len": 327680}]}).encode()
        elif self.path == "/metrics":
            body = METRICS.encode()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def api():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def fake_run(states: dict):
    calls = []

    def run(argv):
        calls.append(argv)
        where = "worker" if argv[0] == "ssh" else "head"
        cmd = argv[-1].split() if where == "worker" else argv
        st = states[where]
        if "inspect" in cmd:
            if st is None:
                return 1, "", "Error: No such container: dspark_vllm"
            return 0, json.dumps([{"Id": where, "State": st, "Config": {"Labels": {}}}]), ""
        return 0, f"{where} line 1\n{where} last line\n", ""
    return run, calls


def test_probe_ready_pair(api):
    run, calls = fake_run({"head": {"Status": "running", "Running": True}, "worker": {"Status": "running", "Running": True}})
    out = ep.probe(run, "dspark_vllm", api, "m", ["ssh", "root@w", "--"])
    assert out["ready"] and out["exited"] == []
    assert out["api"]["kv_cache_size_tokens"] == 1253231 and out["api"]["num_requests_running"] == 2
    assert out["worker"]["logs"][-1] == "worker last line"
    assert ["ssh", "root@w", "--", "docker container inspect dspark_vllm"] in calls  # one quoted string for ssh


def test_probe_exited_worker_is_not_ready(api):
    run, _unused = fake_run({"head": {"Status": "running", "Running": True},
                            "worker": {"Status": "exited", "Running": False, "ExitCode": 1}})
    out = ep.probe(run, "dspark_vllm", api, "m", ["ssh", "root@w", "--"])
    assert not out["ready"] and out["exited"] == ["worker"]


def test_probe_missing_container_and_wrong_model(api):
    run, _unused = fake_run({"head": {"Status": "running", "Running": True}, "worker": None})
    out = ep.probe(run, "dspark_vllm", api, "other-model", ["ssh", "root@w", "--"])
    assert out["worker"]["status"] == "absent" and not out["api"]["ready"] and not out["ready"]


def test_probe_head_down_skips_the_api():
    run, _unused = fake_run({"head": {"Status": "exited", "Running": False, "ExitCode": 137}, "worker": None})
    out = ep.probe(run, "dspark_vllm", "http://127.0.0.1:9", "m", None)
    assert out["exited"] == ["head"] and out["api"]["error"] == "head container not running"
