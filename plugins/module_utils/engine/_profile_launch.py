# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each rank's launch of a resolved profile (docs/wrapper-reference.md §3): the ``vllm serve`` argv
(:func:`rank_argv`), the environment with the rank's own and the site fabric's variables (:func:`rank_env`) and the
Docker env file (:func:`env_file_text`); the launch form every profile shares is spelled here, not in the catalog.

Split from :mod:`._profile` (resolve and check), which builds a rank's launch with it."""
from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import IdentityError, Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.engine._profile_env import (
    _ENV_NAME,
    _Problems,
    _TOKEN,
    _env_value_problem,
    _is_int,
)


KV_CACHE_DTYPE = _pin.KV_CACHE_DTYPE  # the pin's one dtype; every profile's env gets it (_resolve)


COMPILATION_KEY_ORDER = ("mode", "cudagraph_mode", "cudagraph_implementation", "cudagraph_strict")


# Site fabric settings: NCCL knobs that follow how a site's RoCE fabric is cabled and configured
# (which GID of the port carries RoCE v2, the traffic class and service level the switches
# honour), like the HCA and netdev names. They are not profile values: a site that needs GID index
# 1 runs the qualified profile, not an experimental one. They come per rank from dspark_fabric_env
# (rank_env), are validated here, reach the container's environment and the evidence, and are
# neither departures nor part of profile_sha256. name -> (allowed values, what it is).
FABRIC_ENV = {
    "NCCL_IB_GID_INDEX": (range(0, 256), "the RoCE GID index of the HCA port, as show_gids lists it"),
    "NCCL_IB_TC": (range(0, 256), "the InfiniBand/RoCE traffic class"),
    "NCCL_IB_SL": (range(0, 16), "the InfiniBand service level"),
    "NCCL_IB_ROCE_VERSION_NUM": (range(1, 3), "the RoCE version NCCL selects GIDs for"),
    "NCCL_IB_ADDR_FAMILY": (("AF_INET", "AF_INET6"), "the address family of the RoCE GID"),
}
# What every site must state: the wrapper always exported a GID index (3 in its .env.dspark).
FABRIC_ENV_REQUIRED = ("NCCL_IB_GID_INDEX",)
DEFAULT_FABRIC_ENV = {"NCCL_IB_GID_INDEX": "3"}


# The launch form of the wrapper (docs/wrapper-reference.md §3.1, §3.3): the same for every profile, so not catalog data.
VLLM = "vllm"
MODEL_MOUNT = "/model"
TENSOR_PARALLEL_SIZE = 2
PIPELINE_PARALLEL_SIZE = 1
NNODES = 2
BLOCK_SIZE = 256
TOKENIZER_MODE = "deepseek_v4"
EXECUTOR_BACKEND = "mp"
TOOL_CALL_PARSER = "deepseek_v4"
REASONING_PARSER = "deepseek_v4"
REASONING_CONFIG = {"reasoning_parser": "deepseek_v4", "reasoning_start_str": "<think>",
                    "reasoning_end_str": "</think>"}
DEFAULT_CHAT_TEMPLATE_KWARGS = {"thinking": True}  # r0b0tlab serves thinking:true (docs/wrapper-reference.md §3.3)
MOE_BACKEND = "flashinfer_b12x"
JIT_MONITOR_MODE = "error"
API_HOST = "0.0.0.0"


def _ordered_compilation_config(cc: dict) -> dict:
    first = {k: cc[k] for k in COMPILATION_KEY_ORDER if k in cc}
    return {**first, **{k: cc[k] for k in sorted(cc) if k not in first}}


def compilation_config_json(profile: dict) -> str:
    """The ``--compilation-config`` value: compact JSON, keys mode, cudagraph_mode,
    cudagraph_implementation, cudagraph_strict first."""
    return json.dumps(_ordered_compilation_config(profile["compilation_config"]), separators=(",", ":"))


def _compact(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _shown(value: Any) -> Any:
    """Strings that would read as nothing (empty, whitespace) are shown quoted."""
    return repr(value) if isinstance(value, str) and not _TOKEN.match(value) else value


def _rank_problems(profile: dict, rank: Any, head_fabric_ip: Any, master_port: Any,
                   **optional: Any) -> list[Mismatch]:
    """Bad per-rank inputs. ``optional`` may hold api_port, served_model_name, eth_if and ib_hca."""
    problems = _Problems(f"profile {profile.get('name')}, rank {rank}")
    if not _is_int(rank) or rank not in (0, 1):
        problems.add("rank", rank, "0 (head) or 1 (worker)")
    try:
        ipaddress.ip_address(head_fabric_ip if isinstance(head_fabric_ip, str) else None)
    except ValueError:
        problems.add("head fabric address", _shown(head_fabric_ip), "an IP address (the head's dspark_fabric_ip)")
    ports = [("master port", master_port)]
    if "api_port" in optional:
        ports.append(("API port", optional["api_port"]))
    for label, port in ports:
        if not (_is_int(port) and 1 <= port <= 65535):
            problems.add(label, port, "a port in 1..65535")
    if "served_model_name" in optional:
        served = optional["served_model_name"]
        if not (isinstance(served, str) and _TOKEN.match(served) and not served.startswith("-")):
            problems.add("served model name", _shown(served), "one word, not starting with '-'")
    for key, label in (("eth_if", "fabric netdev (NCCL_SOCKET_IFNAME)"), ("ib_hca", "HCA (NCCL_IB_HCA)")):
        if key in optional and not (isinstance(optional[key], str) and _TOKEN.match(optional[key])):
            problems.add(label, _shown(optional[key]), "a name without whitespace")
    if "fabric_env" in optional:
        _fabric_env(optional["fabric_env"], problems)
    return problems.items


def _fabric_value(name: str, value: Any) -> str | None:
    """The env text of a site fabric value, or None when ``name`` does not allow it."""
    allowed = FABRIC_ENV[name][0]
    if isinstance(allowed, range):
        if isinstance(value, str) and re.fullmatch(r"[0-9]{1,3}", value):
            value = int(value)
        return str(value) if _is_int(value) and value in allowed else None
    return value if isinstance(value, str) and value in allowed else None


def _fabric_env(fabric_env: Any, problems: _Problems) -> dict:
    """The checked ``{name: text}`` site fabric environment; every problem is recorded."""
    if not isinstance(fabric_env, dict):
        problems.add("dspark_fabric_env", type(fabric_env).__name__, f"a mapping of {sorted(FABRIC_ENV)}")
        return {}
    out = {}
    for name, value in fabric_env.items():
        if name not in FABRIC_ENV:
            problems.add(f"dspark_fabric_env.{name}", _shown(value), None,
                         f"not a site fabric setting; allowed: {', '.join(sorted(FABRIC_ENV))}")
            continue
        text = _fabric_value(name, value)
        if text is None:
            allowed, what = FABRIC_ENV[name]
            shown = f"{allowed.start}..{allowed.stop - 1}" if isinstance(allowed, range) else list(allowed)
            problems.add(f"dspark_fabric_env.{name}", _shown(value), shown, what)
            continue
        out[name] = text
    for name in FABRIC_ENV_REQUIRED:
        if name not in fabric_env:
            problems.add(f"dspark_fabric_env.{name}", None, "set", FABRIC_ENV[name][1] + "; every site states it")
    return dict(sorted(out.items()))


def check_fabric_env(value: Any, who: str = "site fabric") -> dict:
    """The checked site fabric environment (:data:`FABRIC_ENV`), or IdentityError listing every problem."""
    problems = _Problems(who)
    out = _fabric_env(value, problems)
    if problems.items:
        raise IdentityError(problems.items)
    return out


def rank_argv(profile: dict, rank: int, head_fabric_ip: str, master_port: int, api_port: int,
              served_model_name: str) -> list[str]:
    """The rank's full ``vllm serve /model ...`` argv (docs/wrapper-reference.md §3.3: v0.25 order plus the v026 flags).

    The head (rank 0) serves the API (``--host 0.0.0.0 --port``); the worker (rank 1) is
    ``--headless`` and has no port. ``--kv-cache-memory-bytes`` appears only for a pinned KV size.
    Every flag of docs/wrapper-reference.md §3.3 is emitted: the simulator's stand-in CLI accepts all of them
    (including the tool-call and reasoning parser flags), so none is left out.
    """
    problems = _rank_problems(profile, rank, head_fabric_ip, master_port, api_port=api_port,
                              served_model_name=served_model_name)
    if problems:
        raise IdentityError(problems)
    p = profile
    argv = [VLLM, "serve", MODEL_MOUNT, "--served-model-name", served_model_name]
    if rank == 0:
        argv += ["--host", API_HOST, "--port", str(api_port)]
    argv += ["--trust-remote-code",
             "--tensor-parallel-size", str(TENSOR_PARALLEL_SIZE),
             "--pipeline-parallel-size", str(PIPELINE_PARALLEL_SIZE),
             "--kv-cache-dtype", p["env"]["KV_CACHE_DTYPE"],
             "--block-size", str(BLOCK_SIZE),
             "--max-model-len", str(p["max_model_len"]),
             "--max-num-seqs", str(p["max_num_seqs"]),
             "--max-num-batched-tokens", str(p["max_num_batched_tokens"]),
             "--gpu-memory-utilization", str(p["gpu_memory_utilization"])]
    if p["kv_cache_memory_bytes"] is not None:
        argv += ["--kv-cache-memory-bytes", str(p["kv_cache_memory_bytes"])]
    argv += ["--enable-prefix-caching",
             "--speculative-config",
             _compact({"method": p["speculative_method"], "num_speculative_tokens": p["mtp_tokens"]}),
             "--compilation-config", compilation_config_json(p),
             "--optimization-level", str(p["optimization_level"]),
             "--performance-mode", p["performance_mode"],
             "--jit-monitor-mode", JIT_MONITOR_MODE,
             "--tokenizer-mode", TOKENIZER_MODE,
             "--distributed-executor-backend", EXECUTOR_BACKEND,
             "--tool-call-parser", TOOL_CALL_PARSER,
             "--enable-auto-tool-choice",
             "--reasoning-parser", REASONING_PARSER,
             "--reasoning-config", _compact(REASONING_CONFIG),
             "--default-chat-template-kwargs", _compact(DEFAULT_CHAT_TEMPLATE_KWARGS)]
    if p["enable_flashinfer_autotune"]:
        argv.append("--enable-flashinfer-autotune")
    argv += ["--moe-backend", MOE_BACKEND,
             "--nnodes", str(NNODES),
             "--node-rank", str(rank),
             "--master-addr", head_fabric_ip,
             "--master-port", str(master_port)]
    if rank != 0:
        argv.append("--headless")
    return argv


def rank_env(profile: dict, rank: int, eth_if: str, ib_hca: str, head_fabric_ip: str,
             master_port: int, fabric: dict | None = None) -> dict:
    """The rank's container environment: the profile's env plus the per-rank extras (docs/wrapper-reference.md §3.2)
    and the site fabric settings (``fabric``: :data:`FABRIC_ENV`, default ``NCCL_IB_GID_INDEX=3``)."""
    fabric = dict(DEFAULT_FABRIC_ENV) if fabric is None else fabric
    problems = _rank_problems(profile, rank, head_fabric_ip, master_port, eth_if=eth_if, ib_hca=ib_hca,
                              fabric_env=fabric)
    if problems:
        raise IdentityError(problems)
    env = {**profile["env"], **profile.get("extra_env", {}), **check_fabric_env(fabric)}
    env.update({
        "NODE_RANK": str(rank),
        "HEADLESS": "1" if rank != 0 else "",
        "NCCL_IB_HCA": ib_hca,
        "NCCL_SOCKET_IFNAME": eth_if,
        "MASTER_ADDR": head_fabric_ip,
        "MASTER_PORT": str(master_port),
        "MTP_NUM_TOKENS": str(profile["mtp_tokens"]),
    })
    return dict(sorted(env.items()))


def env_file_text(env: dict) -> str:
    """``KEY=VALUE`` lines, sorted by name, for ``docker run --env-file`` and community.docker.

    Docker takes each line literally after the first ``=``: there is no quoting and no escaping,
    so quotes would become part of the value. Nothing is quoted here; instead a value that no
    env file can carry verbatim is refused (IdentityError): a newline, carriage return or NUL,
    and leading or trailing whitespace (community.docker's ``env_file`` reader strips each line).
    An empty value is written as ``KEY=`` and read back as the empty string.
    """
    problems = _Problems("env file")
    lines = []
    for key in sorted(env):
        value = env[key]
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            problems.add(f"name {key!r}", key, "a name of letters, digits and underscores")
        elif not isinstance(value, str):
            problems.add(key, type(value).__name__, "a string")
        elif _env_value_problem(value):
            problems.add(key, repr(value), "a single-line value", _env_value_problem(value))
        else:
            lines.append(f"{key}={value}\n")
    if problems.items:
        raise IdentityError(problems.items)
    return "".join(lines)
