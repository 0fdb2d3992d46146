"""Identity on the simulator: playbooks/identity.yml converges a pair and fails closed.

Pair 1 is converged and re-run. Pair 2 is kept unconverged (no image, no archive on its ranks),
so that every injected mismatch would otherwise lead to a copy and a load; each test shows the
run fails with a message naming the rank, the expected and the actual value, and that no image,
container or file on either rank of the pair changed.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simhelpers import INVENTORY, ROOT, ansible, on_rank, site, snapshot, unconverge

sys.path.insert(0, str(ROOT))
from tests.support import synthetic_archive  # noqa: E402

PLAYBOOK = "playbooks/identity.yml"
FAKEHW = [sys.executable, "-m", "fakehw"]


def pin() -> dict:
    return yaml.safe_load((INVENTORY / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]


def run(pair, clean_tree, *extra: str, check: bool = False, tree: Path | None = None):
    return ansible(PLAYBOOK, "--limit", pair.group, "-e", f"dspark_preflight_wrapper_path={tree or clean_tree}",
                   *extra, tool="ansible-playbook", check=check)


def fails_closed(pair, clean_tree, *extra: str, expect: list[str], tree: Path | None = None) -> str:
    before = {r.name: snapshot(r) for r in pair.ranks}
    res = run(pair, clean_tree, *extra, tree=tree)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-4000:]
    flat = " ".join(out.split())  # the YAML callback wraps long messages
    for needle in expect:
        assert " ".join(needle.split()) in flat, f"{needle!r} not in output:\n{out[-6000:]}"
    after = {r.name: snapshot(r) for r in pair.ranks}
    assert after == before, "a failed run changed a rank"
    return out


@pytest.fixture
def pair2(pair_b):
    pair = pair_b
    unconverge(pair)
    return pair


def test_identity_converges_then_changes_nothing(pair_a, clean_tree):
    pair = pair_a
    unconverge(pair)
    p = pin()
    first = run(pair, clean_tree, check=True)
    assert "changed=0" not in first.stdout.split("PLAY RECAP")[1].splitlines()[1]
    for r in pair.ranks:
        tag_id = on_rank(r, ["docker", "image", "inspect", "--format", "{{.Id}}", p["image_tag"]]).stdout.strip()
        assert tag_id == p["image_id"], r.name
    since = on_rank(pair.head, ["date", "+%s"]).stdout.strip()
    second = run(pair, clean_tree, check=True)
    recap = second.stdout.split("PLAY RECAP")[1]
    assert recap.count("changed=0") == 2, recap
    for r in pair.ranks:  # the engines saw no load and no tag during the second run
        events = on_rank(r, ["docker", "events", "--since", since, "--until", "0s", "--filter", "type=image",
                             "--format", "{{.Action}}"]).stdout.split()
        assert events == [], (r.name, events)
    first_events = on_rank(pair.worker, ["docker", "events", "--since", "0", "--until", "0s", "--filter", "type=image",
                                         "--format", "{{.Action}}"]).stdout.split()
    assert "load" in first_events  # the probe above would be vacuous if the engine never reported loads
    tree = json.loads((Path(site()["dspark_evidence_dir"]) / "wrapper-tree.json").read_text())
    assert tree["dirty"] is False and tree["publishable"] is True


def test_check_mode_reports_and_changes_nothing(pair2, clean_tree):
    before = {r.name: snapshot(r) for r in pair2.ranks}
    res = run(pair2, clean_tree, "--check", "--diff", check=True)
    assert "image_id: " + pin()["image_id"] in res.stdout or pin()["image_id"] in res.stdout
    assert {r.name: snapshot(r) for r in pair2.ranks} == before


@pytest.mark.parametrize("where", [pytest.param("worker", marks=pytest.mark.fault("image-tag-worker")),
                                   pytest.param("head", marks=pytest.mark.fault("image-tag-head"))])
def test_a_rank_holding_another_image_under_the_pinned_tag(pair2, clean_tree, where):
    rank = pair2.worker if where == "worker" else pair2.head
    p = pin()
    on_rank(rank, ["sh", "-c", f"tar -cf - -T /dev/null | docker import - {p['image_tag']} >/dev/null"])
    other = on_rank(rank, ["docker", "image", "inspect", "--format", "{{.Id}}", p["image_tag"]]).stdout.strip()
    fails_closed(pair2, clean_tree, expect=[f"rank {rank.name}: image {p['image_tag']} is {other}, pinned {p['image_id']}"])


@pytest.mark.fault("archive-truncated")
def test_a_truncated_archive_is_refused_before_anything_is_copied(pair2, clean_tree, tmp_path):
    src = Path(site()["dspark_image_archive"])
    cut = tmp_path / src.name
    with src.open("rb") as fin, cut.open("wb") as fout:
        fout.write(fin.read(src.stat().st_size // 2))
    fails_closed(pair2, clean_tree, "-e", f"dspark_image_archive={cut}",
                 expect=[f"rank control node: {cut} is not a readable image archive: member",
                         "more than the archive holds (truncated?)"])


@pytest.mark.fault("archive-name-tricks")
def test_an_archive_hiding_a_second_manifest_is_refused_before_anything_is_copied(pair2, clean_tree, tmp_path):
    """Docker cleans member names like Go's path.Clean, so a later x/../manifest.json is the manifest
    it loads; the reader sees both and refuses. The pin carries the crafted file's own sha256, so
    only the reader stands between the trick and the ranks."""
    import io
    import tarfile

    src = Path(site()["dspark_image_archive"])
    crafted = tmp_path / src.name
    shutil.copyfile(src, crafted)
    with tarfile.open(src) as t:
        manifest = json.load(t.extractfile("manifest.json"))
    manifest[0]["RepoTags"] = ["evil:latest"]
    data = json.dumps(manifest).encode()
    with tarfile.open(crafted, "a") as t:
        member = tarfile.TarInfo("x/../manifest.json")
        member.size = len(data)
        t.addfile(member, io.BytesIO(data))
    p = dict(pin(), image_archive_sha256=hashlib.sha256(crafted.read_bytes()).hexdigest())
    fails_closed(pair2, clean_tree, "-e", f"dspark_image_archive={crafted}", "-e", json.dumps({"dspark_pin": p}),
                 expect=["rank control node", "member name 'manifest.json' appears more than once "
                         "(as 'manifest.json' and 'x/../manifest.json')"])


@pytest.mark.fault("disk-space")
def test_too_little_disk_for_the_archive_is_refused(pair2, clean_tree):
    need = 1 << 50  # a petabyte of margin: no rank has that much free
    size = Path(site()["dspark_image_archive"]).stat().st_size
    fails_closed(pair2, clean_tree, "-e", f"dspark_image_free_margin_bytes={need}",
                 expect=[f"rank {pair2.head.name}: free space is", f"expected at least {size + need}"])


@pytest.mark.fault("worker-unreachable")
def test_an_unreachable_worker_stops_the_run_before_the_head_changes(pair2, clean_tree):
    head, worker = pair2.head, pair2.worker
    before = snapshot(head)
    subprocess.run(["ip", "link", "set", worker.host_veth, "down"], check=True)
    try:
        res = run(pair2, clean_tree, "-e", "ansible_ssh_timeout=5")
    finally:
        subprocess.run(["ip", "link", "set", worker.host_veth, "up"], check=True)
    flat = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0
    assert f"fatal: [{worker.name}]: UNREACHABLE!" in flat, flat[-3000:]
    assert snapshot(head) == before


@pytest.mark.fault("archive-id")
def test_control_node_archive_with_another_id(pair2, clean_tree, tmp_path):
    p = pin()
    labels = {"org.opencontainers.image.revision": p["source_revision"]}
    bad = synthetic_archive.write(tmp_path / "other.tar", tag=p["image_tag"], labels=labels)
    fails_closed(pair2, clean_tree, "-e", f"dspark_image_archive={bad['path']}",
                 expect=[f"rank control node: archive {bad['path']} image is {bad['image_id']}, pinned {p['image_id']}"])


@pytest.mark.fault("archive-id")
def test_archive_staged_on_a_rank_with_another_id(pair2, clean_tree, tmp_path):
    p = pin()
    head = pair2.head
    name = Path(site()["dspark_image_archive"]).name
    bad = synthetic_archive.write(tmp_path / name, tag=p["image_tag"])
    staged = head.sub("var-dspark") / "images"
    staged.mkdir(parents=True, exist_ok=True)
    shutil.copy(bad["path"], staged / name)
    fails_closed(pair2, clean_tree,
                 expect=[f"rank {head.name}: archive /var/lib/dspark/images/{name} image is {bad['image_id']}, pinned {p['image_id']}"])


@pytest.mark.fault("manifest-tampered", "manifest-field")
def test_tampered_runtime_manifest(pair2, clean_tree, tmp_path):
    src = Path(site()["dspark_runtime_manifest_src"])
    doc = json.loads(src.read_text())
    doc["kv_cache_dtype"] = "fp8"
    tampered = tmp_path / "runtime-manifest.json"
    tampered.write_text(json.dumps(doc, indent=2))
    actual = hashlib.sha256(tampered.read_bytes()).hexdigest()
    out = fails_closed(pair2, clean_tree, "-e", f"dspark_runtime_manifest_src={tampered}",
                       expect=[f"rank control node: runtime manifest sha256 is {actual}, pinned {pin()['runtime_manifest_sha256']}"])
    assert "kv_cache_dtype is fp8, pinned nvfp4_ds_mla" in out


@pytest.mark.fault("manifest-tampered")
def test_tampered_manifest_on_a_rank_is_named(pair2):
    worker = pair2.worker
    on_rank(worker, ["sh", "-c", "echo '{\"schema_version\": 3}' > /etc/dspark/runtime-manifest.json"])
    try:
        res = ansible(worker.name, "-m", "gb10.dspark.runtime_manifest", "-a",
                      json.dumps({"rank": worker.name, "path": "/etc/dspark/runtime-manifest.json",
                                  "expected_sha256": pin()["runtime_manifest_sha256"]}), check=False)
        assert res.returncode != 0
        assert f"rank {worker.name}: runtime manifest sha256 is " in res.stdout
    finally:
        on_rank(worker, ["rm", "-f", "/etc/dspark/runtime-manifest.json"])


@pytest.mark.fault("model-revision")
def test_wrong_model_revision(pair2, clean_tree):
    worker = pair2.worker
    p = pin()
    marker = f"{site()['dspark_model_dir']}/{p['model_revision_marker']}"
    wrong = "0" * 40
    on_rank(worker, ["sh", "-c", f"echo {wrong} > {marker}"])
    try:
        fails_closed(pair2, clean_tree, expect=[f"rank {worker.name}: model revision is {wrong}, pinned {p['model_revision']}"])
    finally:
        on_rank(worker, ["sh", "-c", f"echo {p['model_revision']} > {marker}"])


@pytest.mark.fault("model-shard")
def test_missing_shard(pair2, clean_tree):
    head = pair2.head
    shard = f"{site()['dspark_model_dir']}/model-00007-of-00048.safetensors"
    on_rank(head, ["mv", shard, "/root/shard7.bak"])
    try:
        fails_closed(pair2, clean_tree, expect=[f"rank {head.name}: shard model-00007-of-00048.safetensors is absent"])
    finally:
        on_rank(head, ["mv", "/root/shard7.bak", shard])


@pytest.mark.fault("gpu-capability")
def test_h200_instead_of_a_gb10(pair2, clean_tree):
    worker = pair2.worker
    env = {"PYTHONPATH": str(ROOT / "sim")}
    subprocess.run([*FAKEHW, "--hw-dir", str(worker.sub("hw")), "set-gpu", "--profile", "h200"], check=True,
                   env=env, capture_output=True)
    try:
        fails_closed(pair2, clean_tree, expect=[f"rank {worker.name}: GPU 0 compute capability is 9.0, expected 12.1"])
    finally:
        subprocess.run([*FAKEHW, "--hw-dir", str(worker.sub("hw")), "set-gpu", "--profile", "gb10"], check=True,
                       env=env, capture_output=True)


@pytest.mark.fault("nic-down")
def test_fabric_link_down(pair2, clean_tree):
    worker = pair2.worker
    netdev = worker.port["netdev"]
    on_rank(worker, ["ip", "link", "set", netdev, "down"])
    try:
        fails_closed(pair2, clean_tree, expect=[f"rank {worker.name}: netdev {netdev} link is Down, expected Up",
                                                f"rank {worker.name}: HCA {worker.port['hca']} link is Down, expected Up"])
    finally:
        on_rank(worker, ["ip", "link", "set", netdev, "up"])


@pytest.mark.fault("tree-dirty")
def test_dirty_tree(pair2, clean_tree, tmp_path):
    dirty = tmp_path / "dirty"
    subprocess.run(["git", "clone", "--quiet", "--local", str(clean_tree), str(dirty)], check=True)
    (dirty / "roles" / "README.md").write_text("edited on the control node\n")
    fails_closed(pair2, clean_tree, tree=dirty, expect=[f"wrapper tree {dirty} is dirty (1 path: M roles/README.md), expected clean"])
