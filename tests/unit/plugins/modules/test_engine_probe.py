"""gb10.dspark.engine_probe as a module: the options that read more than the container's state, against the
fake engine on a real socket through the collection's Docker client (the docker SDK)."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.modules import engine_probe
from tests.support.fake_dockerd import FakeDockerd

LABEL = "io.gb10.dspark.pair"
RECORD = {"Id": "c0ffee", "Image": "sha256:x", "State": {"Running": True, "Status": "running"},
          "Config": {"Env": ["VLLM_API_KEY=sk-for-the-pack-only"], "Labels": {LABEL: "p0"}}}


@pytest.fixture
def dockerd(tmp_path):
    with FakeDockerd(str(tmp_path / "docker.sock")) as d:
        d.state.engine_api_version = "1.43"
        d.state.containers["dspark_vllm"] = RECORD
        yield d


def args(dockerd, **kw):
    return {"model": "m", "read_api": False, "log_lines": 0, "rank": "sim01-head", "docker_host": dockerd.docker_host,
            **kw}


def test_inspect_returns_the_record_read_at_the_engines_own_api_version(run_module, dockerd):
    res = run_module(engine_probe, args(dockerd, inspect=True))
    assert res["failed"] is False and res["changed"] is False and res["probe"]["inspect"] == RECORD
    assert dockerd.state.requests[:2] == ["GET /version", "GET /containers/dspark_vllm/json"]
    assert dockerd.state.api_versions[1] == "1.43"  # as community.docker's docker_container_info read it


def test_without_inspect_no_record_and_the_fixed_api_version(run_module, dockerd):
    res = run_module(engine_probe, args(dockerd))
    assert "inspect" not in res["probe"] and "sk-for-the-pack-only" not in str(res)
    assert "GET /version" not in dockerd.state.requests and set(dockerd.state.api_versions) == {"1.41"}


def test_labelled_and_engine_info(run_module, dockerd):
    dockerd.state.containers["dspark_vllm_old"] = {**RECORD, "Id": "01d", "State": {"Running": False}}
    res = run_module(engine_probe, args(dockerd, labelled=LABEL, engine_info=True), check_mode=True)
    assert res["failed"] is False and res["probe"]["labelled"] == ["dspark_vllm_old"]
    assert res["probe"]["engine"] == {"id": "FAKE-ENGINE", "name": "fake-rank", "image_store": "classic"}


def test_an_engine_that_cannot_list_fails_naming_the_rank(run_module, tmp_path):
    res = run_module(engine_probe, {"model": "m", "read_api": False, "log_lines": 0, "rank": "sim01-head",
                                    "labelled": LABEL, "docker_host": f"unix://{tmp_path}/none.sock"})
    assert res["failed"] and res["msg"].startswith("rank sim01-head: cannot reach the Docker engine at ")


def _profiles(tmp_path):
    import base64
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "production.env").write_text("VLLM_USE_V1=1\n")
    (folder / "production.compilation-config.json").write_text("{}\n")
    (folder / "notes.txt").write_text("not a profile\n")
    return folder, base64.b64encode(b"VLLM_USE_V1=1\n").decode()


def test_read_returns_the_profiles_with_the_record_in_one_call(run_module, dockerd, tmp_path):
    folder, env64 = _profiles(tmp_path)
    res = run_module(engine_probe, args(dockerd, inspect=True, read=[{"path": str(folder), "patterns": ["*.env", "*.json"]}]))
    assert res["failed"] is False and res["probe"]["inspect"] == RECORD
    assert [f["path"] for f in res["read"]] == [str(folder / "production.compilation-config.json"),
                                                str(folder / "production.env")]
    assert res["read"][1]["content"] == env64
    assert run_module(engine_probe, args(dockerd))["read"] == []  # nothing asked, nothing read


def test_read_comes_back_when_the_engine_cannot_be_read(run_module, tmp_path):
    folder, env64 = _profiles(tmp_path)
    res = run_module(engine_probe, {"model": "m", "read_api": False, "log_lines": 0, "rank": "sim01-worker",
                                    "labelled": LABEL, "docker_host": f"unix://{tmp_path}/none.sock",
                                    "read": [{"path": str(folder), "patterns": ["*.env"]}]})
    assert res["failed"] and res["msg"].startswith("rank sim01-worker: cannot reach the Docker engine at ")
    assert [f["content"] for f in res["read"]] == [env64] and not res.get("read_failed")


def test_a_folder_that_is_a_link_fails_the_read_naming_the_rank(run_module, dockerd, tmp_path):
    folder, _unused = _profiles(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(folder)
    res = run_module(engine_probe, args(dockerd, read=[{"path": str(link)}]))
    assert res["failed"] and res["read_failed"] is True and res["read"] == []
    assert res["msg"].startswith(f"rank sim01-head: {link}: is ") and "expected a folder" in res["msg"], res["msg"]
    assert dockerd.state.requests == []  # refused before the engine was asked anything
