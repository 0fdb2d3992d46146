"""dspark render for real: the CLI and playbooks/render.yml against inventories/sample, on the control node only.

The sample inventory's addresses are documentation ranges that no host answers; the render must still
succeed, and with a connection that would fail (and leave a trace) if any task used it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "inventories" / "sample"
ENGINE = REPO / "roles" / "engine"
MARKER = "dspark-render-test-key-4b7e19c2"  # the API key given with -e: must appear nowhere
TIMEOUT = 300


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DSPARK_INVENTORY", "DSPARK_ARTIFACTS", "ANSIBLE_CONFIG", "ANSIBLE_HOST_KEY_CHECKING")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "cli"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _dspark_argv() -> list[str]:
    script = Path(sys.executable).with_name("dspark")  # the installed command (make deps: editable ./cli)
    return [str(script)] if script.is_file() else [sys.executable, "-m", "dspark_cli.main"]


def dspark(runs: Path, *argv: str) -> subprocess.CompletedProcess:
    """``dspark <argv> --artifacts <runs>`` from the repository root, as an operator runs it."""
    return subprocess.run([*_dspark_argv(), *argv, "--artifacts", str(runs)], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


def value_after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def long_1m(tmp_path_factory):
    runs = tmp_path_factory.mktemp("render-long-1m") / "runs"
    proc = dspark(runs, "render", "-i", "inventories/sample", "-l", "pair_lab01", "--profile", "long-1m", "--json",
                  "-e", f"dspark_api_key={MARKER}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, runs


def test_long_1m_json_is_parseable_and_lists_both_ranks_in_order(long_1m):
    proc, _runs = long_1m
    tool = subprocess.run([sys.executable, "-m", "json.tool"], input=proc.stdout, capture_output=True, text=True,
                          check=False)
    assert tool.returncode == 0, proc.stdout[:2000]
    doc = json.loads(proc.stdout)
    assert [(r["pair"], r["rank"], r["host"], r["role"]) for r in doc] == [
        ("lab01", 0, "lab01-head", "head"), ("lab01", 1, "lab01-worker", "worker")]
    for rank in doc:
        assert rank["profile"] == "long-1m"
        assert value_after(rank["argv"], "--gpu-memory-utilization") == "0.88"
        assert rank["env"]["VLLM_ENGINE_ITERATION_TIMEOUT_S"] == "3600"
        assert rank["env"]["VLLM_RPC_TIMEOUT"] == "3600"
        assert rank["argv"][:2] == ["vllm", "serve"]
        assert len(rank["profile_sha256"]) == 64 and rank["experimental"] is False
        assert rank["labels"]["io.gb10.dspark.profile"] == "long-1m"
        assert rank["labels"]["io.gb10.dspark.rank"] == str(rank["rank"])
    head, worker = doc
    assert value_after(head["argv"], "--port") == "8888" and "--headless" not in head["argv"]
    assert "--headless" in worker["argv"] and "--port" not in worker["argv"]
    assert head["profile_sha256"] == worker["profile_sha256"]


def _derivatives(key: str) -> list[str]:
    """What a fingerprint of the key could be spelled as: the former label's digits, plain sha256 cuts."""
    former = ["fp:"] + [hashlib.sha256(f"gb10.dspark:{pair}:{key}".encode()).hexdigest()[:16] for pair in ("lab01",)]
    plain = hashlib.sha256(key.encode()).hexdigest()
    return [*former, plain[:16], "hmac-sha256:"]


def test_the_api_key_is_never_shown_nor_recorded(long_1m):
    """Neither the key nor anything derived from it: the render says that a key is set, and nothing more."""
    proc, runs = long_1m
    assert MARKER not in proc.stdout and MARKER not in proc.stderr
    files = [p for p in runs.rglob("*") if p.is_file()]
    assert any(p.name == "render.json" for p in files)  # the run folder holds the render and the artifacts
    for text in [proc.stdout, proc.stderr] + [p.read_text(errors="replace") for p in files]:
        assert MARKER not in text
        for derivative in _derivatives(MARKER):
            assert derivative not in text, derivative
    for rank in json.loads(proc.stdout):
        shown = rank["env"]["VLLM_API_KEY"]  # the engine gets one: the render says so, without it
        assert "dspark_api_key" in shown and "not shown" in shown
        assert rank["labels"]["io.gb10.dspark.api_key"] == shown


def test_container_options_are_the_engine_roles(long_1m):
    proc, _runs = long_1m
    options = load_yaml(ENGINE / "vars" / "main.yml")["__dspark_engine_container_options"]
    defaults = load_yaml(ENGINE / "defaults" / "main.yml")
    pin = load_yaml(SAMPLE / "group_vars" / "all" / "pin.yml")["dspark_pin"]
    model_dir = load_yaml(SAMPLE / "hosts.yml")["all"]["children"]["dspark_pairs"]["children"]["pair_lab01"][
        "hosts"]["lab01-head"]["dspark_model_dir"]
    for rank in json.loads(proc.stdout):
        shown = {**rank["options"], "labels": rank["labels"]}
        assert set(shown) == set(options)  # every option the engine passes, and nothing else
        for key, value in options.items():
            if "{{" not in json.dumps(value):  # literal values come out exactly as written
                assert shown[key] == value, key
        assert shown["ipc_mode"] == "private" and shown["network_mode"] == "host"
        assert shown["shm_size"] == defaults["dspark_engine_shm_size"]
        assert all(isinstance(u, str) for u in shown["ulimits"]) and f"memlock:{defaults['dspark_engine_memlock']}" \
            in shown["ulimits"]
        assert {"type": "bind", "source": model_dir, "target": "/model", "read_only": True} in shown["mounts"]
        assert {"type": "bind", "source": defaults["dspark_engine_manifest_file"],
                "target": pin["runtime_manifest_path"], "read_only": True} in shown["mounts"]
        assert rank["container"] == "dspark_vllm"
        assert rank["image"]["tag"] == pin["image_tag"]
        assert rank["image"]["id"] == pin["image_id"]
        assert rank["image"]["containerd_id"] == pin["image_manifest_digest"]
        assert "containerd" in rank["image"]["note"]


def test_the_engine_tasks_read_the_same_options():
    """The docker_container tasks of the engine take every option from __dspark_engine_container_options."""
    options = load_yaml(ENGINE / "vars" / "main.yml")["__dspark_engine_container_options"]
    def flat(tasks):  # a block's own tasks too (the starts and the wait share one, with its rescue)
        for t in tasks:
            yield t
            yield from flat(t.get("block") or [])

    tasks = list(flat(load_yaml(ENGINE / "tasks" / "main.yml")))
    starts = [t["community.docker.docker_container"] for t in tasks
              if isinstance(t.get("community.docker.docker_container"), dict)
              and "command" in t["community.docker.docker_container"]]
    assert len(starts) == 3  # the plan, the worker, the head
    for args in starts:
        for key in options:
            assert args[key] == f"{{{{ __dspark_engine_container_options.{key} }}}}", key
        assert args["command"] == "{{ dspark_profile_active.argv }}"


def test_breakable_ab_text_shows_each_rank_and_the_compilation_config(tmp_path):
    proc = dspark(tmp_path / "runs", "render", "-i", "inventories/sample", "-l", "pair_lab01",
                  "--profile", "breakable-ab")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    headers = [line for line in proc.stdout.splitlines() if line.startswith("== ")]
    assert len(headers) == 2
    assert "host lab01-head" in headers[0] and "(head)" in headers[0]
    assert "host lab01-worker" in headers[1] and "(worker)" in headers[1]
    configs = [json.loads(shlex.split(line.rstrip("\\"))[1]) for line in proc.stdout.splitlines()
               if line.strip().startswith("--compilation-config ")]
    assert len(configs) == 2
    for config in configs:
        assert config["cudagraph_mode"] == "PIECEWISE" and config["cudagraph_implementation"] == "breakable"
    assert "TASK [" not in proc.stdout and "PLAY RECAP" not in proc.stdout  # no Ansible noise on stdout
    assert "VLLM_API_KEY" not in proc.stdout  # no key set: no key variable at all


def test_unknown_profile_fails_naming_it(tmp_path):
    proc = dspark(tmp_path / "runs", "render", "-i", "inventories/sample", "-l", "pair_lab01",
                  "--profile", "nosuch-profile", "--json")
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert "nosuch-profile" in proc.stderr


def test_bad_inventory_fails_naming_the_pair(tmp_path):
    inventory = load_yaml(SAMPLE / "hosts.yml")
    inventory["all"]["children"]["dspark_pairs"]["children"]["pair_lab01"]["hosts"]["lab01-head"]["dspark_rank"] = 1
    inv = tmp_path / "inv"
    shutil.copytree(SAMPLE / "group_vars", inv / "group_vars")
    (inv / "hosts.yml").write_text(yaml.safe_dump(inventory))
    proc = dspark(tmp_path / "runs", "render", "-i", str(inv), "--profile", "production", "--json")
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert "pair lab01" in proc.stderr


@pytest.fixture()
def trapped_inventory(tmp_path):
    """The sample fleet (three pairs: the sample folder without its one-pair hosts.yml) whose ranks are reached
    through an SSH that fails and leaves a trace if it is ever started, on a port nothing listens on."""
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventories" / "sample", inv)
    (inv / "hosts.yml").unlink()
    trace = tmp_path / "ssh-was-started"
    trap = tmp_path / "ssh-trap"
    trap.write_text(f"#!/bin/sh\necho \"$@\" >> {shlex.quote(str(trace))}\nexit 255\n")
    trap.chmod(0o755)
    (inv / "group_vars" / "dspark_pairs.yml").write_text(yaml.safe_dump({
        "ansible_connection": "ssh", "ansible_ssh_executable": str(trap), "ansible_port": 1,
        "ansible_ssh_common_args": "-o ConnectTimeout=1 -o ProxyCommand=false"}))
    return inv, trace


def ansible_playbook(inv: Path, *argv: str) -> subprocess.CompletedProcess:
    env = _env()
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inv),
                           "gb10.dspark.render", *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def test_playbook_contacts_no_host_and_writes_the_document(tmp_path, trapped_inventory):
    inv, trace = trapped_inventory
    output = tmp_path / "render.json"
    proc = ansible_playbook(inv, "-e", f"dspark_render_output={output}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not trace.exists(), trace.read_text()
    assert "UNREACHABLE" not in proc.stdout
    doc = json.loads(output.read_text())
    got = [(r["pair"], r["rank"]) for r in doc]
    assert got == sorted(got) and len(got) == 6  # fleet01..03, head then worker
    profiles = {r["pair"]: r["profile"] for r in doc}
    assert profiles == {"fleet01": "production", "fleet02": "production",
                        "fleet03": "long-1m"}  # without dspark_profile_name, each pair's own profile
    fleet02 = [r for r in doc if r["pair"] == "fleet02"]
    assert all({"type": "bind", "source": "/data/models/DeepSeek-V4-Flash-0731", "target": "/model",
                "read_only": True} in r["options"]["mounts"] for r in fleet02)
    assert all("VLLM_API_KEY" not in r["env"] for r in doc)


def test_playbook_prints_the_document_without_an_output_file(tmp_path, trapped_inventory):
    inv, trace = trapped_inventory
    proc = ansible_playbook(inv, "--limit", "pair_fleet03", "-e", f"dspark_api_key={MARKER}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not trace.exists()
    assert "fleet03-head" in proc.stdout and "fleet03-worker" in proc.stdout
    assert "--gpu-memory-utilization" in proc.stdout and "VLLM_RPC_TIMEOUT" in proc.stdout
    assert MARKER not in proc.stdout + proc.stderr


def test_a_play_works_the_topology_out_once_however_often_its_roles_are_entered(tmp_path, trapped_inventory):
    """Topology once per play: the profile role entered four ways (import_role twice, include_role, and its
    publish entry point), then the engine's render, run gb10.dspark.pair_topology once per host and record no
    other result of it, not even a skip (Ansible runs the topology role, their dependency, once per play)."""
    import ansible_runner

    inv, trace = trapped_inventory
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{
        "name": "Enter the roles that need the topology, several times", "hosts": "dspark_pairs", "gather_facts": False,
        "tasks": [
            {"name": "Resolve", "ansible.builtin.import_role": {"name": "gb10.dspark.profile", "tasks_from": "resolve"}},
            {"name": "Resolve again", "ansible.builtin.include_role": {"name": "gb10.dspark.profile", "tasks_from": "resolve"}},
            {"name": "Publish", "ansible.builtin.import_role": {"name": "gb10.dspark.profile", "tasks_from": "publish"}},
            {"name": "Render", "ansible.builtin.import_role": {"name": "gb10.dspark.engine", "tasks_from": "render"}},
        ]}]))
    env = _env()
    (tmp_path / "runner").mkdir()
    run = ansible_runner.run(private_data_dir=str(tmp_path / "runner"), playbook=str(book), inventory=str(inv),
                             envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PYTHONPATH": env["PYTHONPATH"],
                                      "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])},
                             quiet=True, suppress_env_files=True)
    assert run.rc == 0, run.stdout.read()[-3000:]
    assert not trace.exists()
    results = [(e["event"], e["event_data"]["host"]) for e in run.events
               if e.get("event", "").startswith("runner_on_") and e["event"] != "runner_on_start"
               and e.get("event_data", {}).get("task_action")
               in ("gb10.dspark.pair_topology", "pair_topology")]
    hosts = sorted(h for _event, h in results)
    assert len(hosts) == 6 and hosts == sorted(set(hosts)), results  # three pairs, once per host
    assert {event for event, _host in results} == {"runner_on_ok"}, results
