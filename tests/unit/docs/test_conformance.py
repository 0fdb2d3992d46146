# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/wrapper-reference.md's conformance tables hold against what the collection pins and renders.

Each table row states one value that seed 003 (the wrapper's AGENTS.md) names. The row is compared
with the sample identity pin, with the `vllm serve` argv and environment that
plugins/module_utils/engine/_profile.py renders for both ranks of inventories/sample, with the runtime
gate's expectations in the profile catalog, or with the sample site variables. One function,
:func:`check_conformance`, does every comparison for a (catalog, pin) pair. The negative tests
call it on mutated copies to show that each departure is reported, and reported under its own row.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _profile  # noqa: E402
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _profile_launch
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import IdentityError  # noqa: E402

DOC = REPO / "docs" / "wrapper-reference.md"
CATALOG_FILE = REPO / "roles" / "profile" / "vars" / "main.yml"
SAMPLE = REPO / "inventories" / "sample"
PIN_FILE = SAMPLE / "group_vars" / "all" / "pin.yml"
SITE_FILE = SAMPLE / "group_vars" / "all" / "site.yml"
HOSTS_FILE = SAMPLE / "hosts.yml"
# The seed is not in the repository; point this variable at it to check the cited seed lines too.

HEADER = ("id", "scope", "kind", "name", "value", "seed line", "note")
ABSENT = "absent"
PROFILE_KINDS = ("flag", "head-flag", "flag-json", "env")  # rendered per rank; scope a profile or "all"
CATALOG_KINDS = ("gate", "exempt")                           # read from the catalog entry; scope a profile
KINDS = ("pin", "site") + PROFILE_KINDS + CATALOG_KINDS
TEXT_KINDS = ("flag", "head-flag", "env", "exempt")          # compared as text; the others as JSON values
# What the runtime gate is run with, by the seed's runtime_gate.py option: where the catalog holds it.
GATE_SOURCES = {
    "expected-implementation": ("gate", "cudagraph_implementation"),
    "expected-cudagraph-mode": ("gate", "cudagraph_mode"),
    # the gate role passes the profile's compilation_config as --expected-compilation-config
    "expected-strict": ("compilation_config", "cudagraph_strict"),
}
ROW_ID = re.compile(r"[A-Z0-9]+-\d{2}")
SEED_CELL = re.compile(r"seed 003 L\d+\b.*")
SEED_LINES = re.compile(r"L(\d+)(?:-L?(\d+))?")
_JSON_SCALAR = re.compile(r"true|false|null|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")

# The (scope, kind, name) rows the table must keep: deleting one of them cannot make this test pass.
_PROFILES = ("production", "long-1m", "breakable-ab")
_PER_PROFILE = (
    ("flag", "--max-model-len"),
    ("flag", "--max-num-seqs"),
    ("flag", "--max-num-batched-tokens"),
    ("flag", "--gpu-memory-utilization"),
    ("flag", "--kv-cache-memory-bytes"),                 # "auto" is the flag absent
    ("flag-json", "--speculative-config.num_speculative_tokens"),
    ("flag", "--kv-cache-dtype"),
    ("env", "KV_CACHE_DTYPE"),
    ("flag", "--moe-backend"),
    ("flag-json", "--compilation-config.mode"),
    ("flag-json", "--compilation-config.cudagraph_mode"),
    ("flag-json", "--compilation-config.cudagraph_implementation"),
    ("flag-json", "--compilation-config.cudagraph_strict"),
    ("gate", "expected-implementation"),
    ("gate", "expected-strict"),
    ("gate", "expected-cudagraph-mode"),
)
REQUIRED = frozenset(
    {(profile, kind, name) for profile in _PROFILES for kind, name in _PER_PROFILE}
    | {("pin", "pin", key) for key in ("image_tag", "image_id", "vllm_version", "integrated_vllm_commit",
                                       "source_revision", "model_revision", "runtime_manifest_sha256")}
    | {("long-1m", "env", "VLLM_ENGINE_ITERATION_TIMEOUT_S"), ("long-1m", "env", "VLLM_RPC_TIMEOUT"),
       ("long-1m", "exempt", "gpu_memory_utilization"), ("long-1m", "exempt", "kv_cache_memory_bytes"),
       ("all", "flag", "--served-model-name"), ("all", "head-flag", "--port")}
)


# --- the document -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    scope: str
    kind: str
    name: str
    value: str
    seed: str
    line: int  # in docs/wrapper-reference.md

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.scope, self.kind, self.name)


def markdown_tables(text: str) -> list[list[tuple[int, str]]]:
    """Every run of consecutive lines starting with '|', as (line number, line) pairs."""
    tables, block = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("|"):
            block.append((number, line))
        elif block:
            tables.append(block)
            block = []
    if block:
        tables.append(block)
    return tables


def split_cells(line: str) -> list[str]:
    stripped = line.strip()
    if not (stripped.startswith("|") and stripped.endswith("|")):
        return []
    return [cell.strip() for cell in stripped[1:-1].split("|")]


def _unquote(cell: str) -> str:
    return cell[1:-1] if len(cell) >= 2 and cell[0] == cell[-1] == "`" else cell


def parse_rows(text: str) -> list[Row]:
    """The rows of every table whose header is exactly :data:`HEADER`."""
    rows = []
    for table in markdown_tables(text):
        if tuple(split_cells(table[0][1])) != HEADER:
            continue
        for number, line in table[2:]:
            cells = [_unquote(c) for c in split_cells(line)]
            cells += [""] * (len(HEADER) - len(cells))  # a short row fails the well-formed test
            rows.append(Row(id=cells[0], scope=cells[1], kind=cells[2], name=cells[3], value=cells[4],
                            seed=cells[5], line=number))
    return rows


@lru_cache(maxsize=None)
def _doc_rows() -> tuple[Row, ...]:
    return tuple(parse_rows(DOC.read_text(encoding="utf-8")))


def doc_rows() -> list[Row]:
    return list(_doc_rows())


def table_problems(rows: list[Row], profiles) -> list[str]:
    """What makes the rows unusable: unknown kinds or scopes, duplicates, malformed cells."""
    problems = []
    seen_ids, seen_keys = {}, {}
    profile_scopes = set(profiles)
    for row in rows:
        where = f"{row.id or '<no id>'} (line {row.line})"
        if not ROW_ID.fullmatch(row.id):
            problems.append(f"{where}: id is not like PRD-01")
        if row.id in seen_ids:
            problems.append(f"{where}: id already used on line {seen_ids[row.id]}")
        seen_ids.setdefault(row.id, row.line)
        if row.key in seen_keys:
            problems.append(f"{where}: {row.key} already stated by {seen_keys[row.key]}")
        seen_keys.setdefault(row.key, row.id)
        if row.kind not in KINDS:
            problems.append(f"{where}: unknown kind {row.kind!r}, expected one of {list(KINDS)}")
            continue
        allowed = {"pin": {"pin"}, "site": {"site"}}.get(
            row.kind, profile_scopes | ({"all"} if row.kind in PROFILE_KINDS else set()))
        if row.scope not in allowed:
            problems.append(f"{where}: scope {row.scope!r} does not fit kind {row.kind}, expected {sorted(allowed)}")
        if not row.value:
            problems.append(f"{where}: empty value")
        if row.kind in ("flag", "head-flag") and not row.name.startswith("--"):
            problems.append(f"{where}: {row.name!r} is not a flag")
        if row.kind == "flag-json" and not re.fullmatch(r"--[a-z0-9-]+\.\w+", row.name):
            problems.append(f"{where}: {row.name!r} is not <flag>.<key>")
        if row.kind == "gate" and row.name not in GATE_SOURCES:
            problems.append(f"{where}: unknown gate expectation {row.name!r}, expected one of {sorted(GATE_SOURCES)}")
        if row.kind == "exempt":
            if row.value not in ("yes", "no"):
                problems.append(f"{where}: exempt value {row.value!r}, expected yes or no")
            if row.name not in _profile.MANIFEST_KEYS:
                problems.append(f"{where}: {row.name!r} is not a runtime-manifest key")
        if row.value == ABSENT and row.kind not in ("flag", "head-flag", "flag-json", "env"):
            problems.append(f"{where}: only flags and env variables can be absent")
        if not SEED_CELL.fullmatch(row.seed):
            problems.append(f"{where}: seed line {row.seed!r} is not like 'seed 003 L24'")
    return problems


def missing_required(rows: list[Row]) -> list[tuple[str, str, str]]:
    present = {row.key for row in rows}
    return sorted(REQUIRED - present)


# --- the collection -----------------------------------------------------------------------------

def load_catalog() -> dict:
    # safe_load resolves the catalog's anchors and '<<' merge keys, as Ansible's loader does
    return yaml.safe_load(CATALOG_FILE.read_text())["__dspark_profile_catalog"]


def load_pin() -> dict:
    return yaml.safe_load(PIN_FILE.read_text())["dspark_pin"]


def _hosts(node: dict, inherited: dict) -> Iterator[dict]:
    """Each host of an inventory YAML tree with the group vars along its path."""
    here = {**inherited, **(node.get("vars") or {})}
    for host_vars in (node.get("hosts") or {}).values():
        yield {**here, **(host_vars or {})}
    for child in (node.get("children") or {}).values():
        yield from _hosts(child or {}, here)


def sample_inventory() -> dict:
    """The sample inventory's site variables and the two ranks of its (one) pair."""
    site = yaml.safe_load(SITE_FILE.read_text())
    hosts = [h for h in _hosts(yaml.safe_load(HOSTS_FILE.read_text())["all"], {}) if "dspark_rank" in h]
    ranks = {h["dspark_rank"]: h for h in hosts}
    assert sorted(ranks) == [0, 1] and len(hosts) == 2, f"{HOSTS_FILE}: expected one head and one worker"
    return {"site": site, "ranks": ranks}


class Refused:
    """The collection refused to render the profile: every rendered row of it fails."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"<refused: {self.reason}>"


class _NotSet:
    def __repr__(self) -> str:
        return "<not set>"


NOT_SET = _NotSet()


def render(catalog: dict, pin: dict, name: str, inventory: dict) -> dict:
    """{rank: build()} for both ranks, with keyword arguments only (build() may grow options)."""
    site = inventory["site"]
    takes_fabric = "fabric_env" in inspect.signature(_profile.build).parameters
    out = {}
    for rank, host in sorted(inventory["ranks"].items()):
        kwargs = {}
        fabric = host.get("dspark_fabric_env", site.get("dspark_fabric_env"))
        if takes_fabric and fabric is not None:
            kwargs["fabric_env"] = fabric
        out[rank] = _profile.build(
            catalog=catalog, name=name, overrides={}, allow_experimental=False, pin=pin, rank=rank,
            eth_if=host["dspark_eth_if"], ib_hca=host["dspark_ib_hca"],
            head_fabric_ip=inventory["ranks"][0]["dspark_fabric_ip"], master_port=site["dspark_master_port"],
            api_port=site["dspark_api_port"], served_model_name=site["dspark_served_model_name"], **kwargs)
    return out


def _flag_value(argv: list[str], flag: str) -> Any:
    count = argv.count(flag)
    if count == 0:
        return NOT_SET
    if count > 1:
        return f"<{flag} given {count} times>"
    index = argv.index(flag)
    return argv[index + 1] if index + 1 < len(argv) else "<no value>"


def _rendered_value(row: Row, built: dict) -> Any:
    if row.kind == "env":
        return built["env"].get(row.name, NOT_SET)
    if row.kind == "flag-json":
        flag, _dot, key = row.name.partition(".")
        raw = _flag_value(built["argv"], flag)
        if not isinstance(raw, str) or raw.startswith("<"):
            return raw
        try:
            parsed = json.loads(raw)
        except ValueError:
            return f"<{flag} is not JSON: {raw}>"
        return parsed.get(key, NOT_SET) if isinstance(parsed, dict) else f"<{flag} is not an object>"
    return _flag_value(built["argv"], row.name)


def actual_values(row: Row, catalog: dict, pin: dict, inventory: dict,
                  rendered: Callable[[str], Any]) -> Iterator[tuple[str, Any]]:
    """(where, actual value) for every place the row's value must hold."""
    if row.kind == "pin":
        yield f"dspark_pin.{row.name}", pin.get(row.name, NOT_SET)
    elif row.kind == "site":
        yield f"site.yml {row.name}", inventory["site"].get(row.name, NOT_SET)
    elif row.kind in CATALOG_KINDS:
        entry = catalog.get(row.scope)
        if not isinstance(entry, dict):
            yield f"catalog {row.scope}", Refused("no such profile in the catalog")
        elif row.kind == "gate":
            section, key = GATE_SOURCES[row.name]
            yield f"catalog {row.scope}.{section}.{key}", (entry.get(section) or {}).get(key, NOT_SET)
        else:
            yield f"catalog {row.scope}.manifest_exempt", "yes" if row.name in (entry.get("manifest_exempt") or []) else "no"
    else:
        profiles = sorted(catalog) if row.scope == "all" else [row.scope]
        for profile in profiles:
            built = rendered(profile)
            ranks = [0] if row.kind == "head-flag" else [0, 1]
            for rank in ranks:
                where = f"profile {profile}, rank {rank}"
                if isinstance(built, Refused):
                    yield where, built
                else:
                    yield where, _rendered_value(row, built[rank])


def _typed(cell: str) -> Any:
    return json.loads(cell) if _JSON_SCALAR.fullmatch(cell) else cell


def matches(row: Row, actual: Any) -> bool:
    if isinstance(actual, Refused):
        return False
    if row.value == ABSENT:
        return actual is NOT_SET
    if actual is NOT_SET:
        return False
    if row.kind in TEXT_KINDS:
        return isinstance(actual, str) and actual == row.value
    expected = _typed(row.value)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return expected == actual
    return type(expected) is type(actual) and expected == actual


@dataclasses.dataclass(frozen=True)
class Failure:
    row: str
    where: str
    expected: str
    actual: Any

    def __str__(self) -> str:
        return (f"{self.row} ({self.where}): expected {self.expected!r} from docs/wrapper-reference.md, "
                f"actual {self.actual!r} in the collection")


def check_conformance(catalog: dict, pin: dict, rows: list[Row] | None = None,
                      inventory: dict | None = None) -> list[Failure]:
    """Every place where the collection departs from a row of the conformance tables."""
    rows = doc_rows() if rows is None else rows
    inventory = sample_inventory() if inventory is None else inventory
    cache: dict[str, Any] = {}

    def rendered(profile: str) -> Any:
        if profile not in cache:
            if not isinstance(catalog.get(profile), dict):
                cache[profile] = Refused("no such profile in the catalog")
            else:
                try:
                    cache[profile] = render(catalog, pin, profile, inventory)
                except IdentityError as err:
                    cache[profile] = Refused(str(err))
        return cache[profile]

    failures = []
    for row in rows:
        for where, actual in actual_values(row, catalog, pin, inventory, rendered):
            if not matches(row, actual):
                failures.append(Failure(row.id, where, row.value, actual))
    return failures


def row_id(scope: str, kind: str, name: str) -> str:
    found = [row.id for row in doc_rows() if row.key == (scope, kind, name)]
    assert len(found) == 1, f"expected one row for {(scope, kind, name)}, found {found}"
    return found[0]


# --- the tables are there and well formed ------------------------------------------------------

def test_every_markdown_table_of_the_reference_is_well_formed():
    tables = markdown_tables(DOC.read_text(encoding="utf-8"))
    assert tables
    for table in tables:
        first = table[0][0]
        assert len(table) >= 3, f"line {first}: a table needs a header, a separator and a row"
        width = len(split_cells(table[0][1]))
        assert width >= 2, f"line {first}: header has no cells"
        assert re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", table[1][1].strip()), f"line {table[1][0]}: bad separator"
        for number, line in table[1:]:
            assert len(split_cells(line)) == width, f"line {number}: {len(split_cells(line))} cells, header has {width}"


def test_the_conformance_rows_are_usable():
    rows = doc_rows()
    assert len(rows) >= len(REQUIRED)
    assert table_problems(rows, load_catalog()) == []


def test_no_required_row_is_missing():
    assert missing_required(doc_rows()) == []


# --- the collection conforms --------------------------------------------------------------------

def test_the_collection_conforms_to_every_row():
    failures = check_conformance(load_catalog(), load_pin())
    assert not failures, "\n".join(str(f) for f in failures)


def test_every_profile_row_is_checked_on_both_ranks():
    """The comparison really looks at rendered launches: one value per rank, none refused."""
    catalog, pin, inventory = load_catalog(), load_pin(), sample_inventory()
    builds = {name: render(catalog, pin, name, inventory) for name in catalog}
    for row in doc_rows():
        if row.kind not in PROFILE_KINDS:
            continue
        seen = list(actual_values(row, catalog, pin, inventory, builds.__getitem__))
        per_profile = 1 if row.kind == "head-flag" else 2
        assert len(seen) == per_profile * (len(catalog) if row.scope == "all" else 1), row.id
        assert not any(isinstance(actual, Refused) for _where, actual in seen), row.id


# --- the check bites: the collection departs ---------------------------------------------------

DELETE = object()


def _set(path: str, value: Any) -> Callable[[dict, dict, dict], None]:
    """A mutation of the catalog ('catalog:long-1m.gpu_memory_utilization'), the pin ('pin:key')
    or the site ('site:key'). A dotted catalog path walks into mappings; DELETE removes the key."""
    where, _colon, dotted = path.partition(":")

    def mutate(catalog: dict, pin: dict, inventory: dict) -> None:
        keys = dotted.split(".")
        node = {"catalog": catalog, "pin": pin, "site": inventory["site"]}[where]
        for key in keys[:-1]:
            node[key] = dict(node[key])  # unshare YAML aliases: change this profile only
            node = node[key]
        if value is DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return mutate


def _both(*mutations):
    def mutate(catalog, pin, inventory):
        for m in mutations:
            m(catalog, pin, inventory)
    return mutate


DEPARTURES = {
    "long-1m gpu_memory_utilization back to the manifest's 0.835": (
        _set("catalog:long-1m.gpu_memory_utilization", 0.835),
        {("long-1m", "flag", "--gpu-memory-utilization")}),
    "long-1m KV pinned like production": (
        _set("catalog:long-1m.kv_cache_memory_bytes", 15998753178),
        {("long-1m", "flag", "--kv-cache-memory-bytes")}),
    "long-1m without VLLM_RPC_TIMEOUT": (
        _set("catalog:long-1m.env.VLLM_RPC_TIMEOUT", DELETE),
        {("long-1m", "env", "VLLM_RPC_TIMEOUT")}),
    "long-1m iteration timeout shortened": (
        _set("catalog:long-1m.env.VLLM_ENGINE_ITERATION_TIMEOUT_S", "600"),
        {("long-1m", "env", "VLLM_ENGINE_ITERATION_TIMEOUT_S")}),
    "long-1m no longer exempts gpu_memory_utilization": (
        _set("catalog:long-1m.manifest_exempt", ["kv_cache_memory_bytes"]),
        {("long-1m", "exempt", "gpu_memory_utilization")}),
    "breakable-ab on FULL_AND_PIECEWISE (graphs and gate)": (
        _both(_set("catalog:breakable-ab.compilation_config.cudagraph_mode", "FULL_AND_PIECEWISE"),
              _set("catalog:breakable-ab.gate.cudagraph_mode", "FULL_AND_PIECEWISE")),
        {("breakable-ab", "flag-json", "--compilation-config.cudagraph_mode"),
         ("breakable-ab", "gate", "expected-cudagraph-mode")}),
    "breakable-ab back on regular graphs (graphs and gate)": (
        _both(_set("catalog:breakable-ab.compilation_config.cudagraph_implementation", "regular"),
              _set("catalog:breakable-ab.gate.cudagraph_implementation", "regular")),
        {("breakable-ab", "flag-json", "--compilation-config.cudagraph_implementation"),
         ("breakable-ab", "gate", "expected-implementation")}),
    "breakable-ab not strict": (
        _set("catalog:breakable-ab.compilation_config.cudagraph_strict", False),
        {("breakable-ab", "flag-json", "--compilation-config.cudagraph_strict"),
         ("breakable-ab", "gate", "expected-strict")}),
    "production serves 8 sequences": (
        _set("catalog:production.max_num_seqs", 8),
        {("production", "flag", "--max-num-seqs")}),
    "production KV left to auto": (
        _set("catalog:production.kv_cache_memory_bytes", None),
        {("production", "flag", "--kv-cache-memory-bytes")}),
    "production gains the long-1m RPC timeout": (
        _set("catalog:production.env.VLLM_RPC_TIMEOUT", "3600"),
        {("production", "env", "VLLM_RPC_TIMEOUT")}),
    "pin source_revision is the copy commit": (
        _set("pin:source_revision", "d8393134b49f7e92ffd64b9670b5d500fc6478cb"),
        {("pin", "pin", "source_revision")}),
    "pin image_id of another build": (
        _set("pin:image_id", "sha256:" + "0" * 64),
        {("pin", "pin", "image_id")}),
    "pin manifest sha256 of another manifest": (
        _set("pin:runtime_manifest_sha256", "f" * 64),
        {("pin", "pin", "runtime_manifest_sha256")}),
    "site serves another model name": (
        _set("site:dspark_served_model_name", "deepseek-v4-flash"),
        {("all", "flag", "--served-model-name")}),
    "site serves on port 8000": (
        _set("site:dspark_api_port", 8000),
        {("all", "head-flag", "--port")}),
}


@pytest.mark.parametrize("case", sorted(DEPARTURES))
def test_a_departure_is_reported_under_exactly_its_row(case):
    mutate, keys = DEPARTURES[case]
    catalog, pin, inventory = load_catalog(), load_pin(), sample_inventory()
    catalog, pin, inventory = copy.deepcopy(catalog), copy.deepcopy(pin), copy.deepcopy(inventory)
    before = check_conformance(catalog, pin, inventory=inventory)
    assert before == [], "the unmutated copy must conform"
    mutate(catalog, pin, inventory)
    failures = check_conformance(catalog, pin, inventory=inventory)
    expected_ids = {row_id(*key) for key in keys}
    assert {f.row for f in failures} == expected_ids, "\n".join(str(f) for f in failures)
    rows = {row.id: row for row in doc_rows()}
    for failure in failures:
        text = str(failure)
        assert failure.row in text and repr(rows[failure.row].value) in text and repr(failure.actual) in text
        assert not matches(rows[failure.row], failure.actual)


def test_a_constant_of_the_renderer_is_checked_too(monkeypatch):
    """The MoE backend is no catalog value but a constant of _profile.py: every profile's row bites."""
    monkeypatch.setattr(_profile_launch, "MOE_BACKEND", "cutlass")
    failures = check_conformance(load_catalog(), load_pin())
    assert {f.row for f in failures} == {row_id(p, "flag", "--moe-backend") for p in _PROFILES}
    assert {f.actual for f in failures} == {"cutlass"}


def test_a_profile_the_collection_refuses_fails_all_its_rendered_rows():
    catalog = copy.deepcopy(load_catalog())
    # graphs changed without the gate: the lock refuses to resolve breakable-ab at all
    catalog["breakable-ab"]["compilation_config"] = {**catalog["breakable-ab"]["compilation_config"],
                                                     "cudagraph_mode": "FULL_AND_PIECEWISE"}
    failures = check_conformance(catalog, load_pin())
    rendered_rows = {row.id for row in doc_rows()
                     if row.kind in PROFILE_KINDS and row.scope in ("breakable-ab", "all")}
    assert {f.row for f in failures} == rendered_rows
    assert all(isinstance(f.actual, Refused) and "gate cudagraph_mode" in f.actual.reason for f in failures)


# --- the check bites: the table departs --------------------------------------------------------

TABLE_EDITS = {
    "long-1m utilisation written as the manifest's": (("long-1m", "flag", "--gpu-memory-utilization"), "0.835"),
    "breakable-ab mode written as FULL_AND_PIECEWISE": (
        ("breakable-ab", "flag-json", "--compilation-config.cudagraph_mode"), "FULL_AND_PIECEWISE"),
    "strict written as a string": (("production", "flag-json", "--compilation-config.cudagraph_strict"), "yes"),
    "long-1m KV written as pinned": (("long-1m", "flag", "--kv-cache-memory-bytes"), "15998753178"),
    "production timeout written as set": (("production", "env", "VLLM_RPC_TIMEOUT"), "3600"),
    "gate strict written as false": (("long-1m", "gate", "expected-strict"), "false"),
    "pin revision of another model": (("pin", "pin", "model_revision"), "0" * 40),
}


@pytest.mark.parametrize("case", sorted(TABLE_EDITS))
def test_a_wrong_table_value_is_reported_under_its_row(case):
    key, value = TABLE_EDITS[case]
    rows = [dataclasses.replace(r, value=value) if r.key == key else r for r in doc_rows()]
    failures = check_conformance(load_catalog(), load_pin(), rows=rows)
    assert {f.row for f in failures} == {row_id(*key)}


@pytest.mark.parametrize("key", sorted(REQUIRED))
def test_deleting_a_required_row_is_reported(key):
    rows = [r for r in doc_rows() if r.key != key]
    assert missing_required(rows) == [key]


TABLE_DEFECTS = {
    "unknown kind": (lambda r: dataclasses.replace(r, kind="flags"), "unknown kind"),
    "scope that is no profile": (lambda r: dataclasses.replace(r, scope="long-2m"), "does not fit kind"),
    "unknown gate expectation": (lambda r: dataclasses.replace(r, kind="gate", name="expected-level"),
                                 "unknown gate expectation"),
    "seed line without a line number": (lambda r: dataclasses.replace(r, seed="seed 003"), "seed line"),
    "id already used": (lambda r: dataclasses.replace(r, id=doc_rows()[0].id), "id already used"),
}


@pytest.mark.parametrize("case", sorted(TABLE_DEFECTS))
def test_a_malformed_row_is_reported(case):
    edit, phrase = TABLE_DEFECTS[case]
    rows = doc_rows()
    victim = next(r for r in rows if r.kind == "flag" and r.scope == "long-1m")
    rows = [edit(r) if r == victim else r for r in rows]
    problems = table_problems(rows, load_catalog())
    assert table_problems(doc_rows(), load_catalog()) == []
    assert len(problems) == 1 and phrase in problems[0], problems


# --- section numbers that code cites exist ------------------------------------------------------

_NUM = r"\d+(?:\.\d+)?"
_NUMS = rf"{_NUM}(?:\s*(?:,|/|and)\s*{_NUM})*"
CITATIONS = (
    re.compile(rf"wrapper-reference\.md,?\s*(?:section\s+|§\s?)({_NUMS})", re.IGNORECASE),
    re.compile(rf"\bspec,?\s+(?:section\s+|§\s?)?({_NUMS})", re.IGNORECASE),  # "wrapper spec 5.4", "spec §1"
)
SCANNED = {".py", ".yml", ".yaml", ".md", ".sh", ".j2", ".cfg", ".toml", ".txt", ".ini", ".rst"}
NOT_SCANNED = {"collections", "artifacts", "node_modules", "__pycache__"}


def cited_sections() -> dict[str, list[str]]:
    """Section number -> the file:line places that cite it."""
    out: dict[str, list[str]] = {}
    this = Path(__file__).resolve()
    for path in sorted(REPO.rglob("*")):
        relative = path.relative_to(REPO)
        if (any(part.startswith(".") or part in NOT_SCANNED for part in relative.parts[:-1])
                or path.suffix not in SCANNED or not path.is_file() or path.resolve() in (this, DOC.resolve())):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for pattern in CITATIONS:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                for number in re.findall(_NUM, match.group(1)):
                    out.setdefault(number, []).append(f"{relative}:{line}")
    return out


def test_every_cited_section_exists_in_the_reference():
    headings = set(re.findall(rf"^#{{2,4}} §({_NUM})\s", DOC.read_text(encoding="utf-8"), re.MULTILINE))
    assert {str(n) for n in range(1, 12)} <= headings, sorted(headings)
    cited = cited_sections()
    assert cited, "no citation found: the scan is broken"
    missing = {number: places for number, places in cited.items() if number not in headings}
    assert not missing, f"cited sections without a heading in {DOC.name}: {missing}"
