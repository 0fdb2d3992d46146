"""A release rolled out in waves (playbooks/rollout.yml) on the second fleet's 4 pairs (sim03 to sim06, as test_80
leaves them), to the simulator's next release (sim-v027: the same layer under another tag and label, so another
image ID). Three runs in all:

1. a rollout halted by its canary: sim03's stand-in answers with inconsistent usage, so its runtime gate fails; no
   other pair is touched (not even staged);
2. a rollout stopped by the failure budget: sim03 (the canary, its fault gone) is drained first - a streamed request
   to its head is in flight when the run reaches its engine; the run waits for it, the request gets all its tokens,
   and only then is the engine replaced - then the image is staged on sim04-06 in one play, then waves of two pairs:
   in the first, sim04 passes and sim05 fails its gate (its stand-in now answers with inconsistent usage), and the
   budget (0, the rollout's default) keeps the second wave, sim06's, from starting: sim06's engines are not touched;
3. the rollout again, sim05's fault gone, in waves of two: it takes up where the budget stopped it - the canary and
   sim04, converged, are left alone; sim04+sim05, then sim06, each wave gated before the next starts. Every rank
   ends on the new image, loaded once.
"""
from __future__ import annotations

import datetime
import functools
import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

import simhelpers
from simhelpers import FLEET2_INVENTORY as INVENTORY, fleet2, on_rank, snapshot
from dspark_sim import layout

# every run, read and write of this file is the second fleet's (sim03 to sim06): it never reaches sim01 or sim02
playbook = functools.partial(simhelpers.playbook, inventory=INVENTORY)
site = functools.partial(simhelpers.site, INVENTORY)
DRAIN_MARK = "dspark-rollout-drain"  # only the test's own request is slow, never the gate's or the guard's
# A request of 60 s, in flight when the run reaches the canary's engine: alone, the run reaches the canary's stop
# within ~10 s; beside the one-pair lanes (lane c), it may take two or three times that.
DRAIN_TOKENS, TOKEN_DELAY_S = 120, 0.5


def release() -> Path:
    return layout.RELEASES_DIR / "sim-v027.yml"


def release_pin() -> dict:
    return yaml.safe_load(release().read_text())["dspark_pin"]


def evidence() -> Path:
    return Path(site()["dspark_evidence_dir"])


def waves_report(since: float) -> dict:
    files = [f for f in (evidence() / "runs").glob("*-rollout-waves-*.json") if f.stat().st_mtime >= since]
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def when(stamp: str) -> datetime.datetime:
    """An RFC 3339 time (Docker's StartedAt has nanoseconds; the report milliseconds) as an aware datetime."""
    stamp = stamp.replace("Z", "+00:00")
    head, _, rest = stamp.partition(".")
    if rest:
        frac, zone = rest[:rest.index("+")], rest[rest.index("+"):]
        stamp = f"{head}.{frac[:6]}{zone}"
    return datetime.datetime.fromisoformat(stamp)


def engine(rank, absent_ok: bool = False) -> dict | None:
    """The rank's engine container: its image, start time and whether it runs (None when there is none and
    ``absent_ok``: test_80 leaves sim05 torn down)."""
    res = on_rank(rank, ["docker", "inspect", "--format", "{{json .}}", "dspark_vllm"], check=not absent_ok)
    if res.returncode != 0:
        return None
    doc = json.loads(res.stdout)
    return {"image": doc["Image"], "started": when(doc["State"]["StartedAt"]), "running": doc["State"]["Running"]}


def loads_since(rank, since: str) -> int:
    out = on_rank(rank, ["docker", "events", "--since", since, "--until", "0s", "--filter", "type=image",
                         "--filter", "event=load", "--format", "{{.Action}}"]).stdout
    return len([line for line in out.splitlines() if line.strip()])


def put_host_vars(rank, data: dict | None) -> None:
    path = INVENTORY / "host_vars" / f"{rank.name}.yml"
    if data is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(exist_ok=True)
    temp = INVENTORY / f".{rank.name}.yml.tmp"
    temp.write_text(yaml.safe_dump(data))
    temp.replace(path)


def streamed_request(head, seen: dict) -> None:
    """One streamed completion with the drain marker, read to its end; what came back goes into ``seen``."""
    body = json.dumps({"model": site()["dspark_served_model_name"], "prompt": f"hello {DRAIN_MARK}",
                       "max_tokens": DRAIN_TOKENS, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(f"http://{head.mgmt_ip}:8888/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    seen["started"] = datetime.datetime.now(datetime.timezone.utc)
    chunks, finish, usage, done = 0, None, None, False
    try:
        with urllib.request.urlopen(req, timeout=300) as answer:
            for raw in answer:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                event = json.loads(line[len("data: "):])
                for choice in event.get("choices") or []:
                    chunks += 1 if choice.get("text") else 0
                    finish = choice.get("finish_reason") or finish
                usage = event.get("usage") or usage
    except OSError as exc:
        seen["error"] = repr(exc)
    seen.update(ended=datetime.datetime.now(datetime.timezone.utc), chunks=chunks, finish=finish, usage=usage,
                done=done)


def gate_times(pairs) -> dict:
    return {p.name: datetime.datetime.fromtimestamp((evidence() / p.name / "runtime-gate.json").stat().st_mtime,
                                                    datetime.timezone.utc) for p in pairs}


@pytest.fixture(scope="module")
def rollouts(sim, clean_tree):
    """The three rollouts (halted by the canary, stopped by the budget, then through) and what each did, on the second
    fleet's four pairs, as test_80 left them (run alone: as the session brought them up)."""
    pairs = fleet2()
    assert [p.name for p in pairs] == ["sim03", "sim04", "sim05", "sim06"], pairs  # the names this file's checks read
    canary, others, failing = pairs[0], pairs[1:], pairs[2]
    ranks = [r for p in pairs for r in p.ranks]
    release_args = ("-e", f"@{release()}", "-e", "dspark_rollout_drain_timeout=180")
    env = {**(site().get("dspark_engine_extra_env") or {}), "DSPARK_SIM_TOKEN_DELAY_S": str(TOKEN_DELAY_S),
           "DSPARK_SIM_TOKEN_DELAY_MATCH": DRAIN_MARK}
    wrong_usage = {"dspark_engine_extra_env": {**env, "DSPARK_SIM_FAULT": "wrong_usage"}}
    seen: dict = {"pairs": pairs}
    try:
        for r in canary.ranks:  # the canary's gate fails (usage inconsistent); its engine keeps serving slowly
            put_host_vars(r, wrong_usage)
        seen["before_halted"] = {r.name: snapshot(r) for p in others for r in p.ranks}
        started = time.time()
        seen["halted"] = playbook("rollout.yml", clean_tree, *release_args, "-e", "dspark_rollout_wave_pairs=2",
                                  check=False, timeout=1800)
        seen["halted_s"] = time.time() - started
        seen["after_halted"] = {r.name: snapshot(r) for p in others for r in p.ranks}
        seen["halted_waves"] = waves_report(started)

        # the canary's fault is gone, sim05's gate now fails: waves of two pairs, the rollout's budget (0). sim04
        # passes beside sim05, so the wave is not a batch that failed whole (which Ansible itself would end the play
        # on, whatever the budget): what stops sim06's wave is the budget
        for r in canary.ranks:
            put_host_vars(r, None)
        for r in failing.ranks:
            put_host_vars(r, wrong_usage)
        since = {r.name: on_rank(r, ["date", "+%s"]).stdout.strip() for r in ranks}
        # a rank may hold the release's image already (sim03's from the halted run; another pair's from an earlier
        # test of its lane, e.g. the release rollback's): such a rank loads nothing
        seen["held"] = {r.name: on_rank(r, ["docker", "image", "inspect", release_pin()["image_id"]],
                                        check=False).returncode == 0 for r in ranks}
        seen["before_budget"] = {r.name: engine(r, absent_ok=True) for r in ranks}
        request: dict = {}
        thread = threading.Thread(target=streamed_request, args=(canary.head, request), daemon=True)
        thread.start()
        started = time.time()
        seen["budget"] = playbook("rollout.yml", clean_tree, *release_args, "-e", "dspark_rollout_wave_pairs=2",
                                  check=False, timeout=2400)
        seen["budget_s"] = time.time() - started
        thread.join(timeout=300)
        seen["request"] = request
        seen["budget_waves"] = waves_report(started)
        seen["after_budget"] = {r.name: engine(r, absent_ok=True) for r in ranks}
        seen["gated_budget"] = gate_times(pairs[:2])
        seen["readiness"] = json.loads((evidence() / canary.name / "readiness.json").read_text())
        seen["guarded"] = datetime.datetime.fromtimestamp(
            (evidence() / canary.name / "serving-guard.json").stat().st_mtime, datetime.timezone.utc)

        # sim05's fault is gone: the rollout again, waves of two pairs
        for r in failing.ranks:
            put_host_vars(r, None)
        started = time.time()
        seen["through"] = playbook("rollout.yml", clean_tree, *release_args, "-e", "dspark_rollout_wave_pairs=2",
                                   check=False, timeout=2400)
        seen["through_s"] = time.time() - started
        seen["waves"] = waves_report(started)
        seen["engines"] = {r.name: engine(r) for r in ranks}
        seen["loads"] = {r.name: loads_since(r, since[r.name]) for r in ranks}
        seen["gated"] = gate_times(pairs)
    finally:
        for r in (*canary.ranks, *failing.ranks):
            put_host_vars(r, None)
    return seen


def flat(res) -> str:
    return " ".join((res.stdout + res.stderr).split())


@pytest.mark.fault("rollout-canary-fails")
def test_a_failing_canary_halts_the_rollout_and_touches_no_other_pair(rollouts):
    res, doc = rollouts["halted"], rollouts["halted_waves"]
    out = flat(res)
    assert res.returncode == 2, out[-4000:]
    assert rollouts["after_halted"] == rollouts["before_halted"], "a pair other than the canary was changed"
    assert "usage is inconsistent" in out, out[-3000:]
    assert "HALTED: the canary pair sim03 did not pass: no other pair was touched" in out, out[-3000:]
    assert [(s["step"], s["verdict"]) for s in doc["steps"]] == [("canary", "FAILED")]
    assert doc["steps"][0]["pairs"][0]["phase"] == "Gate", doc
    assert doc["not_started"] == ["sim04", "sim05", "sim06"]


@pytest.mark.fault("rollout-drain-waits")
def test_the_canary_is_drained_the_request_in_flight_ends_whole_before_its_engine_is_replaced(rollouts):
    request, doc = rollouts["request"], rollouts["budget_waves"]
    assert doc["steps"][0]["step"] == "canary" and doc["steps"][0]["verdict"] == "PASS", doc
    assert "error" not in request, request
    assert request["done"] and request["finish"] == "length", request
    # every token came (a chunk carries one decode step's tokens, so the usage counts them)
    assert request["usage"]["completion_tokens"] == DRAIN_TOKENS and request["chunks"] > 0, request
    head = rollouts["after_budget"][rollouts["pairs"][0].head.name]
    assert head["started"] > request["ended"], (head, request)  # replaced only after the request had ended
    assert rollouts["readiness"]["drained_s"] > 0, rollouts["readiness"]  # the stop waited for it


@pytest.mark.fault("rollout-failure-budget")
def test_the_failure_budget_stops_the_waves_not_yet_started_and_touches_none_of_their_pairs(rollouts):
    res, doc = rollouts["budget"], rollouts["budget_waves"]
    out = flat(res)
    assert res.returncode == 2, out[-4000:]
    assert [(s["step"], s["wave"], [e["pair"] for e in s["pairs"]], s["verdict"]) for s in doc["steps"]] == [
        ("canary", None, ["sim03"], "PASS"), ("stage", None, ["sim04", "sim05", "sim06"], "PASS"),
        ("wave", 1, ["sim04", "sim05"], "FAILED"), ("wave", 2, ["sim06"], "FAILED")], doc
    wave1 = {e["pair"]: e for e in doc["steps"][2]["pairs"]}
    assert wave1["sim04"]["verdict"] == "PASS" and wave1["sim05"]["phase"] == "Gate", doc
    assert doc["steps"][3]["pairs"][0]["verdict"] == "NOT STARTED", doc  # its batch stopped at the budget's barrier
    assert doc["not_started"] == ["sim06"] and "failure budget" in doc["halted"], doc
    assert "pair sim06 not started: 1 of 3 pairs failed (sim05), expected at most 0" in out, out[-3000:]
    assert "HALTED: the failure budget (dspark_fleet_max_failed_pairs) stopped the waves of sim06" in out, out[-3000:]
    # sim06 was staged (its image loaded) but its engines were not touched: same containers, the old image
    before, after = rollouts["before_budget"], rollouts["after_budget"]
    for role in ("head", "worker"):
        assert after[f"sim06-{role}"] == before[f"sim06-{role}"], (before, after)
        assert (after[f"sim06-{role}"] or {}).get("image") != release_pin()["image_id"]
    assert after["sim04-head"]["image"] == release_pin()["image_id"]  # the wave before the failure went through


@pytest.mark.fault("rollout-two-waves")
def test_the_rollout_goes_canary_first_then_waves_of_whole_pairs_each_gated_before_the_next(rollouts):
    doc, engines, gated = rollouts["waves"], rollouts["engines"], rollouts["gated"]
    assert rollouts["through"].returncode == 0, flat(rollouts["through"])[-4000:]
    assert [(s["step"], s["wave"], [e["pair"] for e in s["pairs"]], s["verdict"]) for s in doc["steps"]] == [
        ("canary", None, ["sim03"], "PASS"), ("stage", None, ["sim04", "sim05", "sim06"], "PASS"),
        ("wave", 1, ["sim04", "sim05"], "PASS"), ("wave", 2, ["sim06"], "PASS")], doc
    assert doc["halted"] is None and doc["not_started"] == []
    steps = {(s["step"], s["wave"]): (when(s["started"]), when(s["ended"])) for s in doc["steps"]}
    budget = {(s["step"], s["wave"]): (when(s["started"]), when(s["ended"])) for s in rollouts["budget_waves"]["steps"]}
    # whole pairs: both ranks of each pair started within their own step; a pair the budget's run had converged
    # (the canary, sim04) was left alone by this run, and no engine started while staging
    for run, step, names in ((budget, ("canary", None), ["sim03"]), (budget, ("wave", 1), ["sim04"]),
                             (steps, ("wave", 1), ["sim05"]), (steps, ("wave", 2), ["sim06"])):
        begin, end = run[step]
        for name in names:
            for role in ("head", "worker"):
                assert begin < engines[f"{name}-{role}"]["started"] < end, (step, name, role, engines)
    # each step gated before the next one's engines start: the canary (guarded too) before everything else,
    # wave 1 before wave 2
    first_other = min(rollouts["after_budget"][f"sim04-{r}"]["started"] for r in ("head", "worker"))
    assert rollouts["gated_budget"]["sim03"] < rollouts["guarded"] < budget[("stage", None)][0] < first_other
    wave2 = min(engines[f"sim06-{r}"]["started"] for r in ("head", "worker"))
    assert max(gated["sim04"], gated["sim05"]) < wave2, (gated, wave2)
    # every rank serves the new release; a rank that lacked its image loaded it once (sim03 in the halted run)
    assert {name: e["image"] for name, e in engines.items()} == {name: release_pin()["image_id"] for name in engines}
    assert all(e["running"] for e in engines.values())
    assert rollouts["held"]["sim03-head"] and rollouts["held"]["sim03-worker"], rollouts["held"]  # the halted run's load
    assert rollouts["loads"] == {name: (0 if rollouts["held"][name] else 1) for name in engines}, (rollouts["loads"],
                                                                                                   rollouts["held"])
    assert not all(rollouts["held"].values()), rollouts["held"]  # the runs did load the release somewhere
    took = rollouts["halted_s"] + rollouts["budget_s"] + rollouts["through_s"]
    print(f"rollout runs: halted {rollouts['halted_s']:.0f} s, budget {rollouts['budget_s']:.0f} s, "
          f"through {rollouts['through_s']:.0f} s ({took:.0f} s)")
