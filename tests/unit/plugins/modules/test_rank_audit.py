"""gb10.dspark.rank_audit end to end: module plumbing, a fake docker CLI on PATH, a fake head API."""
from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils import _audit
from ansible_collections.gb10.dspark.plugins.modules import rank_audit
from tests.unit.plugins.module_utils.test_audit import (
    API_KEY,
    DEFAULT_IMAGES,
    HF_TOKEN,
    IMAGE_ID,
    MANIFEST_SHA256,
    MODEL_REVISION,
    NAMES,
    PAIR,
    SERVED,
    FakeAPI,
    desired,
    inspect_doc,
    rank_files,
)

FAKE_DOCKER = """#!{python}
import json, os, sys
state = os.environ["FAKE_DOCKER_STATE"]
args = sys.argv[1:]
with open(os.path.join(state, "calls.jsonl"), "a") as log:
    log.write(json.dumps(args) + "\\n")
with open(os.path.join(state, "state.json")) as f:
    cfg = json.load(f)
if cfg.get("down"):
    sys.stderr.write("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                     "Is the docker daemon running?\\n")
    sys.exit(1)
if args == ["image", "ls", "--no-trunc", "--format", "{{{{json .}}}}"]:
    sys.stdout.write(cfg["images"])
    sys.exit(0)
if args[:2] == ["container", "inspect"] and len(args) == 3:
    if cfg.get("inspect") is None:
        sys.stdout.write("[]\\n")
        sys.stderr.write("Error response from daemon: No such container: " + args[2] + "\\n")
        sys.exit(1)
    sys.stdout.write(json.dumps(cfg["inspect"]) + "\\n")
    sys.exit(0)
sys.stderr.write("fake docker: unsupported " + repr(args) + "\\n")
sys.exit(64)
"""


class FakeDocker:
    def __init__(self, root: Path):
        self.state = root / "docker-state"
        self.state.mkdir()
        self.bin = root / "bin"
        self.bin.mkdir()
        script = self.bin / "docker"
        script.write_text(FAKE_DOCKER.format(python=sys.executable))
        script.chmod(0o755)
        self.set()

    def set(self, images: str = DEFAULT_IMAGES, inspect: object = "running-worker", down: bool = False) -> None:
        if inspect == "running-worker":
            inspect = inspect_doc("worker")
        (self.state / "state.json").write_text(json.dumps({"images": images, "inspect": inspect, "down": down}))

    def calls(self) -> list[list[str]]:
        log = self.state / "calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def docker(tmp_path, monkeypatch):
    fake = FakeDocker(tmp_path)
    # only the fake: the real docker CLI (/usr/local/bin) is not on this PATH
    monkeypatch.setenv("PATH", f"{fake.bin}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(fake.state))
    return fake


def worker_args(tmp_path: Path, **kw) -> dict:
    args = {"rank": NAMES["worker"], **rank_files(tmp_path, "worker")}
    args.update(kw)
    return args


def test_worker_audit(run_module, docker, tmp_path):
    res = run_module(rank_audit, worker_args(tmp_path))
    assert res["failed"] is False and res["changed"] is False
    audit = res["audit"]
    assert audit["rank"] == NAMES["worker"] and audit["docker"]["reachable"] is True
    assert audit["container"]["running"] is True and audit["container"]["image_id"] == IMAGE_ID
    assert audit["profile_file"]["env_matches_container"] is True
    assert audit["manifest"]["sha256"] == MANIFEST_SHA256 and audit["model"]["revision"] == MODEL_REVISION
    assert audit["api"] is None and audit["metrics"] is None
    assert docker.calls() == [["image", "ls", "--no-trunc", "--format", "{{json .}}"],
                              ["container", "inspect", "dspark_vllm"]]
    text = json.dumps(res)
    assert HF_TOKEN not in text and API_KEY not in text


def test_head_audit_with_api_and_the_pair_verdict(run_module, docker, tmp_path):
    worker = run_module(rank_audit, worker_args(tmp_path))
    docker.set(inspect=inspect_doc("head"))
    with FakeAPI() as api:
        head = run_module(rank_audit, {"rank": NAMES["head"], **rank_files(tmp_path, "head"), "api": True,
                                       "base_url": api.url, "model": SERVED, "api_key": API_KEY})
    assert head["failed"] is False
    assert head["audit"]["api"]["ready"] is True and head["audit"]["metrics"]["prompt_tokens_total"] == 913377
    assert set(api.auth) == {f"Bearer {API_KEY}"}
    assert API_KEY not in json.dumps(head) and HF_TOKEN not in json.dumps(head)
    # the registered results feed the pair verdict directly
    assert _audit.pair_verdict(PAIR, desired(), head, worker)["verdict"] == "OK"


def test_check_mode_and_diff_read_the_same_and_change_nothing(run_module, docker, tmp_path):
    args = worker_args(tmp_path)
    normal = run_module(rank_audit, args)
    checked = run_module(rank_audit, args, check_mode=True, diff=True)
    assert checked["failed"] is False and checked["changed"] is False and "diff" not in checked
    assert checked["audit"] == normal["audit"]
    # only reads: image ls and container inspect, twice
    assert {c[0] + " " + c[1] for c in docker.calls()} == {"image ls", "container inspect"}
    assert len(docker.calls()) == 4


def test_dead_engine_does_not_fail_and_makes_the_pair_down(run_module, docker, tmp_path):
    docker.set(inspect=inspect_doc("head"))
    with FakeAPI() as api:
        head = run_module(rank_audit, {"rank": NAMES["head"], **rank_files(tmp_path, "head"), "api": True,
                                       "base_url": api.url, "model": SERVED})
    docker.set(down=True)
    res = run_module(rank_audit, worker_args(tmp_path))
    assert res["failed"] is False
    assert res["audit"]["docker"]["reachable"] is False and "Cannot connect" in res["audit"]["docker"]["error"]
    assert docker.calls()[-1] == ["image", "ls", "--no-trunc", "--format", "{{json .}}"]  # no inspect after it
    verdict = _audit.pair_verdict(PAIR, desired(), head, res)
    assert verdict["verdict"] == "DOWN"
    assert verdict["reasons"] == [f"rank {NAMES['worker']}: docker engine is unreachable, expected reachable "
                                  f"({res['audit']['docker']['error']})"]


def test_absent_container_and_no_docker_cli(run_module, docker, tmp_path, monkeypatch):
    docker.set(inspect=None)
    res = run_module(rank_audit, worker_args(tmp_path))
    assert res["failed"] is False and res["audit"]["container"]["exists"] is False
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    res = run_module(rank_audit, worker_args(tmp_path / "other"))
    assert res["failed"] is False and res["audit"]["docker"]["reachable"] is False
    assert "not installed" in res["audit"]["docker"]["error"]


@pytest.mark.parametrize("extra, text", [
    ({"revision_marker": "../../etc/shadow"}, "revision_marker '../../etc/shadow' is not a file name inside model_dir"),
    ({"api": True}, "model (the served model name) is required when api is true"),
])
def test_unusable_options_fail_with_the_rank_in_the_message(run_module, docker, tmp_path, extra, text):
    res = run_module(rank_audit, worker_args(tmp_path, **extra))
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"] == f"rank {NAMES['worker']}: {text}"
    assert docker.calls() == []


def test_rank_defaults_to_the_hostname(run_module, docker, tmp_path):
    args = worker_args(tmp_path)
    del args["rank"]
    res = run_module(rank_audit, args)
    assert res["audit"]["rank"] == socket.gethostname()
