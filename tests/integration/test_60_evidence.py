"""The evidence pack on the simulator: one folder per pair and run whose index lists every file
with its checksum (and SHA256SUMS verifies), with no control-node path and no API key in it; a run
from a dirty tree (allowed) with an experimental profile is marked invalid for publication."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest


from simhelpers import ROOT, newest_pack, playbook, runs, site

KEY = "sk-evidence-test-5b1e9c"
EXTRA_SECRET = "hunter2-evidence-77d1"  # a site's secret passed to the engine through extra_env


def index_rows(pack: Path) -> dict[str, str]:
    rows = {}
    for line in (pack / "index.md").read_text().splitlines():
        m = re.match(r"\| `([^`]+)` \| \w+ \| present \| \d+ \| ([0-9a-f]{64}) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


@pytest.mark.fault("secret-evidence-extra-env", "evidence-earlier-result")
def test_pack_lists_every_file_with_its_checksum_and_leaks_nothing(pair_a, clean_tree, host_vars):
    pair = pair_a
    for rank in (pair.head, pair.worker):
        host_vars(rank, {"dspark_api_key": KEY, "dspark_engine_extra_env": {"DB_PASSWD": EXTRA_SECRET}})
    # a failing guard report an earlier run left in the pair's folder: not this run's, so not in the pack
    planted = Path(site()["dspark_evidence_dir"]) / f"sim{pair.index:02d}" / "serving-guard.json"
    planted.parent.mkdir(parents=True, exist_ok=True)
    kept = planted.read_bytes() if planted.exists() else None
    planted.write_text(json.dumps({"status": "FAIL", "infra_failures": 3, "contract_failures": 5}) + "\n")
    before = runs(pair)
    try:
        playbook("provision.yml", clean_tree, "--limit", pair.group)
    finally:
        if kept is None:
            planted.unlink(missing_ok=True)
        else:
            planted.write_bytes(kept)
    pack = newest_pack(pair, before)
    files = sorted(str(p.relative_to(pack)) for p in pack.rglob("*") if p.is_file())
    assert "serving-guard.json" not in files
    assert {"pin.json", "readiness.json", "runtime-gate.json", "wrapper-tree.json", "inspect/head.json",
            "inspect/worker.json", "profiles/head/production.env", "profiles/worker/production.compilation-config.json",
            "SHA256SUMS", "index.md", "index.json", "logs/head.log", "logs/worker.log"} <= set(files)
    # each rank's engine log, its last lines in the order written: the worker's holds its wait for the head
    head_log = (pack / "logs" / "head.log").read_text().splitlines()
    worker_log = (pack / "logs" / "worker.log").read_text()
    assert 0 < len(head_log) <= 500 and not head_log[0].startswith("# no log line")
    assert "Waiting for the head node at " in worker_log, worker_log[-2000:]
    listed = index_rows(pack)
    for name in files:
        if name in ("index.md", "SHA256SUMS"):
            continue
        assert listed[name] == hashlib.sha256((pack / name).read_bytes()).hexdigest(), name
    assert subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=pack, check=False).returncode == 0
    for path in pack.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert KEY not in text, path
            assert EXTRA_SECRET not in text, path
            assert str(ROOT) not in text and str(clean_tree) not in text, path
    env = json.loads((pack / "inspect" / "head.json").read_text())[0]["Config"]["Env"]
    assert "VLLM_API_KEY=<redacted>" in env and "DB_PASSWD=<redacted>" in env
    assert "DB_PASSWD=<redacted>" in (pack / "profiles" / "head" / "production.env").read_text()
    index = json.loads((pack / "index.json").read_text())
    assert index["invalid_for_publish"] is False, index["reasons"]
    assert index["results"]["guard"]["ran"] is False, index["results"]


def test_dirty_tree_and_experimental_profile_are_invalid_for_publication(pair_a, clean_tree, tmp_path):
    pair = pair_a
    dirty = tmp_path / "dirty" / "gb10-dspark"
    shutil.copytree(clean_tree, dirty, symlinks=True)
    (dirty / "README.md").write_text((dirty / "README.md").read_text() + "\nlocal edit\n")
    before = runs(pair)
    playbook("provision.yml", dirty, "--limit", pair.group, "-e", "dspark_preflight_allow_dirty_tree=true",
             "-e", '{"dspark_profile_overrides": {"max_num_seqs": 8}, "dspark_profile_allow_experimental": true}')
    pack = newest_pack(pair, before)
    index = json.loads((pack / "index.json").read_text())
    text = " | ".join(index["reasons"])
    assert index["invalid_for_publish"] is True
    assert "is dirty (allowed by allow_dirty)" in text
    assert "profile production is experimental" in text and "max_num_seqs" in text
    md = (pack / "index.md").read_text()
    assert "`invalid_for_publish: true`" in md and "is dirty" in md
    assert str(dirty) not in (pack / "wrapper-tree.json").read_text()
    playbook("provision.yml", clean_tree, "--limit", pair.group)  # back to the qualified profile, clean tree
