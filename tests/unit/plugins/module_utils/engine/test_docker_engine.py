"""The collection's Docker client (the docker SDK, wrapped in ``_docker_engine``) against a fake engine
on a real Unix socket: the SDK speaks real HTTP to it, so what is tested is the wrapper and the SDK
together, at the engine's API."""
from __future__ import annotations

import json
import socketserver
import threading

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _docker_engine
from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import (
    CHUNK,
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
    # streamed: a chunked body of pieces of at most CHUNK bytes, never the archive in one piece
    assert sum(dockerd.state.load_chunks) == size and len(dockerd.state.load_chunks) >= 4
    assert max(dockerd.state.load_chunks) <= CHUNK < size
    assert [b for b, _unused in seen] == [min(CHUNK * (i + 1), size) for i in range(len(seen))]
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


def test_load_of_an_archive_the_engine_refuses_is_an_engine_error(dockerd, tmp_path):
    path = tmp_path / "not.tar"
    path.write_bytes(b"not a tar archive" * 100)
    with pytest.raises(EngineError, match="image load from"):
        Engine(dockerd.docker_host).load(str(path))


def test_list_containers_by_label_running_or_not(dockerd):
    eng = Engine(dockerd.docker_host)
    dockerd.state.containers["dspark_vllm"] = {"Id": "1", "State": {"Running": True},
                                               "Config": {"Labels": {"io.gb10.dspark.pair": "p0"}}}
    dockerd.state.containers["old"] = {"Id": "2", "State": {"Running": False},
                                       "Config": {"Labels": {"io.gb10.dspark.pair": "p0"}}}
    dockerd.state.containers["theirs"] = {"Id": "3", "State": {"Running": True}, "Config": {"Labels": {}}}
    names = sorted(n for row in eng.list_containers("io.gb10.dspark.pair") for n in row["Names"])
    assert names == ["/dspark_vllm", "/old"]


def test_remove_image_by_id_with_force_takes_every_tag_and_refuses_one_in_use(dockerd, tmp_path):
    made = synthetic_archive.write(tmp_path / "a.tar", tag="dspark:v1")
    eng = Engine(dockerd.docker_host)
    eng.load(made["path"])
    eng.tag(made["image_id"], "dspark", "prod")
    dockerd.state.in_use.add(made["image_id"])
    with pytest.raises(EngineError, match="image is being used by running container") as err:
        eng.remove_image(made["image_id"], force=True)
    assert err.value.status == 409
    dockerd.state.in_use.clear()
    eng.remove_image(made["image_id"], force=True)
    assert eng.inspect_image("dspark:v1") is None and eng.inspect_image("dspark:prod") is None
    assert eng.inspect_image(made["image_id"]) is None
    with pytest.raises(EngineError, match="HTTP 404") as err:
        eng.remove_image(made["image_id"], force=True)
    assert err.value.status == 404


def test_without_the_sdk_the_engine_names_the_package_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(_docker_engine, "docker", None)
    monkeypatch.setattr(_docker_engine, "_IMPORT_ERROR", ImportError("No module named 'docker'"))
    with pytest.raises(EngineError, match="docker SDK for Python is missing on this rank.*install python3-docker"):
        Engine(f"unix://{tmp_path}/docker.sock")


def test_missing_sdk_names_the_debian_packages(monkeypatch):
    assert _docker_engine.missing_sdk() == []
    real_import = __import__

    def no_docker(name, *args, **kwargs):
        if name in ("docker", "requests"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", no_docker)
    assert _docker_engine.missing_sdk() == ["python3-docker", "python3-requests"]


_SHIMMED_IMPORT = """
import sys
class DistutilsMetaFinder:  # stands in for setuptools' shim: answering distutils would import setuptools
    asked = []
    def find_spec(self, fullname, path, target=None):
        self.asked.append(fullname)
        return None
DistutilsMetaFinder.__module__ = "_distutils_hack"
shim = DistutilsMetaFinder()
sys.meta_path.insert(0, shim)
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _docker_engine
imported_at_import = "docker" in sys.modules
_docker_engine.Engine("unix:///nonexistent/docker.sock")  # the first Engine imports the SDK
print(repr((imported_at_import, shim.asked, sys.meta_path.index(shim), _docker_engine.docker is not None,
            sys.modules["distutils"].__file__ if "distutils" in sys.modules else None)))
"""


def test_the_first_engine_imports_the_sdk_past_setuptools_distutils_shim(tmp_path):
    """Importing the module imports no SDK; the first Engine does. Where setuptools' distutils shim is installed
    (Debian's python3 with python3-setuptools), it imports the standard library's distutils past the shim first
    (Python < 3.12), so the SDK's import costs no setuptools; the shim is put back where it was. Run in a fresh interpreter: this one has imported the module already."""
    import ast
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[5]
    env = {"PYTHONPATH": f"{root / 'collections'}:{root}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", _SHIMMED_IMPORT], env=env, capture_output=True, text=True, check=True)
    imported_at_import, asked, position, sdk, distutils_file = ast.literal_eval(out.stdout.strip())
    assert not imported_at_import  # a module that never reaches an engine never pays for the SDK
    assert position == 0 and sdk
    if sys.version_info < (3, 12):
        assert "distutils" not in asked and not any(a.startswith("distutils.") for a in asked), asked
        assert distutils_file.startswith(sys.base_prefix) or "/lib/python3" in distutils_file, distutils_file
        assert "site-packages" not in distutils_file and "setuptools" not in distutils_file, distutils_file
    # The simulated ranks' own Python (Debian's, with python3-docker from tools/deps/apt.sh): the SDK imports,
    # and setuptools is never imported on the way (it is, through the shim, when python3-setuptools is installed
    # and the module does not step past it).
    rank = subprocess.run(["/usr/bin/python3", "-c", "import sys\n"
                           "from ansible_collections.gb10.dspark.plugins.module_utils.engine import _docker_engine\n"
                           "_docker_engine.Engine('unix:///nonexistent/docker.sock')\n"
                           "print(_docker_engine.docker is not None, 'setuptools' in sys.modules)"],
                          env=env, capture_output=True, text=True, check=True)
    assert rank.stdout.split() == ["True", "False"], rank.stdout + rank.stderr


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


@pytest.fixture
def execd(tmp_path):
    path = str(tmp_path / "exec.sock")
    state = fake_dockerd.exec_state()
    state.containers["dspark_vllm"] = {"Id": "c0ffee", "State": {"Running": True}}
    state.containers["stopped"] = {"Id": "dead", "State": {"Running": False}}
    server = fake_dockerd._Server(path, type("Handler", (fake_dockerd.ExecHandler,), {"state": state}))
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
    [create] = state.exec["create"]
    assert {k: create[k] for k in ("AttachStdin", "AttachStdout", "AttachStderr", "Tty", "Cmd")} == \
        {"AttachStdin": False, "AttachStdout": True, "AttachStderr": True, "Tty": False, "Cmd": argv}
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


# ============================================================================================
# the ranks' Python: /usr/bin/python3 with Debian's SDK (python3-docker 5.x, requests 2.28), which
# the simulator's ranks run and a real rank runs; the virtualenv above has the SDK from PyPI (7.x)
# ============================================================================================
RANK_PYTHON = "/usr/bin/python3"
_ON_THE_RANK = r'''
import json, sys, tempfile, threading
sys.path[:0] = [sys.argv[1] + "/collections", sys.argv[1]]
import docker
from tests.support import fake_dockerd, synthetic_archive
from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import Engine, EngineError
out = {"sdk": docker.__version__}
tmp = tempfile.mkdtemp()
with fake_dockerd.FakeDockerd(tmp + "/d.sock") as d:
    made = synthetic_archive.write(tmp + "/a.tar", tag="dspark:v1", layer_bytes=3 << 20)
    eng = Engine(d.docker_host, timeout=10)
    out["loaded"] = eng.load(made["path"])
    out["chunks"] = d.state.load_chunks
    eng.tag(made["image_id"], "dspark", "prod")
    out["tagged"] = eng.inspect_image("dspark:prod")["Id"] == made["image_id"]
    out["missing"] = eng.inspect_image("nothing:here")
    d.state.containers["old"] = {"Id": "2", "State": {"Running": False}, "Config": {"Labels": {"l": "p"}}}
    out["labelled"] = [r["Names"] for r in eng.list_containers("l")]
    eng.remove_image(made["image_id"], force=True)
    out["images_after_remove"] = eng.list_images()
state = fake_dockerd.exec_state()
state.containers["c"] = {"Id": "c", "State": {"Running": True}}
frame = lambda s, p: bytes([s, 0, 0, 0]) + len(p).to_bytes(4, "big") + p
state.exec.update(output=frame(1, b"out\n") + frame(2, b"err\n") + frame(1, b"x" * 40), rc=7,
                  logs=frame(1, b"INFO up\n") + frame(2, b"ERROR boom\n"))
server = fake_dockerd._Server(tmp + "/e.sock", type("H", (fake_dockerd.ExecHandler,), {"state": state}))
threading.Thread(target=server.serve_forever, daemon=True).start()
eng = Engine("unix://" + tmp + "/e.sock", timeout=10)
rc, so, se = eng.exec_run("c", ["true"], max_bytes=20)
out["exec"] = [rc, so.decode(), se.decode()]
try:
    eng.exec_run("nothing", ["true"])
except EngineError as exc:
    out["exec_missing"] = [str(exc), exc.status]
out["logs"] = [x.decode() for x in eng.logs("c", 5)]
out["log_text"] = eng.log_text("c", 5).decode()
server.shutdown()
print(json.dumps(out))
'''


def test_the_ranks_python_runs_the_client_with_debians_sdk():
    import subprocess
    from pathlib import Path
    repo = Path(__file__).resolve().parents[5]
    done = subprocess.run([RANK_PYTHON, "-c", _ON_THE_RANK, str(repo)], capture_output=True, text=True, timeout=120,
                          cwd=repo, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["sdk"].split(".")[0] == "5"  # Debian bookworm's python3-docker, not the virtualenv's
    assert out["loaded"] == [{"stream": "Loaded image: dspark:v1\n"}]
    assert len(out["chunks"]) >= 4 and max(out["chunks"]) <= CHUNK  # streamed in chunks there too
    assert out["tagged"] is True and out["missing"] is None
    assert out["labelled"] == [["/old"]] and out["images_after_remove"] == []
    assert out["exec"] == [7, "out\n" + "x" * 12, "err\n\n[gb10.dspark: output cut at 20 bytes; 28 more bytes "
                                                   "were not returned]\n"]
    assert out["exec_missing"] == ["exec in container nothing: HTTP 404: No such container: nothing", 404]
    assert out["logs"] == ["INFO up\n", "ERROR boom\n"] and out["log_text"] == "INFO up\nERROR boom\n"


def test_auto_speaks_the_engines_own_api_version_asked_once_at_the_first_call(dockerd, tmp_path):
    dockerd.state.engine_api_version = "1.43"
    eng = Engine(dockerd.docker_host, api_version="auto")
    assert dockerd.state.requests == []  # making one asks nothing
    assert eng.inspect_container("nothing") is None and eng.list_images() == []
    assert dockerd.state.requests == ["GET /version", "GET /containers/nothing/json", "GET /images/json"]
    assert dockerd.state.api_versions == ["", "1.43", "1.43"]
    Engine(dockerd.docker_host).list_images()
    assert dockerd.state.api_versions[-1] == "1.41"  # the default: fixed, no /version asked
    with pytest.raises(EngineError, match="cannot reach the Docker engine"):
        Engine(f"unix://{tmp_path}/none.sock", api_version="auto").info()
