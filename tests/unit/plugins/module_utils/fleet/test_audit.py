"""The fleet audit: the per-rank collector against a fake Docker engine and a fake API, and the pair verdict."""
from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support import standin

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _audit
from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _audit_verdict
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _container_reads as cr
from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import Engine, EngineError
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError
from ansible_collections.gb10.dspark.plugins.module_utils.identity._labels import LABELS, PREFIX
from ansible_collections.gb10.dspark.plugins.module_utils.common import _secrets

PAIR = "pair-a"
NAMES = {"head": "spark-a0", "worker": "spark-a1"}
CONTAINER = "dspark_vllm"
SERVED = "deepseek-v4-flash-dspark"
API_KEY = "sk-audit-7f41c2d9e8b3a6f0"
HF_TOKEN = "hf_QmZp3RrT8vYc2LkW9sXa"
IMAGE_ID = "sha256:7f3c9a0d5be14e2a8c61f0b3d9e4a7c25186f0e3b7d2c9a41e5f8b06c3d7a912"
OLD_IMAGE_ID = "sha256:2b8e61d04c9f3a7e5d1b0c8a6f4e2d9c7b5a3f1e0d8c6b4a29f7e5d3c1b0a8f6"
PROFILE_SHA256 = "5c0e9a7b3d1f8e6c4a2b0d9f7e5c3a1b8d6f4e2c0a9b7d5f3e1c8a6b4d2f0e9c"
MODEL_REVISION = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
MANIFEST = b'{"schema_version": 1, "production_profile": {"max_model_len": 327680}}\n'
MANIFEST_SHA256 = hashlib.sha256(MANIFEST).hexdigest()

PROFILE_ENV = {
    "KV_CACHE_DTYPE": "nvfp4_ds_mla",
    "HF_HOME": "/cache/huggingface",
    "HF_HUB_OFFLINE": "1",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_NET": "IB",
    "VLLM_DSV4_ENABLE_MULTI_STREAM": "0",
    "VLLM_B12X_W4A16_FORCE_TILE_CONFIG": "",
    "MTP_NUM_TOKENS": "6",
}


def rank_env(role: str) -> dict:
    env = dict(PROFILE_ENV)
    env.update({"NODE_RANK": "0" if role == "head" else "1", "MASTER_ADDR": "10.77.0.10", "MASTER_PORT": "25000",
                "NCCL_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_IB_HCA": "rocep1s0f0"})
    if role == "worker":
        env["HEADLESS"] = "1"
    return dict(sorted(env.items()))


def env_file_text(env: dict) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(env.items()))


def desired(**changes) -> dict:
    d = {"image_id": IMAGE_ID, "manifest_sha256": MANIFEST_SHA256, "model_revision": MODEL_REVISION,
         "profile": "production", "profile_sha256": PROFILE_SHA256, "cudagraph_implementation": "regular",
         "served_model": SERVED}
    d.update(changes)
    return d


def labels_for(role: str) -> dict:
    return {
        "io.gb10.dspark.pair": PAIR,
        "io.gb10.dspark.rank": "0" if role == "head" else "1",
        "io.gb10.dspark.profile": "production",
        "io.gb10.dspark.profile.sha256": PROFILE_SHA256,
        "io.gb10.dspark.cudagraph.implementation": "regular",
        "io.gb10.dspark.profile.experimental": "false",
        "io.gb10.dspark.image.id": IMAGE_ID,
        "io.gb10.dspark.manifest.sha256": MANIFEST_SHA256,
        "io.gb10.dspark.model.revision": MODEL_REVISION,
        "io.gb10.dspark.release": "v026",
        # labels the image brings along; they are not the collection's
        "org.opencontainers.image.revision": "3" * 40,
        "io.r0b0tlab.model.revision": MODEL_REVISION,
    }


def inspect_doc(role: str, running: bool = True, exit_code: int = 0, env: dict | None = None) -> list[dict]:
    """A ``docker container inspect dspark_vllm`` answer as dockerd writes it (trimmed)."""
    args = ["serve", "/model", "--served-model-name", SERVED, "--max-model-len", "327680", "--max-num-seqs", "16",
            "--compilation-config",
            '{"mode":0,"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_implementation":"regular"}',
            "--optimization-level", "2", "--performance-mode", "balanced", "--port", "8888"]
    if role == "worker":
        args += ["--headless"]
    env_lines = [f"{k}={v}" for k, v in (env or rank_env(role)).items()]
    env_lines += ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "CUDA_VERSION=13.0.1",
                  f"VLLM_API_KEY={API_KEY}", f"HF_TOKEN={HF_TOKEN}"]
    return [{
        "Id": "c0ffee" + ("1" if role == "head" else "2") * 58,
        "Created": "2026-09-01T08:12:40.102938Z",
        "Path": "vllm",
        "Args": args,
        "State": {"Status": "running" if running else "exited", "Running": running, "Paused": False,
                  "Restarting": False, "OOMKilled": False, "Dead": False, "Pid": 41233 if running else 0,
                  "ExitCode": exit_code, "Error": "", "StartedAt": "2026-09-01T08:12:44.318204Z",
                  "FinishedAt": "0001-01-01T00:00:00Z" if running else "2026-09-01T09:02:11.004512Z"},
        "Image": IMAGE_ID,
        "Name": "/" + CONTAINER,
        "RestartCount": 0,
        "HostConfig": {"NetworkMode": "host", "IpcMode": "host", "RestartPolicy": {"Name": "no"}},
        "Mounts": [{"Type": "bind", "Source": "/etc/dspark/runtime-manifest.json",
                    "Destination": "/opt/dspark/runtime-manifest.json", "RW": False}],
        "Config": {"Hostname": NAMES[role], "Env": env_lines, "Cmd": args, "Image": IMAGE_ID,
                   "Entrypoint": ["vllm"], "Labels": labels_for(role)},
    }]


def image_rows(*rows: tuple[str, list[str]]) -> list[dict]:
    """``GET /images/json`` records as dockerd writes them (trimmed): one per image, with all its tags."""
    return [{"Containers": -1, "Created": 1788087751, "Id": image_id, "Labels": None, "ParentId": "",
             "RepoDigests": [], "RepoTags": tags, "SharedSize": -1, "Size": 31200000000}
            for image_id, tags in rows]


DEFAULT_IMAGES = image_rows((IMAGE_ID, ["dspark-r0b0tlab:production-v026", "dspark:prod"]),
                            (OLD_IMAGE_ID, ["dspark-r0b0tlab:production-v025", "<none>:<none>"]))
LIST_IMAGES = ("list_images",)
INSPECT = ("inspect_container", CONTAINER)
LAST_LINES = ("log_text", CONTAINER, _audit.LAST_LOG_LINES)  # a running container's last lines, for a bad verdict


class FakeEngine:
    """The two reads the audit makes of a Docker engine (``_docker_engine.Engine``), answered from
    memory; records every call. ``down`` is what an engine that does not answer raises;
    ``inspect_error`` what a failing inspect raises."""

    def __init__(self, images: list[dict] | None = None, containers: dict | None = None, down: str | None = None,
                 inspect_error: str | None = None, logged: str = ""):
        self.images = DEFAULT_IMAGES if images is None else images
        self.containers = containers or {}
        self.down = down
        self.inspect_error = inspect_error
        self.logged = logged
        self.calls: list[tuple] = []

    def log_text(self, name: str, tail: int, tty: bool = False) -> bytes:
        self.calls.append(("log_text", name, tail))
        return "\n".join(self.logged.splitlines()[-tail:]).encode()

    def list_images(self) -> list[dict]:
        self.calls.append(LIST_IMAGES)
        if self.down:
            raise EngineError(self.down)
        return copy.deepcopy(self.images)

    def inspect_container(self, name: str) -> dict | None:
        assert isinstance(name, str)
        self.calls.append(("inspect_container", name))
        if self.down:
            raise EngineError(self.down)
        if self.inspect_error:
            raise EngineError(self.inspect_error, 500)
        return copy.deepcopy(self.containers.get(name))


def docker_up(role: str, inspect: list[dict] | None = None, images: list[dict] | None = None) -> FakeEngine:
    """An engine holding the images and the rank's container (``inspect``: a ``docker container
    inspect`` answer, a list of one document)."""
    doc = (inspect_doc(role) if inspect is None else inspect)[0]
    return FakeEngine(images, {CONTAINER: doc})


class FakeAPI:
    """The head's OpenAI API on 127.0.0.1: /v1/models and /metrics, recording Authorization headers."""

    def __init__(self, models: list[str] | None = None, status: int = 200, stall_s: float = 0.0):
        self.models = [SERVED] if models is None else models
        self.status = status
        self.stall_s = stall_s  # a one-token completion answers after this long (a hung engine: longer than asked)
        self.auth: list[str | None] = []
        self.completions: list[dict] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                api.auth.append(self.headers.get("Authorization"))
                api.completions.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                time.sleep(api.stall_s)
                body = json.dumps({"choices": [{"text": "x", "finish_reason": "length"}]}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up waiting

            def do_GET(self):  # noqa: N802 - http.server's name
                api.auth.append(self.headers.get("Authorization"))
                if self.path == "/v1/models":
                    body = json.dumps({"object": "list", "data": [
                        {"id": m, "object": "model", "owned_by": "vllm", "root": "/model", "max_model_len": 327680}
                        for m in api.models]}).encode()
                    ctype = "application/json"
                elif self.path == "/metrics":
                    body = METRICS.encode()
                    ctype = "text/plain; version=0.0.4"
                else:
                    body, ctype = b"{}", "application/json"
                code = api.status if self.path == "/v1/models" else 200
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


METRICS = f"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="{SERVED}"}} 2.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{engine="0",model_name="{SERVED}",block_size="256",kv_cache_size_tokens="1253213"}} 1.0
# HELP vllm:kv_cache_size_tokens GPU KV cache size in tokens.
# TYPE vllm:kv_cache_size_tokens gauge
vllm:kv_cache_size_tokens{{engine="0",model_name="{SERVED}"}} 1253213
# HELP vllm:prompt_tokens Number of prefill tokens processed.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{{engine="0",model_name="{SERVED}"}} 913377.0
# HELP vllm:generation_tokens Number of generation tokens processed.
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{engine="0",model_name="{SERVED}"}} 48213.0
"""


def rank_files(root: Path, role: str, env: dict | None = None, revision: str = MODEL_REVISION) -> dict:
    """The files the profile and engine roles leave on a rank; returns the collect() path options."""
    base = root / role
    profiles = base / "etc" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "production.env").write_text(env_file_text(rank_env(role) if env is None else env))
    (profiles / "production.compilation-config.json").write_text("{}\n")
    manifest = base / "etc" / "runtime-manifest.json"
    manifest.write_bytes(MANIFEST)
    model = base / "models" / "DeepSeek-V4-Flash"
    model.mkdir(parents=True)
    (model / ".r0b0tlab-model-revision").write_text(revision + "\n")
    (model / "config.json").write_text("{}")
    return {"profiles_dir": str(profiles), "manifest_path": str(manifest), "model_dir": str(model)}


def collect_rank(root: Path, role: str, engine: FakeEngine | None = None, api_url: str | None = None, **kw) -> dict:
    options = rank_files(root, role)
    options.update(kw)
    if role == "head" and api_url:
        options.update(api=True, base_url=api_url, model=SERVED, api_key=API_KEY)
    return _audit.collect(engine or docker_up(role), rank=NAMES[role], container=CONTAINER, **options)


@pytest.fixture
def api():
    with FakeAPI() as server:
        yield server


@pytest.fixture
def pair_audits(tmp_path, api):
    return collect_rank(tmp_path, "head", api_url=api.url), collect_rank(tmp_path, "worker")


def assert_no_secret(value: object) -> None:
    text = json.dumps(value)
    assert API_KEY not in text and HF_TOKEN not in text


# ============================================================================================
# collect
# ============================================================================================
def test_image_list_groups_tags_per_id_and_drops_none():
    junk = [{"Id": ""}, "not a record", {"RepoTags": ["x:y"]}]
    images = _audit.image_list(DEFAULT_IMAGES + junk)
    assert images == [{"id": OLD_IMAGE_ID, "tags": ["dspark-r0b0tlab:production-v025"]},
                      {"id": IMAGE_ID, "tags": ["dspark-r0b0tlab:production-v026", "dspark:prod"]}]
    # a registry port is not a tag; an untagged image is listed with no tags; nothing else is a list
    rows = image_rows(("sha256:" + "c" * 64, ["reg.example:5000/dspark:v1", "reg.example:5000/notag", "<none>:x"]),
                      ("sha256:" + "d" * 64, []))
    rows.append({"Id": "sha256:" + "e" * 64, "RepoTags": None})
    assert _audit.image_list(rows) == [{"id": "sha256:" + "c" * 64, "tags": ["reg.example:5000/dspark:v1"]},
                                       {"id": "sha256:" + "d" * 64, "tags": []},
                                       {"id": "sha256:" + "e" * 64, "tags": []}]
    assert _audit.image_list(None) == [] and _audit.image_list({"Id": IMAGE_ID}) == []


def test_env_hash_ignores_order_and_secret_names_but_not_other_values():
    base = ["A=1", "B=2", "VLLM_API_KEY=one", "HF_TOKEN=x"]
    assert _audit.env_sha256(base) == _audit.env_sha256(list(reversed(base)))
    assert _audit.env_sha256(base) == _audit.env_sha256(["A=1", "B=2", "VLLM_API_KEY=two"])
    assert _audit.env_sha256(base) == hashlib.sha256(b"A=1\nB=2\n").hexdigest()
    assert _audit.env_sha256(base) != _audit.env_sha256(["A=1", "B=3"])
    for name in ("VLLM_API_KEY", "hf_token", "DB_PASSWORD", "CLIENT_SECRET", "AWS_CREDENTIALS"):
        assert _audit.is_secret_name(name), name
    assert not _audit.is_secret_name("KV_CACHE_DTYPE")
    assert not _audit.is_secret_name("MTP_NUM_TOKENS")  # a profile knob, hashed like any other


def test_head_audit_collects_everything_in_one_call(tmp_path, api):
    engine = docker_up("head")
    audit = collect_rank(tmp_path, "head", engine=engine, api_url=api.url)
    assert engine.calls == [LIST_IMAGES, INSPECT, LAST_LINES]
    assert audit["rank"] == NAMES["head"]
    assert audit["docker"] == {"reachable": True, "error": None}
    assert {"id": IMAGE_ID, "tags": ["dspark-r0b0tlab:production-v026", "dspark:prod"]} in audit["images"]

    c = audit["container"]
    assert (c["exists"], c["running"], c["status"], c["exit_code"]) == (True, True, "running", 0)
    assert c["image_id"] == IMAGE_ID and c["profile"] == "production" and c["restart_count"] == 0
    assert c["started_at"] == "2026-09-01T08:12:44.318204Z"
    assert set(c["labels"]) == {k for k in labels_for("head") if k.startswith(PREFIX)} == set(LABELS.values()) - {LABELS["api_key"]}
    doc = inspect_doc("head")[0]
    # the runtime gate's command_sha256: Path and Args space-joined
    assert c["command_sha256"] == hashlib.sha256(" ".join([doc["Path"], *doc["Args"]]).encode()).hexdigest()
    plain = sorted(e for e in doc["Config"]["Env"] if not e.startswith(("VLLM_API_KEY=", "HF_TOKEN=")))
    assert c["env_sha256"] == hashlib.sha256("".join(e + "\n" for e in plain).encode()).hexdigest()

    pf = audit["profile_file"]
    env_file = Path(tmp_path / "head" / "etc" / "profiles" / "production.env")
    assert pf["path"] == str(env_file) and pf["present"] is True
    assert pf["sha256"] == hashlib.sha256(env_file.read_bytes()).hexdigest()
    assert pf["env_matches_container"] is True and pf["env_differences"] == []

    assert audit["manifest"]["present"] is True and audit["manifest"]["sha256"] == MANIFEST_SHA256
    assert audit["model"]["present"] is True and audit["model"]["revision"] == MODEL_REVISION

    a = audit["api"]
    assert a["ready"] is True and a["status"] == 200 and a["models"] == [SERVED] and a["max_model_len"] == 327680
    assert a["kv_cache_size_tokens"] == 1253213 and a["num_requests_running"] == 2 and a["error"] is None
    assert audit["metrics"] == {"generation_tokens_total": 48213, "prompt_tokens_total": 913377, "error": None}
    assert api.auth and set(api.auth) == {f"Bearer {API_KEY}"}  # the key goes only into the header
    assert_no_secret(audit)


def test_audit_reads_kv_size_and_counters_from_metrics_shaped_like_a_real_servers(tmp_path):
    # a real vLLM server (and the stand-in) has no vllm:kv_cache_size_tokens series: the size is only a
    # label of vllm:cache_config_info; counters come with <name>_created samples that must not be summed in
    proc, log, url = standin.start(tmp_path / "engine", {})
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert "\nvllm:kv_cache_size_tokens" not in text and "\nvllm:prompt_tokens_created{" in text
        body = json.dumps({"model": standin.SERVED, "prompt": "count me", "max_tokens": 5, "ignore_eos": True})
        req = urllib.request.Request(url + "/v1/completions", body.encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            usage = json.loads(resp.read())["usage"]
        audit = collect_rank(tmp_path, "head", api_url=url)
    finally:
        standin.stop(proc, log)
    label = re.search(r'^vllm:cache_config_info\{[^}]*kv_cache_size_tokens="(\d+)"', text, re.M)
    assert audit["api"]["kv_cache_size_tokens"] == int(label.group(1)) > 0
    assert audit["api"]["num_requests_running"] == 0 and audit["api"]["metrics_error"] is None
    assert audit["metrics"] == {"generation_tokens_total": 5, "prompt_tokens_total": usage["prompt_tokens"],
                                "error": None}


def test_worker_audit_does_not_touch_the_api(tmp_path, api):
    audit = collect_rank(tmp_path, "worker")
    assert audit["api"] is None and audit["metrics"] is None and api.auth == []
    assert audit["container"]["labels"]["io.gb10.dspark.rank"] == "1"


def test_hand_edited_env_file_shows_names_never_values(tmp_path):
    edited = rank_env("worker")
    edited["NCCL_IB_GID_INDEX"] = "1"
    edited["VLLM_API_KEY"] = "sk-edited-by-hand-123456"
    options = rank_files(tmp_path, "worker", env=edited)
    audit = _audit.collect(docker_up("worker"), rank=NAMES["worker"], **options)
    pf = audit["profile_file"]
    assert pf["env_matches_container"] is False
    assert pf["env_differences"] == ["NCCL_IB_GID_INDEX", "VLLM_API_KEY"]
    assert "sk-edited-by-hand-123456" not in json.dumps(audit)
    assert_no_secret(audit)


def test_env_file_comments_blank_lines_and_empty_values():
    entries = _audit.parse_env_file("# rendered by gb10.dspark\n\nA=1\n  B=  \nC=\nHOME\n")
    assert entries == ["A=1", "B=", "C=", "HOME"]
    assert _audit.env_file_differences(entries, ["A=1", "B=", "C=", "HOME=/root"]) == []
    assert _audit.env_file_differences(entries, ["A=2", "B=", "C=x"]) == ["A", "C", "HOME"]


def test_dead_docker_engine_is_reported_not_raised(tmp_path):
    engine = FakeEngine(down="cannot reach the Docker engine at /var/run/docker.sock: [Errno 111] Connection refused")
    audit = _audit.collect(engine, rank="spark-a1", **rank_files(tmp_path, "worker"))
    assert audit["docker"] == {"reachable": False, "error": engine.down}
    assert audit["images"] == [] and engine.calls == [LIST_IMAGES]  # no inspect against a dead engine
    assert audit["container"]["exists"] is None and audit["container"]["running"] is None
    assert audit["profile_file"]["env_matches_container"] is None
    assert audit["manifest"]["sha256"] == MANIFEST_SHA256  # the files are still read


def test_no_engine_at_the_socket_is_an_unreachable_engine(tmp_path):
    engine = _audit.open_engine("spark-a1", f"unix://{tmp_path}/docker.sock")  # nothing listens there
    audit = _audit.collect(engine, rank="spark-a1", **rank_files(tmp_path, "worker"))
    assert audit["docker"]["reachable"] is False and "cannot reach the Docker engine" in audit["docker"]["error"]
    assert audit["container"]["exists"] is None and audit["container"]["error"] == "docker engine unreachable"


def test_a_docker_host_that_is_not_a_unix_socket_is_an_unusable_option():
    assert isinstance(_audit.open_engine("spark-a1", "/run/docker.sock"), Engine)
    with pytest.raises(CheckError, match=r"^rank spark-a1: docker_host 'tcp://10\.0\.0\.1:2375' is not a unix socket"):
        _audit.open_engine("spark-a1", "tcp://10.0.0.1:2375")


def test_absent_container(tmp_path):
    engine = FakeEngine(containers={})
    audit = _audit.collect(engine, rank="spark-a1", **rank_files(tmp_path, "worker"))
    assert engine.calls == [LIST_IMAGES, INSPECT]
    c = audit["container"]
    assert (c["exists"], c["running"], c["status"], c["labels"], c["error"]) == (False, False, "absent", {}, None)
    assert audit["profile_file"]["path"] is None and "no profile label" in audit["profile_file"]["error"]


def test_exited_container_and_inspect_error(tmp_path):
    audit = collect_rank(tmp_path, "worker", engine=docker_up("worker", inspect_doc("worker", running=False, exit_code=137)))
    c = audit["container"]
    assert (c["exists"], c["running"], c["status"], c["exit_code"]) == (True, False, "exited", 137)
    engine = FakeEngine(inspect_error="inspecting container dspark_vllm: HTTP 500: permission denied")
    c = _audit.collect(engine, rank="r", **rank_files(tmp_path / "x", "worker"))["container"]
    assert c["exists"] is None and c["error"] == "inspecting container dspark_vllm: HTTP 500: permission denied"


def test_files_missing(tmp_path):
    audit = _audit.collect(docker_up("worker"), rank="r", profiles_dir=str(tmp_path / "none"),
                           manifest_path=str(tmp_path / "none.json"), model_dir=str(tmp_path / "nomodel"))
    assert audit["manifest"] == {"path": str(tmp_path / "none.json"), "present": False, "sha256": None,
                                 "error": f"no file {tmp_path / 'none.json'}"}
    assert audit["model"]["present"] is False and audit["model"]["revision"] is None
    assert audit["profile_file"]["present"] is False and audit["profile_file"]["env_matches_container"] is None
    (tmp_path / "empty").mkdir()
    model = _audit.model_state(str(tmp_path / "empty"), ".r0b0tlab-model-revision")
    assert model["present"] is True and model["revision"] is None and "no marker" in model["error"]


def test_profile_label_cannot_leave_the_profiles_dir(tmp_path):
    state = _audit.profile_file_state(str(tmp_path), "../../etc/shadow", ["A=1"])
    assert state["path"] is None and state["present"] is False and "not a plain name" in state["error"]


def test_unreachable_api_is_reported(tmp_path):
    with FakeAPI() as server:
        url = server.url
    audit = collect_rank(tmp_path, "head", api_url=url, timeout=2.0)
    assert audit["api"]["ready"] is False and audit["api"]["status"] is None and audit["api"]["error"]
    assert audit["metrics"]["generation_tokens_total"] is None and audit["metrics"]["error"]


@pytest.mark.parametrize("options, text", [
    ({"revision_marker": "../marker"}, "revision_marker '../marker' is not a file name"),
    ({"revision_marker": ""}, "revision_marker '' is not a file name"),
    ({"api": True, "model": None}, "model (the served model name) is required"),
])
def test_unusable_options_fail_naming_the_rank(tmp_path, options, text):
    kwargs = rank_files(tmp_path, "head")
    kwargs.update(options)
    engine = docker_up("head")
    with pytest.raises(CheckError) as err:
        _audit.collect(engine, rank="spark-a0", **kwargs)
    assert str(err.value).startswith("rank spark-a0: ") and text in str(err.value)
    assert engine.calls == []  # refused before the engine is asked anything


# ============================================================================================
# pair_verdict
# ============================================================================================
def find(result: dict, rank: str, item: str) -> dict:
    hits = [d for d in result["differences"] if d["rank"] == rank and d["item"] == item
            and not d["expected_word"].startswith("head ")]  # not the rank-against-rank comparison
    assert len(hits) == 1, (rank, item, result["differences"])
    return hits[0]


def test_ok(pair_audits):
    head, worker = pair_audits
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    assert result["verdict"] == "OK" and result["differences"] == [] and result["reasons"] == []
    assert result["pair"] == PAIR
    assert result["ranks"]["head"]["rank"] == NAMES["head"] and result["ranks"]["head"]["api_ready"] is True
    assert result["ranks"]["worker"]["image_id"] == IMAGE_ID and result["ranks"]["worker"]["running"] is True
    assert_no_secret(result)


def test_liveness_is_one_token_within_its_bound_with_the_key_in_the_header(tmp_path, api):
    head = collect_rank(tmp_path, "head", api_url=api.url, liveness_timeout=5)
    assert head["liveness"]["ok"] is True and head["liveness"]["status"] == 200 and head["liveness"]["error"] is None
    assert api.completions == [{"model": SERVED, "prompt": "ping", "max_tokens": 1, "temperature": 0}]
    assert api.auth[-1] == f"Bearer {API_KEY}"
    assert_no_secret(head)


def test_no_liveness_unless_asked_or_when_the_api_does_not_serve_the_model(tmp_path):
    with FakeAPI() as served:
        assert collect_rank(tmp_path / "a", "head", api_url=served.url)["liveness"] is None
        assert served.completions == []
    with FakeAPI(models=["another-model"]) as other:
        assert collect_rank(tmp_path / "b", "head", api_url=other.url, liveness_timeout=5)["liveness"] is None
        assert other.completions == []


def test_an_api_that_answers_but_does_not_generate_is_hung_with_the_reason(tmp_path):
    head_engine, worker_engine = docker_up("head"), docker_up("worker")
    head_engine.logged = "\n".join(f"INFO GET /metrics 200 ({i})" for i in range(12))
    worker_engine.logged = "INFO step 41 done\nINFO step 42 started\n"
    with FakeAPI(stall_s=3) as stalled:
        started = time.monotonic()
        head = collect_rank(tmp_path, "head", engine=head_engine, api_url=stalled.url, liveness_timeout=0.5)
        assert time.monotonic() - started < 2.5  # bounded by the liveness timeout, not by the engine
    worker = collect_rank(tmp_path, "worker", engine=worker_engine)
    assert head["api"]["ready"] is True and head["liveness"]["ok"] is False
    assert head["liveness"]["error"] == "the API answers, but no token came within 0.5 s"
    assert head["liveness"]["stalled"] is True
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    assert result["verdict"] == "HUNG"
    assert result["reasons"] == [f"rank {NAMES['head']}: generation is stalled, expected one token "
                                 "(the API answers, but no token came within 0.5 s)"]
    assert result["logs"] == {  # both ranks' last lines: the worker's tell where it stopped
        "head": [f"INFO GET /metrics 200 ({i})" for i in range(2, 12)],
        "worker": ["INFO step 41 done", "INFO step 42 started"]}


def test_a_secret_in_the_last_log_lines_is_redacted(tmp_path, api):
    engine = docker_up("head")
    engine.logged = f"INFO non-default args: api_key={API_KEY}\nINFO token {HF_TOKEN} read\n"
    head = collect_rank(tmp_path, "head", engine=engine, api_url=api.url)
    assert head["container"]["last_log_lines"] == ["INFO non-default args: api_key=<redacted>", "INFO token <redacted> read"]
    assert_no_secret(head)


def test_only_a_down_or_hung_pair_carries_logs(pair_audits):
    head, worker = pair_audits
    assert "logs" not in _audit_verdict.pair_verdict(PAIR, desired(), head, worker)  # OK
    assert "logs" not in _audit_verdict.pair_verdict(PAIR, desired(image_id=OLD_IMAGE_ID), head, worker)  # DRIFT
    assert "logs" not in _audit_verdict.pair_verdict(PAIR, desired(), head, None)  # UNREACHABLE: nothing was read


def test_a_stopped_engine_is_down_with_its_exit_code_and_its_errors(tmp_path, api):
    lines = "\n".join([f"INFO line {i}" for i in range(8)] + [
        "ERROR core.py:935 EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        '  File "/vllm/v1/executor/multiproc_executor.py", line 298, in collective_rpc',
        "TimeoutError: RPC call to sample_tokens timed out after 300 s (no answer from rank(s) [1])",
        "ERROR async_llm.py:480 AsyncLLM output_handler failed.",
        "Traceback (most recent call last):",
        '  File "/vllm/v1/engine/async_llm.py", line 439, in output_handler',
        "    outputs = await engine_core.get_output_async()",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        "BrokenPipeError: [Errno 32] Broken pipe", "BrokenPipeError: [Errno 32] Broken pipe",
        "BrokenPipeError: [Errno 32] Broken pipe", "INFO shutting down", ""])
    engine = docker_up("head", inspect=inspect_doc("head", running=False, exit_code=1))
    engine.logged = lines
    head = collect_rank(tmp_path, "head", engine=engine, api_url=api.url)
    assert head["container"]["last_log_lines"][-1] == "INFO shutting down"
    assert len(head["container"]["last_log_lines"]) == _audit.LAST_LOG_LINES
    worker_engine = docker_up("worker")
    worker_engine.logged = "INFO waiting for the head\n"
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, collect_rank(tmp_path, "worker", engine=worker_engine))
    assert result["verdict"] == "DOWN"
    assert result["logs"] == {"head": head["container"]["last_log_lines"], "worker": ["INFO waiting for the head"]}
    reason = next(r for r in result["reasons"] if "container dspark_vllm" in r)
    assert reason == (f"rank {NAMES['head']}: container dspark_vllm is exited (exit code 1), expected running (its errors: "
                      "TimeoutError: RPC call to sample_tokens timed out after 300 s (no answer from rank(s) [1]) | "
                      "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. | "
                      "BrokenPipeError: [Errno 32] Broken pipe)")


def test_exception_lines_are_found_behind_the_process_prefix(tmp_path, api):
    engine = docker_up("worker", inspect=inspect_doc("worker", running=False, exit_code=1))
    engine.logged = ("(Worker_TP1 pid=212) Capturing CUDA graphs (decode, FULL): 100%\n"
                       "(Worker_TP1 pid=212) ncclRemoteError: A call failed possibly due to a network error\n"
                       "(Worker_TP1 pid=212) Last error:\n"
                       "(EngineCore_DP0 pid=1) ERROR 12-05 02:58:01 [core.py:935] TimeoutError: RPC call to sample_tokens "
                       "timed out after 25 s\n"
                       "(EngineCore_DP0 pid=1) ERROR 12-05 02:58:01 [core.py:935] Traceback (most recent call last):\n")
    worker = collect_rank(tmp_path, "worker", engine=engine)
    assert worker["container"]["error_lines"] == [
        "(Worker_TP1 pid=212) ncclRemoteError: A call failed possibly due to a network error",
        "(EngineCore_DP0 pid=1) ERROR 12-05 02:58:01 [core.py:935] TimeoutError: RPC call to sample_tokens timed out "
        "after 25 s"]


def test_a_stopped_engine_without_exception_lines_shows_its_last_lines(tmp_path, api):
    engine = docker_up("head", inspect=inspect_doc("head", running=False, exit_code=137))
    engine.logged = "\n".join(f"INFO line {i}" for i in range(9))
    result = _audit_verdict.pair_verdict(PAIR, desired(), collect_rank(tmp_path, "head", engine=engine, api_url=api.url),
                                 collect_rank(tmp_path, "worker"))
    reason = next(r for r in result["reasons"] if "container dspark_vllm" in r)
    assert reason.endswith("(exit code 137), expected running (last log lines: INFO line 4 | INFO line 5 | INFO line 6 "
                           "| INFO line 7 | INFO line 8)")


def test_down_wins_over_hung(tmp_path):
    with FakeAPI(stall_s=2) as stalled:
        head = collect_rank(tmp_path, "head", api_url=stalled.url, liveness_timeout=0.3)
    worker = collect_rank(tmp_path, "worker", engine=docker_up("worker", inspect=inspect_doc("worker", running=False,
                                                                                               exit_code=137)))
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    assert result["verdict"] == "DOWN"
    assert any("exit code 137" in r for r in result["reasons"]), result["reasons"]


def test_registered_module_results_are_accepted(pair_audits):
    head, worker = pair_audits
    result = _audit_verdict.pair_verdict(PAIR, desired(), {"changed": False, "audit": head}, {"changed": False, "audit": worker})
    assert result["verdict"] == "OK"


@pytest.mark.parametrize("head_in, worker_in, names", [
    ("audit", None, ["rank worker: host is unreachable"]),
    ({"unreachable": True, "msg": "Failed to connect to the host via ssh: timed out", "rank": "spark-a0"}, "audit",
     ["rank spark-a0: host is unreachable, expected reachable (Failed to connect to the host via ssh: timed out)"]),
    ({"failed": True, "msg": "MODULE FAILURE"}, {"skipped": True}, ["rank head: host is unreachable",
                                                                    "rank worker: host is unreachable"]),
])
def test_unreachable(pair_audits, head_in, worker_in, names):
    head, worker = pair_audits
    head_in = head if head_in == "audit" else head_in
    worker_in = worker if worker_in == "audit" else worker_in
    result = _audit_verdict.pair_verdict(PAIR, desired(), head_in, worker_in)
    assert result["verdict"] == "UNREACHABLE" and result["differences"] == []
    assert len(result["reasons"]) == len(names)
    for reason, start in zip(result["reasons"], names):
        assert reason.startswith(start), reason


def test_unreachable_wins_over_down(pair_audits):
    head, _unused = pair_audits
    head = copy.deepcopy(head)
    head["container"].update(running=False, status="exited", exit_code=1)
    assert _audit_verdict.pair_verdict(PAIR, desired(), head, None)["verdict"] == "UNREACHABLE"


def _docker_dead(a, role):
    a["docker"] = {"reachable": False, "error": "Cannot connect to the Docker daemon"}
    a["images"] = []
    a["container"] = _audit._empty_container(CONTAINER, None, "docker engine unreachable")


def _absent(a, role):
    a["container"] = _audit._empty_container(CONTAINER, False, None)


def _exited(a, role):
    a["container"].update(running=False, status="exited", exit_code=137)


def _api_down(a, role):
    a["api"].update(ready=False, status=None, models=[], error="[Errno 111] Connection refused")


def _api_not_queried(a, role):
    a["api"] = None


@pytest.mark.parametrize("role, breaks, message", [
    ("worker", _docker_dead, "rank spark-a1: docker engine is unreachable, expected reachable (Cannot connect"),
    ("head", _absent, "rank spark-a0: container dspark_vllm is absent, expected running"),
    ("worker", _exited, "rank spark-a1: container dspark_vllm is exited (exit code 137), expected running"),
    ("head", _api_down, "rank spark-a0: OpenAI API is not answering ([Errno 111] Connection refused), "
                        "expected answering /v1/models"),
    ("head", _api_not_queried, "rank spark-a0: OpenAI API is not queried (api=false), expected answering /v1/models"),
])
def test_down(pair_audits, role, breaks, message):
    audits = dict(zip(("head", "worker"), copy.deepcopy(pair_audits)))
    breaks(audits[role], role)
    result = _audit_verdict.pair_verdict(PAIR, desired(), audits["head"], audits["worker"])
    assert result["verdict"] == "DOWN"
    assert any(r.startswith(message) for r in result["reasons"]), result["reasons"]


def test_down_wins_over_drift_and_still_lists_the_differences(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    worker["container"].update(running=False, status="exited", exit_code=1)
    worker["container"]["image_id"] = OLD_IMAGE_ID
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    assert result["verdict"] == "DOWN" and len(result["reasons"]) == 1
    diff = find(result, NAMES["worker"], "running image")
    assert (diff["expected"], diff["actual"]) == (IMAGE_ID, OLD_IMAGE_ID)


def test_down_skips_what_an_absent_container_cannot_show(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    _absent(worker, "worker")
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    assert result["verdict"] == "DOWN" and result["differences"] == []


def set_label(label, value):
    def change(a):
        a["container"]["labels"][label] = value
    return change


def _running(image_id):
    def change(a):
        a["container"]["image_id"] = image_id
    return change


def _drop_image(a):
    a["images"] = [i for i in a["images"] if i["id"] != IMAGE_ID]


def _hand_edit(a):
    a["profile_file"].update(env_matches_container=False, env_differences=["NCCL_IB_GID_INDEX"])


def _no_env_file(a):
    a["profile_file"].update(present=False, sha256=None, env_matches_container=None,
                             error="no env file /etc/dspark/profiles/production.env")


def _manifest(a):
    a["manifest"]["sha256"] = "e" * 64


def _revision(a):
    a["model"]["revision"] = "0" * 40


def _served(a):
    a["api"].update(models=["some-other-model"], ready=False)


MODEL_ITEM = "model revision in {dir}"
MANIFEST_ITEM = "runtime manifest {path}"


@pytest.mark.parametrize("role, change, item, expected, actual", [
    ("head", _running(OLD_IMAGE_ID), "running image", IMAGE_ID, OLD_IMAGE_ID),
    ("worker", set_label("io.gb10.dspark.image.id", OLD_IMAGE_ID), "label io.gb10.dspark.image.id", IMAGE_ID,
     OLD_IMAGE_ID),
    ("worker", _drop_image, f"image {IMAGE_ID}", "present", "absent"),
    ("head", set_label("io.gb10.dspark.profile", "long-1m"), "label io.gb10.dspark.profile", "production", "long-1m"),
    ("worker", set_label("io.gb10.dspark.profile.sha256", "a" * 64), "label io.gb10.dspark.profile.sha256",
     PROFILE_SHA256, "a" * 64),
    ("head", set_label("io.gb10.dspark.cudagraph.implementation", "breakable"),
     "label io.gb10.dspark.cudagraph.implementation", "regular", "breakable"),
    ("worker", set_label("io.gb10.dspark.manifest.sha256", "b" * 64), "label io.gb10.dspark.manifest.sha256",
     MANIFEST_SHA256, "b" * 64),
    ("head", set_label("io.gb10.dspark.model.revision", "1" * 40), "label io.gb10.dspark.model.revision",
     MODEL_REVISION, "1" * 40),
    ("worker", set_label("io.gb10.dspark.pair", "pair-b"), "label io.gb10.dspark.pair", PAIR, "pair-b"),
    ("worker", set_label("io.gb10.dspark.rank", "0"), "label io.gb10.dspark.rank", "1", "0"),
    ("worker", _hand_edit, "profile env file {env}", "the container's environment",
     "changed since the container started"),
    ("head", _no_env_file, "profile env file {env}", "the container's environment", "absent"),
    ("worker", _manifest, MANIFEST_ITEM, MANIFEST_SHA256, "e" * 64),
    ("head", _revision, MODEL_ITEM, MODEL_REVISION, "0" * 40),
    ("head", _served, "served models", SERVED, ["some-other-model"]),
])
def test_every_drift_cause_names_rank_expected_actual(pair_audits, role, change, item, expected, actual):
    audits = dict(zip(("head", "worker"), copy.deepcopy(pair_audits)))
    audit = audits[role]
    change(audit)
    item = item.format(dir=audit["model"]["dir"], path=audit["manifest"]["path"], env=audit["profile_file"]["path"])
    result = _audit_verdict.pair_verdict(PAIR, desired(), audits["head"], audits["worker"])
    assert result["verdict"] == "DRIFT", result["differences"]
    diff = find(result, NAMES[role], item)
    assert (diff["expected"], diff["actual"], diff["role"]) == (expected, actual, role)
    assert diff["message"].startswith(f"rank {NAMES[role]}: {item} is ")
    shown = ", ".join(actual) if isinstance(actual, list) else actual
    assert shown in diff["message"] and str(expected) in diff["message"]
    assert result["reasons"] == []  # a DRIFT is told by its differences, each once
    assert_no_secret(result)


def test_hand_edit_reason_names_the_changed_entries(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    _hand_edit(worker)
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    diff = find(result, NAMES["worker"], f"profile env file {worker['profile_file']['path']}")
    assert "NCCL_IB_GID_INDEX" in diff["message"]


def test_ranks_disagreeing_with_each_other(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    worker["container"]["image_id"] = OLD_IMAGE_ID
    worker["container"]["labels"]["io.gb10.dspark.profile.sha256"] = "a" * 64
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    assert result["verdict"] == "DRIFT"
    cross = [d for d in result["differences"] if d["expected_word"].startswith("head ")]
    assert [(d["item"], d["expected"], d["actual"]) for d in cross] == [
        ("running image", IMAGE_ID, OLD_IMAGE_ID), ("label io.gb10.dspark.profile.sha256", PROFILE_SHA256, "a" * 64)]
    assert cross[0]["message"] == (f"rank {NAMES['worker']}: running image is {OLD_IMAGE_ID}, head {NAMES['head']} has "
                                   f"{IMAGE_ID} (the ranks of the pair disagree)")


def test_ranks_disagreeing_when_the_desired_state_is_met_by_neither(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    head["container"]["image_id"] = "sha256:" + "1" * 64
    worker["container"]["image_id"] = "sha256:" + "2" * 64
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    items = [(d["rank"], d["item"]) for d in result["differences"]]
    assert items.count((NAMES["head"], "running image")) == 1 and items.count((NAMES["worker"], "running image")) == 2


def test_every_difference_is_listed_at_once(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    _manifest(head)
    _revision(worker)
    _hand_edit(worker)
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    assert result["verdict"] == "DRIFT" and len(result["differences"]) == 3 and result["reasons"] == []


def test_revision_compares_without_case_and_cudagraph_is_optional(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    worker["model"]["revision"] = MODEL_REVISION.upper()
    head["container"]["labels"]["io.gb10.dspark.cudagraph.implementation"] = "breakable"
    result = _audit_verdict.pair_verdict(PAIR, desired(cudagraph_implementation=None), head, worker)
    assert result["verdict"] == "OK", result["reasons"]


@pytest.mark.parametrize("bad", [None, [], {"image_id": IMAGE_ID}, desired(served_model="")])
def test_incomplete_desired_state_is_refused(pair_audits, bad):
    with pytest.raises(ValueError):
        _audit_verdict.pair_verdict(PAIR, bad, *pair_audits)


def test_incomplete_audit_is_not_trusted(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    del worker["manifest"]
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, worker)
    assert result["verdict"] == "UNREACHABLE" and "missing manifest" in result["reasons"][0]


# ============================================================================================
# the pinned tag
# ============================================================================================
TAG = "dspark-r0b0tlab:production-v026"


def test_pinned_tag_on_the_pinned_id_is_ok(pair_audits):
    head, worker = pair_audits
    assert _audit_verdict.pair_verdict(PAIR, desired(image_tag=TAG), head, worker)["verdict"] == "OK"


def test_another_image_under_the_pinned_tag_is_drift_on_that_rank(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    swapped = "sha256:" + "9" * 64
    for image in worker["images"]:
        if image["id"] == IMAGE_ID:
            image["tags"] = [t for t in image["tags"] if t != TAG]
    worker["images"].append({"id": swapped, "tags": [TAG]})
    result = _audit_verdict.pair_verdict(PAIR, desired(image_tag=TAG), head, worker)
    assert result["verdict"] == "DRIFT"
    assert [d["message"] for d in result["differences"]] == [
        f"rank {worker['rank']}: image {TAG} is {swapped}, pinned {IMAGE_ID}"]
    assert result["differences"][0]["role"] == "worker"


def test_pinned_tag_missing_is_drift(pair_audits):
    head, worker = copy.deepcopy(pair_audits)
    for image in head["images"]:
        image["tags"] = [t for t in image["tags"] if t != TAG]
    result = _audit_verdict.pair_verdict(PAIR, desired(image_tag=TAG), head, worker)
    assert result["verdict"] == "DRIFT"
    assert result["differences"][0]["actual"] == "absent" and result["differences"][0]["item"] == f"image {TAG}"


def test_an_unreachable_rank_is_named_by_the_inventory_name_given(pair_audits):
    head, _unused = pair_audits
    result = _audit_verdict.pair_verdict(PAIR, desired(), head, {"unreachable": True, "msg": "No route to host"},
                                 names=("sim09-head", "sim09-worker"))
    assert result["verdict"] == "UNREACHABLE"
    assert result["reasons"] == ["rank sim09-worker: host is unreachable, expected reachable (No route to host)"]
    assert result["ranks"]["worker"]["rank"] == "sim09-worker"


# ============================================================================================
# collect(runtime=...): what the runtime gate reads, in the same call
# ============================================================================================
RUNTIME = {"log_tail": 500, "env_prefixes": ["VLLM_USE_BREAKABLE_CUDAGRAPH=", "VLLM_DSV4_ENABLE_MULTI_STREAM="]}
IN_CONTAINER_MANIFEST = "/opt/dspark/runtime-manifest.json"
IMAGE_DOC = {"Id": IMAGE_ID, "Architecture": "arm64", "Config": {"Labels": {"io.r0b0tlab.model.revision": MODEL_REVISION}}}


class RuntimeEngine(FakeEngine):
    """FakeEngine plus the reads of ``runtime``: ``inspect_image``, ``exec_run`` and ``logs``;
    ``fail`` maps a method name to the EngineError it raises."""

    def __init__(self, *args, fail: dict | None = None, logs: tuple[bytes, bytes] = (b"", b""), **kw):
        super().__init__(*args, **kw)
        self.fail = fail or {}
        self.log_answer = logs
        self.image_docs = {IMAGE_ID: IMAGE_DOC}

    def _maybe_fail(self, method: str) -> None:
        if method in self.fail:
            raise self.fail[method]

    def inspect_image(self, ref: str) -> dict | None:
        self.calls.append(("inspect_image", ref))
        self._maybe_fail("inspect_image")
        return copy.deepcopy(self.image_docs.get(ref))

    def exec_run(self, container: str, argv: list[str]) -> tuple[int, bytes, bytes]:
        self.calls.append(("exec_run", container, list(argv)))
        self._maybe_fail("exec_run")
        if argv[2] == cr.PID1_ENV_CODE:
            return 0, b'["VLLM_DSV4_ENABLE_MULTI_STREAM=0"]\n', b""
        return 0, (MANIFEST_SHA256 + "\n").encode(), b""

    def logs(self, container: str, tail: int, tty: bool = False) -> tuple[bytes, bytes]:
        self.calls.append(("logs", container, tail, tty))
        self._maybe_fail("logs")
        return self.log_answer


def runtime_engine(role: str = "worker", **kw) -> RuntimeEngine:
    return RuntimeEngine(containers={CONTAINER: inspect_doc(role)[0]}, **kw)


def collect_runtime(engine: RuntimeEngine, tmp_path: Path, **kw) -> dict:
    options = rank_files(tmp_path, "worker")
    options.update(manifest_path=IN_CONTAINER_MANIFEST, runtime=dict(RUNTIME))
    options.update(kw)
    return _audit.collect(engine, rank=NAMES["worker"], container=CONTAINER, **options)


def test_runtime_reads_every_piece_with_one_inspect(tmp_path):
    engine = runtime_engine(logs=(b"INFO up\n", b"WARNING \xc3\xa9 \xff\n"))  # not UTF-8 at the end
    audit = collect_runtime(engine, tmp_path)
    rt = audit["runtime"]
    assert set(rt) == {"container", "image", "pid1_env", "manifest_sha256", "logs", "errors"}
    assert engine.calls == [
        LIST_IMAGES, INSPECT, LAST_LINES, ("inspect_image", IMAGE_ID),
        ("exec_run", CONTAINER, cr.pid1_env_argv(RUNTIME["env_prefixes"])),
        ("exec_run", CONTAINER, cr.sha256_argv(IN_CONTAINER_MANIFEST)),
        ("logs", CONTAINER, 500, False),
    ]  # the container is inspected once, for both sections
    doc = inspect_doc("worker")[0]
    assert rt["container"]["Id"] == doc["Id"] and rt["container"]["Args"] == doc["Args"]
    assert rt["container"]["State"] == doc["State"] and rt["container"]["Config"]["Labels"] == doc["Config"]["Labels"]
    assert rt["image"] == IMAGE_DOC and rt["errors"] == {}
    assert rt["pid1_env"] == {"rc": 0, "stdout": '["VLLM_DSV4_ENABLE_MULTI_STREAM=0"]\n', "stderr": ""}
    assert rt["manifest_sha256"] == {"rc": 0, "stdout": MANIFEST_SHA256 + "\n", "stderr": ""}
    assert rt["logs"] == {"rc": 0, "stdout": "INFO up\n", "stderr": "WARNING \u00e9 \ufffd\n"}
    json.dumps(audit, allow_nan=False).encode("utf-8")  # JSON-safe: no surrogates
    assert audit["container"]["exists"] is True and audit["model"]["revision"] == MODEL_REVISION


def test_runtime_secrets_in_the_container_env_and_logs_are_redacted(tmp_path):
    env = dict(rank_env("worker"), MY_PASSWORD="short")  # shorter than MIN_SECRET_LENGTH: only the Env rewrite hides it
    engine = RuntimeEngine(containers={CONTAINER: inspect_doc("worker", env=env)[0]},
                           logs=(f"using key {API_KEY}\n".encode(), f"HF_TOKEN={HF_TOKEN}\n".encode()))
    audit = collect_runtime(engine, tmp_path)
    assert_no_secret(audit)
    env_out = audit["runtime"]["container"]["Config"]["Env"]
    assert "VLLM_API_KEY=<redacted>" in env_out and "HF_TOKEN=<redacted>" in env_out
    assert "MY_PASSWORD=<redacted>" in env_out and "MY_PASSWORD=short" not in json.dumps(audit)
    assert "NCCL_NET=IB" in env_out  # the rest is kept as the engine answered
    assert audit["runtime"]["logs"]["stdout"] == "using key <redacted>\n"
    assert HF_TOKEN not in audit["runtime"]["logs"]["stderr"]
    # the container section is computed from the engine's record, before the runtime copy is rewritten
    assert audit["container"]["env_sha256"] == _audit.env_sha256(inspect_doc("worker", env=env)[0]["Config"]["Env"])


def test_a_secret_env_value_of_the_one_minimum_length_is_scrubbed_from_the_logs(tmp_path):
    """The audit scrubs secret-named env values from text from _secrets.MIN_SECRET_LENGTH characters on (6), as
    the evidence pack searches for them: a 6-character password echoed in a log does not reach the result."""
    short_password = "hunt3r"
    assert len(short_password) == _secrets.MIN_SECRET_LENGTH
    env = dict(rank_env("worker"), MY_PASSWORD=short_password, MY_TOKEN="abcde")  # "abcde": too short to search for
    engine = RuntimeEngine(containers={CONTAINER: inspect_doc("worker", env=env)[0]},
                           logs=(f"login with {short_password} and abcde\n".encode(), b""))
    audit = collect_runtime(engine, tmp_path)
    assert short_password not in json.dumps(audit)
    assert audit["runtime"]["logs"]["stdout"] == "login with <redacted> and abcde\n"
    assert "MY_TOKEN=<redacted>" in audit["runtime"]["container"]["Config"]["Env"]  # by its name, whatever its length


def test_runtime_of_a_missing_container(tmp_path):
    engine = RuntimeEngine(containers={})
    rt = collect_runtime(engine, tmp_path)["runtime"]
    assert engine.calls == [LIST_IMAGES, INSPECT]  # nothing more is asked of a container that is not there
    missing = {"rc": 125, "stdout": "", "stderr": f"Error: No such container: {CONTAINER}"}
    assert rt == {"container": None, "image": None, "pid1_env": missing, "manifest_sha256": missing, "logs": missing,
                  "errors": {"container": f"No such container: {CONTAINER}"}}


def test_runtime_pieces_that_fail_are_reported_like_the_cli(tmp_path):
    engine = runtime_engine(fail={
        "exec_run": EngineError("exec in container dspark_vllm: HTTP 409: container is not running", 409),
        "logs": EngineError("reading the logs of container dspark_vllm: HTTP 404: No such container", 404),
        "inspect_image": EngineError("inspecting image x: HTTP 500: boom", 500)})
    rt = collect_runtime(engine, tmp_path)["runtime"]
    assert rt["container"] is not None and rt["image"] is None
    assert rt["errors"] == {"image": "inspecting image x: HTTP 500: boom"}
    not_running = {"rc": 1, "stdout": "", "stderr": "exec in container dspark_vllm: HTTP 409: container is not running"}
    assert rt["pid1_env"] == not_running and rt["manifest_sha256"] == not_running
    assert rt["logs"] == {"rc": 125, "stdout": "",
                          "stderr": "reading the logs of container dspark_vllm: HTTP 404: No such container"}


def test_runtime_image_gone_and_inspect_error(tmp_path):
    engine = runtime_engine()
    engine.image_docs = {}
    rt = collect_runtime(engine, tmp_path)["runtime"]
    assert rt["image"] is None and rt["errors"] == {"image": f"No such image: {IMAGE_ID}"}
    engine = RuntimeEngine(inspect_error="inspecting container dspark_vllm: HTTP 500: permission denied")
    rt = collect_runtime(engine, tmp_path / "x")["runtime"]
    assert rt["container"] is None and rt["image"] is None
    assert rt["errors"] == {"container": "inspecting container dspark_vllm: HTTP 500: permission denied"}
    assert rt["pid1_env"]["rc"] == 0 and rt["logs"]["rc"] == 0  # still tried: the engine may answer those
    assert ("logs", CONTAINER, 500, False) in engine.calls


def test_runtime_tty_container_logs_are_read_raw(tmp_path):
    doc = inspect_doc("worker")[0]
    doc["Config"]["Tty"] = True
    engine = RuntimeEngine(containers={CONTAINER: doc})
    collect_runtime(engine, tmp_path)
    assert ("logs", CONTAINER, 500, True) in engine.calls


def test_runtime_against_a_dead_engine(tmp_path):
    engine = RuntimeEngine(down="cannot reach the Docker engine at /var/run/docker.sock: refused")
    rt = collect_runtime(engine, tmp_path)["runtime"]
    assert engine.calls == [LIST_IMAGES]
    down = {"rc": 1, "stdout": "", "stderr": "docker engine unreachable"}
    assert rt == {"container": None, "image": None, "pid1_env": down, "manifest_sha256": down, "logs": down,
                  "errors": {"container": "docker engine unreachable"}}


def test_without_runtime_or_model_dir(tmp_path):
    options = rank_files(tmp_path, "worker")
    del options["model_dir"]
    engine = runtime_engine()
    audit = _audit.collect(engine, rank="r", container=CONTAINER, **options)
    assert audit["model"] is None and "runtime" not in audit
    assert engine.calls == [LIST_IMAGES, INSPECT, LAST_LINES]


@pytest.mark.parametrize("runtime, text", [
    ([], "runtime must be a mapping"),
    ({"log_tail": 5}, "runtime.env_prefixes must be a list of non-empty strings"),
    ({"log_tail": -1, "env_prefixes": ["A="]}, "runtime.log_tail must be a whole number >= 0"),
    ({"log_tail": True, "env_prefixes": ["A="]}, "runtime.log_tail must be a whole number >= 0"),
    ({"env_prefixes": [""]}, "runtime.env_prefixes must be a list of non-empty strings"),
    ({"env_prefixes": ["A="], "extra": 1}, "runtime has unknown keys: extra"),
])
def test_unusable_runtime_fails_before_the_engine_is_asked(tmp_path, runtime, text):
    engine = runtime_engine()
    with pytest.raises(CheckError, match=re.escape(text)):
        collect_runtime(engine, tmp_path, runtime=runtime)
    assert engine.calls == []
