"""playbooks/niah.yml on the simulator: the pair is switched to long-1m, the 25/50/90 % ladder
passes against the stand-in, rows record the KV cache, the evidence is packed, and the pair goes
back to production when asked. With a KV cache smaller than the window, the depths it cannot
hold are ERROR rows (no request sent); after an interruption (the engine dies mid-ladder) the
next run sends only the depths that were not finished."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from simhelpers import INVENTORY, container_state, control_node_dies, on_rank, playbook, site, snapshot

LONG_WINDOW = 1_048_576
DEPTHS = [262_128, 524_256, 943_660]


def niah_runs(pair) -> list[Path]:
    root = Path(site()["dspark_evidence_dir"]) / f"sim{pair.index:02d}" / "niah"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def written_since(run: Path, started: float) -> bool:
    """The run's summary was written at or after ``started`` (by the test's own run)."""
    summary_file = run / "niah.json"
    return summary_file.exists() and summary_file.stat().st_mtime >= started


def summary(run: Path) -> dict:
    return json.loads((run / "niah.json").read_text())


def labels(rank) -> dict:
    out = on_rank(rank, ["docker", "container", "inspect", "dspark_vllm"]).stdout
    return json.loads(out)[0]["Config"]["Labels"]


def outside_the_ladder(snap: dict) -> dict:
    """A rank's snapshot without the running ladder's own files (it writes its rows as it goes)."""
    return dict(snap, files=[f for f in snap["files"] if not f.startswith("/var/lib/dspark/niah")])


def flat(res) -> str:
    return " ".join((res.stdout + res.stderr).split())


def test_niah_passes_at_three_depths_and_restores_production(pair_a, clean_tree):
    pair = pair_a
    started = time.time()  # an earlier make test in this checkout may have left runs in the evidence
    playbook("provision.yml", clean_tree, "--limit", pair.group)
    assert labels(pair.head)["io.gb10.dspark.profile"] == "production"
    res = playbook("niah.yml", clean_tree, "--limit", pair.group, "-e", "dspark_niah_restore_profile=production",
                   "-e", "dspark_niah_poll_interval=1")
    out = flat(res)
    assert "NIAH PASS" in out and "depth 943660" in out  # the progress lines and the verdict
    runs = [r for r in niah_runs(pair) if r.name.startswith("long-1m-") and written_since(r, started)]
    assert len(runs) == 1
    doc = summary(runs[0])
    assert doc["status"] == "PASS" and doc["max_model_len"] == LONG_WINDOW
    assert doc["depths"] == DEPTHS and [r["status"] for r in doc["rows"]] == ["PASS"] * 3
    assert doc["kv_cache_size_tokens"] >= LONG_WINDOW and doc["kv_below_window"] is False
    for row in doc["rows"]:
        assert row["prompt_tokens_constructed"] == row["depth"]
        assert row["usage"]["prompt_tokens"] == row["depth"]  # the server counted exactly the constructed prompt
        assert len(row["prompt_sha256"]) == 64 and row["elapsed_s"] >= 0
        assert (runs[0] / f"depth-{row['depth']}.json").exists()
    # back on production, one engine per rank, and the rows stay on the head for a resume
    assert labels(pair.head)["io.gb10.dspark.profile"] == "production"
    assert labels(pair.worker)["io.gb10.dspark.profile"] == "production"
    assert container_state(pair.head)["Running"] and container_state(pair.worker)["Running"]
    listing = on_rank(pair.head, ["ls", f"/var/lib/dspark/niah/{runs[0].name}"]).stdout.split()
    assert {"niah.json", "progress.json", "depth-262128.json"} <= set(listing)


def test_kv_smaller_than_the_window_and_resume_after_an_interruption(pair_b, clean_tree, host_vars):
    pair = pair_b
    env = {"DSPARK_SIM_STARTUP_DELAY_S": "1", "DSPARK_SIM_KV_TOKENS": "600000", "DSPARK_SIM_KV_OVERCOMMIT": "1"}
    host_vars(pair.worker, {"dspark_engine_extra_env": env})
    # the head's engine dies after 4 generation requests - the gate's three canaries and the first
    # depth: the ladder is interrupted at the second depth
    host_vars(pair.head, {"dspark_engine_extra_env": dict(env, DSPARK_SIM_FAULT="die_after_requests",
                                                          DSPARK_SIM_DIE_AFTER_REQUESTS="4")})
    started = time.time()  # an earlier make test in this checkout may have left runs in the evidence
    first = playbook("niah.yml", clean_tree, "--limit", pair.group, "-e", "dspark_niah_poll_interval=1",
                     "-e", "dspark_niah_request_timeout=60", check=False)
    assert first.returncode != 0
    runs = [r for r in niah_runs(pair) if r.name.startswith("long-1m-") and written_since(r, started)]
    assert len(runs) == 1
    doc = summary(runs[0])
    assert doc["status"] == "ERROR" and doc["kv_cache_size_tokens"] == 600_000 and doc["kv_below_window"] is True
    d1, d2, d3 = doc["rows"]
    assert d1["status"] == "PASS" and d2["status"] == "ERROR" and d2["kind"] == "infra"
    assert d3["status"] == "ERROR"
    assert "NIAH ERROR" in flat(first)
    d1_file = runs[0] / "depth-262128.json"
    d1_row = json.loads(d1_file.read_text())

    # the next run restarts the dead engine (same profile), resumes: depth 1 is not sent again,
    # depth 2 runs, depth 3 cannot fit the 600,000-token KV cache and is an ERROR row unsent
    second = playbook("niah.yml", clean_tree, "--limit", pair.group, "-e", "dspark_niah_poll_interval=1",
                      "-e", "dspark_niah_request_timeout=60", check=False)
    assert second.returncode != 0  # depth 3 cannot pass on this cache
    doc = summary(runs[0])
    assert doc["resumed"] == [262_128]
    assert 524_256 in doc["ran"] and 262_128 not in doc["ran"]
    d1, d2, d3 = doc["rows"]
    assert d1 == d1_row  # the finished row is kept as it was
    assert d2["status"] == "PASS"
    assert d3["status"] == "ERROR" and d3["kind"] == "capacity" and "600000" in d3["reason"].replace(",", "")
    assert d3["http_status"] is None  # never sent


@pytest.mark.fault("lock-niah")
def test_an_interrupted_control_node_reattaches_and_restarts_nothing(pair_a, clean_tree, host_vars):
    import os
    import subprocess
    import sys
    import time

    from simhelpers import ROOT

    pair = pair_a
    # a code of its own gives this run its own key: the first test's finished rows (same profile,
    # same image) would otherwise be resumed and nothing would run long enough to interrupt
    CODE = "GB10-NIAH-INT3"
    # every token the ladder generates takes 2 s, so it outlasts both the interruption and the
    # refused provision below; only prompts holding the code are slowed (the gate's are not)
    slow = {"DSPARK_SIM_STARTUP_DELAY_S": "1", "DSPARK_SIM_TOKEN_DELAY_S": "2", "DSPARK_SIM_TOKEN_DELAY_MATCH": CODE}
    host_vars(pair.head, {"dspark_engine_extra_env": slow})
    host_vars(pair.worker, {"dspark_engine_extra_env": slow})
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1")
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(INVENTORY), "playbooks/niah.yml",
            "--limit", pair.group, "-e", f"dspark_preflight_wrapper_path={clean_tree}", "-e", "dspark_niah_poll_interval=1",
            "-e", f"dspark_niah_code={CODE}"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    seen = []
    deadline = time.monotonic() + 600
    for line in proc.stdout:
        seen.append(line)
        if "NIAH running: depth" in line or time.monotonic() > deadline:
            break
    assert any("NIAH running: depth" in line for line in seen), "".join(seen[-40:])
    control_node_dies(proc, pair, look=outside_the_ladder)  # mid-ladder: the ladder runs on
    engine = (container_state(pair.head)["StartedAt"], container_state(pair.worker)["StartedAt"])

    # While the ladder runs on, a provision of the pair is refused before anything changes.
    before = {r.name: outside_the_ladder(snapshot(r)) for r in pair.ranks}
    refused = playbook("provision.yml", clean_tree, "--limit", pair.group, check=False)
    text = flat(refused)
    assert refused.returncode != 0, text[-4000:]
    assert f"rank {pair.head.name} (head of pair sim{pair.index:02d}): a NIAH ladder is running in" in text, text[-4000:]
    assert "expected none" in text and "/long-1m-" in text, text[-4000:]
    after = {r.name: outside_the_ladder(snapshot(r)) for r in pair.ranks}
    assert after == before, "a provision refused for a running ladder changed a rank"

    again = playbook("niah.yml", clean_tree, "--limit", pair.group, "-e", "dspark_niah_poll_interval=1",
                     "-e", f"dspark_niah_code={CODE}")
    out = flat(again)
    assert "a NIAH run is in progress on the head; the pair is not touched" in out
    assert (container_state(pair.head)["StartedAt"], container_state(pair.worker)["StartedAt"]) == engine
    run = max((r for r in niah_runs(pair) if r.name.startswith("long-1m-")), key=lambda r: (r / "niah.json").stat().st_mtime)
    doc = summary(run)
    assert doc["code"] == CODE
    assert doc["status"] == "PASS" and doc["ran"] == DEPTHS and doc["resumed"] == []  # one job did every depth
