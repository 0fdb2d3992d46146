# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a pack may be published, and what it says of itself: the publication reasons (each required result of
the run, its status, the client kinds, departures from the pin), the index (``index.json``, ``index.md``) and
``SHA256SUMS``.

Split from :mod:`._evidence`; :mod:`._evidence_pack` calls it."""
from __future__ import annotations

import json

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence import (
    CLIENT_KINDS,
    Entry,
    GENERATED,
    IMPLEMENTATIONS,
    INDEX_MD,
    SCHEMA_VERSION,
    SUMS,
    _mismatch,
)


# --------------------------------------------------------------------------------------------
# publication
# --------------------------------------------------------------------------------------------
def _document_of(entry: Entry) -> object:
    document = entry.document if entry.is_json else None
    if not entry.is_json and entry.data is not None:
        try:
            document = json.loads(entry.data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            document = None
    return document


def _status_of(entry: Entry) -> str | None:
    document = _document_of(entry)
    if isinstance(document, dict) and document.get("status") is not None:
        return str(document["status"])
    return None


def client_kind_sources(facts: dict, entries: list[Entry]) -> dict[str, list[str]]:
    """Each client kind of the run's result rows and where it came from: the facts (``client_kinds``,
    kind -> sources) and the rows of every systems report in the pack (their ``client_kind``; a row
    without one measured nothing and does not count)."""
    kinds: dict[str, list[str]] = {}
    for kind, where in (facts.get("client_kinds") or {}).items():
        for source in where:
            if source not in kinds.setdefault(kind, []):
                kinds[kind].append(source)
    for entry in entries:
        if entry.kind != "systems" or entry.state != "present":
            continue
        document = _document_of(entry)
        rows = document.get("rows") if isinstance(document, dict) else None
        labels: dict[str, list[str]] = {}
        for row in rows if isinstance(rows, list) else []:
            kind = row.get("client_kind") if isinstance(row, dict) else None
            if not isinstance(kind, str) or not kind:
                continue
            label = f"external {row.get('level')}" if row.get("lane") == "external" else str(row.get("lane"))
            if label not in labels.setdefault(kind, []):
                labels[kind].append(label)
        for kind, names in labels.items():
            source = f"{entry.name} rows {', '.join(names)}"
            if source not in kinds.setdefault(kind, []):
                kinds[kind].append(source)
    return kinds


def client_kind_reasons(kinds: dict[str, list[str]]) -> list[str]:
    reasons = [f"client kind {kind} of {'; '.join(where)} is unknown, expected {' or '.join(CLIENT_KINDS)}"
               for kind, where in sorted(kinds.items()) if kind not in CLIENT_KINDS]
    if len(kinds) > 1:
        reasons.append("result rows mix client kinds: "
                       + " and ".join(f"{kind} ({'; '.join(where)})" for kind, where in sorted(kinds.items()))
                       + "; vllm-bench and openai_portable rows are never published together")
    return reasons


def judge_result(label: str, kind: str, fact_status: str | None, entries: list[Entry],
                 always: bool = False, also_kinds: tuple[str, ...] = ()) -> tuple[dict, list[str]]:
    """One result (gate, guard, NIAH): its status from the facts and from the pack's own files.

    A result counts as run when ``always``, when any artifact of ``kind`` (or ``also_kinds``) is in the
    pack, or when the facts give a status. A run result is publishable only when its file is in the
    pack and every status seen (facts and files) is PASS."""
    present = [e for e in entries if e.kind == kind and e.state == "present"]
    related = [e for e in entries if e.kind in also_kinds and e.state == "present"]
    if not (always or present or related or fact_status is not None):
        return {"status": None, "ran": False, "sources": []}, []
    reasons = []
    seen = [("facts", fact_status)] if fact_status is not None else []
    seen += [(e.name, s) for e in present if (s := _status_of(e)) is not None]
    for source, status in seen:
        if fact_status is not None and source != "facts" and status != fact_status:
            reasons.append(f"{label} status is {status} in {source} but {fact_status} in the facts")
    failing = [status for _unused, status in seen if status != "PASS"]
    status = failing[0] if failing else ("PASS" if seen else None)
    if not present:
        reasons.append(f"{label} result is missing from the pack")
    elif status is None:
        reasons.append(f"{label} status is not recorded")
    if status is not None and status != "PASS":
        reasons.append(f"{label} status is {status}, expected PASS")
    return {"status": status, "ran": True, "sources": [s for s, _unused in seen]}, reasons


def _departure(item: object) -> str:
    if isinstance(item, dict) and "key" in item:
        return f"{item['key']} {item.get('actual')} (qualified {item.get('qualified')})"
    return str(item)


def publication_reasons(facts: dict, entries: list[Entry]) -> tuple[list[str], dict]:
    """Every reason the run may not be published, and the results section of the index."""
    reasons: list[str] = []
    pin = facts.get("pin") or {}
    for key, label in (("image_id", "image id"), ("model_revision", "model revision")):
        if not pin.get(key):
            reasons.append(f"{label} is not recorded (facts.pin.{key})")

    manifest, pinned = facts.get("manifest_sha256"), pin.get("runtime_manifest_sha256")
    if not manifest:
        reasons.append("runtime manifest sha256 is not recorded (facts.manifest_sha256)")
    elif pinned and manifest != pinned:
        reasons.append(f"runtime manifest sha256 is {manifest}, pinned {pinned}")

    tree = facts.get("tree") or {}
    commit = tree.get("commit") or "an unrecorded commit"
    if tree.get("dirty") is None:
        reasons.append("wrapper tree state is not recorded (facts.tree.dirty)")
    elif tree["dirty"]:
        how = "allowed by allow_dirty" if tree.get("allow_dirty") else "without allow_dirty"
        reasons.append(f"wrapper tree at {commit} is dirty ({how})")

    profile = facts.get("profile") or {}
    label = profile.get("name") or "(unnamed)"
    if not profile.get("name"):
        reasons.append("profile is not recorded (facts.profile.name)")
    if profile.get("experimental"):
        reasons.append(f"profile {label} is experimental")
    elif profile.get("experimental") is None and profile.get("name"):
        reasons.append(f"profile {label}: whether it is experimental is not recorded")
    departures = profile.get("departures") or []
    if departures:
        reasons.append(f"profile {label} departs from the qualified profile: "
                       + "; ".join(_departure(d) for d in departures))

    gate, why = judge_result("runtime gate", "gate", facts.get("gate_status"), entries, always=True)
    reasons += why
    guard, why = judge_result("serving guard", "guard", facts.get("guard_status"), entries)
    reasons += why
    niah, why = judge_result("NIAH", "niah", facts.get("niah_status"), entries, also_kinds=("niah_row",))
    reasons += why
    systems, why = judge_result("systems lanes", "systems", facts.get("systems_status"), entries)
    reasons += why
    for section, prefix, label_ in ((guard, "guard", "serving guard"), (niah, "niah", "NIAH"),
                                    (systems, "systems", "systems lanes")):
        section["infra_errors"] = facts.get(f"{prefix}_infra_errors")
        section["model_failures"] = facts.get(f"{prefix}_model_failures")
        if section["infra_errors"]:
            reasons.append(f"{label_} counted {section['infra_errors']} infra error(s); publishable rows need 0")
    # rows that were not measured (NOT_IMPLEMENTED): shown, neither failures nor infra errors
    systems["not_implemented"] = facts.get("systems_not_implemented")

    kinds = sorted(set(facts.get("row_kinds") or []))
    implementation = profile.get("cudagraph_implementation")
    if len(kinds) > 1:
        reasons.append(f"result rows mix CUDA-graph implementations: {', '.join(kinds)}")
    elif kinds and implementation and kinds[0] != implementation:
        reasons.append(f"result rows are {kinds[0]}, but profile {label} runs {implementation}")

    clients = client_kind_sources(facts, entries)
    reasons += client_kind_reasons(clients)

    for entry in entries:
        if entry.state == "missing":
            reasons.append(f"required artifact {entry.name} ({entry.kind}) is missing")
        elif entry.state == "not_in_run":
            reasons.append(f"required artifact {entry.name} ({entry.kind}) was not produced by this run "
                           "(a pack holds only its own run's results)")
        elif entry.state == "stale":
            found = entry.source_sha256 or "the file is gone"
            reasons.append(f"artifact {entry.name} ({entry.kind}) was rewritten after this run recorded it "
                           f"(sha256 {entry.recorded_sha256} recorded, {found} found); left out")
    return reasons, {"gate": gate, "guard": guard, "niah": niah, "systems": systems, "row_kinds": kinds,
                     "client_kinds": sorted(clients)}


def check_facts(facts: dict) -> list[Mismatch]:
    problems = []
    for key in ("guard_infra_errors", "guard_model_failures", "niah_infra_errors", "niah_model_failures",
                "systems_infra_errors", "systems_model_failures", "systems_not_implemented"):
        value = facts.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append(_mismatch(f"facts.{key}", repr(value), "a count (an integer >= 0)"))
    for kind in facts.get("row_kinds") or []:
        if kind not in IMPLEMENTATIONS:
            problems.append(_mismatch("facts.row_kinds element", repr(kind), " or ".join(IMPLEMENTATIONS)))
    clients = facts.get("client_kinds")
    if clients is not None and not isinstance(clients, dict):
        problems.append(_mismatch("facts.client_kinds", repr(clients), "a mapping of client kind to sources"))
    for kind, where in (clients if isinstance(clients, dict) else {}).items():
        if kind not in CLIENT_KINDS:
            problems.append(_mismatch("facts.client_kinds key", repr(kind), " or ".join(CLIENT_KINDS)))
        if not isinstance(where, list) or not all(isinstance(s, str) for s in where):
            problems.append(_mismatch(f"facts.client_kinds.{kind}", repr(where), "a list of sources (strings)"))
    return problems


# --------------------------------------------------------------------------------------------
# index and checksums
# --------------------------------------------------------------------------------------------
def build_index(pair: str, run_id: str, playbook: str, created: str, facts: dict, entries: list[Entry],
                reasons: list[str], results: dict) -> dict:
    pin = facts.get("pin") or {}
    profile = facts.get("profile") or {}
    tree = facts.get("tree") or {}
    return {
        "schema_version": SCHEMA_VERSION,
        "pair": pair,
        "run_id": run_id,
        "playbook": playbook,
        "created_utc": created,
        "identity": {key: pin.get(key) for key in ("release", "image_id", "model_id", "model_revision",
                                                   "runtime_manifest_sha256")},
        "manifest_sha256": facts.get("manifest_sha256"),
        "profile": {key: profile.get(key) for key in ("name", "sha256", "experimental", "departures",
                                                      "cudagraph_implementation")},
        # the site's RoCE settings each rank ran with (dspark_fabric_env): cabling, not a departure
        "fabric_env": profile.get("fabric_env"),
        "tree": {key: tree.get(key) for key in ("commit", "dirty", "allow_dirty")},
        "invalid_for_publish": bool(reasons),
        "reasons": list(reasons),
        "results": results,
        "artifacts": [e.as_dict() for e in entries],
        "generated": list(GENERATED),
    }


def _cell(value: object) -> str:
    if value is None:
        return "not recorded"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _code(value: str) -> str:
    return "`" + _cell(value).replace("`", "'") + "`"


def _result_row(label: str, section: dict, counts: bool) -> str:
    status = section["status"] if section["ran"] else "not run"
    if not counts:
        return f"| {label} | {_cell(status)} | - | - |"
    return f"| {label} | {_cell(status)} | {_cell(section.get('infra_errors'))} | {_cell(section.get('model_failures'))} |"


def _fabric_cell(fabric: object) -> str:
    """``head NCCL_IB_GID_INDEX=3; worker NCCL_IB_GID_INDEX=3``, or "not recorded"."""
    if not isinstance(fabric, dict) or not fabric:
        return _cell(None)
    parts = []
    for rank in sorted(fabric):
        env = fabric[rank] if isinstance(fabric[rank], dict) else {}
        parts.append(f"{rank} " + (" ".join(f"{k}={v}" for k, v in sorted(env.items())) or "none"))
    return _cell("; ".join(parts))


def render_markdown(index: dict, index_json: Entry) -> str:
    profile = index["profile"]
    identity = index["identity"]
    invalid = "true" if index["invalid_for_publish"] else "false"
    lines = [
        f"# Evidence pack: pair {_cell(index['pair'])}, run {_cell(index['run_id'])}",
        "",
        f"`invalid_for_publish: {invalid}`",
        "",
        "| Field | Value |",
        "|---|---|",
        f"| pair | {_cell(index['pair'])} |",
        f"| run_id | {_cell(index['run_id'])} |",
        f"| playbook | {_cell(index['playbook'])} |",
        f"| created (UTC) | {_cell(index['created_utc'])} |",
        f"| image id | {_cell(identity['image_id'])} |",
        f"| model revision | {_cell(identity['model_revision'])} |",
        f"| manifest sha256 | {_cell(index['manifest_sha256'])} |",
        f"| profile | {_cell(profile['name'])} (sha256 {_cell(profile['sha256'])}) |",
        f"| site fabric | {_fabric_cell(index.get('fabric_env'))} |",
        f"| wrapper tree | {_cell(index['tree']['commit'])} (dirty: {_cell(index['tree']['dirty'])}) |",
        f"| invalid_for_publish | {invalid} |",
        "",
        "## Reasons not valid for publication",
        "",
    ]
    lines += [f"- {_cell(reason)}" for reason in index["reasons"]] or ["none"]
    results = index["results"]
    lines += [
        "",
        "## Results",
        "",
        "Infra errors and model failures are counted separately; publishable rows need 0 infra errors.",
        "",
        "| Check | Status | Infra errors | Model failures |",
        "|---|---|---|---|",
        _result_row("runtime gate", results["gate"], counts=False),
        _result_row("serving guard", results["guard"], counts=True),
        _result_row("NIAH", results["niah"], counts=True),
        _result_row("systems lanes", results["systems"], counts=True),
        "",
        f"Result row implementations: {', '.join(results['row_kinds']) or 'not recorded'}",
        "",
        f"Result row client kinds: {', '.join(results.get('client_kinds') or []) or 'not recorded'}",
        "",
    ]
    if results["systems"].get("not_implemented") is not None:
        lines += [f"Systems rows NOT_IMPLEMENTED (not measured, no score, not failures): "
                  f"{_cell(results['systems']['not_implemented'])}", ""]
    lines += [
        "## Artifacts",
        "",
        "| File | Kind | State | Bytes | sha256 |",
        "|---|---|---|---|---|",
    ]
    for artifact in index["artifacts"]:
        state = artifact["state"]
        size = artifact["bytes"] if state == "present" else state
        digest = artifact["sha256"] if state == "present" else state
        lines.append(f"| {_code(artifact['name'])} | {artifact['kind']} | {state} | {size} | {digest} |")
    lines += [
        f"| {_code(index_json.name)} | index | present | {index_json.size} | {index_json.sha256} |",
        f"| {_code(INDEX_MD)} | index | present | - | this file; listed in {SUMS} |",
        f"| {_code(SUMS)} | checksums | present | - | sha256 of every other file (`sha256sum -c {SUMS}`) |",
    ]
    return "\n".join(lines) + "\n"


def sha256sums(entries: list[Entry]) -> bytes:
    """``sha256sum -c`` input: ``<hex>  <relative path>`` per file, sorted by path."""
    rows = sorted((e.name, e.sha256) for e in entries if e.data is not None)
    return "".join(f"{digest}  {name}\n" for name, digest in rows).encode("utf-8")
