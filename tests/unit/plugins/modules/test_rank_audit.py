"""gb10.dspark.rank_audit end to end: module plumbing, a fake Docker engine on a Unix socket, a fake head API."""
from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _audit_verdict
from ansible_collections.gb10.dspark.plugins.module_utils.identity._labels import PREFIX
from ansible_collections.gb10.dspark.plugins.modules import rank_audit
from tests.support import fake_dockerd
from tests.support.fake_dockerd import FakeDockerd
from tests.unit.plugins.module_utils.fleet.test_audit import (
    API_KEY,
    CONTAINER,
    DEFAULT_IMAGES,
    HF_TOKEN,
    IMAGE_ID,
    MANIFEST_SHA256,
    MODEL_REVISION,
    NAMES,
    OLD_IMAGE_ID,
    PAIR,
    SERVED,
    FakeAPI,
    desired,
    inspect_doc,
    labels_for,
    rank_files,
)
from tests.unit.plugins.module_utils.engine.test_docker_engine import frame


class Docker:
    """A fake Docker engine on a Unix socket (tests/support/fake_dockerd.py) holding the default
    images and the worker's engine container; ``calls`` are the requests it answered."""

    def __init__(self, dockerd: FakeDockerd):
        self.dockerd = dockerd
        self.docker_host = dockerd.docker_host
        self.set()

    def set(self, images: list[dict] | None = None, inspect: object = "running-worker") -> None:
        state = self.dockerd.state
        state.images.clear()
        state.tags.clear()
        for row in DEFAULT_IMAGES if images is None else images:
            state.images[row["Id"]] = {"Id": row["Id"], "Config": {"Labels": row.get("Labels")}}
            state.tags.update({tag: row["Id"] for tag in row.get("RepoTags") or []})
        state.containers.clear()
        if inspect == "running-worker":
            inspect = inspect_doc("worker")
        if inspect:
            state.containers[CONTAINER] = inspect[0]

    def calls(self) -> list[str]:
        return list(self.dockerd.state.requests)


@pytest.fixture
def docker(tmp_path):
    with FakeDockerd(str(tmp_path / "docker.sock")) as dockerd:
        yield Docker(dockerd)


def worker_args(tmp_path: Path, docker: Docker, **kw) -> dict:
    args = {"rank": NAMES["worker"], "docker_host": docker.docker_host, **rank_files(tmp_path, "worker")}
    args.update(kw)
    return args


GET_IMAGES = "GET /images/json"
GET_CONTAINER = f"GET /containers/{CONTAINER}/json"
GET_LOGS = f"GET /containers/{CONTAINER}/logs"  # its last lines, for the report of a DOWN or HUNG pair


def test_worker_audit(run_module, docker, tmp_path):
    res = run_module(rank_audit, worker_args(tmp_path, docker))
    assert res["failed"] is False and res["changed"] is False
    audit = res["audit"]
    assert audit["rank"] == NAMES["worker"] and audit["docker"] == {"reachable": True, "error": None}
    assert audit["images"] == [{"id": OLD_IMAGE_ID, "tags": ["dspark-r0b0tlab:production-v025"]},
                               {"id": IMAGE_ID, "tags": ["dspark-r0b0tlab:production-v026", "dspark:prod"]}]
    assert audit["container"]["running"] is True and audit["container"]["image_id"] == IMAGE_ID
    assert audit["container"]["labels"] == {k: v for k, v in labels_for("worker").items() if k.startswith(PREFIX)}
    assert audit["profile_file"]["env_matches_container"] is True
    assert audit["manifest"]["sha256"] == MANIFEST_SHA256 and audit["model"]["revision"] == MODEL_REVISION
    assert audit["api"] is None and audit["metrics"] is None
    assert docker.calls() == [GET_IMAGES, GET_CONTAINER, GET_LOGS]
    text = json.dumps(res)
    assert HF_TOKEN not in text and API_KEY not in text


def test_head_audit_with_api_and_the_pair_verdict(run_module, docker, tmp_path):
    worker = run_module(rank_audit, worker_args(tmp_path, docker))
    docker.set(inspect=inspect_doc("head"))
    with FakeAPI() as api:
        head = run_module(rank_audit, {"rank": NAMES["head"], **rank_files(tmp_path, "head"), "api": True,
                                       "base_url": api.url, "model": SERVED, "api_key": API_KEY,
                                       "docker_host": docker.docker_host})
    assert head["failed"] is False
    assert head["audit"]["api"]["ready"] is True and head["audit"]["metrics"]["prompt_tokens_total"] == 913377
    assert set(api.auth) == {f"Bearer {API_KEY}"}
    assert API_KEY not in json.dumps(head) and HF_TOKEN not in json.dumps(head)
    # the registered results feed the pair verdict directly
    assert _audit_verdict.pair_verdict(PAIR, desired(), head, worker)["verdict"] == "OK"


def test_check_mode_and_diff_read_the_same_and_change_nothing(run_module, docker, tmp_path):
    args = worker_args(tmp_path, docker)
    normal = run_module(rank_audit, args)
    checked = run_module(rank_audit, args, check_mode=True, diff=True)
    assert checked["failed"] is False and checked["changed"] is False and "diff" not in checked
    assert checked["audit"] == normal["audit"]
    # only reads: the image list, the container's inspect and its last log lines, twice
    assert docker.calls() == [GET_IMAGES, GET_CONTAINER, GET_LOGS] * 2


def test_dead_engine_does_not_fail_and_makes_the_pair_down(run_module, docker, tmp_path):
    docker.set(inspect=inspect_doc("head"))
    with FakeAPI() as api:
        head = run_module(rank_audit, {"rank": NAMES["head"], **rank_files(tmp_path, "head"), "api": True,
                                       "base_url": api.url, "model": SERVED, "docker_host": docker.docker_host})
    dead = f"unix://{tmp_path}/dead.sock"  # no engine listens there
    res = run_module(rank_audit, worker_args(tmp_path / "w", docker, docker_host=dead))
    assert res["failed"] is False
    error = res["audit"]["docker"]["error"]
    assert res["audit"]["docker"]["reachable"] is False and error.startswith("cannot reach the Docker engine at ")
    assert res["audit"]["images"] == [] and res["audit"]["container"]["error"] == "docker engine unreachable"
    verdict = _audit_verdict.pair_verdict(PAIR, desired(), head, res)
    assert verdict["verdict"] == "DOWN"
    assert verdict["reasons"] == [f"rank {NAMES['worker']}: docker engine is unreachable, expected reachable ({error})"]


def test_absent_container(run_module, docker, tmp_path):
    docker.set(inspect=None)
    res = run_module(rank_audit, worker_args(tmp_path, docker))
    assert res["failed"] is False and res["audit"]["docker"]["reachable"] is True
    c = res["audit"]["container"]
    assert (c["exists"], c["running"], c["status"], c["labels"], c["error"]) == (False, False, "absent", {}, None)


@pytest.mark.parametrize("extra, text", [
    ({"revision_marker": "../../etc/shadow"}, "revision_marker '../../etc/shadow' is not a file name inside model_dir"),
    ({"api": True}, "model (the served model name) is required when api is true"),
    ({"docker_host": "tcp://10.0.0.1:2375"}, "docker_host 'tcp://10.0.0.1:2375' is not a unix socket (unix:///path)"),
])
def test_unusable_options_fail_with_the_rank_in_the_message(run_module, docker, tmp_path, extra, text):
    res = run_module(rank_audit, worker_args(tmp_path, docker, **extra))
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"] == f"rank {NAMES['worker']}: {text}"
    assert docker.calls() == []


def test_rank_defaults_to_the_hostname(run_module, docker, tmp_path):
    args = worker_args(tmp_path, docker)
    del args["rank"]
    res = run_module(rank_audit, args)
    assert res["audit"]["rank"] == socket.gethostname()


# ============================================================================================
# runtime: what the runtime gate reads, through the engine's exec and logs endpoints
# ============================================================================================
@pytest.fixture
def execd(tmp_path):
    """A fake engine that also runs execs (answering ``state.exec["output"]``) and serves logs."""
    path = str(tmp_path / "exec.sock")
    state = fake_dockerd.State()
    state.exec = {"create": [], "start": [], "output": frame(1, b'["VLLM_DSV4_ENABLE_MULTI_STREAM=0"]\n'), "rc": 0,
                  "running_polls": 0, "logs": frame(1, f"INFO key {API_KEY}\n".encode()) + frame(2, b"WARNING x\n")}
    state.containers[CONTAINER] = inspect_doc("worker")[0]
    state.images[IMAGE_ID] = {"Id": IMAGE_ID, "Architecture": "arm64", "Config": {"Labels": {}}}
    server = fake_dockerd._Server(path, type("Handler", (fake_dockerd.ExecHandler,), {"state": state}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"unix://{path}", state
    finally:
        server.shutdown()
        server.server_close()


def test_runtime_without_model_dir(run_module, execd, tmp_path):
    docker_host, state = execd
    args = {"rank": NAMES["worker"], "docker_host": docker_host, **rank_files(tmp_path, "worker"),
            "runtime": {"env_prefixes": ["VLLM_DSV4_ENABLE_MULTI_STREAM="]}}
    del args["model_dir"]
    res = run_module(rank_audit, args)
    assert res["failed"] is False and res["changed"] is False
    audit = res["audit"]
    assert audit["model"] is None
    rt = audit["runtime"]
    assert rt["container"]["Id"] == inspect_doc("worker")[0]["Id"] and rt["image"]["Id"] == IMAGE_ID
    assert rt["errors"] == {}
    assert rt["pid1_env"] == {"rc": 0, "stdout": '["VLLM_DSV4_ENABLE_MULTI_STREAM=0"]\n', "stderr": ""}
    assert rt["logs"] == {"rc": 0, "stdout": "INFO key <redacted>\n", "stderr": "WARNING x\n"}
    assert "VLLM_API_KEY=<redacted>" in rt["container"]["Config"]["Env"]
    assert API_KEY not in json.dumps(res) and HF_TOKEN not in json.dumps(res)
    assert [c["Cmd"][3:] for c in state.exec["create"]] == [["VLLM_DSV4_ENABLE_MULTI_STREAM="], [args["manifest_path"]]]
    assert state.requests.count(GET_CONTAINER) == 1  # one inspect for the audit and the runtime
    assert f"GET /containers/{CONTAINER}/logs?stderr=1&stdout=1&tail=20000" in state.requests  # log_tail's default


def test_runtime_needs_env_prefixes(run_module, execd, tmp_path):
    args = {"rank": NAMES["worker"], "docker_host": execd[0], **rank_files(tmp_path, "worker"),
            "runtime": {"log_tail": 10}}
    res = run_module(rank_audit, args)
    assert res["failed"] is True and "env_prefixes" in res["msg"]
