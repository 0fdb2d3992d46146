"""playbooks/systems.yml and playbooks/pubsuite.yml on the simulator: the lanes' figures follow the
stand-in's per-token delay, a wrong-usage fault gives error rows and no figure, and the
publication suite runs end to end and resumes after an interruption without redoing a stage."""
from __future__ import annotations

import json
import re
import uuid


from simhelpers import container_state, evidence_of, pair_playbook

DELAY_S = 0.05
SMALL = json.dumps({
    "dspark_systems_latency_reps": 3, "dspark_systems_latency_max_tokens": 16,
    "dspark_systems_concurrency_levels": [1, 2], "dspark_systems_concurrency_reps": 1,
    "dspark_systems_concurrency_max_tokens": 16, "dspark_systems_decode_reps": 2,
    "dspark_systems_decode_max_tokens": 32, "dspark_systems_prefill_reps": 1,
    "dspark_systems_prefill_prompt_tokens": 2000})


def systems(pair) -> dict:
    return json.loads((evidence_of(pair) / "systems.json").read_text())


def rows(doc: dict, lane: str) -> list[dict]:
    return [r for r in doc["rows"] if r["lane"] == lane]


def flat(res) -> str:
    return " ".join((res.stdout + res.stderr).split())


def slow(pair, host_vars, **extra):
    env = {"DSPARK_SIM_STARTUP_DELAY_S": "1", "DSPARK_SIM_TOKEN_DELAY_S": str(DELAY_S), **extra}
    host_vars(pair.head, {"dspark_engine_extra_env": env})
    host_vars(pair.worker, {"dspark_engine_extra_env": {k: v for k, v in env.items() if k != "DSPARK_SIM_FAULT"}})


def test_lanes_follow_the_per_token_delay(pair_c, clean_tree, host_vars):
    pair = pair_c
    slow(pair, host_vars)
    pair_playbook("provision.yml", pair, clean_tree)
    res = pair_playbook("systems.yml", pair, clean_tree, "-e", SMALL)
    assert "systems lanes PASS" in flat(res)
    doc = systems(pair)
    assert doc["status"] == "PASS" and doc["context"]["profile"] == "production"
    latency = rows(doc, "latency")[0]
    # each generated token takes DELAY_S on the stand-in: the measured inter-token latency is that
    # delay plus scheduling noise, never less
    assert DELAY_S * 1000 * 0.9 <= latency["client"]["itl_ms"] <= DELAY_S * 1000 * 2.0, latency
    assert latency["client"]["ttft_ms"] > 0 and latency["client"]["tok_s"] <= 1.0 / DELAY_S * 1.1
    levels = {r["level"]: r for r in rows(doc, "concurrency")}
    assert set(levels) == {1, 2} and all(r["status"] == "PASS" for r in levels.values())
    assert levels[2]["client"]["tok_s"] > levels[1]["client"]["tok_s"] * 1.4  # two streams, one delay each
    spec = rows(doc, "spec_decode")[0]
    assert spec["status"] == "PASS" and 0 < spec["server"]["acceptance_rate"] <= 1
    external = rows(doc, "external")
    assert external and all(r["status"] == "NOT_IMPLEMENTED" for r in external)
    # no r0b0bench on the simulator: its default lanes and the quality pillars are shown, not scored
    assert [r["level"] for r in external] == ["canary", "bfcl_mt", "bfcl_ast", "latency", "concurrency",
                                              "throughput", "qa", "ifeval", "humaneval", "gsm8k"]
    assert all(r["client_kind"] is None and r["reasons"] for r in external)
    # the collection's own lanes are OpenAI-API clients; one kind, nothing refused
    assert all(r["client_kind"] == "openai_portable" for r in doc["rows"] if r["lane"] != "external")
    assert doc["client_kinds"] == ["openai_portable"] and doc["reasons"] == []
    assert "client" in latency and "server" in latency  # client and server figures are kept apart
    assert "| latency |" in (evidence_of(pair) / "systems.md").read_text()


def test_wrong_usage_is_an_error_row_not_a_figure(pair_b, clean_tree, host_vars):
    pair = pair_b
    slow(pair, host_vars, DSPARK_SIM_FAULT="wrong_usage")
    pair_playbook("provision.yml", pair, clean_tree, check=False)  # the gate fails on usage too
    res = pair_playbook("systems.yml", pair, clean_tree, "-e", SMALL, check=False)
    assert res.returncode != 0
    doc = systems(pair)
    latency = rows(doc, "latency")[0]
    assert latency["status"] == "ERROR" and latency["client"]["itl_ms"] is None and latency["client"]["tok_s"] is None
    assert any("usage" in reason for reason in latency["reasons"])
    assert "systems lanes ERROR" in flat(res)


def test_pubsuite_runs_end_to_end_and_resumes_without_redoing_a_stage(pair_c, clean_tree, host_vars):
    pair = pair_c
    slow(pair, host_vars)
    suite_id = f"t70-{uuid.uuid4().hex[:8]}"  # a new suite: nothing recorded yet
    suite = ["-e", f"dspark_pubsuite_id={suite_id}", "-e", "dspark_niah_poll_interval=1", "-e", SMALL]
    stages_file = evidence_of(pair) / "pubsuite" / suite_id / "stages.json"
    # the first run is interrupted in the systems stage (an unknown lane is refused there)
    first = pair_playbook("pubsuite.yml", pair, clean_tree, *suite,
                          "-e", '{"dspark_systems_lanes": ["latency", "no_such_lane"]}', check=False)
    assert first.returncode != 0
    stages = json.loads(stages_file.read_text())["stages"]
    assert set(stages) == {"niah", "production"} and stages["niah"]["status"] == "PASS"
    engine = (container_state(pair.head)["StartedAt"], container_state(pair.worker)["StartedAt"])
    niah_summaries = sorted(evidence_of(pair).glob("niah/long-1m-*/niah.json"))
    niah_mtimes = [p.stat().st_mtime for p in niah_summaries]

    second = pair_playbook("pubsuite.yml", pair, clean_tree, *suite)
    out = flat(second)
    assert re.search(r"finished stages: niah, production\b(?!,)", out)
    stages = json.loads(stages_file.read_text())["stages"]
    assert set(stages) == {"niah", "production", "systems", "repro", "pack"}
    assert stages["systems"]["status"] == "PASS" and stages["repro"]["status"] == "PASS"
    # NIAH and the production launch were not done again: same engine, same NIAH summary
    assert (container_state(pair.head)["StartedAt"], container_state(pair.worker)["StartedAt"]) == engine
    assert [p.stat().st_mtime for p in niah_summaries] == niah_mtimes
    packs = sorted((evidence_of(pair) / "runs").iterdir())
    index = json.loads((packs[-1] / "index.json").read_text())
    assert index["playbook"] == "pubsuite"
    names = {a["name"] for a in index["artifacts"]}
    assert {"systems.json", "serving-guard.json", "runtime-gate.json"} <= names
    assert any(n.startswith("niah/long-1m-") and n.endswith("niah.json") for n in names)
    # NIAH ran on long-1m and the lanes on production, both regular: no breakable/regular mix
    assert not any("mix CUDA-graph" in r for r in index["reasons"])
    assert not any("mix client kinds" in r for r in index["reasons"])
    assert index["results"]["client_kinds"] == ["openai_portable"]
    assert index["results"]["systems"]["not_implemented"] == 10

    assert stages["pack"]["status"] == "PUBLISHABLE", index["reasons"]
    assert "all PASS, the pack is publishable" in out

    third = pair_playbook("pubsuite.yml", pair, clean_tree, *suite)
    assert re.search(r"finished stages: niah, production, systems, repro, pack\b", flat(third))
