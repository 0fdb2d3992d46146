"""The stdlib Docker Engine client against a fake engine on a real Unix socket."""
from __future__ import annotations

import json
import socketserver
import threading

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import (
    Engine,
    EngineError,
    demux,
    loaded_references,
    socket_path_of,
    split_tag,
)
from tests.support import fake_dockerd, synthetic_archive
from tests.support.fake_dockerd import FakeDockerd


@pytest.fixture
def dockerd(tmp_path):
    with FakeDockerd(str(tmp_path / "docker.sock")) as d:
        yield d


def test_image_store_detection(tmp_path):
    with FakeDockerd(str(tmp_path / "c.sock"), store="containerd") as d:
        assert Engine(d.docker_host).image_store() == "containerd"
    with FakeDockerd(str(tmp_path / "o.sock")) as d:
        assert Engine(d.docker_host).image_store() == "classic"


def test_inspect_missing_is_none(dockerd):
    assert Engine(dockerd.docker_host).inspect_image("nothing:here") is None


def test_load_streams_whole_archive_and_tags(dockerd, tmp_path):
    made = synthetic_archive.write(tmp_path / "a.tar", tag="reg.example:5000/dspark:v1", layer_bytes=3 << 20)
    eng = Engine(dockerd.docker_host)
    seen = []
    lines = eng.load(made["path"], progress=lambda sent, total: seen.append((sent, total)))
    size = (tmp_path / "a.tar").stat().st_size
    assert dockerd.state.load_bytes == size
    assert seen[-1] == (size, size) and len(seen) >= 3  # sent in 1 MiB chunks
    assert loaded_references(lines) == ([], ["reg.example:5000/dspark:v1"])
    assert eng.inspect_image("reg.example:5000/dspark:v1")["Id"] == made["image_id"]
    eng.tag(made["image_id"], "dspark", "prod")
    assert eng.inspect_image("dspark:prod")["Id"] == made["image_id"]
    eng.remove_image("dspark:prod")
    assert eng.inspect_image("dspark:prod") is None


def test_load_error_line_raises(dockerd, tmp_path):
    made = synthetic_archive.write(tmp_path / "a.tar")
    dockerd.state.fail_load = "unexpected EOF"
    with pytest.raises(EngineError, match="unexpected EOF"):
        Engine(dockerd.docker_host).load(made["path"])


def test_list_images_and_inspect_container(dockerd):
    eng = Engine(dockerd.docker_host)
    assert eng.list_images() == []
    dockerd.state.images["sha256:" + "a" * 64] = {"Id": "sha256:" + "a" * 64, "Config": {"Labels": {"k": "v"}}}
    dockerd.state.tags["dspark:prod"] = "sha256:" + "a" * 64
    assert eng.list_images() == [{"Id": "sha256:" + "a" * 64, "RepoTags": ["dspark:prod"], "RepoDigests": [],
                                  "Size": 0, "Labels": {"k": "v"}}]
    assert eng.inspect_container("dspark_vllm") is None  # 404: no such container
    dockerd.state.containers["dspark_vllm"] = {"Id": "c0ffee", "Name": "/dspark_vllm", "State": {"Running": True}}
    assert eng.inspect_container("dspark_vllm")["State"] == {"Running": True}
    assert dockerd.state.requests == ["GET /images/json"] * 2 + ["GET /containers/dspark_vllm/json"] * 2


def test_an_engine_answering_garbage_is_an_engine_error(tmp_path):
    class Garbage(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.recv(65536)
            self.request.sendall(b"not http at all\r\n\r\n")

    path = str(tmp_path / "g.sock")
    with socketserver.UnixStreamServer(path, Garbage) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            with pytest.raises(EngineError, match="cannot reach the Docker engine"):
                Engine(f"unix://{path}", timeout=5).list_images()
        finally:
            server.shutdown()


def test_unreachable_engine(tmp_path):
    with pytest.raises(EngineError, match="cannot reach the Docker engine"):
        Engine(f"unix://{tmp_path}/none.sock").info()


def test_docker_host_forms():
    assert socket_path_of("unix:///run/docker.sock") == "/run/docker.sock"
    assert socket_path_of("/run/docker.sock") == "/run/docker.sock"
    with pytest.raises(EngineError):
        socket_path_of("tcp://10.0.0.1:2375")


@pytest.mark.parametrize("ref,expected", [
    ("dspark:prod", ("dspark", "prod")),
    ("dspark", ("dspark", "latest")),
    ("reg:5000/team/dspark:v1", ("reg:5000/team/dspark", "v1")),
    ("reg:5000/dspark", ("reg:5000/dspark", "latest")),
])
def test_split_tag(ref, expected):
    assert split_tag(ref) == expected


def test_loaded_references_reads_both_line_kinds():
    lines = [{"stream": "Loaded image ID: sha256:abc\n"}, {"stream": "Loaded image: a:b\n"}, {"status": "x"}]
    assert loaded_references(lines) == (["sha256:abc"], ["a:b"])


# ============================================================================================
# exec and logs: Docker's multiplexed stream
# ============================================================================================
def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_demux_splits_the_streams_in_order():
    data = frame(1, b"out 1\n") + frame(2, b"err 1\n") + frame(1, b"out 2\n") + frame(1, b"") + frame(2, b"err 2")
    assert demux(data) == (b"out 1\nout 2\n", b"err 1\nerr 2")
    assert demux(b"") == (b"", b"")
    assert demux(frame(0, b"stdin echo")) == (b"stdin echo", b"")


@pytest.mark.parametrize("data, text", [
    (frame(1, b"whole") + b"\x01\x00\x00", "truncated multiplexed Docker stream: 3 bytes"),
    (frame(1, b"whole")[:-2], "truncated multiplexed Docker stream"),
    (b"plain log text, no frames\n", "not a multiplexed Docker stream"),
    (frame(3, b"exec failed: oops\n"), "the Docker engine reported: exec failed: oops"),
])
def test_demux_refuses_a_broken_stream(data, text):
    with pytest.raises(EngineError, match=text):
        demux(data)


class _ExecHandler(fake_dockerd._Handler):
    """FakeDockerd's handler plus ``POST /containers/<n>/exec``, ``POST /exec/<id>/start``,
    ``GET /exec/<id>/json`` and ``GET /containers/<n>/logs``, answered from ``state.exec``."""

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")

    def do_POST(self):  # noqa: N802 - http.server's name
        path, _query = self._path()
        ex = self.state.exec
        if path.startswith("/containers/") and path.endswith("/exec"):
            self.state.requests.append(f"POST {path}")
            ex["create"].append(self._body())
            name = path[len("/containers/"):-len("/exec")]
            if name not in self.state.containers:
                return self._send(404, {"message": f"No such container: {name}"})
            if not self.state.containers[name].get("State", {}).get("Running"):
                return self._send(409, {"message": f"container {name} is not running"})
            return self._send(201, {"Id": "e1"})
        if path == "/exec/e1/start":
            self.state.requests.append(f"POST {path}")
            ex["start"].append(self._body())
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.docker.raw-stream")
            self.end_headers()
            data = ex["output"]
            for i in range(0, len(data), 7):  # in odd pieces: frames cross the reads
                self.wfile.write(data[i:i + 7])
            self.wfile.flush()
            self.close_connection = True
            return None
        return super().do_POST()

    def do_GET(self):  # noqa: N802 - http.server's name
        path, query = self._path()
        ex = self.state.exec
        if path == "/exec/e1/json":
            self.state.requests.append(f"GET {path}")
            running = ex["running_polls"] > 0
            ex["running_polls"] -= 1
            return self._send(200, {"ID": "e1", "Running": running, "ExitCode": None if running else ex["rc"]})
        if path.startswith("/containers/") and path.endswith("/logs"):
            self.state.requests.append(f"GET {path}?{'&'.join(f'{k}={v}' for k, v in sorted(query.items()))}")
            name = path[len("/containers/"):-len("/logs")]
            if name not in self.state.containers:
                return self._send(404, {"message": f"No such container: {name}"})
            data = ex["logs"]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        return super().do_GET()


@pytest.fixture
def execd(tmp_path):
    path = str(tmp_path / "exec.sock")
    state = fake_dockerd.State()
    state.exec = {"create": [], "start": [], "output": b"", "rc": 0, "running_polls": 0, "logs": b""}
    state.containers["dspark_vllm"] = {"Id": "c0ffee", "State": {"Running": True}}
    state.containers["stopped"] = {"Id": "dead", "State": {"Running": False}}
    server = fake_dockerd._Server(path, type("Handler", (_ExecHandler,), {"state": state}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Engine(f"unix://{path}", timeout=10), state
    finally:
        server.shutdown()
        server.server_close()


def test_exec_run_answers_like_docker_exec(execd):
    eng, state = execd
    state.exec.update(output=frame(1, b'["A=1"]\n') + frame(2, b"warning\n") + frame(1, b"done\n"), rc=3,
                      running_polls=1)  # the exec is still winding down at the first look
    argv = ["/usr/bin/python3", "-c", "print(1)", "A="]
    assert eng.exec_run("dspark_vllm", argv) == (3, b'["A=1"]\ndone\n', b"warning\n")
    assert state.exec["create"] == [{"AttachStdout": True, "AttachStderr": True, "Tty": False, "Cmd": argv}]
    assert state.exec["start"] == [{"Detach": False, "Tty": False}]
    assert state.requests == ["POST /containers/dspark_vllm/exec", "POST /exec/e1/start",
                              "GET /exec/e1/json", "GET /exec/e1/json"]


def test_exec_run_cuts_the_output_and_says_so(execd):
    eng, state = execd
    state.exec["output"] = frame(1, b"a" * 10) + frame(2, b"b" * 10) + frame(1, b"c" * 10)
    rc, out, err = eng.exec_run("dspark_vllm", ["true"], max_bytes=15)
    assert rc == 0 and out == b"a" * 10
    assert err.startswith(b"b" * 5 + b"\n[gb10.dspark: output cut at 15 bytes; 15 more bytes were not returned]")


@pytest.mark.parametrize("name, status, text", [
    ("nothing", 404, "No such container: nothing"),
    ("stopped", 409, "container stopped is not running"),
])
def test_exec_run_that_cannot_run_is_an_engine_error(execd, name, status, text):
    eng, state = execd
    with pytest.raises(EngineError, match=text) as err:
        eng.exec_run(name, ["true"])
    assert err.value.status == status
    assert state.requests == [f"POST /containers/{name}/exec"]  # never started


def test_exec_run_refuses_an_empty_argv(execd):
    with pytest.raises(ValueError):
        execd[0].exec_run("dspark_vllm", [])


def test_logs_demultiplexed_raw_with_a_tty_and_missing(execd):
    eng, state = execd
    state.exec["logs"] = frame(1, b"INFO up\n") + frame(2, b"WARNING slow\n")
    assert eng.logs("dspark_vllm", 200) == (b"INFO up\n", b"WARNING slow\n")
    assert state.requests == ["GET /containers/dspark_vllm/logs?stderr=1&stdout=1&tail=200"]
    state.exec["logs"] = b"raw tty text\r\n"
    assert eng.logs("dspark_vllm", 5, tty=True) == (b"raw tty text\r\n", b"")
    with pytest.raises(EngineError, match="not a multiplexed Docker stream"):
        eng.logs("dspark_vllm", 5)  # a TTY log read as multiplexed is refused, not garbled
    with pytest.raises(EngineError, match="No such container: nothing") as err:
        eng.logs("nothing", 5)
    assert err.value.status == 404
    with pytest.raises(ValueError):
        eng.logs("dspark_vllm", -1)


def test_log_text_keeps_the_order_the_container_wrote_in(execd):
    eng, state = execd
    state.exec["logs"] = frame(1, b"INFO up\n") + frame(2, b"ERROR boom\n") + frame(1, b"INFO after\n")
    assert eng.log_text("dspark_vllm", 3) == b"INFO up\nERROR boom\nINFO after\n"
    assert eng.logs("dspark_vllm", 3) == (b"INFO up\nINFO after\n", b"ERROR boom\n")  # split, order lost
    assert state.requests[-1] == "GET /containers/dspark_vllm/logs?stderr=1&stdout=1&tail=3"
    state.exec["logs"] = b"raw tty text\r\n"
    assert eng.log_text("dspark_vllm", 1, tty=True) == b"raw tty text\r\n"
    with pytest.raises(EngineError, match="not a multiplexed Docker stream"):
        eng.log_text("dspark_vllm", 1)
    with pytest.raises(EngineError, match="No such container: nothing") as err:
        eng.log_text("nothing", 5)
    assert err.value.status == 404
    with pytest.raises(ValueError):
        eng.log_text("dspark_vllm", True)
