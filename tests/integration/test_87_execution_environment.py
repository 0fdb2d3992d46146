"""The execution environment (EE) built for real and run: `make ee`'s steps (tools/ee: a base image imported from
a mmdebstrap rootfs, a host-made wheelhouse, ansible-builder on the control node's own dockerd, cached by the key
of its inputs) build gb10-dspark-ee:latest from a clean clone of HEAD, and `ansible-navigator run` with the
repository's ansible-navigator.yml provisions pair sim01 inside it over real SSH, then audits it.

Cost, measured here: with the EE already built for these inputs (the control node's engine keeps its images in
/var/lib/gb10-dspark-ee) the build step only recomputes the key, about 5 s with the engine's start; when the
collection changed it rebuilds from the galaxy stage on, 15 to 40 s; a fresh machine (CI) builds cold: rootfs,
wheelhouse and image, about 2.5 minutes. Then one provision of sim01 (cold when the lane left it unconverged) and
one audit: about 33 s. The whole test took 53 s on a warm machine."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from simhelpers import ROOT

sys.path.insert(0, str(ROOT))
import tools.ee.__main__ as ee  # noqa: E402

NAVIGATOR = str(Path(sys.executable).with_name("ansible-navigator"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")
INSTALLED = "/usr/share/ansible/collections/ansible_collections/gb10/dspark"  # the EE's gb10.dspark


@pytest.fixture(scope="module")
def ee_image(clean_tree):
    """gb10-dspark-ee:latest built (or found built) from the clean clone, on the control node's engine; the
    engine is stopped again at the end if this module started it (its images stay, for the next run)."""
    started = not ee.engine_ready()
    ee.engine_up()
    try:
        t0 = time.monotonic()
        keyed = ee.build(clean_tree)
        print(f"EE {keyed} ready in {time.monotonic() - t0:.0f} s")
        yield keyed
    finally:
        if started:
            ee.engine_down()


def navigator(*args: str, artifact: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    """ansible-navigator from the checkout (its ansible-navigator.yml), on the control node's engine."""
    env = dict(os.environ, DOCKER_HOST=ee.DOCKER_HOST)
    env.pop("ANSIBLE_CONFIG", None)
    res = subprocess.run([NAVIGATOR, "run", *args, "--pas", str(artifact)], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=timeout, check=False)
    res.stdout = ANSI.sub("", res.stdout)  # Ansible inside the container colours its output
    return res


def ee_starts_since(since: str) -> int:
    """Containers of the EE image that the control node's engine started since ``since`` (ansible-navigator's
    runs; the build's own step containers run from intermediate images and are not counted)."""
    out = ee.docker("events", "--since", since, "--until", str(int(time.time())), "--filter", "type=container",
                    "--filter", "event=start", "--format", "{{.From}}").stdout
    return out.split().count(ee.IMAGE)


def test_navigator_provisions_and_audits_a_pair_inside_the_ee(pair_a, ee_image):
    pair = pair_a
    name = f"sim{pair.index:02d}"
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert not Path(INSTALLED).exists(), "the control node itself has the EE's path: the proof below would prove nothing"
    out = ROOT / "artifacts" / "ee"
    shutil.rmtree(out, ignore_errors=True)
    evidence = out / "evidence"  # under the checkout, which ansible-navigator mounts at the same path
    evidence.mkdir(parents=True)
    since = str(int(time.time()) - 1)

    res = navigator("gb10.dspark.provision", "--limit", pair.group, "-e", f"dspark_evidence_dir={evidence}",
                    artifact=out / "provision.json")
    recap = res.stdout.split("PLAY RECAP")[-1]
    assert res.returncode == 0, f"provision in the EE exited {res.returncode}:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    for rank in pair.ranks:
        line = next(ln for ln in recap.splitlines() if ln.startswith(rank.name))
        assert "failed=0" in line and "unreachable=0" in line, line
    gate = json.loads((evidence / name / "runtime-gate.json").read_text())
    assert gate["status"] == "PASS" and gate["errors"] == [], gate
    # Inside the container: preflight proved the EE's installed gb10.dspark (a path the host does not have)...
    tree = json.loads((evidence / name / "wrapper-tree.json").read_text())
    assert tree["kind"] == "installed_collection" and tree["path"] == INSTALLED and tree["dirty"] is False, tree
    assert tree["revision"] == f"gb10.dspark:{version}", tree
    # ...ansible-navigator's artifact names the playbook at that path and its run as successful...
    art = json.loads((out / "provision.json").read_text())
    assert art["status"] == "successful", art["status"]
    playbooks = {p["playbook"] for p in art["plays"]}
    assert f"{INSTALLED}/playbooks/provision.yml" in playbooks, playbooks
    assert all(p.startswith(f"{INSTALLED}/playbooks/") for p in playbooks), playbooks
    # ...and the control node's engine started the EE image for it.
    assert ee_starts_since(since) == 1

    res = navigator("gb10.dspark.audit", "--limit", pair.group, "-e", f"dspark_evidence_dir={evidence}",
                    artifact=out / "audit.json")
    assert res.returncode == 0, f"audit in the EE exited {res.returncode}:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    report = json.loads((evidence / "fleet" / "audit.json").read_text())
    assert {p["pair"]: p["verdict"] for p in report["pairs"]} == {name: "OK"}, report["pairs"]
    assert report["exit_code"] == 0
    assert json.loads((out / "audit.json").read_text())["status"] == "successful"
    assert ee_starts_since(since) == 2
