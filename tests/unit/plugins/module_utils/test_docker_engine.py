"""The stdlib Docker Engine client against a fake engine on a real Unix socket."""
from __future__ import annotations

import socketserver
import threading

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils._docker_engine import (
    Engine,
    EngineError,
    loaded_references,
    socket_path_of,
    split_tag,
)
from tests.support import synthetic_archive
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
