"""Fleet jobs on the simulator's second fleet (4 pairs, sim03 to sim06, inventories/sim-fleet2): the read-only
audit with injected drift (exact verdicts, the differences named, a failing exit code, nothing changed on any rank),
its HTML report in a real headless browser, the `dspark` command line, rollback and roll-forward with the image in
place, and teardown."""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import simhelpers
from simhelpers import FLEET2_INVENTORY as INVENTORY, FLEET2_PAIRS as PAIRS, GUIDE_OPS_USER, ROOT, fleet2, on_rank
from simhelpers import snapshot, wait_for
from dspark_sim import layout

# every run, read and write of this file is the second fleet's: a whole-fleet run here never reaches sim01 or sim02
ansible = functools.partial(simhelpers.ansible, inventory=INVENTORY)
playbook = functools.partial(simhelpers.playbook, inventory=INVENTORY)
site = functools.partial(simhelpers.site, INVENTORY)
FAST_UNREACHABLE = {"ANSIBLE_TIMEOUT": "5"}  # a pulled cable is reported after 5 s, not 30


def pin() -> dict:
    return yaml.safe_load((INVENTORY / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]


def report_dir() -> Path:
    return Path(site()["dspark_evidence_dir"]) / "fleet"


def audit(clean_tree, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    res = playbook("audit.yml", clean_tree, *extra, check=False, env=FAST_UNREACHABLE, timeout=600)
    doc = json.loads((report_dir() / "audit.json").read_text())
    return res, doc


def verdicts(doc: dict) -> dict:
    return {p["pair"]: p["verdict"] for p in doc["pairs"]}


def messages(doc: dict, pair: str) -> list[str]:
    entry = next(p for p in doc["pairs"] if p["pair"] == pair)
    return [d["message"] for d in entry["differences"]] + entry["reasons"]


def events_since(rank, since: str) -> list[str]:
    out = on_rank(rank, ["docker", "events", "--since", since, "--until", "0s", "--filter", "type=image",
                         "--format", "{{.Action}} {{.Actor.ID}}"]).stdout
    return [line for line in out.splitlines() if line.strip()]


def rank_now(rank) -> str:
    return on_rank(rank, ["date", "+%s"]).stdout.strip()


def gate(pair: str) -> dict:
    return json.loads((Path(site()["dspark_evidence_dir"]) / pair / "runtime-gate.json").read_text())


@pytest.fixture(scope="module")
def fleet_runs(sim, clean_tree, tmp_path_factory):
    """The second fleet's four pairs (the session brought them up; the last lane's tests bring them down), provisioned
    as an operator meets a fleet: a run refused as a whole (the checkout is dirty: nothing may change anywhere); a run
    in which sim05's worker has its fabric link down (sim05 is refused, the three others are provisioned and gated);
    then sim05 alone, its link back. What each run did is kept for the tests that judge it."""
    pairs = fleet2()
    assert [p.name for p in pairs] == ["sim03", "sim04", "sim05", "sim06"], pairs  # the names this file's checks read
    ranks = [r for p in pairs for r in p.ranks]
    seen: dict = {"pairs": pairs}
    dirty = tmp_path_factory.mktemp("dirty") / "tree"
    subprocess.run(["git", "clone", "--quiet", "--local", str(clean_tree), str(dirty)], check=True)
    (dirty / "roles" / "README.md").write_text("edited on the control node\n")
    seen["before_run_wide"] = {r.name: snapshot(r) for r in ranks}
    seen["run_wide"] = playbook("provision.yml", dirty, check=False, timeout=900)
    seen["after_run_wide"] = {r.name: snapshot(r) for r in ranks}
    refused = pairs[2]
    netdev = refused.worker.port["netdev"]
    on_rank(refused.worker, ["ip", "link", "set", netdev, "down"])
    try:
        seen["before_isolation"] = snapshot(refused.worker), snapshot(refused.head)
        seen["isolation"] = playbook("provision.yml", clean_tree, check=False, timeout=1800)
        seen["after_isolation"] = snapshot(refused.worker), snapshot(refused.head)
        seen["gates"] = {p.name: gate(p.name) for p in pairs if p is not refused}
    finally:
        on_rank(refused.worker, ["ip", "link", "set", netdev, "up"])
    playbook("provision.yml", clean_tree, "--limit", refused.group, timeout=1800)
    return seen


@pytest.fixture(scope="module")
def fleet(fleet_runs):
    """Four converged pairs."""
    return fleet_runs["pairs"]


@pytest.mark.fault("run-wide-refusal")
def test_a_run_wide_refusal_touches_no_pair(fleet_runs):
    res = fleet_runs["run_wide"]
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 2, out[-4000:]
    assert "is dirty (1 path: M roles/README.md), expected clean" in out
    assert fleet_runs["after_run_wide"] == fleet_runs["before_run_wide"], "a run refused as a whole changed a rank"
    assert "PAIR SUMMARY provision.yml: 0 of 4 pairs PASS" in out, out[-3000:]


@pytest.mark.fault("pair-isolation-preflight")
def test_a_pair_refused_at_preflight_leaves_the_other_pairs_provisioned(fleet_runs):
    pairs, res = fleet_runs["pairs"], fleet_runs["isolation"]
    refused = pairs[2]
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 2, out[-4000:]
    assert fleet_runs["after_isolation"] == fleet_runs["before_isolation"], "the refused pair was changed"
    assert {name: doc["status"] for name, doc in fleet_runs["gates"].items()} == {
        p.name: "PASS" for p in pairs if p is not refused}
    assert "PAIR SUMMARY provision.yml: 3 of 4 pairs PASS" in out, out[-3000:]
    # the isolation run's summary: the last run of all four pairs in which sim03 passed and the refused pair did not
    files = sorted((Path(site()["dspark_evidence_dir"]) / "runs").glob("*-provision-*.json"), key=lambda f: f.stat().st_mtime_ns)
    rows = [{r["pair"]: r for r in json.loads(f.read_text())["pairs"]} for f in files]
    row = next(r[refused.name] for r in reversed(rows) if len(r) == 4 and r[refused.name]["verdict"] == "FAILED"
               and r[pairs[0].name]["verdict"] == "PASS")
    # the pair's fabric link is down at both ends (the worker's side was taken down): either rank may be named first
    assert row["phase"] == "Preflight" and row["rank"] in (refused.head.name, refused.worker.name), row
    assert f"rank {row['rank']}: netdev " in row["reason"] and "link is Down, expected Up" in row["reason"], row


def test_converged_fleet_is_ok_and_a_second_audit_rewrites_nothing(fleet, clean_tree):
    res, doc = audit(clean_tree)
    assert res.returncode == 0, res.stdout[-4000:]
    assert verdicts(doc) == {p.name: "OK" for p in fleet}
    assert doc["exit_code"] == 0 and doc["counts"]["OK"] == PAIRS
    mtimes = {p.name: p.stat().st_mtime_ns for p in report_dir().iterdir()}
    res, _unused = audit(clean_tree)
    assert res.returncode == 0
    recap = [line for line in res.stdout.split("PLAY RECAP")[-1].splitlines() if line.startswith("sim")]
    assert len(recap) == 2 * PAIRS and all("changed=0" in line for line in recap), recap
    assert {p.name: p.stat().st_mtime_ns for p in report_dir().iterdir()} == mtimes
    # Provisioned and audited through the unprivileged operator account: no rank took a root login. (test_85, after
    # this file, logs in once on sim03's worker as the operator guide's ops account, which it made the guide's way.)
    for rank_ in (r for pair in fleet for r in pair.ranks):
        users = set(re.findall(r"Accepted publickey for (\S+) ", (rank_.sub("log") / "sshd.log").read_text()))
        assert users - {GUIDE_OPS_USER} == {layout.OPERATOR}, (rank_.name, users)


@pytest.fixture(scope="module")
def drifted(fleet):
    """sim03 stays OK; sim04 gets another image under the pinned tag on its worker and a hand-edited
    profile env on its head; sim05's head engine is stopped; sim06's worker loses its network."""
    p = pin()
    s1, s2, s3, s4 = fleet
    on_rank(s2.worker, ["sh", "-c", f"tar -cf - -T /dev/null | docker import - {p['image_tag']} >/dev/null"])
    swapped = on_rank(s2.worker, ["docker", "image", "inspect", "--format", "{{.Id}}", p["image_tag"]]).stdout.strip()
    env_file = "/etc/dspark/profiles/production.env"
    on_rank(s2.head, ["sed", "-i", "s/^NCCL_IB_GID_INDEX=.*/NCCL_IB_GID_INDEX=5/", env_file])
    on_rank(s3.head, ["docker", "stop", "--time", "5", "dspark_vllm"])
    reachable = [r for pair in fleet for r in pair.ranks if r.name != s4.worker.name]
    before = {r.name: snapshot(r) for r in reachable}
    since = {r.name: rank_now(r) for r in reachable}
    subprocess.run(["ip", "link", "set", s4.worker.host_veth, "down"], check=True)
    yield {"swapped": swapped, "env_file": env_file, "before": before, "since": since, "reachable": reachable}
    subprocess.run(["ip", "link", "set", s4.worker.host_veth, "up"], check=True)


def test_drifted_fleet_gets_exact_verdicts_and_changes_nothing(fleet, drifted, clean_tree):
    s1, s2, s3, s4 = fleet
    p = pin()
    written = {p.name: p.stat().st_mtime_ns for p in report_dir().iterdir()}
    for extra in (("--check",), ()):  # check mode judges the same and writes no report
        res, doc = audit(clean_tree, *extra)
        out = res.stdout + res.stderr
        assert res.returncode == 2, out[-4000:]
        assert "sim04, sim05, sim06 not OK" in " ".join(out.split())
        if extra:
            assert {p.name: p.stat().st_mtime_ns for p in report_dir().iterdir()} == written
    assert verdicts(doc) == {"sim03": "OK", "sim04": "DRIFT", "sim05": "DOWN", "sim06": "UNREACHABLE"}
    assert doc["exit_code"] == 2 and doc["not_ok"] == ["sim04", "sim05", "sim06"]
    drift = messages(doc, "sim04")
    assert f"rank {s2.worker.name}: image {p['image_tag']} is {drifted['swapped']}, pinned {p['image_id']}" in drift
    assert any(m.startswith(f"rank {s2.head.name}: profile env file {drifted['env_file']} is changed since the "
                            "container started, expected to match the container's environment") for m in drift), drift
    assert len(drift) == 2, drift  # nothing else differs on sim04
    assert any(m.startswith(f"rank {s3.head.name}: ") for m in messages(doc, "sim05")), messages(doc, "sim05")
    assert any(m.startswith(f"rank {s4.worker.name}: host is unreachable, expected reachable") for m in messages(doc, "sim06"))
    assert messages(doc, "sim03") == []
    # Read-only: every reachable rank holds the same images, containers (IDs, start times, restart
    # counts) and files as before, and no image was loaded, tagged or removed.
    for r in drifted["reachable"]:
        assert snapshot(r) == drifted["before"][r.name], r.name
        assert events_since(r, drifted["since"][r.name]) == [], r.name


def test_the_html_report_shows_the_fleet_table_in_a_headless_browser(fleet, drifted, clean_tree, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    audit(clean_tree)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        driver.get((report_dir() / "audit.html").as_uri())
        table = driver.find_element(By.ID, "fleet")
        assert table.is_displayed() and table.size["height"] > 50 and table.size["width"] > 300
        rows = table.find_elements(By.CSS_SELECTOR, "tr[data-pair]")
        shown = {r.get_attribute("data-pair"): r.get_attribute("data-verdict") for r in rows}
        assert shown == {"sim03": "OK", "sim04": "DRIFT", "sim05": "DOWN", "sim06": "UNREACHABLE"}
        assert all(r.is_displayed() for r in rows)
        assert "DRIFT" in next(r for r in rows if r.get_attribute("data-pair") == "sim04").text
        details = driver.find_element(By.ID, "pair-sim04")
        assert drifted["swapped"] in details.text
        shot = tmp_path / "audit.png"
        assert driver.save_screenshot(str(shot))
        png = shot.read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        (ROOT / "artifacts").mkdir(exist_ok=True)
        (ROOT / "artifacts" / "fleet-audit-screenshot.png").write_bytes(png)
    finally:
        driver.quit()


def test_dspark_audit_prints_the_table_and_exits_non_zero(fleet, drifted, tmp_path):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), **FAST_UNREACHABLE,
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    res = subprocess.run([str(Path(sys.executable).with_name("dspark")), "audit", "--inventory", str(INVENTORY),
                          "--artifacts", str(tmp_path)], cwd=ROOT, env=env, text=True, capture_output=True, timeout=600, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out[-4000:]
    assert "[sim06] sim06-worker UNREACHABLE" in out
    table = [line for line in out.splitlines() if line.startswith(("sim03 ", "sim04 ", "sim05 ", "sim06 "))]
    assert [line.split()[:2] for line in table] == [["sim03", "OK"], ["sim04", "DRIFT"], ["sim05", "DOWN"],
                                                    ["sim06", "UNREACHABLE"]]
    assert "failing pairs: sim04" in out and "sim05" in out.split("failing pairs:")[-1]
    # the progress line of the fleet's verdict: its name says what failed, its counts read as words, not a dict
    verdict = [line for line in out.splitlines() if "FAILED Audit | The fleet's verdict" in line]
    assert len(verdict) == 1 and "not OK (1 OK, 1 DRIFT, 1 DOWN, 0 HUNG, 1 UNREACHABLE, 0 FAILED)" in verdict[0], verdict or out[-3000:]
    assert "{'" not in verdict[0]
    runs = list(tmp_path.iterdir())
    assert len(runs) == 1 and (runs[0] / "audit" / "audit.html").is_file()


def test_unreachable_rank_back_on_the_network_is_ok_again(fleet, drifted, clean_tree):
    s4 = fleet[3]
    subprocess.run(["ip", "link", "set", s4.worker.host_veth, "up"], check=True)
    # Back on the network once Ansible's own SSH reaches it again: a connection to the rank opened before its link
    # went down waits out TCP's retransmission back-off (it can take longer than the audit's 5 s timeout).
    wait_for(lambda: ansible(s4.worker.name, "--become", "-m", "ansible.builtin.ping", check=False, env=FAST_UNREACHABLE,
                             timeout=60).returncode == 0, 180, interval=2, what=f"{s4.worker.name} to answer Ansible")
    res, doc = audit(clean_tree, "--limit", "pair_sim06:pair_sim03")
    assert res.returncode == 0, res.stdout[-3000:]
    assert verdicts(doc) == {"sim03": "OK", "sim06": "OK"}


def test_a_rank_that_cannot_be_judged_fails_its_pair_with_the_reason(fleet, clean_tree, host_vars):
    """A worker whose profile cannot be resolved is not left out: its pair is FAILED with the rank and why,
    the other pair is still judged, and the audit exits non-zero."""
    s1 = fleet[0]
    host_vars(s1.worker, {"dspark_profile_name": "no-such-profile"})
    res, doc = audit(clean_tree, "--limit", "pair_sim03:pair_sim06")
    assert res.returncode == 2, res.stdout[-3000:]
    assert verdicts(doc) == {"sim03": "FAILED", "sim06": "OK"}
    reasons = messages(doc, "sim03")
    assert reasons and any(r.startswith(f"rank {s1.worker.name}: ") and "no-such-profile" in r for r in reasons), reasons
    assert "sim03 not OK" in " ".join(res.stdout.split())


def test_rollback_and_forward_keep_the_image_and_pass_the_gate(fleet, clean_tree):
    s1 = fleet[0]
    p = pin()
    since = {r.name: rank_now(r) for r in s1.ranks}
    res = playbook("rollback.yml", clean_tree, "--limit", s1.group, timeout=1200)
    assert gate("sim03")["status"] == "PASS"
    for r in s1.ranks:
        labels = json.loads(on_rank(r, ["docker", "inspect", "--format", "{{json .Config.Labels}}", "dspark_vllm"]).stdout)
        assert labels["io.gb10.dspark.profile"] == "breakable-ab"
        assert labels["io.gb10.dspark.cudagraph.implementation"] == "breakable"
        assert on_rank(r, ["docker", "inspect", "--format", "{{.Image}}", "dspark_vllm"]).stdout.strip() == p["image_id"]
    assert gate("sim03")["evidence"]["profile"] == "breakable-ab"
    # The audit of the rolled-back pair names the departure from its inventory profile.
    _unused, doc = audit(clean_tree, "--limit", s1.group)
    assert verdicts(doc) == {"sim03": "DRIFT"}
    assert f"rank {s1.head.name}: label io.gb10.dspark.profile is breakable-ab, pinned production" in messages(doc, "sim03")
    # A second rollback changes nothing and restarts nothing.
    started = {r.name: snapshot(r)["containers"] for r in s1.ranks}
    res = playbook("rollback.yml", clean_tree, "--limit", s1.group, timeout=1200)
    assert {r.name: snapshot(r)["containers"] for r in s1.ranks} == started
    res = playbook("rollforward.yml", clean_tree, "--limit", s1.group, timeout=1200)
    assert gate("sim03")["status"] == "PASS" and gate("sim03")["evidence"]["profile"] == "production"
    for r in s1.ranks:
        assert on_rank(r, ["docker", "inspect", "--format", "{{.Image}}", "dspark_vllm"]).stdout.strip() == p["image_id"]
        # nothing loaded, pulled, tagged or removed on either rank through both switches
        assert events_since(r, since[r.name]) == [], r.name
    res, doc = audit(clean_tree, "--limit", s1.group)
    assert res.returncode == 0 and verdicts(doc) == {"sim03": "OK"}


def test_rollback_refuses_a_pair_without_the_image_and_changes_nothing(fleet, clean_tree):
    s2 = fleet[1]  # its worker holds another image under the pinned tag since the drift test
    p = pin()
    on_rank(s2.worker, ["sh", "-c", "docker rm -f dspark_vllm >/dev/null; docker image rm -f "
                        f"{p['image_id']} {p['image_tag']} >/dev/null"])
    before = {r.name: snapshot(r) for r in s2.ranks}
    res = playbook("rollback.yml", clean_tree, "--limit", s2.group, check=False, timeout=600)
    flat = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0
    assert f"rank {s2.worker.name}: image {p['image_id']} is absent, expected present" in flat, flat[-3000:]
    assert {r.name: snapshot(r) for r in s2.ranks} == before


def test_teardown_removes_the_engines_and_keeps_images_and_model(fleet, clean_tree):
    s3 = fleet[2]
    p = pin()
    on_rank(s3.head, ["docker", "run", "-d", "--name", "dspark_leftover", "--label", "io.gb10.dspark.pair=sim05",
                      "--entrypoint", "sleep", p["image_id"], "600"])
    res = playbook("teardown.yml", clean_tree, "--limit", s3.group, timeout=600)
    for r in s3.ranks:
        assert on_rank(r, ["docker", "ps", "-aq", "--filter", "label=io.gb10.dspark.pair"]).stdout.strip() == ""
        assert p["image_id"] in on_rank(r, ["docker", "image", "ls", "--no-trunc", "--format", "{{.ID}}"]).stdout
        assert on_rank(r, ["test", "-d", site()["dspark_model_dir"]], check=False).returncode == 0
    res = playbook("teardown.yml", clean_tree, "--limit", s3.group, timeout=600)
    recap = res.stdout.split("PLAY RECAP")[-1]
    assert all("changed=0" in line for line in recap.splitlines() if line.startswith("sim05")), recap
    _unused, doc = audit(clean_tree, "--limit", s3.group)
    assert verdicts(doc) == {"sim05": "DOWN"}
