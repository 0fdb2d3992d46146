#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_probe
short_description: Read the state of a rank's engine, changing nothing
version_added: 0.1.0
requirements:
  - the docker SDK for Python on the rank (Debian's C(python3-docker), with C(python3-requests))
extends_documentation_fragment:
  - gb10.dspark._attributes.read_only
  - gb10.dspark._probe
description:
  - Runs on a rank. Reports the rank's engine container (exists, status, exit code, start time,
    labels, the last log lines, with control characters replaced), read through the rank's Docker
    engine API. On the head, it also reports whether the OpenAI API serves the model
    (C(/v1/models)), the KV cache size and the requests in flight (C(/metrics)).
  - Only the fields above are returned, never the container's environment or command, so a
    registered probe cannot carry the engine's API key into Ansible's output or run records -
    unless I(inspect=true) asks for the whole inspect record (the evidence role, under C(no_log)).
  - With I(labelled) it also lists the other containers that carry a label (the engine role's
    leftovers); with I(engine_info) it also says who the rank's Docker engine is.
  - Each rank is read through its own Ansible connection; no rank reaches another.
  - M(gb10.dspark.pair_ready) calls it in a loop; the engine role calls it before replacing a
    running engine, to refuse while requests are in flight.
options:
  read_api:
    description:
      - Read the head's API (C(/v1/models), C(/metrics)). With C(false) only the container is read,
        which is what preflight and the worker need.
    type: bool
    default: true
  refuse_foreign:
    description:
      - Fail when a container holds I(container)'s name but carries none of the collection's
        C(io.gb10.dspark.*) labels - someone else's workload, which the collection never replaces
        unasked. The message names the container, its image and its start time.
    type: bool
    default: false
  replace_foreign:
    description: With I(refuse_foreign), warn instead of failing (the operator's C(dspark_engine_replace_foreign)).
    type: bool
    default: false
  refuse_busy:
    description:
      - Fail unless the head may be stopped now - its container does not run, or its C(/metrics)
        reads C(vllm:num_requests_running) plus C(vllm:num_requests_waiting) 0 (requests in the model's
        batches and requests queued for one). A count that cannot be read (timeout, error, either
        gauge missing) is never taken for idle, nor is a container whose Docker engine cannot be read
        (status C(unknown)); both fail, naming the rank and why.
    type: bool
    default: false
  force:
    description: With I(refuse_busy), warn instead of failing (the operator's C(dspark_engine_force_replace)).
    type: bool
    default: false
  drain_timeout:
    description:
      - With I(refuse_busy), wait up to this many seconds for the head's requests in flight to end, reading
        its C(/metrics) every I(drain_interval) seconds, before refusing; nothing is cut. 0 refuses at once.
        A head whose load or container cannot be read refuses at once whatever the timeout.
    type: float
    default: 0
  drain_interval:
    description: Seconds between two reads of the head's load while I(drain_timeout) waits.
    type: float
    default: 2
  rank:
    description: The rank's inventory name, for the messages.
    type: str
  inspect:
    description:
      - Also return the container's whole inspect record as the engine answers it (what
        C(docker container inspect) lists), as RV(probe.inspect), at the engine's own API version
        (as C(community.docker.docker_container_info) read it).
      - It holds the container's environment, with the API key. Register it only in a task with C(no_log).
    type: bool
    default: false
  labelled:
    description:
      - A label's full name. Also list the containers, running or not, that carry it, other than
        I(container), as RV(probe.labelled). The module fails, naming the rank, when the engine cannot list them.
    type: str
  engine_info:
    description:
      - Also say who the rank's Docker engine is (RV(probe.engine)). The module fails, naming the
        rank, when the engine cannot answer.
    type: bool
    default: false
  read:
    description:
      - Folders of the rank whose files to return in RV(read), in the same call (the evidence role reads the
        rendered profiles with the engine's container). Each folder's regular files whose names match a
        pattern are read; links and subfolders are not; an absent folder gives none. A file over 1 MiB, or
        a folder that is a link or not a folder, fails the module with RV(read_failed) (the files are read
        first, so an engine that cannot be read still returns them).
      - A rendered profile may hold an operator's secret-named value. Register it only in a task with C(no_log).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the folder.
        type: path
        required: true
      patterns:
        description: Shell patterns matched against the file names.
        type: list
        elements: str
        default: ["*"]
seealso:
  - module: gb10.dspark.pair_ready
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: How is the pair doing?
  gb10.dspark.engine_probe:
    model: deepseek-v4-flash-dspark
  register: __dspark_probe
  when: dspark_rank == 0

- name: Show requests in flight
  ansible.builtin.debug:
    msg: "{{ __dspark_probe.probe.api.num_requests_running }} requests running"

- name: The containers carrying the pair label, other than the engine
  gb10.dspark.engine_probe:
    model: deepseek-v4-flash-dspark
    read_api: false
    log_lines: 0
    labelled: "{{ 'pair' | gb10.dspark.label_name }}"
  register: __dspark_engine_labelled

- name: The engine's whole inspect record, its last log lines and the rendered profiles, in one call
  gb10.dspark.engine_probe:
    model: deepseek-v4-flash-dspark
    read_api: false
    inspect: true
    log_lines: 500
    read:
      - {path: /etc/dspark/profiles, patterns: ["*.env", "*.json"]}
  register: __dspark_evidence_probe
  failed_when: __dspark_evidence_probe.read_failed | default(false)  # an absent engine is evidence too
  no_log: true  # the inspect record holds the engine's environment, the API key with it
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
read:
  description: The files of O(read), sorted by path, each with its C(path) and base64 C(content); empty without O(read).
  returned: always
  type: list
  elements: dict
  sample: [{path: /etc/dspark/profiles/production.env, content: VkxMTV9VU0VfVjE9MQo=}]
read_failed:
  description: True when a file or folder of O(read) could not be read (the module failed, saying why).
  returned: on that failure
  type: bool
drained_s:
  description: Seconds I(refuse_busy) waited for the head's requests in flight to end (I(drain_timeout)); 0 without a wait.
  returned: always
  type: float
  sample: 12.4
probe:
  description: The pair's state.
  returned: always
  type: dict
  contains:
    container:
      description: >-
        The rank's engine container (exists, status, running, exit_code, started_at, finished_at,
        image (its ID), image_ref (the name it was started from), the collection's labels, logs);
        status C(absent) when there is none, C(unknown) with an error when the Docker engine cannot
        be read.
      type: dict
      returned: always
    api:
      description: >-
        ready, status, models, max_model_len, kv_cache_size_tokens, num_requests_running,
        num_requests_waiting, error, metrics_error (why a request count is unknown, else null).
      type: dict
      returned: always
    ready:
      description: The container runs and the API serves the model.
      type: bool
      returned: always
    inspect:
      description: >-
        The container's whole inspect record as the engine answers it; null when there is no such
        container or the engine cannot be read. Holds the container's environment.
      type: dict
      returned: when I(inspect=true)
    labelled:
      description: >-
        The names (without the engine's leading C(/); link aliases left out) of the containers that
        carry the label I(labelled), running or not, other than I(container); sorted.
      type: list
      elements: str
      returned: when I(labelled) is given
      sample: ["dspark_vllm_old"]
    engine:
      description: The rank's Docker engine - C(id) and C(name) (as C(docker info) shows them) and C(image_store) (C(classic) or C(containerd)).
      type: dict
      returned: when I(engine_info=true)
      sample: {"id": "6ZQH:...", "name": "rank0", "image_store": "classic"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import API_VERSION, Engine, EngineError
from ansible_collections.gb10.dspark.plugins.module_utils.engine._engine_probe import (
    ARGUMENT_SPEC,
    PROBE_ARGUMENT_SPEC,
    drain,
    foreign_message,
    probe,
)
from ansible_collections.gb10.dspark.plugins.module_utils.engine._rank_files import RankFilesError, read_files


def main() -> None:
    module = AnsibleModule(
        argument_spec={**ARGUMENT_SPEC, **PROBE_ARGUMENT_SPEC},
        supports_check_mode=True,
    )
    p = module.params
    rank = p["rank"] or "this rank"
    try:  # first: an engine that cannot be read still leaves the rank's files to the caller
        files = read_files(p["read"])
    except (RankFilesError, OSError) as exc:
        module.fail_json(msg=f"rank {rank}: {exc}", read=[], read_failed=True)

    def fail(msg: str, **result) -> None:  # every later failure still hands back the files read
        module.fail_json(msg=msg, read=files, **result)

    try:
        # the whole record at the engine's own API version, as community.docker's info modules read it
        engine = Engine(p["docker_host"], timeout=max(p["timeout"], 10.0),
                        api_version="auto" if p["inspect"] else API_VERSION)
    except EngineError as exc:
        fail(f"rank {rank}: {exc}")
    try:
        result = probe(engine, p["container"], p["base_url"], p["model"], p["log_lines"], p["timeout"],
                       p["api_key"], p["read_api"], inspect=p["inspect"], labelled=p["labelled"],
                       engine_info=p["engine_info"])
    except EngineError as exc:
        fail(f"rank {rank}: {exc}")
    if p["refuse_foreign"]:
        foreign = foreign_message(result, rank, p["container"])
        if foreign and not p["replace_foreign"]:
            fail(foreign, probe=result)
        if foreign:
            module.warn(f"{foreign} (replace_foreign: it will be replaced)")
    drained = 0.0
    if p["refuse_busy"]:
        def read() -> dict:
            return probe(engine, p["container"], p["base_url"], p["model"], p["log_lines"], p["timeout"],
                         p["api_key"], p["read_api"])
        timeout = 0.0 if p["force"] or module.check_mode else p["drain_timeout"]
        try:
            result, busy, drained = drain(read, p["rank"] or "head", timeout, p["drain_interval"], first=result)
        except EngineError as exc:
            fail(f"rank {rank}: {exc}")
        if busy and not p["force"]:
            fail(busy, probe=result, drained_s=drained)
        if busy:
            module.warn(f"{busy} (forced: stopping it anyway)")
    module.exit_json(changed=False, probe=result, drained_s=drained, read=files)


if __name__ == "__main__":
    main()
