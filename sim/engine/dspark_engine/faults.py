"""Simulator settings and fault injection, read from the environment of one rank.

``DSPARK_SIM_FAULT`` is a comma-separated list of FAULTS; an unknown name refuses start-up.
Numeric knobs (all optional): ``DSPARK_SIM_STARTUP_DELAY_S`` (0), ``DSPARK_SIM_TOKEN_DELAY_S``
(0, or 0.25 under ``slow_tokens``), ``DSPARK_SIM_JOIN_TIMEOUT_S`` (600),
``DSPARK_SIM_HEARTBEAT_TIMEOUT_S`` (0: off), ``DSPARK_SIM_DIE_AFTER_REQUESTS`` (3, used by
``die_after_requests``), ``DSPARK_SIM_HANG_AFTER_REQUESTS`` (3, used by ``worker_hangs_after_requests``),
``DSPARK_SIM_KV_TOKENS`` (overrides the KV capacity).

A stalled peer does not end the engine by itself, as in vLLM: the head keeps answering /health,
/v1/models and /metrics, each model step waits for every rank, and a step that has waited
``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` (vLLM's own variable, 300 s by default) kills the engine with
vLLM's timeout. A closed connection (a rank that exited) is noticed at once. The old shortcut, a rank
silent for ``DSPARK_SIM_HEARTBEAT_TIMEOUT_S`` is lost, is opt-in.
``DSPARK_SIM_TOKEN_DELAY_MATCH``: when set, the token delay applies only to requests whose prompt
text contains it (a test slows the requests it makes, not the runtime gate's canaries).
``DSPARK_SIM_OVERLONG`` says what a request whose prompt fits the window but whose prompt +
``max_tokens`` does not gets: ``cap`` (default, as vLLM 0.32 was seen to do: HTTP 200 with
``max_tokens`` cut to the room left) or ``reject`` (HTTP 400, as older vLLM releases answer).
"""
import math
import os
from dataclasses import dataclass

FAULTS = {
    "crash_on_start": "exit 1 with a traceback after the first start-up log lines",
    "worker_never_joins": "a headless worker that never connects to the head",
    "wrong_usage": "usage.prompt_tokens is one too many and total_tokens is not the sum",
    "forbidden_marker": "log a line containing 'Marlin' and 'fallback to eager'",
    "wrong_cudagraph_mode": "the Worker_TP CUDA_GRAPH_RUNTIME line reports mode=PIECEWISE",
    "slow_tokens": "each generated token takes DSPARK_SIM_TOKEN_DELAY_S (default 0.25 s)",
    "die_after_requests": "the engine dies after DSPARK_SIM_DIE_AFTER_REQUESTS generation requests",
    "worker_hangs_after_requests": "the worker stalls (alive, silent, making no progress) after the head has "
                                   "started DSPARK_SIM_HANG_AFTER_REQUESTS generation requests",
}
OVERLONG_MODES = ("cap", "reject")
DEATH_GRACE_S = 1.0          # /health answers 503 this long before a dead engine exits
SLOW_TOKEN_DELAY_S = 0.25
HEARTBEAT_INTERVAL_S = 0.5   # how often a rank tells its peer it is alive (when no loss timeout is set)
STALL_S = 1.5                # a peer silent this long blocks the next model step


class SettingsError(ValueError):
    """A DSPARK_SIM_* variable is invalid."""


@dataclass(frozen=True)
class SimSettings:
    faults: frozenset = frozenset()
    startup_delay_s: float = 0.0
    token_delay_s: float = 0.0
    token_delay_match: str = ""
    join_timeout_s: float = 600.0
    heartbeat_timeout_s: float = 0.0
    execute_timeout_s: float = 300.0
    die_after_requests: int = 3
    hang_after_requests: int = 3
    kv_tokens: int = None
    kv_overcommit: bool = False
    overlong: str = "cap"

    def has(self, fault):
        return fault in self.faults

    def token_delay_for(self, prompt_text):
        """The pause before each generated token of a request with this prompt."""
        if self.token_delay_match and self.token_delay_match not in (prompt_text or ""):
            return 0.0
        return self.token_delay_s

    @property
    def heartbeat_interval_s(self):
        return min(HEARTBEAT_INTERVAL_S, self.heartbeat_timeout_s / 4) if self.heartbeat_timeout_s else HEARTBEAT_INTERVAL_S


def _number(env, name, default, cast, minimum):
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = cast(raw.strip())
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a valid {cast.__name__}") from None
    if (isinstance(value, float) and math.isnan(value)) or value < minimum or value == float("inf"):
        raise SettingsError(f"{name}={raw!r} must be a finite number >= {minimum}")
    return value


def _flag(env, name):
    raw = (env.get(name) or "").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise SettingsError(f"{name}={raw!r} must be 0 or 1")


def _choice(env, name, choices):
    raw = (env.get(name) or "").strip()
    if raw == "":
        return choices[0]
    if raw not in choices:
        raise SettingsError(f"{name}={raw!r} must be one of {', '.join(choices)}")
    return raw


def _heartbeat_timeout(env):
    """0 (off) unless set; a value that is set must be at least 0.1 s."""
    value = _number(env, "DSPARK_SIM_HEARTBEAT_TIMEOUT_S", 0.0, float, 0)
    if 0 < value < 0.1:
        raise SettingsError(f"DSPARK_SIM_HEARTBEAT_TIMEOUT_S={value!r} must be 0 (off) or at least 0.1")
    return value


def load(env=None):
    """SimSettings from ``env`` (default ``os.environ``); SettingsError when invalid."""
    env = os.environ if env is None else env
    names = [n.strip() for n in env.get("DSPARK_SIM_FAULT", "").split(",") if n.strip()]
    unknown = sorted(set(names) - set(FAULTS))
    if unknown:
        raise SettingsError(f"DSPARK_SIM_FAULT: unknown fault name(s) {', '.join(unknown)}; "
                            f"known faults: {', '.join(FAULTS)}")
    faults = frozenset(names)
    slow_default = SLOW_TOKEN_DELAY_S if "slow_tokens" in faults else 0.0
    return SimSettings(
        faults=faults,
        startup_delay_s=_number(env, "DSPARK_SIM_STARTUP_DELAY_S", 0.0, float, 0),
        token_delay_s=_number(env, "DSPARK_SIM_TOKEN_DELAY_S", slow_default, float, 0),
        token_delay_match=env.get("DSPARK_SIM_TOKEN_DELAY_MATCH", ""),
        join_timeout_s=_number(env, "DSPARK_SIM_JOIN_TIMEOUT_S", 600.0, float, 0),
        heartbeat_timeout_s=_heartbeat_timeout(env),
        execute_timeout_s=_number(env, "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 300.0, float, 1),
        die_after_requests=_number(env, "DSPARK_SIM_DIE_AFTER_REQUESTS", 3, int, 1),
        hang_after_requests=_number(env, "DSPARK_SIM_HANG_AFTER_REQUESTS", 3, int, 0),
        kv_tokens=_number(env, "DSPARK_SIM_KV_TOKENS", None, int, 0),
        kv_overcommit=_flag(env, "DSPARK_SIM_KV_OVERCOMMIT"),
        overlong=_choice(env, "DSPARK_SIM_OVERLONG", OVERLONG_MODES),
    )
