# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving profiles: resolve one from the catalog, check it, and render each rank's launch.

The catalog (``roles/profile/vars/main.yml``, ``__dspark_profile_catalog``) is the one place the
profiles live as data. This module turns a profile name plus operator overrides into a resolved,
rank-independent profile, and that into each rank's ``vllm serve`` argv and environment:

* :func:`resolve` applies overrides, enforces the lane/profile lock (docs/wrapper-reference.md §2.3: a profile
  that departs from its qualified tuple, compilation config, optimization level, performance
  mode, autotune flag or environment is refused unless ``allow_experimental``; the departures
  are returned so evidence records them) and the invariants that hold even for experimental
  runs. Every violation is collected; one :class:`IdentityError` lists them all. Variables that
  hijack the loader or the interpreter (:data:`REFUSED_ENV_PREFIXES`, :data:`REFUSED_ENV_NAMES`)
  are refused wherever they come from; engine settings in ``extra_env``
  (:data:`ENGINE_ENV_PREFIXES`, or a name a profile sets) are treated as env overrides.
* :func:`rank_argv` and :func:`rank_env` render the launch of rank 0 (head) or 1 (worker),
  docs/wrapper-reference.md §3.2 and §3.3; :func:`env_file_text` writes the environment as a Docker env file.
* :func:`profile_sha256` fingerprints the resolved profile (a container label, so a profile
  change is visible); :func:`manifest_expectations` names, once, which catalog value the
  runtime manifest's profile section records under which key (docs/wrapper-reference.md §6).

Standard library only. This file resolves and checks; beside it, by concern: :mod:`._profile_env` (what a
profile's environment may hold) and :mod:`._profile_launch` (each rank's argv, environment and env file).
"""
from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Callable

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import IdentityError, Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import redact_document
from ansible_collections.gb10.dspark.plugins.module_utils.common._site import SITE_DEFAULTS
from ansible_collections.gb10.dspark.plugins.module_utils.engine._profile_env import (
    _Problems,
    _check_env,
    _is_int,
    _is_number,
    is_engine_env,
)
from ansible_collections.gb10.dspark.plugins.module_utils.engine._profile_launch import (
    DEFAULT_FABRIC_ENV,
    FABRIC_ENV,
    KV_CACHE_DTYPE,
    _ordered_compilation_config,
    _rank_problems,
    compilation_config_json,
    env_file_text,
    rank_argv,
    rank_env,
)

RUNTIME_LANE = "native-v026"
# The variables that name the runtime manifest inside the containers (the pin's runtime_manifest_path)
MANIFEST_ENV = ("RUNTIME_AUDIT_MANIFEST", "DSPARK_RUNTIME_AUDIT_MANIFEST")
TUPLE_KEYS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
              "kv_cache_memory_bytes", "mtp_tokens")
# What an override may change; changing any of it departs from the qualified profile.
QUALIFIED_KEYS = TUPLE_KEYS + ("compilation_config", "optimization_level", "performance_mode",
                               "enable_flashinfer_autotune", "env")
# Fixed by the profile: never overridable.
FIXED_KEYS = ("runtime_lane", "manifest_section", "speculative_method", "gate", "manifest_exempt")
CATALOG_KEYS = QUALIFIED_KEYS + FIXED_KEYS
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
CUDAGRAPH_IMPLEMENTATIONS = ("regular", "breakable")  # explicit only: the gate needs to know which
PERFORMANCE_MODES = ("balanced", "throughput", "interactivity")
OPTIMIZATION_LEVELS = (0, 1, 2, 3)
# docs/wrapper-reference.md §2.1: the long-context lane cannot finish a 16K-token first prefill step inside the 300 s
# sample_tokens RPC budget on SM121, so its batch is capped.
LONG_CONTEXT_PROFILES = ("long-1m",)
LONG_CONTEXT_SECTION = "long_context_profile"
LONG_CONTEXT_BATCH_CAP = 8192
BREAKABLE_ENV = "VLLM_USE_BREAKABLE_CUDAGRAPH"   # the gate fails if PID 1 has it at all (docs/wrapper-reference.md §3.2)
MULTI_STREAM_ENV = "VLLM_DSV4_ENABLE_MULTI_STREAM"  # the gate requires "0" in PID 1 (docs/wrapper-reference.md §3.2)
PER_RANK_ENV = ("NODE_RANK", "HEADLESS", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT",
                "MTP_NUM_TOKENS")
# The gate's expectations follow from these profile values (docs/wrapper-reference.md §5.1).
GATE_SOURCES = {
    "cudagraph_implementation": "compilation_config.cudagraph_implementation",
    "cudagraph_mode": "compilation_config.cudagraph_mode",
    "optimization_level": "optimization_level",
    "performance_mode": "performance_mode",
}


# Runtime-manifest profile sections (docs/wrapper-reference.md §6, [A]): manifest key -> (catalog path, converter).
# The runtime_manifest module's ``profile`` option is fed from manifest_expectations().


def _flag(value: Any) -> Any:
    """An engine env flag as the manifest records it: "1" -> true, "0" -> false, else as is."""
    return {"1": True, "0": False}.get(value, value) if isinstance(value, str) else value


def _breakable_flag(value: Any) -> Any:
    return False if value is None else _flag(value)


def _same(value: Any) -> Any:
    return value


MANIFEST_KEYS: dict[str, tuple[str | None, Callable[[Any], Any]]] = {
    "runtime_lane": ("runtime_lane", _same),
    "max_model_len": ("max_model_len", _same),
    "max_num_seqs": ("max_num_seqs", _same),
    "max_num_batched_tokens": ("max_num_batched_tokens", _same),
    "gpu_memory_utilization": ("gpu_memory_utilization", _same),
    "kv_cache_memory_bytes": ("kv_cache_memory_bytes", _same),
    "mtp_tokens": ("mtp_tokens", _same),
    "cudagraph_implementation": ("compilation_config.cudagraph_implementation", _same),
    "cudagraph_strict": ("compilation_config.cudagraph_strict", _same),
    "optimization_level": ("optimization_level", _same),
    "performance_mode": ("performance_mode", _same),
    "enable_flashinfer_autotune": ("enable_flashinfer_autotune", _same),
    "enforce_eager": (None, lambda _: False),  # the argv never carries --enforce-eager
    "use_breakable_cudagraph": ("env." + BREAKABLE_ENV, _breakable_flag),  # absent = not used
    "vllm_disable_compile_cache": ("env.VLLM_DISABLE_COMPILE_CACHE", _flag),
    "vllm_dsv4_enable_multi_stream": ("env." + MULTI_STREAM_ENV, _flag),
    "vllm_use_aot_compile": ("env.VLLM_USE_AOT_COMPILE", _flag),
}
# Which of those keys each section records (docs/wrapper-reference.md §6). An unknown section is compared on all keys.
MANIFEST_SECTION_KEYS = {
    "production_profile": tuple(MANIFEST_KEYS),
    "c1_qualification_profile": tuple(MANIFEST_KEYS),
    "long_context_profile": ("runtime_lane", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                             "gpu_memory_utilization", "kv_cache_memory_bytes", "cudagraph_implementation",
                             "cudagraph_strict", "vllm_disable_compile_cache", "vllm_dsv4_enable_multi_stream",
                             "vllm_use_aot_compile"),
}

_EXPERIMENTAL_HINT = "departs from the qualified profile; set allow_experimental to run it"


def _get(profile: dict, path: str) -> Any:
    """The value at a dotted path (``compilation_config.cudagraph_mode``, ``env.NCCL_DEBUG``)."""
    head, _sep, rest = path.partition(".")
    value = profile.get(head) if isinstance(profile, dict) else None
    if rest:
        return value.get(rest) if isinstance(value, dict) else None
    return value


def _departures(qualified: dict, resolved: dict) -> list[dict]:
    out = []
    for key in QUALIFIED_KEYS:
        q, r = qualified.get(key), resolved.get(key)
        if key in ("compilation_config", "env") and isinstance(q, dict) and isinstance(r, dict):
            for sub in sorted(set(q) | set(r)):
                if q.get(sub) != r.get(sub) or (sub in q) != (sub in r):
                    out.append({"key": f"{key}.{sub}", "qualified": q.get(sub), "actual": r.get(sub)})
        elif q != r or type(q) is not type(r):
            if _is_number(q) and _is_number(r) and q == r:
                continue  # 1 and 1.0 are the same setting
            out.append({"key": key, "qualified": q, "actual": r})
    return out


def _apply_overrides(entry: dict, overrides: Any, problems: _Problems) -> dict:
    resolved = copy.deepcopy(entry)
    if not isinstance(overrides, dict):
        problems.add("overrides", type(overrides).__name__, "a mapping")
        return resolved
    for key, value in overrides.items():
        if key not in QUALIFIED_KEYS:
            reason = "fixed by the profile" if key in FIXED_KEYS else "not a profile setting"
            problems.add(f"override {key}", value, None, f"{reason}; overridable: {', '.join(QUALIFIED_KEYS)}")
            continue
        if key in ("compilation_config", "env"):
            if not isinstance(value, dict):
                problems.add(f"override {key}", type(value).__name__, "a mapping (merged into the profile's)")
                continue
            merged = dict(resolved.get(key) or {})
            for sub, subvalue in value.items():
                if key == "env" and subvalue is None:
                    merged.pop(sub, None)  # null removes an env var
                else:
                    merged[sub] = subvalue
            resolved[key] = merged
        else:
            resolved[key] = value
    return resolved


def _check_values(name: str, p: dict, pin: dict, problems: _Problems) -> None:
    """Types and the invariants that hold for every profile, experimental or not."""
    for key in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "mtp_tokens"):
        if not (_is_int(p.get(key)) and p[key] >= 1):
            problems.add(key, p.get(key), "a positive integer")
    kv_bytes = p.get("kv_cache_memory_bytes")
    if kv_bytes is not None and not (_is_int(kv_bytes) and kv_bytes >= 1):
        problems.add("kv_cache_memory_bytes", kv_bytes, "a positive integer, or null for auto-sized KV")
    gmu = p.get("gpu_memory_utilization")
    if not (_is_number(gmu) and 0 < gmu <= 1):
        problems.add("gpu_memory_utilization", gmu, "a number in (0, 1]")
    if p.get("optimization_level") not in OPTIMIZATION_LEVELS or not _is_int(p.get("optimization_level")):
        problems.add("optimization_level", p.get("optimization_level"), list(OPTIMIZATION_LEVELS))
    if p.get("performance_mode") not in PERFORMANCE_MODES:
        problems.add("performance_mode", p.get("performance_mode"), list(PERFORMANCE_MODES))
    if not isinstance(p.get("enable_flashinfer_autotune"), bool):
        problems.add("enable_flashinfer_autotune", p.get("enable_flashinfer_autotune"), "true or false")
    if p.get("runtime_lane") != RUNTIME_LANE:
        problems.add("runtime_lane", p.get("runtime_lane"), RUNTIME_LANE, "the only lane this collection serves")
    if not isinstance(p.get("manifest_section"), str) or not p.get("manifest_section"):
        problems.add("manifest_section", p.get("manifest_section"), "a runtime-manifest section name")
    exempt = p.get("manifest_exempt")
    if not (isinstance(exempt, list) and all(isinstance(k, str) and k in MANIFEST_KEYS for k in exempt)):
        problems.add("manifest_exempt", exempt, f"a list of manifest keys out of {sorted(MANIFEST_KEYS)}")

    cc = p.get("compilation_config")
    if not isinstance(cc, dict):
        problems.add("compilation_config", cc, "a mapping")
    else:
        if not (_is_int(cc.get("mode")) and cc.get("mode") == 0):
            problems.add("compilation_config.mode", cc.get("mode"), 0,
                         "torch.compile stays off for DeepSeek-V4 on SM121")
        if "level" in cc and not (_is_int(cc["level"]) and cc["level"] == 0):
            problems.add("compilation_config.level", cc["level"], 0, "the legacy name of mode")
        if cc.get("cudagraph_mode") not in CUDAGRAPH_MODES:
            problems.add("compilation_config.cudagraph_mode", cc.get("cudagraph_mode"), list(CUDAGRAPH_MODES))
        if cc.get("cudagraph_implementation") not in CUDAGRAPH_IMPLEMENTATIONS:
            problems.add("compilation_config.cudagraph_implementation", cc.get("cudagraph_implementation"),
                         list(CUDAGRAPH_IMPLEMENTATIONS))
        if not isinstance(cc.get("cudagraph_strict"), bool):
            problems.add("compilation_config.cudagraph_strict", cc.get("cudagraph_strict"), "true or false")

    env = p.get("env") or {}
    if env.get("KV_CACHE_DTYPE") != KV_CACHE_DTYPE:
        problems.add("env.KV_CACHE_DTYPE", env.get("KV_CACHE_DTYPE"), KV_CACHE_DTYPE)
    if env.get(MULTI_STREAM_ENV) != "0":
        problems.add(f"env.{MULTI_STREAM_ENV}", env.get(MULTI_STREAM_ENV), "0",
                     "the runtime gate requires it in PID 1")
    if BREAKABLE_ENV in env:
        problems.add(f"env.{BREAKABLE_ENV}", env[BREAKABLE_ENV], None,
                     "the runtime gate fails on any value; select breakable graphs in compilation_config")
    for key in PER_RANK_ENV:
        if key in env:
            problems.add(f"env.{key}", env[key], None, "set per rank, not by the profile")
    for key in FABRIC_ENV:
        if key in env:
            problems.add(f"env.{key}", env[key], None,
                         "a site fabric setting: set it per site or per host in dspark_fabric_env, not in the profile")

    if name in LONG_CONTEXT_PROFILES or p.get("manifest_section") == LONG_CONTEXT_SECTION:
        batch = p.get("max_num_batched_tokens")
        if _is_int(batch) and batch > LONG_CONTEXT_BATCH_CAP:
            problems.add("max_num_batched_tokens", batch, f"at most {LONG_CONTEXT_BATCH_CAP}",
                         "SM121 sparse prefill cannot finish a larger first step inside the 300 s RPC budget")

    if not isinstance(pin, dict):
        problems.add("pin", type(pin).__name__, "a mapping")
        return
    if pin.get("kv_cache_dtype") != KV_CACHE_DTYPE:
        problems.add("pin kv_cache_dtype", pin.get("kv_cache_dtype"), KV_CACHE_DTYPE,
                     "the profile's KV_CACHE_DTYPE must equal the pin's")
    if p.get("mtp_tokens") != pin.get("speculative_tokens") or not _is_int(pin.get("speculative_tokens")):
        problems.add("mtp_tokens", p.get("mtp_tokens"), pin.get("speculative_tokens"),
                     "the pin's speculative_tokens")
    if p.get("speculative_method") != pin.get("speculative_method"):
        problems.add("speculative_method", p.get("speculative_method"), pin.get("speculative_method"),
                     "the pin's speculative_method")


def _check_gate(entry: dict, problems: _Problems) -> None:
    """The catalog's gate expectations agree with the catalog's own values."""
    gate = entry.get("gate")
    if not isinstance(gate, dict):
        problems.add("gate", gate, f"a mapping of {list(GATE_SOURCES)}")
        return
    for key, path in GATE_SOURCES.items():
        if gate.get(key) != _get(entry, path):
            problems.add(f"gate {key}", gate.get(key), _get(entry, path), f"the profile's {path}")
    for key in sorted(set(gate) - set(GATE_SOURCES)):
        problems.add(f"gate {key}", gate[key], None, f"the gate expects only {list(GATE_SOURCES)}")


def _catalog_env_names(catalog: dict) -> set:
    """Every variable name some profile of the catalog sets: each is engine behaviour."""
    names = set()
    for entry in catalog.values():
        env = entry.get("env") if isinstance(entry, dict) else None
        if isinstance(env, dict):
            names.update(key for key in env if isinstance(key, str))
    return names


def _resolve(catalog: Any, name: str, overrides: Any, allow_experimental: bool, pin: Any,
             extra_env: Any = None) -> tuple[dict | None, list[Mismatch]]:
    problems = _Problems(f"profile {name}")
    if not isinstance(catalog, dict) or not isinstance(catalog.get(name), dict):
        names = sorted(catalog) if isinstance(catalog, dict) else []
        problems.add("profile name", name, names, "not in the catalog")
        return None, problems.items
    entry = catalog[name]
    for key in CATALOG_KEYS:
        if key not in entry:
            problems.add(f"catalog entry {key}", None, "present")
    for key in sorted(set(entry) - set(CATALOG_KEYS), key=str):
        problems.add(f"catalog entry {key}", entry[key], None, "not a profile setting")
    qualified = {key: copy.deepcopy(entry.get(key)) for key in CATALOG_KEYS}
    qualified["env"] = _check_env(entry.get("env", {}), "catalog env", problems)
    # The dtype is the pin's (_pin.KV_CACHE_DTYPE), not catalog data: every profile serves it.
    qualified["env"].setdefault("KV_CACHE_DTYPE", KV_CACHE_DTYPE)
    # The launch names the runtime manifest where the engine mounts it (the pin's runtime_manifest_path), under
    # both names the wrapper exports for the launch (seed 003 L87-L91, L145-L146).
    manifest_path = pin.get("runtime_manifest_path") if isinstance(pin, dict) else None
    if isinstance(manifest_path, str) and manifest_path:
        for variable in MANIFEST_ENV:
            qualified["env"].setdefault(variable, manifest_path)
    _check_gate(qualified, problems)

    resolved = _apply_overrides(qualified, overrides if overrides is not None else {}, problems)
    resolved["env"] = _check_env(resolved.get("env", {}), "env", problems)
    # extra_env splits in two. Engine settings (ENGINE_ENV_PREFIXES, and any name a profile or the
    # overrides set) are merged into the profile's env after the overrides, exactly as an override:
    # a departure, and part of profile_sha256. The rest stays rank-local in extra_env, unhashed.
    extra = _check_env(extra_env, "extra_env", problems) if extra_env else {}
    profile_names = set(qualified["env"]) | set(resolved["env"]) | _catalog_env_names(catalog)
    engine_extra = {key: value for key, value in extra.items() if is_engine_env(key, profile_names)}
    extra = {key: value for key, value in extra.items() if key not in engine_extra}
    resolved["env"].update(engine_extra)
    departures = sorted(_departures(qualified, resolved), key=lambda d: d["key"])

    # The invariants hold for what the container gets: the profile's env merged with extra_env.
    _check_values(name, {**resolved, "env": {**resolved["env"], **extra}}, pin, problems)
    if departures and not allow_experimental:
        already = {m.item for m in problems.items}  # an invariant says more than "departs"
        for d in (d for d in departures if d["key"] not in already):
            sub = d["key"].partition(".")[2] if d["key"].startswith("env.") else None
            hint = (f"set through extra_env, where an engine setting {_EXPERIMENTAL_HINT}"
                    if sub in engine_extra else _EXPERIMENTAL_HINT)
            problems.add(d["key"], d["actual"], d["qualified"], hint)
    if problems.items:
        return None, problems.items

    cc = _ordered_compilation_config(resolved["compilation_config"])
    out = {"name": name}
    for key in CATALOG_KEYS:
        out[key] = resolved[key]
    out["gpu_memory_utilization"] = float(resolved["gpu_memory_utilization"])
    out["compilation_config"] = cc
    out["env"] = dict(sorted(resolved["env"].items()))
    out["extra_env"] = dict(sorted(extra.items()))
    out["gate"] = {key: _get(out, path) for key, path in GATE_SOURCES.items()}
    out["manifest_exempt"] = sorted(resolved["manifest_exempt"])
    out["departures"] = departures
    out["experimental"] = bool(departures)
    return out, []


def resolve(catalog: dict, name: str, overrides: dict, allow_experimental: bool, pin: dict,
            extra_env: dict | None = None) -> dict:
    """The resolved profile ``name`` (with ``departures`` and ``experimental``), or IdentityError.

    ``overrides`` may change the qualified settings (:data:`QUALIFIED_KEYS`);
    ``compilation_config`` and ``env`` overrides are merged (an env value of null removes the
    variable). Any change is a departure, refused unless ``allow_experimental``.

    ``extra_env`` is for rank-local knobs such as the simulator's DSPARK_SIM_*. Its names that
    hijack the loader or the interpreter (LD_*, PYTHONPATH, ...: :func:`refused_env_reason`) are
    refused, even with ``allow_experimental``. Its engine settings (:func:`is_engine_env`: VLLM_*,
    NCCL_*, TORCH_*, ... and every name a catalog profile sets) are merged into ``env`` after the
    overrides, exactly as an env override: a departure, and part of :func:`profile_sha256`. The
    remaining names are kept apart in ``extra_env``, merged last into each rank's environment and
    checked with it; they are not departures and not hashed.
    """
    resolved, problems = _resolve(catalog, name, overrides, allow_experimental, pin, extra_env)
    if problems:
        raise IdentityError(problems)
    return resolved


def profile_sha256(resolved: dict) -> str:
    """sha256 (hex) of the canonical JSON of the resolved, rank-independent profile.

    ``extra_env`` is left out: after :func:`resolve` it holds only rank-local knobs that do not
    change the engine (a simulator fault is set on one rank only). Engine settings given through
    extra_env were moved into ``env`` (and ``departures``), so they are hashed: both ranks of a pair
    agree exactly when they run the same engine settings.
    """
    hashed = {key: value for key, value in resolved.items() if key != "extra_env"}
    canonical = json.dumps(hashed, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def manifest_expectations(resolved: dict) -> dict:
    """What the runtime manifest's ``manifest_section`` must record for this profile.

    Manifest key -> value, from :data:`MANIFEST_KEYS` (the one catalog-to-manifest mapping),
    limited to the keys that section records (:data:`MANIFEST_SECTION_KEYS`) and leaving out the
    profile's ``manifest_exempt`` keys. For an experimental departure the qualified value is
    expected: the manifest is pinned by sha256 and records the qualified profile, while the
    departure itself goes to the evidence.
    """
    qualified = {d["key"]: d["qualified"] for d in resolved.get("departures", [])}
    section = resolved.get("manifest_section")
    keys = MANIFEST_SECTION_KEYS.get(section, tuple(MANIFEST_KEYS))
    exempt = set(resolved.get("manifest_exempt") or ())
    out = {}
    for key in keys:
        if key in exempt:
            continue
        path, convert = MANIFEST_KEYS[key]
        value = None if path is None else (qualified[path] if path in qualified else _get(resolved, path))
        out[key] = convert(value)
    return out


# profile_resolve's options, shared by the module and its action plugin (which resolves in the
# controller's worker process: the task always runs on the control node, so no module is shipped).
RESOLVE_ARGUMENT_SPEC = {
    "catalog": {"type": "dict", "required": True},
    "name": {"type": "str", "required": True},
    "overrides": {"type": "dict", "default": {}},
    "allow_experimental": {"type": "bool", "default": False},
    "pin": {"type": "dict", "required": True},
    "rank": {"type": "int", "required": True, "choices": [0, 1]},
    "eth_if": {"type": "str", "required": True},
    "ib_hca": {"type": "str", "required": True},
    "head_fabric_ip": {"type": "str", "required": True},
    "master_port": {"type": "int", "default": SITE_DEFAULTS["master_port"]},
    "api_port": {"type": "int", "default": SITE_DEFAULTS["api_port"]},
    "served_model_name": {"type": "str", "required": True},
    "extra_env": {"type": "dict", "default": {}},
    "fabric_env": {"type": "dict", "default": dict(DEFAULT_FABRIC_ENV)},
}


def build(catalog: dict, name: str, overrides: dict, allow_experimental: bool, pin: dict, rank: int,
          eth_if: str, ib_hca: str, head_fabric_ip: str, master_port: int, api_port: int,
          served_model_name: str, extra_env: dict | None = None, fabric_env: dict | None = None) -> dict:
    """Everything profile_resolve returns for one rank; every violation, profile and rank, at once."""
    fabric = dict(DEFAULT_FABRIC_ENV) if fabric_env is None else fabric_env
    resolved, problems = _resolve(catalog, name, overrides, allow_experimental, pin, extra_env)
    problems = problems + _rank_problems(resolved or {"name": name}, rank, head_fabric_ip, master_port,
                                         api_port=api_port, served_model_name=served_model_name,
                                         eth_if=eth_if, ib_hca=ib_hca, fabric_env=fabric)
    if problems:
        raise IdentityError(problems)
    env = rank_env(resolved, rank, eth_if, ib_hca, head_fabric_ip, master_port, fabric)
    env_file_text(env)  # refuses a value no env file can carry, while the real values are at hand
    # Every secret-named value (the collection's one rule) is a placeholder from here on: the result is
    # registered, published as facts, shown by the render and kept in run records. The roles add the real
    # values back from the inventory (the secret_env filter) only in tasks that run with no_log.
    shown = redact_document({"profile": resolved, "env": env, "departures": resolved["departures"]})
    return {
        "profile": shown["profile"],
        "argv": rank_argv(resolved, rank, head_fabric_ip, master_port, api_port, served_model_name),
        "env": shown["env"],
        "env_file": env_file_text(shown["env"]),
        "compilation_config_json": compilation_config_json(resolved),
        "profile_sha256": profile_sha256(resolved),
        "departures": shown["departures"],
        "experimental": resolved["experimental"],
        "fabric_env": {key: env[key] for key in FABRIC_ENV if key in env},
        "manifest_expectations": manifest_expectations(resolved),
    }
