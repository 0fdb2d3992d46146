"""playbooks/provision.yml on the simulator: a fresh pair passes the gate, a re-run restarts nothing,
a profile change replaces both ranks, each stand-in fault fails the run with its reason and logs,
and an engine with requests in flight is not replaced without force."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from simhelpers import INVENTORY, PAIRS, ROOT, container_state, on_rank, playbook, site, snapshot, texts_under


def provision(pair, clean_tree, *extra: str, check: bool = False):
    return playbook("provision.yml", clean_tree, "--limit", pair.group, *extra, check=check)


def started(pair) -> dict:
    out = {}
    for r in pair.ranks:
        doc = json.loads(on_rank(r, ["docker", "container", "inspect", "dspark_vllm"]).stdout)[0]
        out[r.name] = (doc["Id"], doc["State"]["StartedAt"], doc["Config"]["Labels"].get("io.gb10.dspark.profile"))
    return out


def gate(pair) -> dict:
    path = Path(site()["dspark_evidence_dir"]) / f"sim{pair.index:02d}" / "runtime-gate.json"
    return json.loads(path.read_text())


def recap(res) -> str:
    return res.stdout.split("PLAY RECAP")[-1]


def flat(res) -> str:
    return " ".join((res.stdout + res.stderr).split())


def test_fresh_pair_passes_the_gate_and_serves(pair_a, clean_tree):
    pair = pair_a
    res = provision(pair, clean_tree, check=True)
    assert "RUNTIME_GATE status=PASS" in res.stdout or gate(pair)["status"] == "PASS"
    doc = gate(pair)
    assert doc["schema_version"] == 3 and doc["status"] == "PASS" and doc["errors"] == []
    assert doc["evidence"]["semantic"]["pass"] and doc["evidence"]["retrieval"]["pass"]
    readiness = json.loads((Path(site()["dspark_evidence_dir"]) / "sim01" / "readiness.json").read_text())
    assert readiness["kv_cache_size_tokens"] > 0
    head = pair.head
    with urllib.request.urlopen(f"http://{head.mgmt_ip}:8888/v1/models", timeout=10) as r:
        assert json.load(r)["data"][0]["id"] == site()["dspark_served_model_name"]


@pytest.mark.fault("inventory-pairs")
def test_a_limit_that_splits_a_pair_is_refused(pair_a, clean_tree):
    pair = pair_a
    res = playbook("provision.yml", clean_tree, "--limit", pair.head.name, check=False)
    assert res.returncode != 0
    assert "worker hosts is 0 (none), expected exactly one" in flat(res)


@pytest.mark.fault("sliced-half-pair")
def test_a_slice_of_a_sliced_awx_job_is_refused_on_every_host_before_anything_changes(pair_a, clean_tree, tmp_path):
    """The inventory AWX hands slice 2 of a job over the simulator's fleet whose job_slice_count is one less than
    its hosts (sorted by name, every (n-1)th from the second: sim01-worker alone), made as AWX makes it: every group kept,
    only the slice's hosts in them, the site's group_vars beside. Provision and the read-only audit are both
    refused by the topology, their first task, naming the half pair, the rank it lacks and the fix."""
    from dspark_sim import drive, layout

    from tests.support.awx_slicing import slice_hosts

    pair = pair_a
    inventory = [r.name for p in layout.pairs(PAIRS) for r in p.ranks]
    keep = slice_hosts(inventory, 2, len(inventory) - 1)
    assert keep == [pair.worker.name], keep
    sliced = tmp_path / "slice"
    shutil.copytree(INVENTORY / "group_vars", sliced / "group_vars")
    doc = yaml.safe_load((INVENTORY / "hosts.yml").read_text())

    def prune(group):
        if group.get("hosts"):
            group["hosts"] = {h: v for h, v in group["hosts"].items() if h in keep}
        for child in (group.get("children") or {}).values():
            prune(child)

    prune(doc["all"])
    (sliced / "hosts.yml").write_text(yaml.safe_dump(doc))
    before = {r.name: snapshot(r) for r in pair.ranks}
    report_dir = tmp_path / "fleet"
    for name, extra in (("provision.yml", ()), ("audit.yml", ("-e", f"dspark_audit_report_dir={report_dir}"))):
        res = subprocess.run([drive.tool("ansible-playbook"), "-i", str(sliced), f"playbooks/{name}",
                              "-e", f"dspark_preflight_wrapper_path={clean_tree}", *extra],
                             cwd=ROOT, env=drive.ansible_env(), text=True, capture_output=True, timeout=600, check=False)
        text = flat(res)
        assert res.returncode != 0, text[-4000:]
        assert (f"rank head of pair sim{pair.index:02d}: head (dspark_rank 0) is absent from the run's inventory, "
                f"expected in it beside its worker {pair.worker.name}") in text, text[-4000:]
        assert f"half pairs is 1 (sim{pair.index:02d} without its head)" in text and "job_slice_count 1" in text
        assert "changed=0" in recap(res) and "failed=1" in recap(res), recap(res)
        tasks = re.findall(r"^TASK \[([^\]]*)\]", res.stdout, re.M)
        assert tasks and all(t.startswith("gb10.dspark.topology : ") for t in tasks), tasks  # its first and only task
    assert not report_dir.exists(), "a refused audit wrote a report"
    assert {r.name: snapshot(r) for r in pair.ranks} == before, "a refused slice changed a rank"


@pytest.mark.fault("inventory-pairs")
def test_a_pair_with_two_heads_is_refused_by_the_topology_check_and_nothing_changes(pair_b, clean_tree, host_vars, tmp_path):
    # The audit has no preflight, so the pair_topology action it opens with is what refuses two heads there.
    pair = pair_b
    host_vars(pair.worker, {"dspark_rank": 0})
    before = {r.name: snapshot(r) for r in pair.ranks}
    res = playbook("audit.yml", clean_tree, "--limit", pair.group, "-e", f"dspark_audit_report_dir={tmp_path}", check=False)
    text = flat(res)
    assert res.returncode != 0, text[-4000:]
    assert (f"head of pair sim{pair.index:02d}: head hosts is 2 ({pair.head.name}, {pair.worker.name}), "
            "expected exactly one") in text, text[-4000:]
    # The worker's inventory group disagrees with its new rank, and the message names that rank.
    assert f"rank {pair.worker.name}: inventory groups is dspark_workers, expected dspark_heads only" in text, text[-4000:]
    assert {r.name: snapshot(r) for r in pair.ranks} == before, "a refused audit changed a rank"


def test_experimental_profile_needs_the_opt_in_and_is_recorded(pair_a, clean_tree):
    pair = pair_a
    before = started(pair)
    refused = provision(pair, clean_tree, "-e", '{"dspark_profile_overrides": {"max_num_seqs": 8}}')
    assert refused.returncode != 0 and "max_num_seqs" in flat(refused)
    assert started(pair) == before
    provision(pair, clean_tree, "-e", '{"dspark_profile_overrides": {"max_num_seqs": 8}, "dspark_profile_allow_experimental": true}',
              check=True)
    record = json.loads((Path(site()["dspark_evidence_dir"]) / "sim01" / "readiness.json").read_text())
    assert record["experimental"] is True
    assert [d["key"] for d in record["departures"]] == ["max_num_seqs"]
    labels = json.loads(on_rank(pair.head, ["docker", "container", "inspect", "dspark_vllm"]).stdout)[0]["Config"]["Labels"]
    assert labels["io.gb10.dspark.profile.experimental"] == "true"
    provision(pair, clean_tree, check=True)  # back to the qualified profile


def test_second_run_changes_nothing_and_restarts_nothing(pair_a, clean_tree):
    pair = pair_a
    before = started(pair)
    res = provision(pair, clean_tree, check=True)
    assert recap(res).count("changed=0") == 2, recap(res)
    assert started(pair) == before


def control_node_files(pair) -> dict:
    """Every file a run on ``pair`` could write in the control node's evidence folder (the pair's own folder, and the
    run records that name the pair; the other lane's pair writes beside them meanwhile), with size and mtime."""
    root = Path(site()["dspark_evidence_dir"])
    files = [p for p in (root / pair.name).rglob("*") if p.is_file()]
    files += [p for p in (root / "runs").glob("*.json") if f'"{pair.name}"' in p.read_text(errors="replace")]
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in files}


@pytest.mark.fault("check-mode-writes-nothing")
def test_check_mode_diff_shows_a_profile_change_and_changes_nothing(pair_a, clean_tree):
    """--check --diff shows the change and changes nothing: no engine restarted, no file on a rank and none on the
    control node (its evidence folder, where the preflight's tree record once went) written."""
    pair = pair_a
    before, ranks, files = started(pair), {r.name: snapshot(r) for r in pair.ranks}, control_node_files(pair)
    res = provision(pair, clean_tree, "-e", "dspark_profile=long-1m", "--check", "--diff", check=True)
    assert "1048576" in res.stdout
    assert started(pair) == before
    assert {r.name: snapshot(r) for r in pair.ranks} == ranks
    written = sorted(set(control_node_files(pair).items()) - set(files.items()))
    assert written == [], written


def test_profile_change_replaces_both_ranks(pair_a, clean_tree):
    pair = pair_a
    before = started(pair)
    provision(pair, clean_tree, "-e", "dspark_profile=breakable-ab", check=True)
    after = started(pair)
    for name in before:
        assert after[name][0] != before[name][0], f"{name} was not replaced"
        assert after[name][2] == "breakable-ab"
    assert gate(pair)["status"] == "PASS"
    back = provision(pair, clean_tree, check=True)
    assert all(v[2] == "production" for v in started(pair).values())
    assert "RUNTIME_GATE" in back.stdout or gate(pair)["status"] == "PASS"


@pytest.mark.parametrize("where,fault,extra,expect", [
    pytest.param("worker", "crash_on_start", {}, ["the pair's engine exited on worker", "Traceback"],
                 marks=pytest.mark.fault("crash-worker", "secret-rescue")),
    pytest.param("head", "crash_on_start", {}, ["the pair's engine exited on head", "Traceback"],
                 marks=pytest.mark.fault("crash-head")),
    pytest.param("worker", "worker_never_joins", {"dspark_engine_ready_budget": 15}, ["TIMEOUT", "did not serve"],
                 marks=pytest.mark.fault("worker-never-joins")),
    pytest.param("worker", "wrong_cudagraph_mode", {},
                 ["worker resolved CUDA-graph mode mismatch: expected FULL_DECODE_ONLY, got PIECEWISE"],
                 marks=pytest.mark.fault("cudagraph-mode")),
    pytest.param("head", "forbidden_marker", {}, ["head forbidden runtime marker present: Marlin"],
                 marks=pytest.mark.fault("forbidden-marker")),
    pytest.param("head", "wrong_usage", {}, ["usage is inconsistent"], marks=pytest.mark.fault("wrong-usage")),
])
def test_stand_in_faults_fail_the_run_with_reason(pair_b, clean_tree, host_vars, where, fault, extra, expect):
    pair = pair_b
    rank = pair.head if where == "head" else pair.worker
    host_vars(rank, {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "1", "DSPARK_SIM_FAULT": fault}})
    if extra:  # readiness runs on the head
        host_vars(pair.head, extra)
    # With a key and -v: the readiness rescue reads and stops both ranks' keyed engines, and none
    # of its results may carry the key (docker_container_info's Config.Env used to).
    key = "sk-dspark-rescue-5e71b2"
    res = provision(pair, clean_tree, "-e", f"dspark_api_key={key}", "-v")
    assert res.returncode != 0
    text = flat(res)
    for needle in expect:
        assert " ".join(needle.split()) in text, f"{needle!r} missing:\n{res.stdout[-5000:]}"
    assert key not in res.stdout + res.stderr, "the API key is in the failed run's output"
    if fault in ("crash_on_start", "worker_never_joins"):
        # Both ranks' waits fail (each reads its own engine; the worker's ends with the head's
        # verdict), and no half-pair is left running.
        failed = {line.split()[0] for line in recap(res).splitlines() if "failed=" in line and "failed=0" not in line}
        assert {r.name for r in pair.ranks} <= failed, recap(res)
        for r in pair.ranks:
            assert container_state(r).get("Running") is not True, (r.name, container_state(r))


@pytest.mark.fault("foreign-container")
def test_a_container_under_the_engines_name_that_is_not_ours_is_refused(pair_b, clean_tree):
    """Someone else's workload named dspark_vllm on the worker (no io.gb10.dspark.* labels): provision
    and teardown refuse before anything changes on either rank, naming the container, its image
    and its start time; dspark_engine_replace_foreign=true replaces it."""
    pair = pair_b
    worker = pair.worker
    if on_rank(worker, ["docker", "container", "inspect", "dspark_vllm"], check=False).returncode != 0:
        provision(pair, clean_tree, check=True)  # run alone: the pinned image and an engine first
    image = json.loads(on_rank(worker, ["docker", "container", "inspect", "dspark_vllm"]).stdout)[0]["Image"]
    on_rank(worker, ["docker", "rm", "-f", "dspark_vllm"])
    on_rank(worker, ["docker", "run", "-d", "--name", "dspark_vllm", "--network", "none", "--entrypoint", "sleep",
                     image, "3600"])
    theirs = json.loads(on_rank(worker, ["docker", "container", "inspect", "dspark_vllm"]).stdout)[0]
    before = {r.name: snapshot(r) for r in pair.ranks}
    expected = (f"rank {worker.name}: container dspark_vllm (image {image}, started {theirs['State']['StartedAt']}, "
                f"running) was not made by gb10.dspark")
    for run_ in (provision(pair, clean_tree), playbook("teardown.yml", clean_tree, "--limit", pair.group, check=False)):
        assert run_.returncode != 0
        assert expected in flat(run_), flat(run_)[-3000:]
        assert {r.name: snapshot(r) for r in pair.ranks} == before, "a refused run changed a rank"
    again = provision(pair, clean_tree, "-e", "dspark_engine_replace_foreign=true")
    assert again.returncode == 0, again.stdout[-4000:]
    assert "was not made by gb10.dspark" in flat(again)  # the override is not silent
    assert all(v[2] == "production" for v in started(pair).values())


@pytest.mark.fault("in-flight")
def test_engine_with_requests_in_flight_is_not_replaced_without_force(pair_b, clean_tree, host_vars):
    pair = pair_b
    for r in pair.ranks:
        # only this test's own request is slow (the gate's canaries are not): it holds the marker
        host_vars(r, {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "1", "DSPARK_SIM_FAULT": "slow_tokens",
                                                  "DSPARK_SIM_TOKEN_DELAY_S": "0.5",
                                                  "DSPARK_SIM_TOKEN_DELAY_MATCH": "dspark-test-in-flight"}})
    provision(pair, clean_tree, check=True)
    before = started(pair)
    body = json.dumps({"model": site()["dspark_served_model_name"], "prompt": "hello dspark-test-in-flight", "max_tokens": 120,
                       "ignore_eos": True}).encode()

    def slow_request():
        req = urllib.request.Request(f"http://{pair.head.mgmt_ip}:8888/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=120).read()
        except OSError:
            pass

    t = threading.Thread(target=slow_request, daemon=True)
    t.start()
    try:
        refused = provision(pair, clean_tree, "-e", "dspark_profile=long-1m")
        assert refused.returncode != 0
        assert "the head has 1 request(s) in flight (running 1, waiting 0), expected 0" in flat(refused)
        assert started(pair) == before
        forced = provision(pair, clean_tree, "-e", "dspark_profile=long-1m", "-e", "dspark_engine_force_replace=true",
                           check=True)
        assert all(v[2] == "long-1m" for v in started(pair).values()), forced.stdout[-2000:]
    finally:
        t.join(timeout=130)


class ProcessWatch:
    """Reads every process's command line (/proc/*/cmdline) on this machine, which holds the
    control node and both simulated ranks, until stopped; keeps those that contain a needle."""

    def __init__(self, needle: str):
        self.needle = needle.encode()
        self.hits: dict[int, str] = {}
        self.seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    cmdline = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                self.seen += 1
                if self.needle in cmdline:
                    self.hits[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
            self._stop.wait(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)


def dspark(*args: str, artifacts: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("dspark")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run([str(exe), *args, "--inventory", str(INVENTORY), "--artifacts", str(artifacts)],
                          cwd=ROOT, env=env, text=True, capture_output=True, timeout=1800, check=False)


@pytest.mark.fault("secret-api-key", "secret-run-records", "secret-process-list", "secret-key-newline",
                   "secret-extra-env-records", "secret-key-label")
def test_api_key_reaches_only_the_containers_environment(pair_b, clean_tree, tmp_path):
    """A keyed engine provisioned twice through `dspark provision -v --diff`, with a secret-named extra variable:
    the first run starts it, the second finds it running (the engine role inspects a keyed engine before anything
    changes); then `dspark render --json`. The key and the token are looked for where they would really go: every
    task result in the run folders (job_events, stdout), render.json, every process's command line while the runs
    go on (the gate's suite included), the evidence, the rendered profiles and the containers' command lines.
    Before all that, a key ending in a newline (`echo KEY | ansible-vault encrypt_string`) is refused before
    any rank is touched, and printed nowhere. The engine's key label is keyed with each rank's own root-only
    secret (never the plain or the former salted sha256 of the key); a rotated key, then no key, replaces both
    ranks."""
    pair = pair_b
    key = "sk-dspark-integration-7f3a9c0e51"
    token = "tok_mysite_4c1d8e2f9a7b3065"
    runs = tmp_path / "runs"
    newline = tmp_path / "newline.json"
    newline.write_text(json.dumps({"dspark_api_key": key + "\n", "dspark_preflight_wrapper_path": str(clean_tree)}))
    newline.chmod(0o600)
    before = {r.name: on_rank(r, ["docker", "ps", "-aq", "--no-trunc"]).stdout for r in pair.ranks}
    refused = dspark("provision", "--limit", pair.group, "-e", f"@{newline}", "-v", "--diff", artifacts=runs / "refused")
    assert refused.returncode != 0
    assert f"rank {pair.head.name}: dspark_api_key holds a line feed (\\n) at its end" in refused.stdout + refused.stderr
    assert key not in refused.stdout + refused.stderr
    assert "Take the pair's lock" not in refused.stdout, "a rank was touched before the key was refused"
    assert {r.name: on_rank(r, ["docker", "ps", "-aq", "--no-trunc"]).stdout for r in pair.ranks} == before
    secrets = tmp_path / "secrets.yml"
    # a start-up slow enough (4 s of weight loading) for the readiness wait to show its phases
    secrets.write_text(f"dspark_api_key: {key}\ndspark_preflight_wrapper_path: {clean_tree}\n"
                       f"dspark_engine_extra_env: {{DSPARK_SIM_STARTUP_DELAY_S: '4', MYSITE_TOKEN: {token}}}\n")
    secrets.chmod(0o600)
    with ProcessWatch(key) as watch:
        first = dspark("provision", "--limit", pair.group, "-e", f"@{secrets}", "-v", "--diff", artifacts=runs)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        # The operator watches the cold start: each rank's phase with the time waited, then the
        # READY line, then the gate's verdict, all in dspark's own output.
        out = first.stdout + first.stderr
        phase = re.search(rf"^\[sim02\] {pair.head.name} \d\d:\d\d:\d\d waited \d+/\d+ s; head loading weights \d+/48; "
                          r"worker \S", out, re.M)
        ready = re.search(rf"^\[sim02\] {pair.head.name} READY served=\S+ kv_cache_size_tokens=\d+ after \d+ s$", out, re.M)
        verdict = re.search(r"Gate \| Run the runtime gate suite \(its verdict is this task's result\) -- "
                            r"pair sim02: RUNTIME_GATE status=PASS errors=0", out)
        assert phase and ready and verdict, out[-5000:]
        assert phase.start() < ready.start() < verdict.start()
        between = started(pair)
        second = dspark("provision", "--limit", pair.group, "-e", f"@{secrets}", "-v", "--diff", artifacts=runs)
        assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
    assert started(pair) == between, "the converged re-run restarted an engine"
    rendered = dspark("render", "--limit", pair.group, "--profile", "production", "-e", f"@{secrets}", "--json",
                      artifacts=runs / "render")
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    shown = {r["host"]: r["env"] for r in json.loads(rendered.stdout)}
    assert shown[pair.head.name]["MYSITE_TOKEN"] == "<redacted>" and shown[pair.worker.name]["MYSITE_TOKEN"] == "<redacted>"
    assert list(runs.rglob("render.json")), "dspark render wrote no render.json"
    assert watch.seen > 1000, watch.seen  # the watch did read the process table during the runs
    assert watch.hits == {}, f"the API key was on a command line: {watch.hits}"
    run_dirs = sorted(p for p in runs.iterdir() if p.is_dir() and p.name not in ("refused", "render"))
    assert len(run_dirs) == 2, run_dirs
    events = list(run_dirs[1].rglob("job_events/*.json"))
    assert any("The container under the engine's name is the collection's own" in e.read_text() for e in events), \
        "no probe of the running engine before the re-run's changes"
    for f in runs.rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            assert key not in text, f"the API key is in the run record {f}"
            assert token not in text, f"the secret-named extra variable is in the run record {f}"
    for out in (refused, first, second, rendered):
        assert key not in out.stdout + out.stderr and token not in out.stdout + out.stderr
    for r in pair.ranks:
        doc = json.loads(on_rank(r, ["docker", "container", "inspect", "dspark_vllm"]).stdout)[0]
        assert key not in json.dumps([doc["Path"], doc["Args"]]) and token not in json.dumps([doc["Path"], doc["Args"]])
        assert f"VLLM_API_KEY={key}" in doc["Config"]["Env"]
        assert f"MYSITE_TOKEN={token}" in doc["Config"]["Env"]  # the engine does get it
        profile_files = on_rank(r, ["sh", "-c", "cat /etc/dspark/profiles/*"]).stdout
        assert key not in profile_files
        assert f"MYSITE_TOKEN={token}\n" in profile_files  # the rank's root-only env file holds what the engine gets
    evidence = Path(site()["dspark_evidence_dir"])
    scanned = 0
    for f, text in texts_under(evidence):  # the pair's runs are over; the other lanes' runs go on writing beside them
        scanned += 1
        assert key not in text and token not in text, f
    assert scanned and (evidence / pair.name / "runtime-gate.json").is_file(), "no evidence was scanned"
    assert gate(pair)["status"] == "PASS"
    url = f"http://{pair.head.mgmt_ip}:8888/v1/models"
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(url, timeout=10)
    assert denied.value.code == 401
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    labels = [json.loads(on_rank(r, ["docker", "container", "inspect", "dspark_vllm"]).stdout)[0]["Config"]["Labels"]
              for r in pair.ranks]
    assert all(key not in json.dumps(lb) for lb in labels)
    key_labels = [lb["io.gb10.dspark.api_key"] for lb in labels]
    plain = hashlib.sha256(key.encode()).hexdigest()
    former = hashlib.sha256(f"gb10.dspark:{labels[0]['io.gb10.dspark.pair']}:{key}".encode()).hexdigest()[:16]
    for value in key_labels:
        assert re.fullmatch(r"hmac-sha256:[0-9a-f]{32}", value) and plain[:16] not in value and former not in value
    assert key_labels[0] != key_labels[1]  # each rank keys the label with its own secret
    for r in pair.ranks:
        shown = on_rank(r, ["stat", "-c", "%a %U %F", "/var/lib/dspark/engine-label.key"]).stdout.strip()
        assert shown == "600 root regular file", (r.name, shown)
        rank_secret = on_rank(r, ["cat", "/var/lib/dspark/engine-label.key"]).stdout.strip()
        assert len(rank_secret) == 64
        for f in runs.rglob("*"):
            if f.is_file():
                assert rank_secret not in f.read_text(errors="replace"), f"{r.name}'s label secret is in {f}"
    # The key rotated: both ranks are replaced, under new labels, and answer the new key only.
    rotated = key + "-rotated"
    secrets.write_text(secrets.read_text().replace(key, rotated))
    before = started(pair)
    third = dspark("provision", "--limit", pair.group, "-e", f"@{secrets}", artifacts=runs)
    assert third.returncode == 0, third.stdout[-4000:] + third.stderr[-2000:]
    after = started(pair)
    assert all(after[n][0] != before[n][0] for n in before), "an engine kept the rotated key"
    relabelled = [json.loads(on_rank(r, ["docker", "container", "inspect", "dspark_vllm"]).stdout)[0]["Config"][
        "Labels"]["io.gb10.dspark.api_key"] for r in pair.ranks]
    assert all(re.fullmatch(r"hmac-sha256:[0-9a-f]{32}", v) for v in relabelled)
    assert set(relabelled).isdisjoint(key_labels)
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {rotated}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    # The key taken out of the inventory: both ranks are replaced, and the API is open again.
    before = started(pair)
    provision(pair, clean_tree, check=True)
    after = started(pair)
    assert all(after[n][0] != before[n][0] for n in before), "an engine kept the removed key"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
