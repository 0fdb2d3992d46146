"""Write ``inventories/sim/``: the simulated fleet as a real fleet inventory would describe it."""
from __future__ import annotations

import hashlib
import resource
import shutil
from pathlib import Path


from . import checkpoint, layout

MANIFEST_SRC = layout.REPO_ROOT / "sim" / "engine" / "runtime-manifest.vllm-sim.3.json"
HEADER = "# Written by the gb10.dspark pair simulator (`make sim-up`). Do not edit: sim-up rewrites it.\n"


def _dump(path: Path, data: dict) -> None:
    import yaml  # only sim-up writes YAML; sim-down must run without the virtualenv

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + yaml.safe_dump(data, sort_keys=False, default_flow_style=False))


def hosts(count: int, first: int = 1) -> dict:
    """The hosts of ``count`` pairs numbered from ``first``: one group per pair, and the heads' and workers' groups."""
    fleet = layout.pairs(count, first)
    pair_groups = {}
    for pair in fleet:
        pair_hosts = {}
        for r in pair.ranks:
            pair_hosts[r.name] = {
                "ansible_host": r.mgmt_ip,
                "dspark_rank": r.rank,
                "dspark_fabric_ip": r.fabric_ip,
                "dspark_eth_if": r.port["netdev"],
                "dspark_ib_hca": r.port["hca"],
                "dspark_ib_hca_twin": r.port["twin_hca"],
            }
        pair_groups[pair.group] = {"hosts": pair_hosts, "vars": {"dspark_pair": pair.name}}
    return {
        "all": {
            "children": {
                "dspark_pairs": {"children": pair_groups},
                "dspark_heads": {"hosts": {p.head.name: None for p in fleet}},
                "dspark_workers": {"hosts": {p.worker.name: None for p in fleet}},
            }
        }
    }


def pin(meta: dict) -> dict:
    manifest_sha = hashlib.sha256(MANIFEST_SRC.read_bytes()).hexdigest()
    lab = meta["labels"]
    return {
        "dspark_pin": {
            "release": meta["release"],
            "image_tag": meta["image_tag"],
            "image_id": meta["image_id"],
            "image_manifest_digest": None,
            "image_architecture": meta["image_architecture"],
            "image_archive_sha256": meta["image_archive_sha256"],
            "vllm_version": lab["io.r0b0tlab.vllm.package.version"],
            "integrated_vllm_commit": lab["io.r0b0tlab.vllm.integrated.commit"],
            "source_revision": lab["org.opencontainers.image.revision"],
            "cudagraph_selector": lab["io.r0b0tlab.cudagraph.selector"],
            "model_id": checkpoint.MODEL_ID,
            "model_revision": checkpoint.MODEL_REVISION,
            "model_revision_marker": checkpoint.REVISION_MARKER,
            "model_shard_count": checkpoint.SHARDS,
            "model_total_size": checkpoint.total_size(),
            "model_config": {k: v for k, v in checkpoint.CONFIG.items() if k != "torch_dtype"},
            "runtime_manifest_path": "/opt/r0b0tlab/runtime-manifest.json",
            "runtime_manifest_sha256": manifest_sha,
            "kv_cache_dtype": lab["io.r0b0tlab.kv-cache.dtype"],
            "speculative_method": lab["io.r0b0tlab.speculative.method"],
            "speculative_tokens": int(lab["io.r0b0tlab.speculative.tokens"]),
            "gpu_compute_capability": "12.1",
        }
    }


def memlock_limit() -> str:
    """What the engines may lock: unlimited on a real GB10, the machine's hard limit here
    (runc cannot raise RLIMIT_MEMLOCK above it, and the container would not start)."""
    _unused, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "-1:-1" if hard == resource.RLIM_INFINITY else f"{hard}:{hard}"


def release_file(meta: dict) -> dict:
    """A release as an operator receives it: its pin and the archive to stage (``-e @releases/<name>.yml``)."""
    return {**pin(meta), "dspark_image_archive": meta["image_archive"]}


def write(count: int, meta: dict, next_meta: dict | None = None, fleet2: int = 0) -> Path:
    """``inventories/sim/`` for pairs 1 to ``count``; with ``fleet2``, ``inventories/sim-fleet2/`` too, for the
    ``fleet2`` pairs after them, with its own evidence folder (a fleet of its own: a run over either inventory
    never reaches the other's pairs). The next release's file, for both."""
    if layout.RELEASES_DIR.exists():
        shutil.rmtree(layout.RELEASES_DIR)
    if next_meta:  # the next release, for the rollout and release-rollback tests (read only when named: -e @file)
        _dump(layout.RELEASES_DIR / f"{next_meta['release']}.yml", release_file(next_meta))
    if layout.FLEET2_INVENTORY_DIR.exists():
        shutil.rmtree(layout.FLEET2_INVENTORY_DIR)
    if fleet2:
        _write_fleet(layout.FLEET2_INVENTORY_DIR, hosts(fleet2, count + 1), meta, layout.FLEET2_EVIDENCE_DIR)
    return _write_fleet(layout.INVENTORY_DIR, hosts(count), meta, layout.EVIDENCE_DIR)


def _write_fleet(inv: Path, fleet_hosts: dict, meta: dict, evidence_dir: Path) -> Path:
    if inv.exists():
        shutil.rmtree(inv)
    _dump(inv / "hosts.yml", fleet_hosts)
    key = layout.STATE_DIR / "ssh" / "id_ed25519"
    known = layout.STATE_DIR / "ssh" / "known_hosts"
    _dump(inv / "group_vars" / "all" / "connection.yml", {
        "ansible_user": layout.OPERATOR,  # unprivileged; the playbooks ask for root with become
        "ansible_ssh_private_key_file": str(key),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes -o ConnectTimeout=10",
        "ansible_python_interpreter": "/usr/bin/python3",
    })
    _dump(inv / "group_vars" / "all" / "pin.yml", pin(meta))
    _dump(inv / "group_vars" / "all" / "site.yml", {
        "dspark_image_archive": meta["image_archive"],
        "dspark_runtime_manifest_src": str(MANIFEST_SRC),
        "dspark_model_dir": f"{layout.RANK_MOUNTS['models']}/{checkpoint.MODEL_DIRNAME}",
        "dspark_served_model_name": "deepseek-v4-flash-dspark",
        "dspark_api_port": 8888,
        "dspark_master_port": 25000,
        "dspark_container_name": "dspark_vllm",
        "dspark_engine_memlock": memlock_limit(),
        # No GPU and no RDMA device in a simulated rank; the stand-in needs neither.
        "dspark_engine_gpus": False,
        "dspark_engine_devices": [],
        "dspark_engine_shm_size": "1g",
        # The stand-in "loads weights" for a second, so readiness is really waited for.
        "dspark_engine_extra_env": {"DSPARK_SIM_STARTUP_DELAY_S": "1"},
        "dspark_engine_ready_interval": 1,
        "dspark_simulated": True,
        "dspark_evidence_dir": str(evidence_dir),
    })
    return inv
