# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The profile catalog resolves, the lock and the invariants hold, and the rendered launch is one
the stand-in engine accepts and would start with."""
from __future__ import annotations

import copy
import json
import sys

import pytest
import yaml
from ansible_collections.community.docker.plugins.module_utils._api.utils.utils import parse_env_file

from ansible_collections.gb10.dspark.plugins.module_utils.engine import _profile
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _profile_launch
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _profile_env
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import IdentityError
from ansible_collections.gb10.dspark.plugins.modules import profile_resolve
from tests.unit.plugins.conftest import REPO

sys.path.insert(0, str(REPO / "sim" / "engine"))
from dspark_engine import cli as standin_cli  # noqa: E402
from dspark_engine import config as standin_config  # noqa: E402

CATALOG_FILE = REPO / "roles" / "profile" / "vars" / "main.yml"
PIN_FILE = REPO / "inventories" / "sample" / "group_vars" / "all" / "pin.yml"
SIM_MANIFEST = REPO / "sim" / "engine" / "runtime-manifest.vllm-sim.3.json"
HEAD_IP = "10.232.1.1"
RANK_IO = {0: ("enp1s0f0np0", "rocep1s0f0"), 1: ("enp1s0f1np1", "rocep1s0f1")}
SERVED = "deepseek-v4-flash-dspark"


def load_catalog() -> dict:
    return yaml.safe_load(CATALOG_FILE.read_text())["__dspark_profile_catalog"]


def load_pin() -> dict:
    return yaml.safe_load(PIN_FILE.read_text())["dspark_pin"]


@pytest.fixture(name="catalog")
def _catalog() -> dict:
    return load_catalog()


@pytest.fixture(name="pin")
def _pin() -> dict:
    return load_pin()


PROFILES = sorted(load_catalog())


def resolve(catalog, name="production", overrides=None, allow=False, pin=None, extra_env=None) -> dict:
    return _profile.resolve(catalog, name, overrides or {}, allow, pin or load_pin(), extra_env=extra_env)


def refused(catalog, name="production", overrides=None, allow=False, pin=None, extra_env=None) -> IdentityError:
    with pytest.raises(IdentityError) as info:
        resolve(catalog, name, overrides, allow, pin, extra_env)
    return info.value


def items(err: IdentityError) -> set[str]:
    return {m.item for m in err.mismatches}


def argv_of(profile: dict, rank: int) -> list[str]:
    return _profile_launch.rank_argv(profile, rank, HEAD_IP, 25000, 8888, SERVED)


def flag(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


# --- the catalog -------------------------------------------------------------------------------

def test_catalog_holds_exactly_the_three_profiles(catalog):
    assert sorted(catalog) == ["breakable-ab", "long-1m", "production"]
    for entry in catalog.values():
        assert sorted(entry) == sorted(_profile.CATALOG_KEYS)
        assert _profile.BREAKABLE_ENV not in entry["env"]


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_resolves_against_the_sample_pin(catalog, pin, name):
    before = copy.deepcopy(catalog)
    p = resolve(catalog, name, pin=pin)
    assert catalog == before, "resolve must not change the catalog"
    assert p["name"] == name and p["departures"] == [] and p["experimental"] is False
    assert p["mtp_tokens"] == pin["speculative_tokens"]
    assert p["env"]["KV_CACHE_DTYPE"] == pin["kv_cache_dtype"]
    assert p["gate"] == catalog[name]["gate"]
    assert list(p["compilation_config"])[:4] == list(_profile_launch.COMPILATION_KEY_ORDER)


def _same_json(a, b) -> bool:
    return json.dumps(a) == json.dumps(b)


@pytest.mark.parametrize("name", PROFILES)
def test_catalog_agrees_with_the_sim_manifest_section(catalog, name):
    manifest = json.loads(SIM_MANIFEST.read_text())
    p = resolve(catalog, name)
    section = manifest[p["manifest_section"]]
    expected = _profile.manifest_expectations(p)
    assert expected, name
    for key, value in expected.items():
        assert key in section, (name, key)
        assert _same_json(section[key], value), (name, key, section[key], value)


def test_production_expectations_cover_the_qualified_values(catalog):
    expected = _profile.manifest_expectations(resolve(catalog, "production"))
    for key in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
                "kv_cache_memory_bytes", "mtp_tokens", "cudagraph_implementation", "optimization_level",
                "performance_mode"):
        assert key in expected, key


def test_a_catalog_value_that_drifts_from_the_manifest_is_caught(catalog):
    manifest = json.loads(SIM_MANIFEST.read_text())["production_profile"]
    catalog["production"]["gpu_memory_utilization"] = 0.84
    expected = _profile.manifest_expectations(resolve(catalog, "production"))
    assert expected["gpu_memory_utilization"] != manifest["gpu_memory_utilization"]


def test_exempt_keys_are_not_compared(catalog):
    assert "cudagraph_implementation" not in _profile.manifest_expectations(resolve(catalog, "breakable-ab"))
    assert "kv_cache_memory_bytes" not in _profile.manifest_expectations(resolve(catalog, "long-1m"))


def test_departed_settings_are_expected_at_their_qualified_value(catalog):
    p = resolve(catalog, overrides={"max_num_seqs": 8, "env": {"VLLM_USE_AOT_COMPILE": "1"}}, allow=True)
    expected = _profile.manifest_expectations(p)
    assert expected["max_num_seqs"] == 16 and expected["vllm_use_aot_compile"] is False
    assert p["max_num_seqs"] == 8


# --- the lock ----------------------------------------------------------------------------------

def test_an_override_without_allow_experimental_is_refused(catalog):
    err = refused(catalog, overrides={"max_num_seqs": 8})
    assert [m.item for m in err.mismatches] == ["max_num_seqs"]
    assert err.mismatches[0].actual == 8 and err.mismatches[0].expected == 16
    assert "rank profile production: max_num_seqs is 8, expected 16" in str(err)
    assert "allow_experimental" in str(err)


def test_an_override_with_allow_experimental_passes_and_lists_the_departure(catalog):
    p = resolve(catalog, overrides={"max_num_seqs": 8, "compilation_config": {"cudagraph_mode": "FULL"}},
                allow=True)
    assert p["experimental"] is True
    assert p["departures"] == [  # sorted by key
        {"key": "compilation_config.cudagraph_mode", "qualified": "FULL_DECODE_ONLY", "actual": "FULL"},
        {"key": "max_num_seqs", "qualified": 16, "actual": 8},
    ]
    assert p["gate"]["cudagraph_mode"] == "FULL"  # the gate follows what actually runs
    assert flag(argv_of(p, 0), "--max-num-seqs") == "8"
    assert json.loads(flag(argv_of(p, 0), "--compilation-config"))["cudagraph_mode"] == "FULL"


@pytest.mark.parametrize("overrides", [
    {"optimization_level": 3}, {"performance_mode": "throughput"}, {"kv_cache_memory_bytes": None},
    {"gpu_memory_utilization": 0.8}, {"enable_flashinfer_autotune": False}, {"env": {"NCCL_DEBUG": "WARN"}},
    {"env": {"NCCL_RAS_ENABLE": None}}, {"env": {"SOMETHING_NEW": "1"}},
    {"compilation_config": {"cudagraph_strict": False}},
])
def test_every_qualified_setting_is_locked(catalog, overrides):
    err = refused(catalog, overrides=overrides)
    assert all("allow_experimental" in m.reason for m in err.mismatches)
    assert resolve(catalog, overrides=overrides, allow=True)["departures"]


def test_an_override_equal_to_the_qualified_value_is_no_departure(catalog):
    p = resolve(catalog, overrides={"max_num_seqs": 16, "gpu_memory_utilization": 0.835,
                                    "env": {"NCCL_DEBUG": "INFO"}})
    assert p["departures"] == [] and p["experimental"] is False


@pytest.mark.parametrize("key", ["runtime_lane", "manifest_section", "gate", "speculative_method", "no_such_key"])
def test_fixed_or_unknown_keys_cannot_be_overridden_even_experimentally(catalog, key):
    err = refused(catalog, overrides={key: "x"}, allow=True)
    assert items(err) == {f"override {key}"}


def test_an_unknown_profile_lists_the_catalog(catalog):
    err = refused(catalog, name="prod")
    assert err.mismatches[0].expected == ["breakable-ab", "long-1m", "production"]
    assert str(err).startswith("rank profile prod: profile name is prod, expected [breakable-ab, long-1m, production]")


@pytest.mark.parametrize("overrides,item", [
    ({"max_num_seqs": "16"}, "max_num_seqs"),
    ({"max_model_len": 0}, "max_model_len"),
    ({"gpu_memory_utilization": 1.2}, "gpu_memory_utilization"),
    ({"kv_cache_memory_bytes": -1}, "kv_cache_memory_bytes"),
    ({"optimization_level": True}, "optimization_level"),
    ({"performance_mode": "fast"}, "performance_mode"),
    ({"compilation_config": {"cudagraph_implementation": "auto"}}, "compilation_config.cudagraph_implementation"),
    ({"compilation_config": {"cudagraph_mode": "full"}}, "compilation_config.cudagraph_mode"),
    ({"env": {"NCCL_DEBUG": "INFO\nX=1"}}, "env.NCCL_DEBUG"),
    ({"env": {"NCCL_DEBUG": {"a": 1}}}, "env.NCCL_DEBUG"),
])
def test_malformed_values_are_refused_even_experimentally(catalog, overrides, item):
    assert item in items(refused(catalog, overrides=overrides, allow=True))


# --- invariants (hold with allow_experimental) -------------------------------------------------

def _pin_with(**changes) -> dict:
    return {**load_pin(), **changes}


@pytest.mark.parametrize("name,overrides,pin,extra_env,item", [
    ("production", {"env": {"KV_CACHE_DTYPE": "fp8"}}, None, None, "env.KV_CACHE_DTYPE"),
    ("production", {"env": {"KV_CACHE_DTYPE": None}}, None, None, "env.KV_CACHE_DTYPE"),
    ("production", {}, _pin_with(kv_cache_dtype="fp8"), None, "pin kv_cache_dtype"),
    ("production", {"compilation_config": {"mode": 3}}, None, None, "compilation_config.mode"),
    ("production", {"compilation_config": {"level": 3}}, None, None, "compilation_config.level"),
    ("production", {"env": {"VLLM_DSV4_ENABLE_MULTI_STREAM": "1"}}, None, None, "env.VLLM_DSV4_ENABLE_MULTI_STREAM"),
    ("production", {}, None, {"VLLM_DSV4_ENABLE_MULTI_STREAM": "1"}, "env.VLLM_DSV4_ENABLE_MULTI_STREAM"),
    ("production", {"env": {"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}}, None, None, "env.VLLM_USE_BREAKABLE_CUDAGRAPH"),
    ("breakable-ab", {}, None, {"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}, "env.VLLM_USE_BREAKABLE_CUDAGRAPH"),
    ("long-1m", {"max_num_batched_tokens": 16384}, None, None, "max_num_batched_tokens"),
    ("production", {}, _pin_with(speculative_tokens=5), None, "mtp_tokens"),
    ("production", {"mtp_tokens": 5}, None, None, "mtp_tokens"),
    ("production", {}, _pin_with(speculative_method="eagle"), None, "speculative_method"),
    ("production", {"env": {"NODE_RANK": "0"}}, None, None, "env.NODE_RANK"),
    ("production", {}, None, {"MASTER_ADDR": "10.0.0.9"}, "env.MASTER_ADDR"),
])
def test_each_invariant_is_refused_even_with_allow_experimental(catalog, name, overrides, pin, extra_env, item):
    err = refused(catalog, name, overrides, True, pin, extra_env)
    assert item in items(err), str(err)
    assert all(m.rank == f"profile {name}" and m.expected_word == "expected" for m in err.mismatches)


def test_the_long_context_cap_allows_8192_and_below(catalog):
    assert resolve(catalog, "long-1m", {"max_num_batched_tokens": 4096}, allow=True)["max_num_batched_tokens"] == 4096
    assert resolve(catalog, "production", {"max_num_batched_tokens": 16384})["max_num_batched_tokens"] == 16384


@pytest.mark.parametrize("change,item", [
    (lambda e: e["env"].update(VLLM_USE_BREAKABLE_CUDAGRAPH="1"), "env.VLLM_USE_BREAKABLE_CUDAGRAPH"),
    (lambda e: e["gate"].update(cudagraph_mode="FULL_AND_PIECEWISE"), "gate cudagraph_mode"),
    (lambda e: e.update(runtime_lane="legacy-stage-c"), "runtime_lane"),
    (lambda e: e.pop("mtp_tokens"), "catalog entry mtp_tokens"),
    (lambda e: e.update(max_cudagraph_capture_size=8), "catalog entry max_cudagraph_capture_size"),
    (lambda e: e.update(manifest_exempt=["no_such_manifest_key"]), "manifest_exempt"),
])
def test_a_broken_catalog_entry_is_refused(catalog, change, item):
    entry = copy.deepcopy(catalog["production"])
    change(entry)
    assert item in items(refused({**catalog, "production": entry}, allow=True))


def test_several_violations_are_all_listed(catalog):
    err = refused(catalog, "long-1m",
                  overrides={"max_num_batched_tokens": 16384, "compilation_config": {"mode": 3},
                             "env": {"VLLM_DSV4_ENABLE_MULTI_STREAM": "1"}, "max_num_seqs": 2},
                  pin=_pin_with(speculative_tokens=5), extra_env={"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"})
    assert items(err) >= {"max_num_batched_tokens", "compilation_config.mode", "env.VLLM_DSV4_ENABLE_MULTI_STREAM",
                          "env.VLLM_USE_BREAKABLE_CUDAGRAPH", "mtp_tokens", "max_num_seqs"}
    text = str(err)
    assert text.startswith(f"{len(err.mismatches)} identity mismatches:\n")
    assert len(text.splitlines()) == len(err.mismatches) + 1
    # an invariant is reported once, not again as a departure
    assert [m.item for m in err.mismatches].count("compilation_config.mode") == 1


# --- extra_env -------------------------------------------------------------------------------

def test_extra_env_adds_rank_local_knobs_without_departing(catalog):
    p = resolve(catalog, extra_env={"DSPARK_SIM_STARTUP_DELAY_S": 1})
    assert p["departures"] == [] and p["extra_env"] == {"DSPARK_SIM_STARTUP_DELAY_S": "1"}
    env = _profile_launch.rank_env(p, 1, *RANK_IO[1], HEAD_IP, 25000)
    assert env["DSPARK_SIM_STARTUP_DELAY_S"] == "1"


def test_extra_env_changing_a_profile_variable_departs(catalog):
    assert "env.NCCL_DEBUG" in items(refused(catalog, extra_env={"NCCL_DEBUG": "WARN"}))
    p = resolve(catalog, extra_env={"NCCL_DEBUG": "WARN"}, allow=True)
    assert p["departures"] == [{"key": "env.NCCL_DEBUG", "qualified": "INFO", "actual": "WARN"}]
    assert _profile_launch.rank_env(p, 0, *RANK_IO[0], HEAD_IP, 25000)["NCCL_DEBUG"] == "WARN"


def _build(catalog, rank, overrides=None, allow=False, extra_env=None) -> dict:
    return _profile.build(catalog, "production", overrides or {}, allow, load_pin(), rank, *RANK_IO[rank], HEAD_IP,
                          25000, 8888, SERVED, extra_env)


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_BIND_NOW", "PYTHONPATH",
                                  "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONUSERBASE", "PATH",
                                  "BASH_ENV", "CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN"])
def test_extra_env_refuses_what_hijacks_the_loader_or_the_interpreter(catalog, name):
    for allow in (False, True):  # an invariant: allow_experimental does not open it
        err = refused(catalog, allow=allow, extra_env={"DSPARK_SIM_STARTUP_DELAY_S": "1", name: "/tmp/x"})
        found = [m for m in err.mismatches if m.item == f"extra_env.{name}"]
        assert len(found) == 1, str(err)
        assert found[0].reason and "allow_experimental" not in found[0].reason  # says why, offers no way round
        assert f"extra_env.{name} is /tmp/x" in str(err)


def test_a_hijacking_name_is_refused_in_the_profile_overrides_too(catalog):
    err = refused(catalog, overrides={"env": {"LD_PRELOAD": "/tmp/x.so"}}, allow=True)
    assert items(err) == {"env.LD_PRELOAD"}
    entry = copy.deepcopy(catalog["production"])
    entry["env"]["PYTHONPATH"] = "/opt/x"
    assert "catalog env.PYTHONPATH" in items(refused({**catalog, "production": entry}, allow=True))


def test_extra_env_cannot_carry_the_api_key(catalog):
    # it would be recorded in departures and the evidence; dspark_api_key keeps it out of both
    err = refused(catalog, allow=True, extra_env={"VLLM_API_KEY": "sekret"})
    assert items(err) == {"extra_env.VLLM_API_KEY"} and "dspark_api_key" in str(err)
    assert "sekret" not in str(err)


def test_an_engine_setting_in_extra_env_is_a_departure(catalog):
    err = refused(catalog, extra_env={"VLLM_FOO": "1", "DSPARK_SIM_STARTUP_DELAY_S": "1"})
    assert items(err) == {"env.VLLM_FOO"}
    assert "allow_experimental" in err.mismatches[0].reason
    p = resolve(catalog, extra_env={"VLLM_FOO": "1", "DSPARK_SIM_STARTUP_DELAY_S": "1"}, allow=True)
    assert p["departures"] == [{"key": "env.VLLM_FOO", "qualified": None, "actual": "1"}]
    assert p["experimental"] is True
    assert _profile_launch.rank_env(p, 0, *RANK_IO[0], HEAD_IP, 25000)["VLLM_FOO"] == "1"
    assert p["extra_env"] == {"DSPARK_SIM_STARTUP_DELAY_S": "1"}  # what stays rank-local and unhashed


def test_an_engine_setting_in_extra_env_changes_the_profile_sha256(catalog):
    sha = _profile.profile_sha256(resolve(catalog))
    with_foo = _profile.profile_sha256(resolve(catalog, extra_env={"VLLM_FOO": "1"}, allow=True))
    assert with_foo != sha
    assert _profile.profile_sha256(resolve(catalog, extra_env={"VLLM_FOO": "2"}, allow=True)) != with_foo
    # the ranks of a pair agree when both carry it, and differ when only one does
    head = _build(catalog, 0, allow=True, extra_env={"VLLM_FOO": "1", "DSPARK_SIM_FAULT": "slow_tokens"})
    worker = _build(catalog, 1, allow=True, extra_env={"VLLM_FOO": "1"})
    assert head["profile_sha256"] == worker["profile_sha256"] == with_foo
    assert _build(catalog, 1, allow=True)["profile_sha256"] != head["profile_sha256"]
    # and it is the same identity as the equivalent profile override
    assert with_foo == _profile.profile_sha256(resolve(catalog, overrides={"env": {"VLLM_FOO": "1"}}, allow=True))


@pytest.mark.parametrize("name,value", [
    ("NCCL_ALGO", "Ring"), ("TORCH_NCCL_BLOCKING_WAIT", "1"), ("CUDA_VISIBLE_DEVICES", "0"),
    ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"), ("TRITON_CACHE_DIR", "/tmp/t"), ("HF_ENDPOINT", "http://x"),
    ("B12X_W4A16_TC_DECODE", "1"), ("TILELANG_CLEANUP_TEMP_FILES", "0"),  # names the catalog sets
])
def test_every_engine_behaviour_name_in_extra_env_departs(catalog, name, value):
    assert f"env.{name}" in items(refused(catalog, extra_env={name: value}))
    p = resolve(catalog, extra_env={name: value}, allow=True)
    assert p["departures"] == [{"key": f"env.{name}", "qualified": catalog["production"]["env"].get(name),
                                "actual": value}]
    assert _profile.profile_sha256(p) != _profile.profile_sha256(resolve(catalog))


def test_an_engine_setting_in_extra_env_equal_to_the_profile_is_no_departure(catalog):
    p = resolve(catalog, extra_env={"NCCL_DEBUG": "INFO"})
    assert p["departures"] == [] and _profile.profile_sha256(p) == _profile.profile_sha256(resolve(catalog))


@pytest.mark.parametrize("extra_env", [
    {"DSPARK_SIM_FAULT": "die_after_requests", "DSPARK_SIM_DIE_AFTER_REQUESTS": "4"},
    {"DSPARK_SIM_STARTUP_DELAY_S": "12"},
    {"SITE_RACK_LABEL": "r12"},  # other site-local names stay as they are too
])
def test_simulator_and_site_knobs_on_one_rank_neither_depart_nor_change_the_sha256(catalog, extra_env):
    p = resolve(catalog, extra_env=extra_env)  # no allow_experimental needed
    assert p["departures"] == [] and p["experimental"] is False and p["extra_env"] == extra_env
    head = _build(catalog, 0, extra_env=extra_env)
    worker = _build(catalog, 1)
    assert head["profile_sha256"] == worker["profile_sha256"] == _profile.profile_sha256(resolve(catalog))
    assert all(head["env"][k] == v for k, v in extra_env.items())


def test_the_refused_and_engine_names_are_documented():
    docs = (REPO / "docs" / "provision.md").read_text()
    for text in (docs, profile_resolve.DOCUMENTATION):
        for name in [*_profile_env.REFUSED_ENV_NAMES, *(f"{prefix}*" for prefix in _profile_env.REFUSED_ENV_PREFIXES)]:
            assert name in text, name
        for prefix in _profile_env.ENGINE_ENV_PREFIXES:
            assert prefix in text, prefix


# --- argv --------------------------------------------------------------------------------------

def test_production_argv_carries_the_compilation_config_once(catalog):
    p = resolve(catalog, "production")
    for rank in (0, 1):
        argv = argv_of(p, rank)
        assert argv[:3] == ["vllm", "serve", "/model"]
        text = flag(argv, "--compilation-config")
        assert json.loads(text) == catalog["production"]["compilation_config"]
        assert list(json.loads(text)) == ["mode", "cudagraph_mode", "cudagraph_implementation", "cudagraph_strict"]
        assert " " not in text and text == _profile_launch.compilation_config_json(p)
        assert json.loads(flag(argv, "--speculative-config")) == {"method": "dspark", "num_speculative_tokens": 6}
        assert flag(argv, "--node-rank") == str(rank) and flag(argv, "--nnodes") == "2"
        assert flag(argv, "--master-addr") == HEAD_IP and flag(argv, "--master-port") == "25000"
        assert flag(argv, "--kv-cache-memory-bytes") == "15998753178"
        assert flag(argv, "--max-model-len") == "327680" and flag(argv, "--gpu-memory-utilization") == "0.835"


def test_head_serves_the_api_and_the_worker_is_headless(catalog):
    p = resolve(catalog, "production")
    head, worker = argv_of(p, 0), argv_of(p, 1)
    assert flag(head, "--host") == "0.0.0.0" and flag(head, "--port") == "8888" and "--headless" not in head
    assert worker[-1] == "--headless" and "--port" not in worker and "--host" not in worker


def test_long_context_has_no_pinned_kv_bytes(catalog):
    for rank in (0, 1):
        argv = argv_of(resolve(catalog, "long-1m"), rank)
        assert "--kv-cache-memory-bytes" not in argv
        assert flag(argv, "--max-num-batched-tokens") == "8192"


def test_breakable_ab_selects_breakable_graphs_in_the_config_only(catalog):
    p = resolve(catalog, "breakable-ab")
    cc = json.loads(flag(argv_of(p, 0), "--compilation-config"))
    assert cc["cudagraph_implementation"] == "breakable" and cc["cudagraph_mode"] == "PIECEWISE"
    assert _profile.BREAKABLE_ENV not in _profile_launch.rank_env(p, 0, *RANK_IO[0], HEAD_IP, 25000)
    assert p["gate"]["cudagraph_implementation"] == "breakable"


def test_bad_rank_inputs_are_all_listed(catalog):
    p = resolve(catalog)
    with pytest.raises(IdentityError) as info:
        _profile_launch.rank_argv(p, 2, "head-1", 0, 70000, "-x")
    assert items(info.value) == {"rank", "head fabric address", "master port", "API port", "served model name"}
    assert all(m.rank == "profile production, rank 2" for m in info.value.mismatches)
    with pytest.raises(IdentityError) as info:
        _profile_launch.rank_env(p, 1, "enp1s0 f1", "", HEAD_IP, 25000)
    assert items(info.value) == {"fabric netdev (NCCL_SOCKET_IFNAME)", "HCA (NCCL_IB_HCA)"}
    assert "is ''" in str(info.value)


# --- the stand-in engine accepts the launch ------------------------------------------------------

@pytest.mark.parametrize("name", PROFILES)
def test_the_standin_cli_parses_and_would_start_every_profile(catalog, name, tmp_path):
    p = resolve(catalog, name)
    fingerprints = []
    for rank in (0, 1):
        argv = argv_of(p, rank)
        args = standin_cli.parse_args(argv[1:])  # SystemExit(2) on any usage error
        assert args.node_rank == rank and args.headless is (rank == 1)
        assert args.compilation_config == p["compilation_config"]
        assert args.max_model_len == p["max_model_len"] and args.max_num_seqs == p["max_num_seqs"]
        assert args.kv_cache_memory_bytes == p["kv_cache_memory_bytes"]
        assert args.speculative_config["num_speculative_tokens"] == p["mtp_tokens"]
        # start-up checks of the stand-in (KV capacity, strict CUDA graphs), with the rank's env
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        args = standin_cli.parse_args([str(model) if a == "/model" else a for a in argv[1:]])
        env = _profile_launch.rank_env(p, rank, *RANK_IO[rank], HEAD_IP, 25000)
        cfg = standin_config.from_args(args, env)
        cfg.check_kv_capacity()
        assert cfg.cudagraph.strict_violations() == []
        assert cfg.cudagraph.resolved == p["gate"]["cudagraph_implementation"]
        assert cfg.cudagraph.mode == p["gate"]["cudagraph_mode"]
        assert cfg.cudagraph.compile_mode == 0 and not cfg.cudagraph.warnings
        fingerprints.append(cfg.fingerprint())
    assert fingerprints[0] == fingerprints[1]  # the join handshake accepts the pair


# --- env ---------------------------------------------------------------------------------------

def test_rank_env_adds_the_per_rank_extras(catalog):
    p = resolve(catalog)
    head = _profile_launch.rank_env(p, 0, *RANK_IO[0], HEAD_IP, 25000)
    worker = _profile_launch.rank_env(p, 1, *RANK_IO[1], HEAD_IP, 25000)
    assert (head["NODE_RANK"], head["HEADLESS"], head["NCCL_SOCKET_IFNAME"], head["NCCL_IB_HCA"]) == \
        ("0", "", "enp1s0f0np0", "rocep1s0f0")
    assert (worker["NODE_RANK"], worker["HEADLESS"], worker["NCCL_SOCKET_IFNAME"], worker["NCCL_IB_HCA"]) == \
        ("1", "1", "enp1s0f1np1", "rocep1s0f1")
    for env in (head, worker):
        assert env["MASTER_ADDR"] == HEAD_IP and env["MASTER_PORT"] == "25000" and env["MTP_NUM_TOKENS"] == "6"
        assert env["VLLM_DSV4_ENABLE_MULTI_STREAM"] == "0" and _profile.BREAKABLE_ENV not in env
        assert env["NCCL_IB_GID_INDEX"] == "3"  # the site fabric default
        rest = {k: v for k, v in env.items() if k not in _profile.PER_RANK_ENV and k not in _profile_launch.FABRIC_ENV}
        assert rest == p["env"]


# --- site fabric settings -----------------------------------------------------------------------

def test_no_profile_sets_a_site_fabric_setting(catalog):
    for name, entry in catalog.items():
        assert not set(entry["env"]) & set(_profile_launch.FABRIC_ENV), name


def test_a_site_gid_index_runs_the_qualified_profile(catalog, pin):
    """GID index 1 is site cabling: same profile sha256, no departure, and it reaches the env."""
    site = _profile.build(catalog, "production", {}, False, pin, 0, *RANK_IO[0], HEAD_IP, 25000, 8888,
                          "deepseek-v4-flash-dspark", fabric_env={"NCCL_IB_GID_INDEX": 1, "NCCL_IB_TC": "106"})
    default = _build(catalog, 0)
    assert site["experimental"] is False and site["departures"] == []
    assert site["profile_sha256"] == default["profile_sha256"]
    assert site["env"]["NCCL_IB_GID_INDEX"] == "1" and site["env"]["NCCL_IB_TC"] == "106"
    assert site["fabric_env"] == {"NCCL_IB_GID_INDEX": "1", "NCCL_IB_TC": "106"}
    assert "NCCL_IB_GID_INDEX=1\n" in site["env_file"]
    assert default["fabric_env"] == {"NCCL_IB_GID_INDEX": "3"}


@pytest.mark.parametrize("fabric, item", [
    ({"NCCL_IB_GID_INDEX": 256}, "dspark_fabric_env.NCCL_IB_GID_INDEX"),
    ({"NCCL_IB_GID_INDEX": "three"}, "dspark_fabric_env.NCCL_IB_GID_INDEX"),
    ({"NCCL_IB_GID_INDEX": True}, "dspark_fabric_env.NCCL_IB_GID_INDEX"),
    ({"NCCL_IB_GID_INDEX": 3, "NCCL_IB_SL": 16}, "dspark_fabric_env.NCCL_IB_SL"),
    ({"NCCL_IB_GID_INDEX": 3, "NCCL_IB_ADDR_FAMILY": "AF_UNIX"}, "dspark_fabric_env.NCCL_IB_ADDR_FAMILY"),
    ({"NCCL_IB_GID_INDEX": 3, "NCCL_DEBUG": "WARN"}, "dspark_fabric_env.NCCL_DEBUG"),
    ({}, "dspark_fabric_env.NCCL_IB_GID_INDEX"),
    ([], "dspark_fabric_env"),
])
def test_bad_site_fabric_settings_are_refused(catalog, pin, fabric, item):
    with pytest.raises(IdentityError) as err:
        _profile.build(catalog, "production", {}, False, pin, 0, *RANK_IO[0], HEAD_IP, 25000, 8888,
                       "deepseek-v4-flash-dspark", fabric_env=fabric)
    assert item in items(err.value)


@pytest.mark.parametrize("where", ["overrides", "extra_env"])
def test_a_fabric_setting_in_the_profile_is_refused_even_experimentally(catalog, where):
    kwargs = {"overrides": {"env": {"NCCL_IB_GID_INDEX": "1"}}} if where == "overrides" else \
        {"extra_env": {"NCCL_IB_GID_INDEX": "1"}}
    err = refused(catalog, allow=True, **kwargs)
    assert "env.NCCL_IB_GID_INDEX" in items(err)
    assert "dspark_fabric_env" in str(err)


def _docker_cli_read(text: str) -> dict:
    """``docker run --env-file``: each non-comment line literally, split at the first '='."""
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _sep, value = line.lstrip().partition("=")
            out[key] = value
    return out


def test_env_file_round_trips_through_both_docker_readers(catalog, tmp_path):
    p = resolve(catalog)
    env = dict(_profile_launch.rank_env(p, 0, *RANK_IO[0], HEAD_IP, 25000),
               QUOTED='"kept as is"', WITH_EQUALS="a=b=c", HASH="#not-a-comment", EMPTY="")
    text = _profile_launch.env_file_text(env)
    assert text.endswith("\n") and text.splitlines() == sorted(text.splitlines())
    assert "HEADLESS=\n" in text and 'QUOTED="kept as is"\n' in text
    path = tmp_path / "production.env"
    path.write_text(text)
    assert parse_env_file(str(path)) == env
    assert _docker_cli_read(text) == env


@pytest.mark.parametrize("value", ["two\nlines", "cr\r", "nul\0", " lead", "trail ", "\ttab"])
def test_env_file_refuses_what_it_cannot_carry_verbatim(value):
    with pytest.raises(IdentityError) as info:
        _profile_launch.env_file_text({"OK": "1", "BAD": value, "bad name": "x"})
    assert items(info.value) == {"BAD", "name 'bad name'"}


# --- sha256 ------------------------------------------------------------------------------------

def test_profile_sha256_follows_the_profile_not_the_rank(catalog):
    p = resolve(catalog)
    sha = _profile.profile_sha256(p)
    assert len(sha) == 64 and sha == _profile.profile_sha256(resolve(load_catalog()))
    experimental = resolve(catalog, overrides={"max_num_batched_tokens": 8192}, allow=True)
    assert _profile.profile_sha256(experimental) != sha
    assert _profile.profile_sha256(resolve(catalog, "breakable-ab")) != sha
    assert _profile.profile_sha256(resolve(catalog, extra_env={"DSPARK_SIM_FAULT": "slow_tokens"})) == sha
    changed = copy.deepcopy(catalog)
    changed["production"]["max_model_len"] = 200000
    assert _profile.profile_sha256(resolve(changed, allow=True)) != sha
    pin = load_pin()
    head = _profile.build(catalog, "production", {}, False, pin, 0, *RANK_IO[0], HEAD_IP, 25000, 8888, SERVED)
    worker = _profile.build(catalog, "production", {}, False, pin, 1, *RANK_IO[1], HEAD_IP, 25000, 8888, SERVED)
    assert head["profile_sha256"] == worker["profile_sha256"] == sha
    assert head["argv"] != worker["argv"] and head["env"] != worker["env"]


def test_build_lists_profile_and_rank_violations_together(catalog, pin):
    with pytest.raises(IdentityError) as info:
        _profile.build(catalog, "production", {"max_num_seqs": 8}, False, pin, 1, "", *RANK_IO[1][1:],
                       "nope", 25000, 8888, SERVED)
    assert items(info.value) == {"max_num_seqs", "fabric netdev (NCCL_SOCKET_IFNAME)", "head fabric address"}


def test_a_secret_named_extra_value_is_a_placeholder_in_everything_build_returns(catalog):
    """The result is registered, published as dspark_profile_result / dspark_profile_active, rendered and kept in
    run records: a *_TOKEN of dspark_engine_extra_env is there as <redacted>, its name kept, the hash unchanged."""
    token = "tok_mysite_4c1d8e2f9a7b3065"
    out = _build(catalog, 0, extra_env={"DSPARK_SIM_STARTUP_DELAY_S": "4", "MYSITE_TOKEN": token, "DB_PASSWD": 123456})
    assert token not in json.dumps(out) and "123456" not in json.dumps(out)
    assert out["env"]["MYSITE_TOKEN"] == "<redacted>" and out["env"]["DB_PASSWD"] == "<redacted>"
    assert out["env"]["DSPARK_SIM_STARTUP_DELAY_S"] == "4"
    assert "MYSITE_TOKEN=<redacted>\n" in out["env_file"]
    assert out["profile"]["extra_env"]["MYSITE_TOKEN"] == "<redacted>"
    assert out["profile_sha256"] == _build(catalog, 0, extra_env={"MYSITE_TOKEN": "another"})["profile_sha256"]


def test_a_secret_named_value_no_env_file_can_carry_is_refused_without_the_value(catalog):
    err = refused(catalog, extra_env={"MYSITE_TOKEN": "tok_0123456789\n"})
    assert "tok_0123456789" not in str(err) and "extra_env.MYSITE_TOKEN" in str(err)
