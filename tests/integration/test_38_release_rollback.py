"""Back to the previous release on the simulator: a pair provisioned to the next release (sim-v027) records it as
current and the inventory's (sim-v026) as previous on both ranks, keeps the previous image, and
`dspark rollback --to previous` returns it to sim-v026 with nothing loaded, pulled, tagged or removed, gated, the
record swapped. A pair whose ranks' records disagree, or that has no previous release, is refused before anything
changes. The pair ends as the lane found it: the inventory's release, serving."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simhelpers import INVENTORY, ROOT, on_rank, playbook, site, snapshot
from dspark_sim import layout

RECORD = "/var/lib/dspark/release.json"
NEXT = layout.RELEASES_DIR / "sim-v027.yml"


def pin() -> dict:
    return yaml.safe_load((INVENTORY / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]


def record(rank) -> dict:
    return json.loads(on_rank(rank, ["cat", RECORD]).stdout)


def write_record(rank, doc: dict) -> None:
    on_rank(rank, ["sh", "-c", f"cat > {RECORD}"], input_text=json.dumps(doc))


def image_of(rank) -> str:
    return on_rank(rank, ["docker", "inspect", "--format", "{{.Image}}", "dspark_vllm"]).stdout.strip()


def gate(pair) -> dict:
    return json.loads((Path(site()["dspark_evidence_dir"]) / f"sim{pair.index:02d}" / "runtime-gate.json").read_text())


def events_since(rank, since: str) -> list[str]:
    out = on_rank(rank, ["docker", "events", "--since", since, "--until", "0s", "--filter", "type=image",
                         "--format", "{{.Action}} {{.Actor.ID}}"]).stdout
    return [line for line in out.splitlines() if line.strip()]


def dspark(*args: str, artifacts: Path) -> subprocess.CompletedProcess:
    """The tree's own `dspark` (cli/ of the checkout under test), as an operator runs it."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               PYTHONPATH=os.pathsep.join([str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", "dspark_cli.main", *args, "--inventory", str(INVENTORY),
                           "--artifacts", str(artifacts)], cwd=ROOT, env=env, text=True, capture_output=True,
                          timeout=1800, check=False)


def refused(pair, clean_tree) -> str:
    """A release rollback that must be refused: it fails, and neither rank changes."""
    before = {r.name: snapshot(r) for r in pair.ranks}
    res = playbook("release_rollback.yml", clean_tree, "--limit", pair.group, check=False, timeout=600)
    assert res.returncode != 0, res.stdout[-3000:]
    assert {r.name: snapshot(r) for r in pair.ranks} == before
    return " ".join((res.stdout + res.stderr).split())


@pytest.mark.fault("release-rollback-previous", "release-rollback-no-previous", "release-rollback-ranks-disagree")
def test_a_pair_returns_to_its_previous_release_with_nothing_copied(pair_b, clean_tree, tmp_path):
    pair, current = pair_b, pin()
    nxt = yaml.safe_load(NEXT.read_text())["dspark_pin"]
    assert nxt["image_id"] != current["image_id"] and nxt["release"] == "sim-v027"
    # The inventory's release, gated (a converged re-run in the lane): the record names it as current.
    playbook("provision.yml", clean_tree, "--limit", pair.group, timeout=1200)
    assert [record(r)["current"]["pin"] for r in pair.ranks] == [current, current]

    # The next release: loaded, gated, recorded on both ranks; the previous release's image stays.
    playbook("provision.yml", clean_tree, "--limit", pair.group, "-e", f"@{NEXT}", timeout=1200)
    assert gate(pair)["status"] == "PASS"
    for r in pair.ranks:
        assert image_of(r) == nxt["image_id"], r.name
        on_rank(r, ["docker", "image", "inspect", current["image_id"]])  # loading a release removes no image
        rec = record(r)
        assert (rec["current"]["release"], rec["previous"]["release"]) == ("sim-v027", "sim-v026"), r.name
        assert rec["current"]["pin"] == nxt and rec["previous"]["pin"] == current
        assert rec["previous"]["profile"] == "production"

    # Refused before anything changes: a rank without a previous release, then ranks that disagree.
    worker_record = record(pair.worker)
    try:
        write_record(pair.worker, dict(worker_record, previous=None))
        out = refused(pair, clean_tree)
        assert f"rank {pair.worker.name}: no previous release in {RECORD} (current sim-v027 (" in out, out[-3000:]
        other = copy.deepcopy(worker_record)
        other["previous"]["release"] = other["previous"]["pin"]["release"] = "sim-v025"
        other["previous"]["pin"]["image_id"] = "sha256:" + "0" * 64
        write_record(pair.worker, other)
        out = refused(pair, clean_tree)
        assert (f"rank {pair.worker.name}: previous release is sim-v025 (image_tag {current['image_tag']}, "
                f"image_id sha256:{'0' * 64}), expected sim-v026 (") in out, out[-3000:]
        assert f"as rank {pair.head.name} records it; the pair's ranks disagree, nothing was changed" in out
    finally:
        write_record(pair.worker, worker_record)

    # Back to the previous release through the operator's command: the image in place, gated, the record swapped.
    since = {r.name: on_rank(r, ["date", "+%s"]).stdout.strip() for r in pair.ranks}
    res = dspark("rollback", "--to", "previous", "--limit", pair.group,
                 "-e", f"dspark_preflight_wrapper_path={clean_tree}", artifacts=tmp_path / "runs")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert gate(pair)["status"] == "PASS"
    for r in pair.ranks:
        assert image_of(r) == current["image_id"], r.name
        # nothing loaded, pulled, tagged or removed on either rank
        assert events_since(r, since[r.name]) == [], r.name
        rec = record(r)
        assert (rec["current"]["release"], rec["previous"]["release"]) == ("sim-v026", "sim-v027"), r.name
        assert rec["current"]["pin"] == current and rec["previous"]["pin"] == nxt
