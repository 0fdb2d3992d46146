# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's environment as Jinja filters: the secret-named entries an inventory hands the engine (which
no result or fact carries: profile_resolve returns them as placeholders), and the env file text of an
environment. The rules are in module_utils (_secrets.is_secret_name, _profile.env_file_text)."""
from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import IdentityError
from ansible_collections.gb10.dspark.plugins.module_utils.engine._profile_launch import env_file_text
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import secret_entries


def secret_env(env):
    """``dspark_engine_extra_env | gb10.dspark.secret_env``: only the entries whose name looks secret."""
    if env is not None and not isinstance(env, Mapping):
        raise AnsibleFilterError(f"secret_env: the environment must be a mapping, not {type(env).__name__}")
    return secret_entries(dict(env or {}))


def env_file(env):
    """``<env mapping> | gb10.dspark.env_file``: its ``NAME=value`` lines, sorted, as the engine's env file."""
    if not isinstance(env, Mapping):
        raise AnsibleFilterError(f"env_file: the environment must be a mapping, not {type(env).__name__}")
    try:
        return env_file_text(dict(env))
    except IdentityError as exc:  # names the variable, never a value (a secret may be one)
        raise AnsibleFilterError("env_file: " + "; ".join(m.item for m in exc.mismatches) + " cannot be written") from None


class FilterModule:
    def filters(self):
        return {"secret_env": secret_env, "env_file": env_file}
