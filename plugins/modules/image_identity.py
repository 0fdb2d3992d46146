#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_identity
short_description: Make a rank hold the pinned vLLM image, loading it from an archive only when missing
version_added: 0.1.0
description:
  - Runs on a rank. Ensures the rank's Docker engine holds the pinned image ID under the pinned tag,
    and fails, having changed nothing, when anything differs from the pin.
  - Reads the archive's own image ID from its metadata (C(manifest.json) and the config digest; for
    OCI layouts also C(index.json) and the manifest digest) without loading it. Plain tar archives
    are read by seeking from header to header; compressed ones are streamed once. Memory stays
    bounded for archives of 30 GB and more.
  - Refuses an archive whose ID differs from the pin before anything is loaded, and refuses when the
    pinned tag already names another image on the rank, or when loading would move a tag the
    archive carries.
  - Refuses, before loading, an archive the engine could read differently from its metadata -
    member names that clean (like Go's C(path.Clean)) to the same name or escape the archive, metadata
    that is a link or oversized, members under a link, ambiguous or absurd tar headers. After a load,
    fails when the engine reports any image ID or name the archive did not show.
  - Loads only when the engine does not already hold the pinned ID, so a re-run is cheap and
    reports no change; the archive is streamed to the engine in 1 MiB chunks. Then tags the image
    and asserts that the tag resolves to the pinned ID.
  - Knows both image stores. A classic store (overlay2) reports the config digest as the image ID
    (the pin's I(image_id)); Docker 29's containerd store reports the manifest digest (the pin's
    I(manifest_digest), required then). The store it saw is returned as RV(image_store).
  - Never pulls and never builds.
  - With I(state=absent) (teardown) it removes the pin's I(image_id) and every tag of it from the
    engine instead (like C(docker rmi -f)), and does nothing when the engine does not hold it. The
    engine refuses an image a running container uses, and so does this, having changed nothing.
requirements:
  - the docker SDK for Python on the rank (Debian's C(python3-docker), with C(python3-requests))
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._rank
options:
  pin:
    description:
      - The identity pin of the release (C(dspark_pin)). Used keys - C(image_tag), C(image_id),
        C(image_manifest_digest) (needed with a containerd-store engine), C(image_architecture),
        C(image_archive_sha256) (required before any load from an archive - fill it with
        C(sha256sum <archive>); the archive's own sha256 must match before it is loaded, one full
        read; without it a load is refused, also in check mode), and the keys the image labels
        map to (C(source_revision), C(model_revision), C(vllm_version), C(integrated_vllm_commit),
        C(cudagraph_selector), C(kv_cache_dtype), C(speculative_method), C(speculative_tokens)).
      - A malformed pin fails the task before the engine is touched.
    type: dict
    required: true
  state:
    description:
      - C(present) - the rank holds the pinned image under the pinned tag (loaded only when missing).
      - C(absent) - the rank's engine no longer holds the pin's I(image_id), under any tag.
        I(path), I(check_labels) and I(check_architecture) are not used.
    type: str
    choices: [present, absent]
    default: present
  path:
    description:
      - The image archive on the rank (C(docker save) layout, plain or gzip/bzip2/xz compressed).
      - Needed only when the engine does not hold the pinned image yet. When given and present it is
        always checked against the pin, even if nothing has to be loaded.
    type: path
  check_labels:
    description: Whether the image's labels (or, before a load, the archive's) must match the pin.
    type: bool
    default: true
  check_architecture:
    description: Whether the image's architecture must equal the pin's C(image_architecture).
    type: bool
    default: true
  docker_host:
    description: The engine's socket.
    type: str
    default: unix:///var/run/docker.sock
  timeout:
    description: Seconds any single engine call may stay silent (a large load stays well inside it).
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    details: Reads the archive and the engine, and reports what it would load and tag (or remove), changing nothing.
  diff_mode:
    support: full
    details: Shows the image ID the tag resolves to before and after (with I(state=absent), whether the image is held).
  idempotent:
    support: full
    details: A second run on a rank that holds the pinned image loads nothing and reports no change.
notes:
  - Talks to the engine over its Unix socket through the collection's one Docker client, the docker SDK for
    Python; the rank needs it (Debian's C(python3-docker)), and preflight says so when it is missing.
  - "Every failure names the rank, the expected and the actual value, for example
    C(rank worker-01: image dspark:prod-v026 is sha256:AAA..., pinned sha256:BBB...)."
seealso:
  - module: gb10.dspark.pair_identity
  - module: community.docker.docker_image_load
    description: Always loads and always reports a change; this module loads only what is missing.
  - module: community.docker.docker_image
    description: The collection does not use it; I(state=absent) here removes the pinned image.
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: The rank holds the pinned image, loaded from the archive only if missing
  gb10.dspark.image_identity:
    rank: "{{ inventory_hostname }}"
    pin: "{{ dspark_pin }}"
    path: /var/lib/dspark/images/dspark-v026.tar
  register: __dspark_image

- name: Show what happened
  ansible.builtin.debug:
    msg: "{{ __dspark_image.image_id }} in the {{ __dspark_image.image_store }} store, loaded={{ __dspark_image.loaded }}"

- name: Teardown - the pinned image (every tag of its ID) leaves the rank's engine
  gb10.dspark.image_identity:
    rank: "{{ inventory_hostname }}"
    pin: "{{ dspark_pin }}"
    state: absent
"""

RETURN = r"""
changed:
  description: Whether the image was (or, in check mode, would be) loaded or tagged (with I(state=absent), removed).
  returned: always
  type: bool
loaded:
  description: Whether the archive was loaded into the engine by this run.
  returned: always
  type: bool
  sample: false
tagged:
  description: Whether this run tagged the image with I(image_tag).
  returned: always
  type: bool
present:
  description: Whether the engine held the pinned image ID before this run (under any tag or none).
  returned: always
  type: bool
  sample: true
needs_archive:
  description:
    - Whether the image is absent from the engine and the archive is not at I(path) on the rank yet.
    - Only a check-mode probe stops there; it tells the caller to copy the archive first.
  returned: always
  type: bool
  sample: false
image_id:
  description: The image ID the rank holds under I(image_tag) (in check mode, the one it would hold); with I(state=absent), the one removed.
  returned: always
  type: str
  sample: sha256:2dfe24a303743722046c55bf2cf3ef9c9e6a40a008f73be16f9aa5c2ca38cf9b
image_store:
  description: C(classic) (image ID = config digest) or C(containerd) (image ID = manifest digest); null with I(state=absent).
  returned: always
  type: str
  sample: classic
actions:
  description: What was (or would be) done, in order.
  returned: always
  type: list
  elements: str
  sample: ["load /var/lib/dspark/images/dspark-v026.tar", "tag sha256:2dfe... as dspark-r0b0tlab:production-v026"]
archive:
  description: The archive's own identity, when it was read.
  returned: always
  type: dict
  sample:
    path: /var/lib/dspark/images/dspark-v026.tar
    size: 10087564383
    compression: none
    image_id: sha256:2dfe24a303743722046c55bf2cf3ef9c9e6a40a008f73be16f9aa5c2ca38cf9b
    manifest_digest: null
    repo_tags: [dspark-r0b0tlab:production-v026-b12x-native-v11]
    architecture: arm64
ansible_facts:
  description: C(dspark_image) with C(image_tag), C(image_id) and C(image_store), for the pair-level check.
  returned: success, with I(state=present)
  type: dict
  contains:
    dspark_image:
      description: What this rank holds.
      type: dict
      sample: {image_tag: "dspark-r0b0tlab:production-v026", image_id: "sha256:2dfe...", image_store: classic}
mismatches:
  description: On failure, every difference found, each with rank, item, expected, actual and message.
  returned: failure
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import DEFAULT_DOCKER_HOST
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import guarded, rank_name
from ansible_collections.gb10.dspark.plugins.module_utils.identity._image_identity import run_ensure, run_remove


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rank": {"type": "str"},
            "pin": {"type": "dict", "required": True},
            "path": {"type": "path"},
            "check_labels": {"type": "bool", "default": True},
            "check_architecture": {"type": "bool", "default": True},
            "docker_host": {"type": "str", "default": DEFAULT_DOCKER_HOST},
            "timeout": {"type": "int", "default": 3600},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "absent":
        gone = guarded(module, lambda: run_remove(rank_name(p["rank"]), p["pin"], module.check_mode,
                                                  p["docker_host"], p["timeout"]))
        result = gone.result()
        if module._diff:
            result["diff"] = {"before": gone.before, "after": gone.after}
        module.exit_json(**result)
    outcome = guarded(module, lambda: run_ensure(rank_name(p["rank"]), p["pin"], p["path"], module.check_mode,
                                                 p["docker_host"], p["timeout"], p["check_labels"],
                                                 p["check_architecture"]))
    for warning in outcome.warnings:
        module.warn(warning)
    result = outcome.result()
    result["ansible_facts"] = {"dspark_image": {"image_tag": p["pin"]["image_tag"], "image_id": outcome.image_id,
                                                "image_store": outcome.image_store}}
    if module._diff:
        result["diff"] = {"before": outcome.before, "after": outcome.after}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
