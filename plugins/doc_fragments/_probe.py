# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options of gb10.dspark.engine_probe, shared with gb10.dspark.pair_ready which calls it."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  container:
    description: The engine container's name (the same on both ranks).
    type: str
    default: dspark_vllm
  base_url:
    description: The head's API as seen from the head (read on the head only).
    type: str
    default: http://127.0.0.1:8888
  model:
    description: The served model name that must appear in C(/v1/models).
    type: str
    required: true
  docker_host:
    description: The rank's Docker engine, a Unix socket (C(unix:///path)).
    type: str
    default: unix:///var/run/docker.sock
  log_lines:
    description: How many of the container's last log lines to return.
    type: int
    default: 20
  timeout:
    description: Seconds for each HTTP request.
    type: float
    default: 5.0
  api_key:
    description: The API key, when the head requires one. Never returned or logged.
    type: str
"""
