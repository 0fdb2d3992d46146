"""Rows of the fault matrix (fault_matrix.yml) on the simulator that need a serving pair: profile
invariants and bad input refused before anything changes, a master port held by someone else, a
rank's dockerd restarted under a serving pair, a control node killed mid-provision, and the
engine container's privileges and mounts.

Pair 1 (pair_a) is provisioned first; every refusal is checked against a snapshot of both ranks
(images, containers with their IDs, start times and restart counts, files)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from simhelpers import (INVENTORY, ROOT, control_node_dies, on_rank, playbook, site, snapshot, snapshot_changes,
                        start_dockerd, stop_dockerd, wait_for)


def provision(pair, tree, *extra: str, check: bool = False, env: dict | None = None):
    return playbook("provision.yml", tree, "--limit", pair.group, *extra, check=check, env=env)


def flat(res) -> str:
    return " ".join((res.stdout + res.stderr).split())


def profiles(pair) -> dict:
    """Each rank's engine: (profile label, status), or (None, "absent")."""
    out = {}
    for r in pair.ranks:
        res = on_rank(r, ["docker", "container", "inspect", "dspark_vllm"], check=False)
        out[r.name] = (None, "absent")
        if res.returncode == 0:
            doc = json.loads(res.stdout)[0]
            out[r.name] = (doc["Config"]["Labels"].get("io.gb10.dspark.profile"), doc["State"]["Status"])
    return out


LOCK = "/run/dspark/lock/pair.lock"
OLD_LOCK = "/run/lock/dspark/pair.lock"  # where earlier versions kept it: /run/lock is world-writable


def locked(pair) -> bool:
    return on_rank(pair.head, ["test", "-e", LOCK], check=False).returncode == 0


def refused(pair, tree, *extra: str, expect: list[str], env: dict | None = None) -> str:
    before = {r.name: snapshot(r) for r in pair.ranks}
    res = provision(pair, tree, *extra, env=env)
    text = flat(res)
    assert res.returncode != 0, res.stdout[-4000:]
    for needle in expect:
        assert " ".join(needle.split()) in text, f"{needle!r} not in output:\n{res.stdout[-6000:]}"
    assert {r.name: snapshot(r) for r in pair.ranks} == before, "a refused run changed a rank"
    assert not locked(pair), "a failed run left the pair's lock behind"
    return text


def background_provision(pair, tree, *extra: str) -> subprocess.Popen:
    """provision.yml in its own process group, so that a test can kill the whole run at once."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.Popen([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(INVENTORY),
                             "playbooks/provision.yml", "-e", f"dspark_preflight_wrapper_path={tree}",
                             "--limit", pair.group, *extra], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="module")
def served(pair_a, clean_tree):
    pair = pair_a
    provision(pair, clean_tree, check=True)
    return pair


@pytest.mark.fault("profile-compile-mode", "lock-released")
def test_compilation_mode_3_is_refused(served, clean_tree):
    refused(served, clean_tree, "-e", json.dumps({"dspark_profile_overrides": {"compilation_config": {"mode": 3}},
                                                  "dspark_profile_allow_experimental": True}),
            expect=["compilation_config.mode is 3, expected 0"])


@pytest.mark.fault("tags-out-of-order")
def test_a_tag_selection_out_of_the_fail_closed_order_is_refused_and_preflight_alone_changes_nothing(served, clean_tree):
    refused(served, clean_tree, "--skip-tags", "preflight",
            expect=["the tags select the phases image, profile, engine, gate of preflight, image, profile, engine, "
                    "gate, without preflight"])
    before = {r.name: snapshot(r) for r in served.ranks}
    res = provision(served, clean_tree, "--tags", "preflight")
    assert res.returncode == 0, res.stdout[-4000:]
    assert "Preflight | The rank has the pinned GPU, its fabric links are Up and it holds the pinned model checkpoint" in res.stdout
    assert "Engine | Plan" not in res.stdout and "Gate | Run" not in res.stdout and "Image | Probe" not in res.stdout
    assert {r.name: snapshot(r) for r in served.ranks} == before
    assert not locked(served)


@pytest.mark.fault("profile-batched-tokens")
def test_16384_batched_tokens_on_long_1m_is_refused(served, clean_tree):
    refused(served, clean_tree, "-e", json.dumps({"dspark_profile": "long-1m",
                                                  "dspark_profile_overrides": {"max_num_batched_tokens": 16384},
                                                  "dspark_profile_allow_experimental": True}),
            expect=["max_num_batched_tokens is 16384, expected at most 8192"])


@pytest.mark.fault("profile-breakable-env")
def test_the_breakable_env_var_on_production_is_refused(served, clean_tree):
    refused(served, clean_tree, "-e", json.dumps({"dspark_profile_overrides": {"env": {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}},
                                                  "dspark_profile_allow_experimental": True}),
            expect=["env.VLLM_USE_BREAKABLE_CUDAGRAPH is 1", "the runtime gate fails on any value"])


@pytest.mark.fault("bad-profile")
@pytest.mark.parametrize("overrides,expect", [
    ({"max_num_seqs": "many"}, "max_num_seqs is many, expected a positive integer"),
    ({"colour": "blue"}, "override colour is blue"),
    ({"compilation_config": '{"mode": 0, "cudagraph_mode": '}, "expected a mapping"),
])
def test_bad_profile_overrides_are_refused(served, clean_tree, overrides, expect):
    refused(served, clean_tree, "-e", json.dumps({"dspark_profile_overrides": overrides,
                                                  "dspark_profile_allow_experimental": True}),
            expect=[expect])


def _pin_file(tmp_path: Path, change) -> Path:
    import yaml

    pin = yaml.safe_load((INVENTORY / "group_vars" / "all" / "pin.yml").read_text())
    change(pin["dspark_pin"])
    path = tmp_path / "pin.yml"
    path.write_text(yaml.safe_dump(pin))
    return path


@pytest.mark.fault("bad-pin")
def test_a_pin_with_an_unknown_key_or_a_wrong_type_is_refused(served, clean_tree, tmp_path):
    unknown = _pin_file(tmp_path, lambda p: p.update(colour="blue"))
    refused(served, clean_tree, "-e", f"@{unknown}", expect=["dspark_pin has unknown keys: colour"])
    wrong = _pin_file(tmp_path, lambda p: p.update(model_shard_count="many"))
    refused(served, clean_tree, "-e", f"@{wrong}", expect=["expected_shard_count", "is of type str and we were unable to convert"])


@pytest.mark.fault("bad-pin")
def test_a_malformed_pin_file_is_refused(served, clean_tree, tmp_path):
    bad = tmp_path / "pin.yml"
    bad.write_text("dspark_pin:\n  image_id: [sha256:1\n  release: v026\n")
    refused(served, clean_tree, "-e", f"@{bad}", expect=[str(bad)])


@pytest.mark.fault("pin-duplicate-key")
def test_a_key_given_twice_in_the_pin_or_the_site_file_is_refused_whatever_ansible_cfg_says(served, clean_tree, tmp_path):
    ignore = {"ANSIBLE_DUPLICATE_YAML_DICT_KEY": "ignore"}  # Ansible alone would keep the last value, silently
    pinned = (INVENTORY / "group_vars" / "all" / "pin.yml").read_text().splitlines()
    at = next(n for n, line in enumerate(pinned) if line.strip().startswith("image_id:"))
    indent = pinned[at][:len(pinned[at]) - len(pinned[at].lstrip())]
    pin = tmp_path / "pin.yml"  # the wrong image_id first, the pinned one last: last-wins would pass it
    pin.write_text("\n".join([*pinned[:at], f"{indent}image_id: sha256:{'e' * 64}", *pinned[at:]]) + "\n")
    text = refused(served, clean_tree, "-e", f"@{pin}", env=ignore,
                   expect=[f'{pin}: key "image_id" is given twice, at lines {at + 1} and {at + 2}'])
    assert "e" * 64 not in text  # a value is never part of the refusal
    site_file = INVENTORY / "group_vars" / served.group / "site.yml"
    site_file.parent.mkdir(exist_ok=True)
    try:
        port = site()["dspark_api_port"]
        site_file.write_text(f"dspark_api_port: {port}\ndspark_container_name: dspark_vllm\ndspark_api_port: {port}\n")
        refused(served, clean_tree, env=ignore,
                expect=[f'{site_file}: key "dspark_api_port" is given twice, at lines 1 and 3'])
    finally:
        site_file.unlink(missing_ok=True)
        site_file.parent.rmdir()


@pytest.mark.fault("master-port")
def test_a_master_port_held_by_another_process_is_refused(served, clean_tree):
    port = site()["dspark_master_port"]
    head = served.head
    on_rank(head, ["docker", "stop", "dspark_vllm"])  # our own engine may hold the port; a stranger may not
    # SO_REUSEADDR: the stopped engine's rendezvous connections may sit in TIME_WAIT on the port.
    listen = (f"import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
              f"s.bind(('0.0.0.0', {port})); s.listen(); time.sleep(900)")
    on_rank(head, ["sh", "-c", 'setsid python3 -c "$1" </dev/null >/dev/null 2>&1 & echo $! >/run/dspark-test-listener.pid',
                   "sh", listen])
    try:
        wait_for(lambda: f":{port} " in on_rank(head, ["ss", "-Htln"]).stdout, 20, what=f"a listener on {port}")
        refused(served, clean_tree,
                expect=[f"rank {head.name}: master port {port} is in use by another process, expected free"])
    finally:
        on_rank(head, ["sh", "-c", "kill $(cat /run/dspark-test-listener.pid)"], check=False)
    provision(served, clean_tree, check=True)  # the stopped head is replaced, with its worker
    assert set(profiles(served).values()) == {("production", "running")}


@pytest.mark.fault("dockerd-restart")
def test_a_restarted_dockerd_is_down_in_the_audit_and_the_next_provision_recovers(served, clean_tree, tmp_path):
    stop_dockerd(served.worker)
    start_dockerd(served.worker)
    audit = playbook("audit.yml", clean_tree, "--limit", served.group, "-e", f"dspark_audit_report_dir={tmp_path}",
                     check=False)
    assert audit.returncode != 0
    doc = json.loads((tmp_path / "audit.json").read_text())
    verdicts = {p["pair"]: p["verdict"] for p in doc["pairs"]}
    assert verdicts == {served.group.removeprefix("pair_"): "DOWN"}, verdicts
    provision(served, clean_tree, check=True)
    assert set(profiles(served).values()) == {("production", "running")}
    again = playbook("audit.yml", clean_tree, "--limit", served.group, "-e", f"dspark_audit_report_dir={tmp_path}",
                     check=False)
    assert again.returncode == 0, again.stdout[-3000:]


@pytest.mark.fault("lock-concurrent", "lock-released")
def test_a_second_provision_of_a_busy_pair_is_refused_by_the_lock(served, clean_tree, host_vars):
    for r in served.ranks:
        host_vars(r, {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "12"}})
    first = background_provision(served, clean_tree, "-e", "dspark_profile=breakable-ab")
    try:
        wait_for(lambda: locked(served) or first.poll() is not None, 300, what="the first run to take the lock")
        assert first.poll() is None, "the first run ended before it took the lock"
        second = provision(served, clean_tree)
        text = flat(second)
        assert second.returncode != 0
        assert f"pair {served.group.removeprefix('pair_')}: lock {LOCK} on {served.head.name} is held by run" in text, text[-3000:]
        assert "expected a free lock" in text
        recap = second.stdout.split("PLAY RECAP")[-1]
        assert all("changed=0" in ln for ln in recap.splitlines() if ln.startswith("sim")), recap
        out, _unused = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert first.returncode == 0, out[-4000:]
    assert set(profiles(served).values()) == {("breakable-ab", "running")}
    assert not locked(served)


@pytest.mark.fault("lock-pubsuite")
def test_the_publication_suite_waits_for_no_one_else_s_lock(served, clean_tree):
    """The suite swaps engines through the same locked chain as provision: a lock held by a run of
    another control node refuses it before anything changes, and that run's lock stays."""
    pair = served.group.removeprefix("pair_")
    holder = {"pair": pair, "run_id": "20261203T000000Z-1", "control_host": "ops-laptop", "control_pid": 4242,
              "control_pid_start": 1, "playbook": "Provision GB10 pairs", "user": "ops", "acquired": "2026-12-03T00:00:00Z"}
    on_rank(served.head, ["sh", "-c", f"mkdir -p {os.path.dirname(LOCK)} && cat > {LOCK}"], check=True,
            input_text=json.dumps(holder))
    try:
        before = {r.name: snapshot(r) for r in served.ranks}
        res = playbook("pubsuite.yml", clean_tree, "--limit", served.group, "-e", "dspark_pubsuite_id=locked", check=False)
        text = flat(res)
        assert res.returncode != 0, res.stdout[-4000:]
        assert (f"pair {pair}: lock {LOCK} on {served.head.name} is held by run 20261203T000000Z-1 (pid 4242 on ops-laptop"
                in text), text[-4000:]
        assert {r.name: snapshot(r) for r in served.ranks} == before, "a refused suite changed a rank"
        assert json.loads(on_rank(served.head, ["cat", LOCK]).stdout) == holder, "the other run's lock was touched"
    finally:
        on_rank(served.head, ["rm", "-f", LOCK], check=False)


@pytest.mark.fault("interrupted-provision", "lock-stale")
def test_a_killed_provision_leaves_a_stale_lock_that_is_reported_and_a_rerun_converges(served, clean_tree, host_vars):
    for r in served.ranks:
        host_vars(r, {"dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "12"}})
    run = background_provision(served, clean_tree)  # breakable-ab -> production, both ranks replaced
    try:
        wait_for(lambda: profiles(served).get(served.worker.name) == ("production", "running")
                 or run.poll() is not None, 300, what="the worker to be replaced")
        assert run.poll() is None, "the run ended before the worker was replaced"
    finally:
        control_node_dies(run, served)  # no always section runs
    assert locked(served)
    before = {r.name: snapshot(r) for r in served.ranks}
    stale = provision(served, clean_tree)
    text = flat(stale)
    assert stale.returncode != 0
    assert f"lock {LOCK} on {served.head.name} is stale: held by run" in text, text[-3000:]
    assert f"(pid {run.pid} on " in text and "dspark_lock_break_stale=true" in text
    after = {r.name: snapshot(r) for r in served.ranks}
    assert after == before, snapshot_changes(before, after)
    assert locked(served)
    provision(served, clean_tree, "-e", "dspark_lock_break_stale=true", check=True)
    assert set(profiles(served).values()) == {("production", "running")}
    assert not locked(served)
    again = provision(served, clean_tree, check=True)
    recap = again.stdout.split("PLAY RECAP")[-1]
    assert all("changed=0" in ln for ln in recap.splitlines() if ln.startswith("sim")), recap


def engines(pair) -> dict:
    """Each rank's engine container: (ID, start time, status), or None."""
    out = {}
    for r in pair.ranks:
        res = on_rank(r, ["docker", "container", "inspect", "dspark_vllm"], check=False)
        doc = json.loads(res.stdout)[0] if res.returncode == 0 else None
        out[r.name] = (doc["Id"], doc["State"]["StartedAt"], doc["State"]["Status"]) if doc else None
    return out


METRICS_DROP = ["INPUT", "-i", "lo", "-p", "tcp", "--dport", "8888", "-m", "string", "--string", "GET /metrics",
                "--algo", "bm", "-j", "DROP"]


@pytest.mark.fault("in-flight-unknown")
def test_a_head_whose_metrics_time_out_is_not_stopped_unless_forced(served, clean_tree):
    """The head's /metrics stops answering (its requests are dropped inside the head's network
    namespace; /v1/models still answers): its load is unknown, and unknown is not idle."""
    before = engines(served)
    assert all(v and v[2] == "running" for v in before.values()), before
    on_rank(served.head, ["iptables", "-I", *METRICS_DROP])
    try:
        res = provision(served, clean_tree, "-e", "dspark_profile=long-1m")
        text = flat(res)
        assert res.returncode != 0, res.stdout[-4000:]
        assert (f"rank {served.head.name}: cannot tell how many requests the head is serving (/metrics: took the "
                "request but sent no answer within ") in text, text[-4000:]
        assert ("the engine is stalled (hung) (timed out)): running unknown, waiting unknown; expected both readable "
                "and 0 (vllm:num_requests_running, vllm:num_requests_waiting) before stopping its engine") in text, \
            text[-4000:]
        assert engines(served) == before, "an engine was stopped although its load could not be read"
        assert not locked(served)
        # Forced (teardown shares the engine role's stop): the operator's word stops it, with a warning.
        forced = playbook("teardown.yml", clean_tree, "--limit", served.group, "-e", "dspark_engine_force_replace=true",
                          check=False)
        assert forced.returncode == 0, forced.stdout[-4000:]
        assert "(forced: stopping it anyway)" in flat(forced)
        assert all(v is None for v in engines(served).values())
    finally:
        on_rank(served.head, ["iptables", "-D", *METRICS_DROP], check=False)
    provision(served, clean_tree, check=True)  # the pair serves again for the tests after this one


@pytest.mark.fault("teardown-model-guard")
def test_teardown_refuses_to_remove_a_folder_that_is_not_the_pinned_checkpoint(served, clean_tree, host_vars):
    host_vars(served.worker, {"dspark_model_dir": "/srv/dspark"})
    before = {r.name: snapshot(r) for r in served.ranks}
    res = playbook("teardown.yml", clean_tree, "--limit", served.group, "-e", "dspark_teardown_remove_model=true",
                   check=False)
    text = flat(res)
    assert res.returncode != 0, res.stdout[-4000:]
    assert f"rank {served.worker.name}: refusing to remove /srv/dspark: its revision marker" in text, text[-4000:]
    assert {r.name: snapshot(r) for r in served.ranks} == before, "a refused teardown changed a rank"
    assert all(v == ("production", "running") for v in profiles(served).values())
    assert not locked(served)


@pytest.mark.fault("lock-folder-foreign")
def test_a_lock_folder_taken_by_another_user_is_refused(served, clean_tree):
    """A user who owns the lock folder could delete a held lock: the run refuses the folder. (Only root can
    make /run/dspark/lock; the folder is handed to another user here, as a careless root or a
    dspark_lock_path pointed at a world-writable place would.)"""
    folder = os.path.dirname(LOCK)
    on_rank(served.head, ["sh", "-c", f"mkdir -p {folder} && chown 65534:65534 {folder} && chmod 0777 {folder}"])
    try:
        before = engines(served)
        res = provision(served, clean_tree)
        text = flat(res)
        assert res.returncode != 0, res.stdout[-4000:]
        assert f"lock folder {folder}: owned by uid 65534" in text, text[-4000:]
        assert engines(served) == before
        assert not locked(served)
    finally:
        on_rank(served.head, ["sh", "-c", f"chown 0:0 {folder} && chmod 0755 {folder}"], check=False)


@pytest.mark.fault("lock-folder-squatted")
def test_a_squatted_old_lock_folder_no_longer_blocks_provisioning(served, clean_tree):
    """A local user made the old lock folder first (world-writable /run/lock), and even wrote a lock record
    naming a live process into it: earlier versions refused every run; now the run goes on and says how
    to remove the folder."""
    folder = os.path.dirname(OLD_LOCK)
    squat = {"pair": served.group.removeprefix("pair_"), "run_id": "squatter-1", "control_host": served.head.name,
             "control_pid": 1, "control_pid_start": 1, "playbook": "x", "user": "nobody", "acquired": "2026-12-05T00:00:00Z"}
    on_rank(served.head, ["sh", "-c", f"mkdir -p {folder} && cat > {OLD_LOCK} && chown -R 65534:65534 {folder} "
                                      f"&& chmod 0777 {folder}"], input_text=json.dumps(squat))
    try:
        res = provision(served, clean_tree, check=False)
        text = flat(res)
        assert res.returncode == 0, res.stdout[-4000:]
        assert (f"the old lock folder {folder}: owned by uid 65534 mode 0777, expected a directory owned by uid 0 and "
                f"not writable by group or others; no run of gb10.dspark used it, so it was ignored. Remove it: rm -rf "
                f"{folder}") in text, text[-4000:]
        assert not locked(served), "the run left its lock behind"
        assert json.loads(on_rank(served.head, ["cat", OLD_LOCK]).stdout) == squat, "the old place was written"
    finally:
        on_rank(served.head, ["rm", "-rf", folder], check=False)


@pytest.mark.fault("lock-legacy-held")
def test_a_run_of_the_previous_version_holding_the_old_lock_keeps_the_pair(served, clean_tree):
    """Mid-upgrade: a run of the previous version (from another control node) holds the lock where that
    version keeps it, in a folder root made: the new run is refused before anything changes, naming it."""
    pair = served.group.removeprefix("pair_")
    holder = {"pair": pair, "run_id": "20261204T000000Z-7", "control_host": "ops-laptop", "control_pid": 4242,
              "control_pid_start": 1, "playbook": "Provision GB10 pairs", "user": "ops", "acquired": "2026-12-04T00:00:00Z"}
    folder = os.path.dirname(OLD_LOCK)
    on_rank(served.head, ["sh", "-c", f"mkdir -p -m 0755 {folder} && cat > {OLD_LOCK}"], input_text=json.dumps(holder))
    try:
        refused(served, clean_tree, expect=[
            f"pair {pair}: lock {OLD_LOCK} (where earlier versions of gb10.dspark keep it) on {served.head.name} is held "
            f"by run 20261204T000000Z-7 (pid 4242 on ops-laptop, Provision GB10 pairs, since 2026-12-04T00:00:00Z); "
            "expected a free lock. A run of an earlier version is working on this pair; nothing was changed.",
            f"if no run is active on ops-laptop, remove {OLD_LOCK} on {served.head.name} by hand."])
        assert json.loads(on_rank(served.head, ["cat", OLD_LOCK]).stdout) == holder, "the old run's lock was touched"
    finally:
        on_rank(served.head, ["rm", "-rf", folder], check=False)


@pytest.mark.fault("container-least-privilege")
def test_engine_containers_are_not_privileged_and_mount_model_and_manifest_read_only(served):
    import yaml

    manifest = yaml.safe_load((INVENTORY / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]["runtime_manifest_path"]
    for r in served.ranks:
        doc = json.loads(on_rank(r, ["docker", "container", "inspect", "dspark_vllm"]).stdout)[0]
        host = doc["HostConfig"]
        assert host["Privileged"] is False, r.name
        assert sorted(host.get("CapAdd") or []) in (["IPC_LOCK"], ["CAP_IPC_LOCK"]), host.get("CapAdd")
        assert host["IpcMode"] == "private", host["IpcMode"]  # a large /dev/shm, not the host's IPC
        assert "no-new-privileges:true" in (host.get("SecurityOpt") or []), host.get("SecurityOpt")
        assert not host.get("Devices") or all("nvidia" in d["PathOnHost"] for d in host["Devices"]), host["Devices"]
        mounts = {m["Destination"]: m for m in doc["Mounts"]}
        assert mounts["/model"]["RW"] is False, r.name
        assert mounts[manifest]["RW"] is False, r.name
        writable = sorted(d for d, m in mounts.items() if m["RW"])
        assert all(d.startswith("/cache") for d in writable), writable
