# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The evidence pack logic: planning, redaction, publication verdict, writing and the leak scan."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.evidence import _evidence as ev
from ansible_collections.gb10.dspark.plugins.module_utils.evidence import _evidence_run as ev_run
from ansible_collections.gb10.dspark.plugins.module_utils.evidence import _evidence_index as ev_index
from ansible_collections.gb10.dspark.plugins.module_utils.evidence import _evidence_pack as ev_pack
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError

MANIFEST = "f6777b31e8c8977361d629ca99c37a199d3b52b9abc134f1de624eb202f083a9"
API_KEY = "sk-live-7Q2vX9pL4mN8"
NOW = datetime(2026, 8, 5, 12, 0, 3, tzinfo=timezone.utc)


def clean_facts(**changes) -> dict:
    facts = {
        "pin": {"image_id": "sha256:" + "2d" * 32, "model_revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
                "runtime_manifest_sha256": MANIFEST, "release": "v026"},
        "manifest_sha256": MANIFEST,
        "profile": {"name": "production", "sha256": "b9" * 32, "experimental": False, "departures": [],
                    "cudagraph_implementation": "regular"},
        "tree": {"dirty": False, "allow_dirty": False, "commit": "4d9a358e0f2b6f1d6f4a4c8f1bb1b1e7c1a2d3e4"},
        "gate_status": "PASS",
        "row_kinds": ["regular"],
    }
    facts.update(changes)
    return facts


def sources(root: Path) -> dict[str, Path]:
    """Realistic control-node files of one run under ``root``/evidence/sim01."""
    run = root / "evidence" / "sim01"
    run.mkdir(parents=True)
    files = {
        "gate": run / "runtime-gate.json",
        "guard": run / "serving-guard.json",
        "niah": run / "niah-summary.json",
        "row": run / "niah-rows.jsonl",
        "inspect": run / "inspect-head.json",
        "env": run / "production.env",
    }
    files["gate"].write_text(json.dumps({"schema_version": 3, "status": "PASS", "errors": [],
                                         "evidence": {"output": str(files["gate"])}}))
    files["guard"].write_text(json.dumps({"schema_version": 1, "status": "PASS", "requests": 64, "errors": []}))
    files["niah"].write_text(json.dumps({"status": "PASS", "depths": [0.25, 0.5, 0.9]}))
    files["row"].write_text('{"depth": 0.25, "status": "PASS", "implementation": "regular"}\n')
    files["inspect"].write_text(json.dumps([{
        "Id": "c0ffee",
        "Args": ["serve", "/model", "--api-key", API_KEY, "--port", "8888"],
        "Config": {"Env": [f"VLLM_API_KEY={API_KEY}", "hf_token=hf_abc", "PATH=/usr/bin", "NCCL_IB_HCA=mlx5_0",
                           "DB_PASSWORD=pw1", "MY_SECRET_THING=s3"],
                   "Cmd": ["vllm", "serve", f"--api-key={API_KEY}"],
                   "Entrypoint": ["bash", "-c", f"exec vllm serve --api-key {API_KEY}"]},
        "Mounts": [{"Source": str(run / "manifest.json")}],
    }]))
    files["env"].write_text(f"MAX_MODEL_LEN=327680\nDSPARK_MODEL_DIR={root}/models/dsv4\n")
    return files


def full_artifacts(files: dict[str, Path]) -> list[dict]:
    return [
        {"name": "runtime-gate.json", "src": str(files["gate"]), "kind": "gate", "required": True},
        {"name": "serving-guard.json", "src": str(files["guard"]), "kind": "guard"},
        {"name": "niah/summary.json", "src": str(files["niah"]), "kind": "niah"},
        {"name": "niah/rows.jsonl", "src": str(files["row"]), "kind": "niah_row"},
        {"name": "inspect/head.json", "src": str(files["inspect"]), "kind": "inspect", "required": True},
        {"name": "profile/production.env", "src": str(files["env"]), "kind": "profile", "required": True},
        {"name": "profile/compilation-config.json", "kind": "compilation_config",
         "content": {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_implementation": "regular"}},
        {"name": "pin.json", "kind": "pin", "content": clean_facts()["pin"], "required": True},
        {"name": "manifest.sha256", "kind": "manifest", "content": f"{MANIFEST}  runtime-manifest.json\n"},
    ]


def prefixes(root: Path) -> list[dict]:
    return [{"prefix": str(root), "placeholder": "<root>"},
            {"prefix": str(root / "evidence"), "placeholder": "<evidence>"}]


def plan(root: Path, artifacts: list[dict] | None = None, facts: dict | None = None, **kwargs) -> ev_pack.Plan:
    files = sources(root) if artifacts is None else None
    kwargs.setdefault("secrets", [API_KEY])
    kwargs.setdefault("redact_prefixes", prefixes(root))
    return ev_pack.plan_pack(str(kwargs.pop("dest", root / "evidence" / "sim01" / "runs" / "r1")), "sim01", "r1",
                        "provision", artifacts if artifacts is not None else full_artifacts(files),
                        facts=clean_facts() if facts is None else facts, now=NOW, **kwargs)


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_index_lists_every_file_with_its_checksum(tmp_path):
    p = plan(tmp_path)
    ev_pack.write_pack(p)
    dest = Path(p.dest)
    index = json.loads((dest / "index.json").read_text())
    assert index == p.index
    assert index["pair"] == "sim01" and index["run_id"] == "r1" and index["created_utc"] == "2026-08-05T12:00:03Z"
    on_disk = {str(f.relative_to(dest)): hashlib.sha256(f.read_bytes()).hexdigest()
               for f in dest.rglob("*") if f.is_file()}
    listed = {a["name"]: a for a in index["artifacts"]}
    assert set(listed) == set(on_disk) - set(ev.GENERATED)
    for name, artifact in listed.items():
        assert artifact["sha256"] == on_disk[name] and artifact["bytes"] == (dest / name).stat().st_size
    markdown = (dest / "index.md").read_text()
    for name, digest in on_disk.items():
        assert f"`{name}`" in markdown
        if name not in ("index.md", "SHA256SUMS"):
            assert digest in markdown, name
    assert "`invalid_for_publish: false`" in markdown and "| pair | sim01 |" in markdown
    assert str(tmp_path) not in markdown and str(tmp_path) not in (dest / "index.json").read_text()


def test_source_hash_differs_from_pack_hash_only_when_redacted(tmp_path):
    p = plan(tmp_path)
    by_name = {e.name: e for e in p.entries}
    guard = by_name["serving-guard.json"]  # holds no path: copied byte for byte
    assert not guard.redacted and guard.source_sha256 == guard.sha256
    gate = by_name["runtime-gate.json"]  # holds the control-node path of its own output
    assert gate.redacted and gate.source_sha256 != gate.sha256
    assert by_name["pin.json"].source_sha256 is None


# --- publication verdict --------------------------------------------------------------------------------
def test_clean_run_is_publishable(tmp_path):
    p = plan(tmp_path)
    assert p.reasons == [] and p.invalid_for_publish is False
    assert p.index["invalid_for_publish"] is False
    assert p.index["results"]["gate"]["status"] == "PASS"
    assert p.index["results"]["guard"]["status"] == "PASS" and p.index["results"]["niah"]["status"] == "PASS"


def test_dirty_tree_and_experimental_profile_are_both_reasons(tmp_path):
    facts = clean_facts(tree={"dirty": True, "allow_dirty": True, "commit": "4d9a358"},
                        profile={"name": "production-k8", "sha256": "ab" * 32, "experimental": True,
                                 "departures": [{"key": "max_num_seqs", "qualified": 16, "actual": 8}],
                                 "cudagraph_implementation": "regular"})
    p = plan(tmp_path, facts=facts)
    assert p.invalid_for_publish is True
    assert "wrapper tree at 4d9a358 is dirty (allowed by allow_dirty)" in p.reasons
    assert "profile production-k8 is experimental" in p.reasons
    assert "profile production-k8 departs from the qualified profile: max_num_seqs 8 (qualified 16)" in p.reasons
    assert len(p.reasons) == 3
    assert p.index["reasons"] == p.reasons and p.index["invalid_for_publish"] is True
    markdown = p.generated[1].data.decode()
    assert "`invalid_for_publish: true`" in markdown
    assert "- profile production-k8 is experimental" in markdown


def test_mixed_row_kinds_are_a_reason(tmp_path):
    p = plan(tmp_path, facts=clean_facts(row_kinds=["regular", "breakable", "regular"]))
    assert p.reasons == ["result rows mix CUDA-graph implementations: breakable, regular"]


def _systems_doc(*rows: tuple) -> dict:
    """A systems.json of rows (lane, level, status, client_kind), as gb10.dspark.systems_lanes writes it."""
    return {"status": "PASS", "counts": {"PASS": len(rows), "ERROR": 0, "FAIL": 0, "NOT_IMPLEMENTED": 0},
            "rows": [{"lane": lane, "level": level, "status": status, "client_kind": kind}
                     for lane, level, status, kind in rows]}


def test_mixed_client_kinds_in_the_facts_are_a_reason_naming_both_and_their_sources(tmp_path):
    p = plan(tmp_path, facts=clean_facts(client_kinds={"vllm-bench": ["bench/vllm-serve.json"],
                                                       "openai_portable": ["serving-guard.json"]}))
    assert p.reasons == ["result rows mix client kinds: openai_portable (serving-guard.json) and vllm-bench "
                         "(bench/vllm-serve.json); vllm-bench and openai_portable rows are never published together"]
    assert p.index["results"]["client_kinds"] == ["openai_portable", "vllm-bench"]
    assert "Result row client kinds: openai_portable, vllm-bench" in p.generated[1].data.decode()


def test_systems_rows_of_two_client_kinds_in_the_pack_are_refused(tmp_path):
    files = sources(tmp_path)
    doc = _systems_doc(("canary", None, "PASS", "openai_portable"), ("concurrency", 1, "PASS", "openai_portable"),
                       ("concurrency", 2, "PASS", "openai_portable"), ("external", "throughput", "PASS", "vllm-bench"),
                       ("external", "gsm8k", "NOT_IMPLEMENTED", None))
    artifacts = full_artifacts(files) + [{"name": "systems.json", "kind": "systems", "content": doc}]
    p = plan(tmp_path, artifacts=artifacts)
    assert p.reasons == ["result rows mix client kinds: openai_portable (systems.json rows canary, concurrency) "
                         "and vllm-bench (systems.json rows external throughput); vllm-bench and openai_portable "
                         "rows are never published together"]


def test_rows_of_one_client_kind_are_accepted_and_rows_without_one_do_not_count(tmp_path):
    files = sources(tmp_path)
    doc = _systems_doc(("latency", None, "PASS", "openai_portable"), ("external", "bfcl_mt", "PASS", "openai_portable"),
                       ("external", "qa", "NOT_IMPLEMENTED", None))
    artifacts = full_artifacts(files) + [{"name": "systems.json", "kind": "systems", "content": doc}]
    p = plan(tmp_path, artifacts=artifacts, facts=clean_facts(client_kinds={"openai_portable": ["serving-guard.json"]}))
    assert p.reasons == [] and p.index["results"]["client_kinds"] == ["openai_portable"]
    q = plan(tmp_path / "only-vllm-bench", facts=clean_facts(client_kinds={"vllm-bench": ["bench.json"]}))
    assert q.reasons == [] and q.index["results"]["client_kinds"] == ["vllm-bench"]
    assert "Result row client kinds: not recorded" in plan(tmp_path / "none").generated[1].data.decode()


def test_an_unknown_client_kind_on_a_row_is_a_reason(tmp_path):
    files = sources(tmp_path)
    doc = _systems_doc(("latency", None, "PASS", "curl"))
    artifacts = full_artifacts(files) + [{"name": "systems.json", "kind": "systems", "content": doc}]
    p = plan(tmp_path, artifacts=artifacts)
    assert p.reasons == ["client kind curl of systems.json rows latency is unknown, expected openai_portable or "
                         "vllm-bench"]


def test_bad_client_kind_facts_are_refused(tmp_path):
    with pytest.raises(IdentityError) as info:
        plan(tmp_path, facts=clean_facts(client_kinds={"curl": ["x.json"], "vllm-bench": "bench.json"}))
    text = str(info.value)
    assert "facts.client_kinds key is 'curl', expected openai_portable or vllm-bench" in text
    assert "facts.client_kinds.vllm-bench is 'bench.json', expected a list of sources (strings)" in text


def test_rows_of_another_implementation_than_the_profile_are_a_reason(tmp_path):
    p = plan(tmp_path, facts=clean_facts(row_kinds=["breakable"]))
    assert p.reasons == ["result rows are breakable, but profile production runs regular"]


def test_infra_errors_are_counted_apart_from_model_failures(tmp_path):
    p = plan(tmp_path, facts=clean_facts(guard_infra_errors=2, guard_model_failures=1, niah_infra_errors=0,
                                         niah_model_failures=3))
    assert p.reasons == ["serving guard counted 2 infra error(s); publishable rows need 0"]
    results = p.index["results"]
    assert (results["guard"]["infra_errors"], results["guard"]["model_failures"]) == (2, 1)
    assert (results["niah"]["infra_errors"], results["niah"]["model_failures"]) == (0, 3)
    assert "| serving guard | PASS | 2 | 1 |" in p.generated[1].data.decode()


def test_gate_status_is_read_from_the_pack_and_checked_against_the_facts(tmp_path):
    files = sources(tmp_path)
    files["gate"].write_text(json.dumps({"schema_version": 3, "status": "FAIL", "errors": ["x"]}))
    p = plan(tmp_path, artifacts=full_artifacts(files))
    assert "runtime gate status is FAIL in runtime-gate.json but PASS in the facts" in p.reasons
    assert "runtime gate status is FAIL, expected PASS" in p.reasons
    assert p.index["results"]["gate"]["status"] == "FAIL"


def test_missing_gate_guard_failure_and_niah_status(tmp_path):
    files = sources(tmp_path)
    files["gate"].unlink()
    files["guard"].write_text(json.dumps({"status": "FAIL"}))
    files["niah"].write_text(json.dumps({"status": "ERROR"}))
    p = plan(tmp_path, artifacts=full_artifacts(files), facts=clean_facts(gate_status=None))
    assert p.reasons == [
        "runtime gate result is missing from the pack",
        "serving guard status is FAIL, expected PASS",
        "NIAH status is ERROR, expected PASS",
        "required artifact runtime-gate.json (gate) is missing",
    ]
    gate = next(e for e in p.entries if e.name == "runtime-gate.json")
    assert gate.state == "missing" and gate.sha256 is None and "runtime-gate.json" not in p.files()


def test_optional_missing_source_is_absent_and_no_reason(tmp_path):
    files = sources(tmp_path)
    artifacts = full_artifacts(files) + [{"name": "readiness.json", "src": str(tmp_path / "nope.json"),
                                          "kind": "readiness"}]
    p = plan(tmp_path, artifacts=artifacts)
    entry = next(e for e in p.entries if e.name == "readiness.json")
    assert entry.state == "absent" and p.reasons == []
    assert "| `readiness.json` | readiness | absent | absent | absent |" in p.generated[1].data.decode()


def test_guard_status_without_its_file_is_a_reason(tmp_path):
    files = sources(tmp_path)
    artifacts = [a for a in full_artifacts(files) if a["kind"] != "guard"]
    p = plan(tmp_path, artifacts=artifacts, facts=clean_facts(guard_status="PASS"))
    assert p.reasons == ["serving guard result is missing from the pack"]
    assert plan(tmp_path / "b", artifacts=[a for a in full_artifacts(sources(tmp_path / "b"))
                                           if a["kind"] != "guard"]).reasons == []


def test_unrecorded_facts_are_reasons_and_manifest_must_match_the_pin(tmp_path):
    p = plan(tmp_path, facts={"gate_status": "PASS", "manifest_sha256": "0" * 64,
                              "pin": {"runtime_manifest_sha256": MANIFEST}})
    assert p.reasons == [
        "image id is not recorded (facts.pin.image_id)",
        "model revision is not recorded (facts.pin.model_revision)",
        f"runtime manifest sha256 is {'0' * 64}, pinned {MANIFEST}",
        "wrapper tree state is not recorded (facts.tree.dirty)",
        "profile is not recorded (facts.profile.name)",
    ]
    facts = clean_facts(profile={"name": "production", "departures": []})
    assert plan(tmp_path / "b", facts=facts).reasons == ["profile production: whether it is experimental is not recorded"]


def test_bad_fact_counts_are_refused(tmp_path):
    with pytest.raises(IdentityError) as info:
        plan(tmp_path, facts=clean_facts(niah_infra_errors=-1, row_kinds=["regular", "piecewise"]))
    assert "rank control node: facts.niah_infra_errors is -1, expected a count" in str(info.value)
    assert "facts.row_kinds element is 'piecewise', expected regular or breakable" in str(info.value)


def test_prefixes_under_a_symlink_are_replaced_in_both_spellings(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    text = tmp_path / "notes.txt"
    text.write_text(f"{link}/a and {real}/b\n")
    p = plan(tmp_path, artifacts=[{"name": "notes.txt", "src": str(text)}], secrets=[],
             redact_prefixes=[{"prefix": str(link) + "/", "placeholder": "<data>"}])
    assert p.entries[0].data == b"<data>/a and <data>/b\n"


def test_path_left_in_an_escaped_spelling_fails_the_plan(tmp_path):
    src = tmp_path / "escaped.json"
    src.write_text('{"output": "' + str(tmp_path / "evidence").replace("/", "\\/") + '/x.json"}')  # valid JSON
    assert json.loads(src.read_text())["output"].startswith(str(tmp_path))
    with pytest.raises(IdentityError) as info:
        plan(tmp_path, artifacts=[{"name": "escaped.json", "src": str(src)}], secrets=[])
    assert f"pack file escaped.json is carrying the control-node path {tmp_path}" in str(info.value)


def test_the_inspect_rule_applies_to_every_kind():
    # issue 21: one rule for everything the pack writes (this test used to require other kinds be left alone)
    doc = {"Env": ["A_TOKEN=x"], "Args": ["--api-key", "k"]}
    redacted = {"Env": ["A_TOKEN=<redacted>"], "Args": ["--api-key", "<redacted>"]}
    assert ev.redact_document(doc) == redacted
    entry = ev.load_artifact({"name": "x.json", "kind": "other", "content": doc}, [])
    assert json.loads(entry.data) == redacted and entry.redacted


def test_inspect_that_is_not_json_fails(tmp_path):
    src = tmp_path / "inspect.txt"
    src.write_text("Env: TOKEN=abc\n")
    with pytest.raises(CheckError, match="inspect.json .inspect. is not JSON"):
        plan(tmp_path, artifacts=[{"name": "inspect.json", "src": str(src), "kind": "inspect"}], secrets=[])


# --- secrets ---------------------------------------------------------------------------------------------
def test_secret_in_an_artifact_fails_the_plan_without_naming_it(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text(f"curl -H 'Authorization: Bearer {API_KEY}'\n")
    files = sources(tmp_path)
    with pytest.raises(IdentityError) as info:
        plan(tmp_path, artifacts=full_artifacts(files) + [{"name": "notes.txt", "src": str(notes)}])
    assert API_KEY not in str(info.value)
    assert str(info.value) == "rank control node: pack file notes.txt is carrying secret #1 (value withheld), " \
                              "expected free of secrets"
    assert not (tmp_path / "evidence" / "sim01" / "runs").exists()


def test_secret_in_facts_reaches_the_index_and_fails(tmp_path):
    with pytest.raises(IdentityError, match="pack file index.json is carrying secret #2"):
        plan(tmp_path, facts=clean_facts(tree={"dirty": False, "allow_dirty": False, "commit": "hunter22"}),
             secrets=[API_KEY, "hunter22"])


def test_non_ascii_secret_is_found_in_escaped_json():
    secret = "pässwörd-42"
    entry = ev.load_artifact({"name": "a.json", "content": {"note": secret}}, [])
    assert secret.encode() not in entry.data  # written as \u escapes
    assert [m.item for m in ev.find_leaks("a.json", entry.data, [secret], [])] == ["pack file a.json"]


# --- destination and names -------------------------------------------------------------------------------
def test_non_empty_destination_is_refused(tmp_path):
    dest = tmp_path / "evidence" / "sim01" / "runs" / "r1"
    dest.mkdir(parents=True)
    (dest / "index.json").write_text("{}")
    with pytest.raises(IdentityError) as info:
        plan(tmp_path / "src", dest=dest)
    assert str(info.value) == (f"rank control node: evidence pack {dest} is a non-empty folder (1 entries), "
                               "expected absent or an empty folder (packs are never overwritten)")
    assert (dest / "index.json").read_text() == "{}"


def test_plan_writes_nothing(tmp_path):
    files = sources(tmp_path)
    before = tree(tmp_path)
    p = plan(tmp_path, artifacts=full_artifacts(files))
    assert tree(tmp_path) == before
    assert p.files() == sorted(["SHA256SUMS", "index.json", "index.md", "inspect/head.json", "manifest.sha256",
                                "niah/rows.jsonl", "niah/summary.json", "pin.json", "profile/compilation-config.json",
                                "profile/production.env", "runtime-gate.json", "serving-guard.json"])


@pytest.mark.parametrize("name, why", [
    ("../escape.json", "'..'"),
    ("a/../../b", "'..'"),
    ("/etc/passwd", "an absolute path"),
    ("a//b", "empty"),
    ("./a", "'.'"),
    ("", "an empty name"),
    ("a\\b", "backslash"),
    ("line\nbreak", "control character"),
    ("SHA256SUMS", "reserves"),
    ("Index.JSON", "reserves"),
])
def test_bad_names_are_refused(tmp_path, name, why):
    with pytest.raises(IdentityError) as info:
        plan(tmp_path, artifacts=[{"name": name, "content": "x"}], secrets=[], redact_prefixes=[])
    assert why in str(info.value)
    assert not (tmp_path / "evidence").exists()


def test_duplicate_and_folder_clashing_names_are_refused():
    problems = ev.check_names(["a.json", "a.json", "inspect", "inspect/head.json", "ok.txt"])
    assert [m.message for m in problems] == [
        "rank control node: artifact name 'a.json' is given twice, expected unique",
        "rank control node: artifact name 'inspect' is also the folder of another artifact, expected a file name",
    ]


def test_src_and_content_are_exclusive_and_one_is_needed():
    with pytest.raises(IdentityError, match="given both src and content"):
        ev.load_artifact({"name": "a", "src": "/x", "content": "y"}, [])
    with pytest.raises(IdentityError, match="given neither src nor content"):
        ev.load_artifact({"name": "a"}, [])


def test_folder_source_fails(tmp_path):
    with pytest.raises(CheckError, match="is a folder, expected a file"):
        ev.load_artifact({"name": "a", "src": str(tmp_path)}, [])


@pytest.mark.parametrize("item, match", [
    ({"prefix": "/", "placeholder": "<root>"}, "other than /"),
    ({"prefix": "relative/path", "placeholder": "<x>"}, "absolute"),
    ({"prefix": "/srv/ev", "placeholder": 'say "hi"'}, "without quotes"),
    ({"prefix": "/srv/ev", "placeholder": "/srv/ev/x"}, "holds no redacted path"),
])
def test_bad_prefixes_are_refused(item, match):
    with pytest.raises(IdentityError, match=match):
        ev.normalise_prefixes([item])


def test_sha256sums_format():
    entries = [ev.Entry("b.txt", "other", data=b"b"), ev.Entry("a/x.json", "other", data=b"{}"),
               ev.Entry("gone", "other", state="absent")]
    assert ev_index.sha256sums(entries).decode().splitlines() == [
        f"{hashlib.sha256(b'{}').hexdigest()}  a/x.json",
        f"{hashlib.sha256(b'b').hexdigest()}  b.txt",
    ]


# --------------------------------------------------------------------------------------------
# this run's own result files: record_run_files (as gb10.dspark.evidence_record builds the list)
# and from_run (what the pack takes from it)
# --------------------------------------------------------------------------------------------
NIAH_KEY = "long-1m-111111111111"
NIAH_DIR = f"niah/{NIAH_KEY}"
TREE_REVISION = "9cef5c53d9e5b9ed8fb1b7ff8024f2a4b5aa540c"


def _put(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record(run_files: list[dict], *files: tuple[str, Path, str]) -> list[dict]:
    """``run_files`` with each (name, src, kind) recorded, as the producing role would."""
    new, recorded, missing = ev_run.record_run_files(run_files, [{"name": n, "src": str(s), "kind": k} for n, s, k in files])
    assert missing == [] and [r["name"] for r in recorded] == [n for n, _s, _k in files]
    return new


def pair_folder(root: Path, guard_impl: str = "regular", dirty: bool = False, guard: bool = True,
                niah_client: str | None = "openai_portable") -> tuple[Path, list[dict]]:
    """A pair's evidence folder holding this run's results next to an earlier run's NIAH folder, and
    this run's list of the files it wrote (the earlier run's files are never on it)."""
    pair = root / "evidence" / "sim01"
    _put(pair / "readiness.json", {"profile": "long-1m", "profile_sha256": "ab" * 32, "experimental": False,
                                   "departures": [], "kv_cache_size_tokens": 1253231,
                                   "fabric_env": {"head": {"NCCL_IB_GID_INDEX": "1"},
                                                  "worker": {"NCCL_IB_GID_INDEX": "3"}}})
    _put(pair / "runtime-gate.json", {"status": "PASS", "errors": [],
                                      "evidence": {"expected_cudagraph_implementation": "regular",
                                                   "runtime_identity": {"head": {
                                                       "runtime_audit_manifest_sha256": MANIFEST}}}})
    _put(pair / "serving-guard.json", {"status": "FAIL", "infra_failures": 2, "contract_failures": 1,
                                       "context": {"cudagraph_implementation": guard_impl}})
    old = pair / "niah" / "long-1m-000000000000"  # an earlier run's NIAH folder: not this run's result
    _put(old / "niah.json", {"status": "FAIL", "infra_error_count": 7, "fail_count": 7})
    _put(old / "context.json", {"cudagraph_implementation": "breakable", "client_kind": "vllm-bench"})
    new = pair / "niah" / NIAH_KEY
    _put(new / "niah.json", {"status": "ERROR", "infra_error_count": 1, "fail_count": 0})
    _put(new / "depth-262128.json", {"status": "PASS"})
    _put(new / "depth-524256.json", {"status": "ERROR"})
    context = {"cudagraph_implementation": "regular"}
    if niah_client:
        context["client_kind"] = niah_client
    _put(new / "context.json", context)
    (new / ".lock").write_text("")
    tree = _put(root / "evidence" / "wrapper-tree.json", {"dirty": dirty, "allowed_dirty": dirty,
                                                          "revision": TREE_REVISION})
    files = [("readiness.json", pair / "readiness.json", "readiness"),
             ("runtime-gate.json", pair / "runtime-gate.json", "gate")]
    if guard:
        files.append(("serving-guard.json", pair / "serving-guard.json", "guard"))
    files.append(("wrapper-tree.json", tree, "tree"))
    run_files, recorded, missing = ev_run.record_run_files(
        [], [{"name": n, "src": str(s), "kind": k} for n, s, k in files]
        + [{"name": NIAH_DIR, "src": str(new), "kind": "niah_run"}])
    assert missing == [] and len(recorded) == len(run_files)
    return pair, run_files


def pack_of_run(root: Path, run_files: list[dict], run_id: str = "r1", **given) -> ev_pack.Plan:
    """The plan of a pack of ``run_files``, with the pin (which no run file states) and ``given`` facts."""
    artifacts, facts = ev_run.from_run(run_files)
    facts = ev_run.merge_facts(facts, {"pin": clean_facts()["pin"], **given})
    return ev_pack.plan_pack(str(root / "pack"), "sim01", run_id, "pubsuite", artifacts, facts=facts, now=NOW)


def test_the_site_fabric_settings_reach_the_index_and_are_no_reason(tmp_path):
    """Ranks on different RoCE GID indexes (site cabling) are recorded, and publishable for that."""
    _pair, run_files = pair_folder(tmp_path)
    plan = pack_of_run(tmp_path, run_files, run_id="r3")
    assert plan.index["fabric_env"] == {"head": {"NCCL_IB_GID_INDEX": "1"}, "worker": {"NCCL_IB_GID_INDEX": "3"}}
    assert not any("fabric" in r or "GID" in r for r in plan.reasons)
    md = next(e for e in plan.generated if e.name == "index.md").data.decode()
    assert "| site fabric | head NCCL_IB_GID_INDEX=1; worker NCCL_IB_GID_INDEX=3 |" in md


def test_a_recorded_file_rewritten_afterwards_is_stale_and_left_out(tmp_path):
    pair, run_files = pair_folder(tmp_path)
    guard = pair / "serving-guard.json"
    recorded = _sha(guard)
    _put(guard, {"status": "PASS", "infra_failures": 0, "contract_failures": 0,  # a later run's guard
                 "context": {"cudagraph_implementation": "breakable", "client_kind": "vllm-bench"}})
    found = _sha(guard)
    artifacts, facts = ev_run.from_run(run_files)
    assert next(a for a in artifacts if a["name"] == "serving-guard.json")["sha256"] == recorded
    assert "guard_infra_errors" not in facts and "guard_model_failures" not in facts
    assert facts["row_kinds"] == ["regular"] and "vllm-bench" not in facts["client_kinds"]
    plan = pack_of_run(tmp_path, run_files)
    entry = next(e for e in plan.entries if e.name == "serving-guard.json")
    assert (entry.state, entry.recorded_sha256, entry.source_sha256) == ("stale", recorded, found)
    assert entry.data is None and entry.sha256 is None
    assert "serving-guard.json" not in plan.files()
    assert (f"artifact serving-guard.json (guard) was rewritten after this run recorded it (sha256 {recorded} "
            f"recorded, {found} found); left out") in plan.reasons
    assert plan.invalid_for_publish
    assert not any("serving guard" in r for r in plan.reasons)  # neither the later PASS nor the recorded FAIL
    listed = next(a for a in plan.index["artifacts"] if a["name"] == "serving-guard.json")
    assert (listed["state"], listed["recorded_sha256"], listed["sha256"]) == ("stale", recorded, None)
    ev_pack.write_pack(plan)
    dest = Path(plan.dest)
    assert not (dest / "serving-guard.json").exists()
    assert "serving-guard.json" not in (dest / "SHA256SUMS").read_text()


def test_a_run_without_gate_readiness_or_tree_has_them_not_in_run(tmp_path):
    artifacts, facts = ev_run.from_run([])
    assert facts == {"row_kinds": []}
    assert artifacts == [{"name": name, "kind": kind, "required": True, "not_in_run": True}
                         for name, kind in (("readiness.json", "readiness"), ("runtime-gate.json", "gate"),
                                            ("wrapper-tree.json", "tree"))]
    guard = _put(tmp_path / "evidence" / "sim02" / "serving-guard.json", {"status": "PASS", "infra_failures": 0})
    run_files = _record([], ("serving-guard.json", guard, "guard"))
    artifacts, facts = ev_run.from_run(run_files)
    plan = ev_pack.plan_pack(str(tmp_path / "pack"), "sim02", "r1", "guard",
                        artifacts + [{"name": "pin.json", "content": clean_facts()["pin"], "kind": "pin"}],
                        facts=ev_run.merge_facts(facts, {"pin": clean_facts()["pin"]}), now=NOW)
    states = {e.name: e.state for e in plan.entries}
    assert states == {"pin.json": "present", "serving-guard.json": "present", "readiness.json": "not_in_run",
                      "runtime-gate.json": "not_in_run", "wrapper-tree.json": "not_in_run"}
    for name, kind in (("readiness.json", "readiness"), ("runtime-gate.json", "gate"), ("wrapper-tree.json", "tree")):
        assert (f"required artifact {name} ({kind}) was not produced by this run (a pack holds only its own run's "
                "results)") in plan.reasons
        assert name not in plan.files()
    assert "runtime gate result is missing from the pack" in plan.reasons
    assert plan.invalid_for_publish and plan.index["invalid_for_publish"] is True
    md = plan.generated[1].data.decode()
    assert "| `runtime-gate.json` | gate | not_in_run | not_in_run | not_in_run |" in md


def test_the_manifest_sha256_fact_comes_from_the_recorded_gate(tmp_path):
    pair, run_files = pair_folder(tmp_path)
    plan = pack_of_run(tmp_path, run_files)
    assert plan.index["manifest_sha256"] == MANIFEST
    assert not any("runtime manifest" in r for r in plan.reasons)
    other = "0" * 64
    pinned = ev_run.merge_facts(ev_run.from_run(run_files)[1], {"pin": dict(clean_facts()["pin"], runtime_manifest_sha256=other)})
    reasons, _results = ev_index.publication_reasons(pinned, [])
    assert f"runtime manifest sha256 is {MANIFEST}, pinned {other}" in reasons
    # a gate that measured none, or a gate rewritten since it was recorded, states no manifest
    _put(pair / "runtime-gate.json", {"status": "PASS", "errors": [],
                                      "evidence": {"expected_cudagraph_implementation": "regular"}})
    assert "manifest_sha256" not in ev_run.from_run(run_files)[1]
    plan = pack_of_run(tmp_path / "b", _record(run_files, ("runtime-gate.json", pair / "runtime-gate.json", "gate")))
    assert plan.index["manifest_sha256"] is None
    assert "runtime manifest sha256 is not recorded (facts.manifest_sha256)" in plan.reasons


# --- one redaction rule for every file of the pack (issue 21) -------------------------------------------
CATALOG = Path(__file__).resolve().parents[5] / "roles" / "profile" / "vars" / "main.yml"
LEAKS = {"DB_PASSWD": "hunter2-xyz", "AWS_CREDENTIALS": "aws-cred-5f1e9b77", "HF_TOKEN": "hf_q8ZrT4kLm2Nv"}


def catalog_env_names() -> list[str]:
    """Every engine variable the profile catalog sets, plus the per-rank extras of the rendered env file."""
    import yaml  # noqa: PLC0415 - only these tests need it

    from ansible_collections.gb10.dspark.plugins.module_utils.engine._profile import PER_RANK_ENV  # noqa: PLC0415

    catalog = yaml.safe_load(CATALOG.read_text())["__dspark_profile_catalog"]
    # KV_CACHE_DTYPE is the pin's dtype, which _profile adds to every profile's env
    names = {name for profile in catalog.values() for name in profile["env"]} | {"KV_CACHE_DTYPE"}
    assert "MTP_NUM_TOKENS" in PER_RANK_ENV and "KV_CACHE_DTYPE" in names  # the catalog is what we think it is
    return sorted(names | set(PER_RANK_ENV))


def test_the_profile_catalog_knobs_are_never_redacted(tmp_path):
    names = catalog_env_names()
    names += ["DSPARK_SIM_TOKEN_DELAY_S", "DSPARK_SIM_KV_TOKENS", "DSPARK_SIM_STARTUP_DELAY_S"]  # the simulator's
    env_text = "".join(f"{n}=v{i}\n" for i, n in enumerate(names))
    artifacts = [{"name": "profiles/head/production.env", "kind": "profile", "content": env_text},
                 {"name": "inspect/head.json", "kind": "inspect",
                  "content": [{"Config": {"Env": [f"{n}=v{i}" for i, n in enumerate(names)]}}]},
                 {"name": "niah/niah.json", "kind": "niah",  # structural keys that merely contain a word
                  "content": {"status": "PASS", "run_key": "long-1m-20260803", "pass_count": 3,
                              "usage": {"prompt_tokens": 9, "max_tokens": 64}, "pass": True}},
                 {"name": "readiness.json", "kind": "readiness",
                  "content": {"departures": [{"key": "max_model_len", "qualified": 327680, "actual": 4096}]}}]
    p = plan(tmp_path, artifacts=artifacts, secrets=[])
    by_name = {e.name: e for e in p.entries}
    assert by_name["profiles/head/production.env"].data.decode() == env_text
    assert by_name["inspect/head.json"].document == artifacts[1]["content"]
    assert by_name["niah/niah.json"].document == artifacts[2]["content"]
    assert by_name["readiness.json"].document == artifacts[3]["content"]
    assert not any(e.redacted for e in p.entries)


@pytest.mark.parametrize("name", ["DB_PASSWD", "AWS_CREDENTIALS", "HF_TOKEN", "db_password", "MYSQL_PWD", "SMTP_PASS",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "OAUTH_CLIENT_SECRET", "SSH_KEY_PASSPHRASE",
                                  "PROXY_AUTH", "SESSION_COOKIE", "TLS_PRIVATE", "WEBHOOK_SIGNATURE", "CLIENT_CERT",
                                  "VLLM_API_KEY", "apiKey", "accessToken", "GITHUBTOKEN", "PWD"])
def test_secret_looking_names_are_redacted_in_env_files(name):
    entry = ev.load_artifact({"name": "x.env", "kind": "profile", "content": f"{name}=s3cr3t-value\nA=1\n"}, [])
    assert entry.data == f"{name}=<redacted>\nA=1\n".encode() and entry.redacted


def test_a_secret_value_in_free_text_is_refused_naming_the_file_and_the_variable(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("the operator typed hunter2-xyz here\n")
    with pytest.raises(IdentityError) as info:
        plan(tmp_path, artifacts=[{"name": "notes.txt", "src": str(notes)}], secrets=[API_KEY],
             secret_env=["DB_PASSWD=hunter2-xyz", "DSPARK_SIM_TOKEN_DELAY_S=2"])
    text = str(info.value)
    assert "pack file notes.txt" in text and "DB_PASSWD" in text and "hunter2-xyz" not in text
    assert not (tmp_path / "evidence" / "sim01" / "runs").exists()


def test_secret_env_adds_only_the_secret_looking_values(tmp_path):
    p = plan(tmp_path, artifacts=[{"name": "notes.txt", "content": "delay 2 s; KV 1253213 tokens\n"}], secrets=[],
             secret_env=["DSPARK_SIM_TOKEN_DELAY_S=2", "DSPARK_SIM_KV_TOKENS=1253213", "HF_TOKEN=hf_q8ZrT4kLm2Nv"])
    assert p.secrets == ["hf_q8ZrT4kLm2Nv"]


@pytest.mark.parametrize("data, variable", [
    (b"NCCL_DEBUG=INFO\nDB_PASSWD=hunter2-xyz\n", "DB_PASSWD"),
    (b"export AWS_CREDENTIALS='aws-cred-5f1e9b77'\n", "AWS_CREDENTIALS"),
    (b"exec env HF_TOKEN=hf_q8ZrT4kLm2Nv vllm serve\n", "HF_TOKEN"),
    (b'[{"Config": {"Env": ["DB_PASSWD=hunter2-xyz"]}}]', "DB_PASSWD"),
    (b'{"db": {"password": "hunter2-xyz"}}', "password"),
    (b'{"Args": ["serve", "--hf-token", "hf_q8ZrT4kLm2Nv"]}', "--hf-token"),
])
def test_an_unredacted_secret_looking_variable_is_a_leak(data, variable):
    leaks = ev.find_leaks("profiles/head/production.env", data, [], [])
    assert len(leaks) == 1
    message = leaks[0].message
    assert "pack file profiles/head/production.env" in message and variable in message
    for value in LEAKS.values():
        assert value not in message


def test_a_redacted_or_empty_secret_variable_is_not_a_leak():
    assert ev.find_leaks("a.env", b"DB_PASSWD=<redacted>\nHF_TOKEN=\nMTP_NUM_TOKENS=6\n", [], []) == []
    assert ev.find_leaks("a.json", b'{"password": "<redacted>", "pass": true, "run_key": "x-1"}', [], []) == []


def test_a_recorded_file_removed_afterwards_is_stale_not_silently_absent(tmp_path):
    guard = tmp_path / "serving-guard.json"
    guard.write_text('{"status": "FAIL"}\n')
    files = [{"name": "serving-guard.json", "src": str(guard), "kind": "guard"}]
    run_files, _unused, _missing = ev_run.record_run_files([], files)
    guard.unlink()
    artifacts, _facts = ev_run.from_run(run_files)
    spec = next(a for a in artifacts if a["name"] == "serving-guard.json")
    entry = ev.load_artifact(spec, [])
    assert entry.state == "stale" and entry.data is None
    reasons, _results = ev_index.publication_reasons({}, [entry])
    assert any("serving-guard.json (guard) was rewritten after this run recorded it" in r and "the file is gone" in r
               for r in reasons), reasons
