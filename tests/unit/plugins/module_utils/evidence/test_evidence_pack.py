# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _evidence_pack: a pack planned, written once through its staging folder, and refused when it
would leak."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
import pytest
from tests.unit.plugins.module_utils.evidence.test_evidence import (
    API_KEY,
    LEAKS,
    clean_facts,
    full_artifacts,
    plan,
    sources,
    tree,
)

from ansible_collections.gb10.dspark.plugins.module_utils.evidence import _evidence_pack as ev_pack
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import IdentityError


# --- the written pack -----------------------------------------------------------------------------------
def test_pack_is_written_and_every_file_is_checksummed(tmp_path):
    old = os.umask(0o077)  # modes must not depend on the umask
    try:
        p = plan(tmp_path)
        ev_pack.write_pack(p)
    finally:
        os.umask(old)
    dest = Path(p.dest)
    files = sorted(str(f.relative_to(dest)) for f in dest.rglob("*") if f.is_file())
    assert files == p.files()
    assert {"SHA256SUMS", "index.json", "index.md", "inspect/head.json", "niah/rows.jsonl"} <= set(files)

    lines = (dest / "SHA256SUMS").read_text().splitlines()
    listed = [line.split("  ", 1)[1] for line in lines]
    assert listed == sorted(listed)
    assert set(listed) == set(files) - {"SHA256SUMS"}
    for line in lines:
        digest, name = line.split("  ", 1)
        assert hashlib.sha256((dest / name).read_bytes()).hexdigest() == digest, name

    if shutil.which("sha256sum"):
        res = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=dest, capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stdout + res.stderr

    for path in [dest, *dest.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))
    assert not [p for p in dest.parent.iterdir() if p.name != "r1"]  # no staging folder left behind


def test_binary_source_is_copied_as_is(tmp_path):
    blob = tmp_path / "trace.bin"
    blob.write_bytes(bytes(range(256)) * 4)
    p = plan(tmp_path, artifacts=[{"name": "trace.bin", "src": str(blob)}], secrets=[], redact_prefixes=[])
    ev_pack.write_pack(p)
    assert (Path(p.dest) / "trace.bin").read_bytes() == blob.read_bytes()


# --- redaction -------------------------------------------------------------------------------------------
def test_control_node_paths_are_replaced_longest_prefix_first(tmp_path):
    p = plan(tmp_path)
    ev_pack.write_pack(p)
    dest = Path(p.dest)
    gate = json.loads((dest / "runtime-gate.json").read_text())
    assert gate["evidence"]["output"] == "<evidence>/sim01/runtime-gate.json"
    assert (dest / "profile/production.env").read_text() == \
        "MAX_MODEL_LEN=327680\nDSPARK_MODEL_DIR=<root>/models/dsv4\n"
    for f in dest.rglob("*"):
        if f.is_file():
            assert str(tmp_path) not in f.read_text(), f


def test_inspect_env_and_api_key_are_redacted(tmp_path):
    p = plan(tmp_path)
    ev_pack.write_pack(p)
    raw = (Path(p.dest) / "inspect/head.json").read_text()
    assert API_KEY not in raw and "hf_abc" not in raw and "pw1" not in raw
    container = json.loads(raw)[0]
    assert container["Config"]["Env"] == ["VLLM_API_KEY=<redacted>", "hf_token=<redacted>", "PATH=/usr/bin",
                                          "NCCL_IB_HCA=mlx5_0", "DB_PASSWORD=<redacted>", "MY_SECRET_THING=<redacted>"]
    assert container["Args"] == ["serve", "/model", "--api-key", "<redacted>", "--port", "8888"]
    assert container["Config"]["Cmd"] == ["vllm", "serve", "--api-key=<redacted>"]
    assert container["Config"]["Entrypoint"][-1] == "exec vllm serve --api-key <redacted>"
    assert container["Mounts"][0]["Source"] == "<evidence>/sim01/manifest.json"
    assert next(e for e in p.entries if e.name == "inspect/head.json").redacted is True


def test_a_ranks_engine_log_is_kept_in_order_and_redacted(tmp_path):
    log = ("INFO 12-05 04:10:01 [api_server.py:1] vLLM API server version 0.19.1\n"
           f"WARNING 12-05 04:10:02 [env.py:7] HF_TOKEN={API_KEY} given through the environment\n"
           f"INFO 12-05 04:10:03 [loader.py:9] loading {tmp_path}/evidence/models/dsv4\n"
           "ERROR 12-05 04:15:00 [core.py:935] TimeoutError: RPC call to sample_tokens timed out after 300 s\n")
    files = sources(tmp_path)
    p = plan(tmp_path, artifacts=full_artifacts(files) + [{"name": "logs/head.log", "kind": "log", "content": log}])
    ev_pack.write_pack(p)
    written = (Path(p.dest) / "logs/head.log").read_text().splitlines()
    assert written == ["INFO 12-05 04:10:01 [api_server.py:1] vLLM API server version 0.19.1",
                       "WARNING 12-05 04:10:02 [env.py:7] HF_TOKEN=<redacted> given through the environment",
                       "INFO 12-05 04:10:03 [loader.py:9] loading <evidence>/models/dsv4",
                       "ERROR 12-05 04:15:00 [core.py:935] TimeoutError: RPC call to sample_tokens timed out after 300 s"]
    entry = next(e for e in p.entries if e.name == "logs/head.log")
    assert entry.kind == "log" and entry.redacted is True


def test_leak_found_on_disk_removes_everything_written(tmp_path):
    p = plan(tmp_path, dest=tmp_path / "evidence" / "sim01" / "runs" / "r1")
    p.secrets.append("c0ffee")  # a value the plan did not know about, present in inspect/head.json
    with pytest.raises(IdentityError) as info:
        ev_pack.write_pack(p)
    assert "pack file inspect/head.json is carrying secret #2 (value withheld)" in str(info.value)
    assert "c0ffee" not in str(info.value)
    assert not (tmp_path / "evidence" / "sim01" / "runs").exists()  # the pack and the parents it created
    assert (tmp_path / "evidence" / "sim01" / "runtime-gate.json").exists()  # sources untouched


def test_file_destination_is_refused_and_empty_folder_is_used(tmp_path):
    target = tmp_path / "pack"
    target.write_text("x")
    with pytest.raises(IdentityError, match="is a file, expected absent or an empty folder"):
        plan(tmp_path / "a", dest=target)
    empty = tmp_path / "empty"
    empty.mkdir()
    p = plan(tmp_path / "b", dest=empty)
    ev_pack.write_pack(p)
    assert "index.json" in os.listdir(empty)


def test_destination_written_meanwhile_is_not_overwritten(tmp_path):
    p = plan(tmp_path)
    Path(p.dest).mkdir(parents=True)
    (Path(p.dest) / "other").write_text("theirs")
    with pytest.raises(IdentityError, match="non-empty folder"):
        ev_pack.write_pack(p)
    assert tree(Path(p.dest)) == ["other"]
    assert [n for n in os.listdir(Path(p.dest).parent) if n != "r1"] == []


def leaking_sources(root: Path) -> tuple[list[dict], dict[str, Path]]:
    """A rank's rendered env file and inspect data holding secrets in the operator's extra env."""
    folder = root / "ranks"
    folder.mkdir()
    env_file = folder / "production.env"
    env_file.write_text("HF_HOME=/cache/huggingface\nNCCL_IB_HCA=mlx5_0\n"
                        + "".join(f"{k}={v}\n" for k, v in LEAKS.items()))
    inspect = folder / "inspect.json"
    env = ["MTP_NUM_TOKENS=6"] + [f"{k}={v}" for k, v in LEAKS.items()]
    inspect.write_text(json.dumps([{"Id": "beef", "Config": {"Env": env}}]))
    artifacts = [{"name": "profiles/head/production.env", "src": str(env_file), "kind": "profile"},
                 {"name": "profiles/worker/production.env", "kind": "profile", "content": env_file.read_text()},
                 {"name": "inspect/head.json", "src": str(inspect), "kind": "inspect", "required": True}]
    return artifacts, {"env": env_file, "inspect": inspect}


def test_secret_extra_env_never_reaches_any_file_of_the_pack(tmp_path):
    artifacts, _unused = leaking_sources(tmp_path)
    p = plan(tmp_path, artifacts=artifacts, secrets=[])
    ev_pack.write_pack(p)
    dest = Path(p.dest)
    for path in dest.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for value in LEAKS.values():
                assert value.encode() not in data, path
    for side in ("head", "worker"):
        env = (dest / "profiles" / side / "production.env").read_text().splitlines()
        assert env == ["HF_HOME=/cache/huggingface", "NCCL_IB_HCA=mlx5_0"] + [f"{k}=<redacted>" for k in LEAKS]
    container = json.loads((dest / "inspect/head.json").read_text())[0]
    assert container["Config"]["Env"] == ["MTP_NUM_TOKENS=6"] + [f"{k}=<redacted>" for k in LEAKS]
    assert all(e.redacted for e in p.entries)


def test_a_secret_value_under_an_innocent_name_is_redacted(tmp_path):
    env_text = "HF_HOME=/cache/huggingface\nSITE_LABEL=hunter2-xyz\n"
    artifacts = [{"name": "profiles/head/production.env", "kind": "profile", "content": env_text},
                 {"name": "inspect/head.json", "kind": "inspect",
                  "content": [{"Config": {"Env": ["SITE_LABEL=hunter2-xyz", "NODE_RANK=0"]}}]}]
    p = plan(tmp_path, artifacts=artifacts, secrets=["hunter2-xyz"])
    ev_pack.write_pack(p)
    dest = Path(p.dest)
    assert (dest / "profiles/head/production.env").read_text() == "HF_HOME=/cache/huggingface\nSITE_LABEL=<redacted>\n"
    assert json.loads((dest / "inspect/head.json").read_text())[0]["Config"]["Env"] == \
        ["SITE_LABEL=<redacted>", "NODE_RANK=0"]


def test_a_pack_whose_file_still_holds_a_secret_is_not_published(tmp_path):
    p = plan(tmp_path, artifacts=[{"name": "profiles/head/production.env", "kind": "profile",
                                   "content": "NCCL_DEBUG=INFO\n"}], secrets=[])
    entry = p.entries[0]
    entry.data = b"NCCL_DEBUG=INFO\nDB_PASSWD=hunter2-xyz\n"  # e.g. a redaction bug between plan and write
    with pytest.raises(IdentityError) as info:
        ev_pack.write_pack(p)
    text = str(info.value)
    assert "pack file profiles/head/production.env" in text and "DB_PASSWD" in text and "hunter2-xyz" not in text
    assert not (tmp_path / "evidence" / "sim01" / "runs").exists()


def test_a_secret_departure_is_redacted_in_the_facts_and_the_index(tmp_path):
    facts = clean_facts(profile={"name": "production", "sha256": "b9" * 32, "experimental": True,
                                 "departures": [{"key": "env.HF_TOKEN", "qualified": None, "actual": "hf_q8ZrT4kLm2Nv"}],
                                 "cudagraph_implementation": "regular"})
    p = plan(tmp_path, artifacts=[{"name": "readiness.json", "kind": "readiness",
                                   "content": {"departures": facts["profile"]["departures"]}}],
             facts=facts, secret_env=["HF_TOKEN=hf_q8ZrT4kLm2Nv"])
    ev_pack.write_pack(p)
    for path in Path(p.dest).rglob("*"):
        if path.is_file():
            assert b"hf_q8ZrT4kLm2Nv" not in path.read_bytes(), path
    assert p.index["profile"]["departures"] == [{"key": "env.HF_TOKEN", "qualified": None, "actual": "<redacted>"}]


@pytest.mark.parametrize("item,value", [("pair", "../sim01"), ("run_id", "../../etc"), ("run_id", "a/b"),
                                        ("pair", ".hidden")])
def test_a_pair_or_run_id_that_could_leave_the_pack_folder_is_refused(tmp_path, item, value):
    kwargs = {"pair": "sim01", "run_id": "20261203T120000Z"}
    kwargs[item] = value
    with pytest.raises(IdentityError) as err:
        ev_pack.plan_pack(str(tmp_path / "pack"), kwargs["pair"], kwargs["run_id"], "provision",
                     [{"name": "a.json", "content": "{}"}])
    assert item in str(err.value) and "1 to 64 letters" in str(err.value)
    assert not (tmp_path / "pack").exists()
