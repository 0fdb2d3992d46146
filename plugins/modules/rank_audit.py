#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: rank_audit
short_description: Collect, read-only and in one call, what a GB10 rank serves for the fleet audit
version_added: 0.1.0
description:
  - Runs on each rank of a pair (head and worker) and gathers in one round trip everything the fleet
    audit compares with the pair's desired state. It changes nothing and needs no fact gathering.
  - "Collects: the images the Docker engine holds (what C(docker image ls) lists); the engine container
    I(container) (what C(docker container inspect) shows: state, running image ID, the collection's
    labels, the sha256 of its command as the runtime gate computes it, the sha256 of its non-secret
    environment); the rendered env file C(<profiles_dir>/<profile>.env) of the profile the container
    is labelled with, its sha256 and whether every C(NAME=value) line of it is in the container's
    environment (a hand edit of the file shows up here); the sha256 of the runtime manifest
    I(manifest_path); the model revision recorded in I(revision_marker) inside I(model_dir)."
  - With I(api=true) (on the head) also the OpenAI API at I(base_url) (C(/v1/models)) and a few
    C(/metrics) values.
  - "With I(runtime) also what the runtime gate reads of the rank, in the same call (RV(audit.runtime)):
    the raw container and image inspect records, the PID 1 environment entries starting with one of
    I(runtime.env_prefixes), the sha256 of I(manifest_path) inside the container and the last
    I(runtime.log_tail) log lines, each as C(docker exec) / C(docker logs) would exit and print."
  - Docker is read through the engine's API on its Unix socket I(docker_host), with the collection's one
    Docker client (the docker SDK for Python, as M(gb10.dspark.image_identity)); no C(docker) CLI is needed.
    The rank's Python needs the SDK (Debian's C(python3-docker)); preflight says when it is missing.
  - Something that is down never fails the module; it is reported. A Docker engine that does not answer
    (or no socket at I(docker_host)) is RV(audit.docker.reachable=false), a missing file is C(present=false),
    an API that does not answer is RV(audit.api.ready=false) with its error.
  - The pair's verdict (OK, DRIFT, DOWN, HUNG or UNREACHABLE) is computed from both ranks' results by
    C(pair_verdict) in the collection's C(_audit_verdict) module_utils.
requirements:
  - the docker SDK for Python on the rank (Debian's C(python3-docker), with C(python3-requests))
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._rank
options:
  container:
    description: The name of the engine container (the same on both ranks).
    type: str
    default: dspark_vllm
  manifest_path:
    description: The runtime manifest on the rank (the engine role places it there read-only).
    type: path
    default: /etc/dspark/runtime-manifest.json
  profiles_dir:
    description:
      - The folder holding the rendered profiles; the env file read is C(<profiles_dir>/<profile>.env),
        where C(<profile>) is the container's profile label.
    type: path
    default: /etc/dspark/profiles
  model_dir:
    description:
      - The model checkpoint directory on the rank.
      - Omitted, the model is not read and RV(audit.model) is null.
    type: path
  revision_marker:
    description:
      - The file inside I(model_dir) that records the model revision (the pin's C(model_revision_marker)).
      - A plain file name; a path that could leave I(model_dir) fails the module.
    type: str
    default: .r0b0tlab-model-revision
  api:
    description:
      - Query the OpenAI API at I(base_url) and its C(/metrics). True on the head, false on the headless
        worker.
    type: bool
    default: false
  base_url:
    description: The head's API, as seen from the head.
    type: str
    default: http://127.0.0.1:8888
  model:
    description: The served model name; RV(audit.api.ready) says whether C(/v1/models) lists it. Required when I(api=true).
    type: str
  api_key:
    description:
      - The API key, when the engine requires one. Sent only as a C(Authorization) header; never returned.
    type: str
  timeout:
    description: Seconds to wait for each HTTP request to the API.
    type: float
    default: 5.0
  liveness_timeout:
    description:
      - With I(api=true), when the API serves I(model), also ask for one token (C(/v1/completions), C(max_tokens=1))
        and wait this many seconds for it (RV(audit.liveness)). A wedged pair still answers C(/health),
        C(/v1/models) and C(/metrics); only a generation tells it from a serving one.
      - Omitted or 0, no generation is asked for.
    type: float
  docker_host:
    description:
      - The Docker engine's socket, C(unix:///path) or a bare path. Other schemes (C(tcp://)) fail the module.
    type: str
    default: unix:///var/run/docker.sock
  runtime:
    description:
      - Also read what the runtime gate checks on the rank (RV(audit.runtime)); omitted, nothing of it is read.
      - The file hashed inside the container is I(manifest_path), the path the module also reads on the rank for RV(audit.manifest).
    type: dict
    suboptions:
      log_tail:
        description: How many of the container's last log lines to return (C(docker logs --tail)).
        type: int
        default: 20000
      env_prefixes:
        description:
          - Return the entries of the container's PID 1 environment that start with one of these
            (for example C(VLLM_USE_BREAKABLE_CUDAGRAPH=)); the rest of it never leaves the container.
        type: list
        elements: str
        required: true
attributes:
  check_mode:
    support: full
    details: Read-only; check mode collects the same and returns the same result.
  diff_mode:
    support: none
    details: Changes nothing, so there is nothing to diff.
  idempotent:
    support: full
    details: Read-only; always reports C(changed=false).
notes:
  - "No secret is returned: the API key goes only into a request header, container environment variables
    whose name looks secret by the collection's one rule (judged by its words: C(HF_TOKEN), C(VLLM_API_KEY),
    C(DB_PASSWD), C(AWS_CREDENTIALS); not C(MTP_NUM_TOKENS)) are neither returned nor hashed into
    RV(audit.container.env_sha256), and their values of 6 characters or more (the collection's one minimum),
    like the API key, are scrubbed from every returned string. Of the env file only the names of differing
    entries are returned."
  - The env file comparison is one-way. Every entry of the file must be in the container's environment,
    which also holds the image's own variables and the API key.
  - "The module fails only for options that cannot be right (a I(revision_marker) that is not a file name,
    I(api=true) without I(model), a I(docker_host) that is not a Unix socket); such a failure reads
    C(rank <rank>: ...)."
  - The requests to the Docker engine have no short time limit of their own; bound a hung engine with the task
    keyword C(timeout).
  - The env file is mode 0600 and owned by root, so the module normally runs with C(become).
seealso:
  - module: gb10.dspark.engine_probe
  - module: gb10.dspark.model_checkpoint
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Audit this rank (read-only, one call)
  gb10.dspark.rank_audit:
    rank: "{{ inventory_hostname }}"
    container: "{{ lookup('gb10.dspark.site', 'container_name') }}"
    model_dir: "{{ dspark_model_dir }}"
    revision_marker: "{{ dspark_pin.model_revision_marker }}"
    api: "{{ dspark_rank == 0 }}"
    base_url: "http://127.0.0.1:{{ lookup('gb10.dspark.site', 'api_port') }}"
    model: "{{ lookup('gb10.dspark.site', 'served_model_name') }}"
    api_key: "{{ dspark_api_key | default(omit) }}"
  become: true
  register: __dspark_rank_audit

- name: Show what the rank runs
  ansible.builtin.debug:
    msg: >-
      {{ inventory_hostname }}: container {{ __dspark_rank_audit.audit.container.status }},
      image {{ __dspark_rank_audit.audit.container.image_id }},
      profile {{ __dspark_rank_audit.audit.container.profile }}

- name: Warn about a hand-edited profile env file
  ansible.builtin.debug:
    msg: "Changed entries: {{ __dspark_rank_audit.audit.profile_file.env_differences }}"
  when: __dspark_rank_audit.audit.profile_file.env_matches_container is false
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
  sample: false
audit:
  description: What the rank holds and serves.
  returned: success
  type: dict
  contains:
    rank:
      description: The rank's name (I(rank), else the hostname).
      returned: success
      type: str
      sample: spark-01
    docker:
      description: Whether the Docker engine answered (C(reachable)), else why not (C(error)).
      returned: success
      type: dict
      sample: {"reachable": true, "error": null}
      contains:
        reachable:
          description: Whether the Docker engine answered.
          returned: success
          type: bool
          sample: true
        error:
          description: Why the engine did not answer; null when it did.
          returned: success
          type: str
          sample: null
    images:
      description: The engine's images, each with its full C(id) and its C(tags) (C(repository:tag)); empty when the engine is unreachable.
      returned: success
      type: list
      elements: dict
      sample: [{"id": "sha256:7f3c9a0d5be14e2a8c61f0b3d9e4a7c25186f0e3b7d2c9a41e5f8b06c3d7a912", "tags": ["dspark-r0b0tlab:production-v026"]}]
    container:
      description:
        - "The engine container: C(name), C(exists) (null when unknown), C(running), C(status), C(exit_code),
          C(image_id) (the image it runs), C(labels) (only the collection's), C(started_at), C(finished_at),
          C(restart_count), C(command_sha256) (sha256 of C(Path) and C(Args) space-joined, as the runtime gate's
          C(command_sha256)), C(env_sha256) (sha256 of the sorted non-secret C(NAME=value) lines, each ending in
          a newline), C(profile) (the profile label), C(error), C(last_log_lines) (its last ten log lines, both
          streams in the order written, secrets redacted; the report shows them for a DOWN or HUNG pair) and
          C(error_lines) (a stopped container's first distinct exception lines among its last 1000, why it
          stopped; empty for a running container)."
      returned: success
      type: dict
      sample:
        name: dspark_vllm
        exists: true
        running: true
        status: running
        exit_code: 0
        image_id: sha256:7f3c9a0d5be14e2a8c61f0b3d9e4a7c25186f0e3b7d2c9a41e5f8b06c3d7a912
        labels: {"io.gb10.dspark.pair": "pair-a", "io.gb10.dspark.rank": "0", "io.gb10.dspark.profile": "production"}
        started_at: "2026-09-01T08:12:44.318204Z"
        finished_at: "0001-01-01T00:00:00Z"
        restart_count: 0
        command_sha256: 4b1e0c2f9a7d3e5b6c8a0f1e2d3c4b5a69788796a5b4c3d2e1f00112233aabb
        env_sha256: 9d8c7b6a5f4e3d2c1b0a99887766554433221100ffeeddccbbaa998877665544
        profile: production
        error: null
      contains:
        env_sha256:
          description:
            - The sha256 of the container's sorted non-secret C(NAME=value) lines, each ending in a newline.
            - Null when the container does not exist or cannot be inspected.
          returned: success
          type: str
          sample: 9d8c7b6a5f4e3d2c1b0a99887766554433221100ffeeddccbbaa998877665544
    profile_file:
      description:
        - "The rendered env file of the labelled profile: C(profile), C(path), C(present), C(sha256),
          C(env_matches_container) (every entry of the file is in the container's environment; null when
          either is unknown), C(env_differences) (names of the entries that are not) and C(error)."
      returned: success
      type: dict
      sample:
        profile: production
        path: /etc/dspark/profiles/production.env
        present: true
        sha256: 1f2e3d4c5b6a79880796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0
        env_matches_container: false
        env_differences: [NCCL_IB_GID_INDEX]
        error: null
    manifest:
      description: The runtime manifest on the rank (C(path), C(present), C(sha256), C(error)).
      returned: success
      type: dict
      sample: {"path": "/etc/dspark/runtime-manifest.json", "present": true,
               "sha256": "0c1d2e3f4a5b6c7d8e9f00112233445566778899aabbccddeeff001122334455", "error": null}
    model:
      description:
        - The model directory (C(dir), C(present), C(marker), C(revision) (the marker's stripped content), C(error)).
        - Null when I(model_dir) is omitted.
      returned: success
      type: dict
      sample: {"dir": "/models/DeepSeek-V4-Flash", "present": true, "marker": ".r0b0tlab-model-revision",
               "revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb", "error": null}
    api:
      description:
        - "The head's API: C(ready) (C(/v1/models) lists I(model)), C(status) (HTTP status of C(/v1/models)),
          C(models), C(max_model_len), C(kv_cache_size_tokens), C(num_requests_running), C(num_requests_waiting),
          C(error)."
        - Null when I(api=false).
      returned: success
      type: dict
      sample: {"ready": true, "status": 200, "models": ["deepseek-v4-flash-dspark"], "max_model_len": 327680,
               "kv_cache_size_tokens": 1253213, "num_requests_running": 0, "num_requests_waiting": 0,
               "error": null}
      contains:
        ready:
          description: Whether C(/v1/models) answered and lists I(model).
          returned: when I(api=true)
          type: bool
          sample: true
        error:
          description: What went wrong asking the API, if anything; null otherwise.
          returned: when I(api=true)
          type: str
          sample: null
    metrics:
      description:
        - A few C(/metrics) counters (C(generation_tokens_total), C(prompt_tokens_total)) and C(error).
        - Null when I(api=false).
      returned: success
      type: dict
      sample: {"generation_tokens_total": 48213, "prompt_tokens_total": 913377, "error": null}
    liveness:
      description:
        - The one-token generation (I(liveness_timeout)) - C(ok), the HTTP C(status), C(seconds) it took, C(error)
          and C(stalled) (no answer within the timeout; C(error) reads C(the API answers, but no token came within N s)).
        - Null when it was not asked for or the API does not serve I(model).
      returned: success
      type: dict
      sample: {"ok": true, "status": 200, "seconds": 0.04, "error": null, "stalled": false}
    runtime:
      description:
        - What the runtime gate reads of the rank, each piece as the C(docker) CLI would have answered it.
        - Secret values are scrubbed as everywhere in the result; secret-looking C(Config.Env) entries of
          RV(audit.runtime.container) read C(NAME=<redacted>).
      returned: when I(runtime) is given
      type: dict
      contains:
        container:
          description: The engine's raw container inspect record (what C(docker container inspect) lists); null when it could not be read.
          returned: when I(runtime) is given
          type: dict
          sample: {"Id": "c0ffee", "Image": "sha256:7f3c9a0d5be14e2a8c61f0b3d9e4a7c25186f0e3b7d2c9a41e5f8b06c3d7a912"}
        image:
          description: The engine's raw inspect record of the container's image (C(docker image inspect)); null when it could not be read.
          returned: when I(runtime) is given
          type: dict
          sample: {"Id": "sha256:7f3c9a0d5be14e2a8c61f0b3d9e4a7c25186f0e3b7d2c9a41e5f8b06c3d7a912", "Architecture": "arm64"}
        pid1_env:
          description:
            - "C(rc), C(stdout), C(stderr) of the in-container command printing, as a JSON list, the PID 1
              environment entries that start with one of I(runtime.env_prefixes)."
            - C(rc) is 125 when there is no such container and 1 when the engine refused or failed the command.
          returned: when I(runtime) is given
          type: dict
          sample: {"rc": 0, "stdout": "[\"VLLM_DSV4_ENABLE_MULTI_STREAM=0\"]\n", "stderr": ""}
        manifest_sha256:
          description: C(rc), C(stdout) (the sha256 in hex and a newline), C(stderr) of hashing I(manifest_path) inside the container.
          returned: when I(runtime) is given
          type: dict
          sample: {"rc": 0, "stdout": "0c1d2e3f4a5b6c7d8e9f00112233445566778899aabbccddeeff001122334455\n", "stderr": ""}
        logs:
          description: C(rc), C(stdout), C(stderr) of C(docker logs --tail) I(runtime.log_tail).
          returned: when I(runtime) is given
          type: dict
          sample: {"rc": 0, "stdout": "INFO 09-01 08:12:50 [api_server.py:1] vLLM API server version 0.26.0\n", "stderr": ""}
        errors:
          description: Why RV(audit.runtime.container) or RV(audit.runtime.image) is null, under the same key; empty when both were read.
          returned: when I(runtime) is given
          type: dict
          sample: {}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._audit import REVISION_MARKER, collect, open_engine
from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import DEFAULT_DOCKER_HOST
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import guarded, rank_name
from ansible_collections.gb10.dspark.plugins.module_utils.common._site import SITE_DEFAULTS, local_api_url


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "default": SITE_DEFAULTS["container_name"]},
            "manifest_path": {"type": "path", "default": "/etc/dspark/runtime-manifest.json"},
            "profiles_dir": {"type": "path", "default": "/etc/dspark/profiles"},
            "model_dir": {"type": "path"},
            "revision_marker": {"type": "str", "default": REVISION_MARKER},
            "api": {"type": "bool", "default": False},
            "base_url": {"type": "str", "default": local_api_url()},
            "model": {"type": "str"},
            "api_key": {"type": "str", "no_log": True},
            "timeout": {"type": "float", "default": 5.0},
            "liveness_timeout": {"type": "float"},
            "docker_host": {"type": "str", "default": DEFAULT_DOCKER_HOST},
            "rank": {"type": "str"},
            "runtime": {"type": "dict", "options": {
                "log_tail": {"type": "int", "default": 20000},
                "env_prefixes": {"type": "list", "elements": "str", "required": True},
            }},
        },
        supports_check_mode=True,
    )
    p = module.params
    rank = rank_name(p["rank"])
    audit = guarded(module, lambda: collect(
        open_engine(rank, p["docker_host"]), rank=rank, container=p["container"],
        manifest_path=p["manifest_path"], profiles_dir=p["profiles_dir"], model_dir=p["model_dir"],
        revision_marker=p["revision_marker"], api=p["api"], base_url=p["base_url"], model=p["model"],
        api_key=p["api_key"], timeout=p["timeout"], runtime=p["runtime"], liveness_timeout=p["liveness_timeout"]))
    module.exit_json(changed=False, audit=audit)


if __name__ == "__main__":
    main()
