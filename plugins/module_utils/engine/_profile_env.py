# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a serving profile's environment may hold: the variables refused everywhere (they would run code of their
setter's choosing in the engine, or put a secret into the evidence), the engine's own variables, and the checks of
names and values; with the problem list every profile check collects into.

Split from :mod:`._profile`, which resolves profiles with it; :mod:`._profile_launch` uses it too."""
from __future__ import annotations

import re
from typing import Any

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import REDACTED, is_secret_name


# Names refused in every environment the profile builds (catalog, overrides, extra_env), even with
# allow_experimental: each one lets whoever sets it run code of their choosing in the engine, or
# puts a secret where the evidence records it. Prefixes first, then single names; name -> why.
REFUSED_ENV_PREFIXES = {
    "LD_": "the dynamic loader reads LD_* variables: they load or redirect shared libraries in every engine process",
}
_PYTHON_HIJACK = "the Python interpreter reads it at start-up and runs or imports code from where it points"
REFUSED_ENV_NAMES = {
    "PYTHONPATH": _PYTHON_HIJACK,
    "PYTHONHOME": _PYTHON_HIJACK,
    "PYTHONSTARTUP": _PYTHON_HIJACK,
    "PYTHONINSPECT": "the Python interpreter drops into an interactive prompt instead of exiting",
    "PYTHONUSERBASE": _PYTHON_HIJACK,
    "PYTHONPLATLIBDIR": _PYTHON_HIJACK,
    "PYTHONEXECUTABLE": _PYTHON_HIJACK,
    "PYTHONPYCACHEPREFIX": "the Python interpreter loads cached bytecode from where it points",
    "PYTHONBREAKPOINT": "the Python interpreter imports and calls what it names at every breakpoint()",
    "PATH": "it decides which 'vllm' executable the container runs",
    "BASH_ENV": "every non-interactive bash runs the file it names",
    "ENV": "every POSIX shell runs the file it names",
    "GCONV_PATH": "glibc loads character-conversion modules (shared libraries) from where it points",
    "GLIBC_TUNABLES": "it tunes glibc and the dynamic loader",
    "CUDA_INJECTION64_PATH": "the CUDA driver loads the shared library it names into the engine",
    "NCCL_NET_PLUGIN": "NCCL loads the shared library it names into the engine",
    "NCCL_TUNER_PLUGIN": "NCCL loads the shared library it names into the engine",
    "NCCL_PROFILER_PLUGIN": "NCCL loads the shared library it names into the engine",
    "OPENSSL_CONF": "OpenSSL loads engines and providers (shared libraries) named in that file",
    "OPENSSL_ENGINES": "OpenSSL loads engines (shared libraries) from where it points",
    "OPENSSL_MODULES": "OpenSSL loads providers (shared libraries) from where it points",
    "VLLM_API_KEY": "the API key belongs in dspark_api_key, which reaches only the container's environment, "
                    "never the profile, its departures or the evidence",
}
# Names in extra_env that change what the engine does: like an override of the profile's env they
# depart from the qualified profile (refused unless allow_experimental) and enter the profile's
# identity (profile_sha256). So does every name the catalog's profiles set. Any other name (the
# simulator's DSPARK_SIM_* knobs, a site's own labels) stays rank-local: no departure, not hashed.
ENGINE_ENV_PREFIXES = ("VLLM_", "NCCL_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_", "CUDA_", "TRITON_", "HF_",
                       "TRANSFORMERS_", "FLASHINFER_", "NVIDIA_", "GLOO_", "UCX_")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no whitespace


class _Problems:
    """Collects every violation of one profile, in the collection's mismatch shape."""

    def __init__(self, who: str):
        self.who = who
        self.items: list[Mismatch] = []

    def add(self, item: str, actual: Any, expected: Any, reason: str = "") -> None:
        self.items.append(Mismatch(rank=self.who, item=item, expected=expected, actual=actual, reason=reason,
                                   expected_word="expected"))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _env_value(value: Any) -> Any:
    """Numbers from YAML become their text; strings stay; anything else is returned unchanged (and refused)."""
    if _is_number(value):
        return str(value)
    return value


def _check_env(env: Any, origin: str, problems: _Problems) -> dict:
    """A clean ``{name: str}`` copy of ``env``; every bad name or value is recorded."""
    if not isinstance(env, dict):
        problems.add(origin, type(env).__name__, "a mapping of names to strings")
        return {}
    out = {}
    for key, raw in env.items():
        value = _env_value(raw)
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            problems.add(f"{origin} name {key!r}", key, "a name of letters, digits and underscores")
            continue
        why = refused_env_reason(key)
        if why:
            shown = REDACTED if is_secret_name(key) else value  # a refused key is not echoed
            problems.add(f"{origin}.{key}", shown, None, f"never accepted: {why}")
            continue
        if not isinstance(value, str):
            problems.add(f"{origin}.{key}", type(raw).__name__, "a string")
            continue
        reason = _env_value_problem(value)
        if reason:  # a secret-named value is never echoed, not even a malformed one
            problems.add(f"{origin}.{key}", REDACTED if is_secret_name(key) else repr(value), "a single-line value",
                         reason)
            continue
        out[key] = value
    return out


def refused_env_reason(name: str) -> str:
    """Why ``name`` is never accepted in the engine's environment, or "" when it may be set."""
    for prefix, why in REFUSED_ENV_PREFIXES.items():
        if name.startswith(prefix):
            return why
    return REFUSED_ENV_NAMES.get(name, "")


def is_engine_env(name: str, profile_names: Any = ()) -> bool:
    """Whether ``name`` in extra_env changes the engine's behaviour (a departure, hashed).

    ``profile_names``: the names the catalog's profiles (and the overrides) set; each counts.
    """
    return name in profile_names or name.startswith(ENGINE_ENV_PREFIXES)


def _env_value_problem(value: str) -> str:
    if any(c in value for c in "\n\r\0"):
        return "an env file holds one line per variable"
    if value != value.strip():
        return "leading or trailing whitespace does not survive every env-file reader"
    return ""
