# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A container's command as inspect reports it (``_container_command``), shared by the gate and the audit."""
from __future__ import annotations

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _audit
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _container_command
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_identity
from ansible_collections.gb10.dspark.plugins.module_utils.engine._container_command import command_string


def test_path_and_args_are_space_joined():
    assert command_string("/entry.sh", ["a", "b c"]) == "/entry.sh a b c"
    assert command_string("vllm", []) == "vllm"


@pytest.mark.parametrize("path, args, expected", [
    (None, ["serve", "x"], "serve x"),
    ("", ["serve"], "serve"),
    ("vllm", None, "vllm"),
    ("vllm", "serve --port 1", "vllm"),
    ("vllm", ["serve", 8888, None, "--port"], "vllm serve --port"),
    (None, None, ""),
])
def test_what_is_not_a_string_is_left_out(path, args, expected):
    assert command_string(path, args) == expected


def test_the_gate_and_the_audit_hash_the_same_command():
    assert _runtime_gate_identity.command_string is _container_command.command_string
    assert _audit.command_string is _container_command.command_string
