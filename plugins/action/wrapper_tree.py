# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inspect the checkout on the control node in the controller's worker process, elsewhere through the module
(plugin_utils/_control_node_check.py); the options and the result are the module's. git runs as the module runs
it: argv lists, the variables that would point it at another repository dropped, ``LC_ALL=C``."""
from __future__ import annotations

import os
import subprocess

from ansible.module_utils.common.process import get_bin_path

from ansible_collections.gb10.dspark.plugins.module_utils.identity._wrapper_tree import (
    ARGUMENT_SPEC,
    check,
    clean_git_environment,
)
from ansible_collections.gb10.dspark.plugins.plugin_utils._control_node_check import ControlNodeCheck


def git_path() -> str | None:
    try:
        return get_bin_path("git")
    except ValueError:  # not installed: the check says the tree cannot be inspected
        return None


def local_runner():
    """``run(argv, env)`` here: ``env`` added to this process's environment, cleaned of git's redirections once for
    the whole check; text out as the module's run_command gives it (undecodable bytes kept as surrogates)."""
    environ = dict(os.environ)
    clean_git_environment(environ)

    def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        done = subprocess.run(argv, env={**environ, **env}, stdin=subprocess.DEVNULL, capture_output=True,
                              check=False)
        return (done.returncode, done.stdout.decode("utf-8", "surrogateescape"),
                done.stderr.decode("utf-8", "surrogateescape"))

    return run


class ActionModule(ControlNodeCheck):
    ARGUMENT_SPEC = ARGUMENT_SPEC
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def check(self, params: dict) -> dict:
        return check(params, local_runner(), git_path())
