#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_archive
short_description: Verify an image archive against the identity pin without loading it
version_added: 0.1.0
description:
  - Reads the archive's own identity from its metadata - the image ID (config digest named by
    C(manifest.json)), and for OCI layouts the manifest digest from C(index.json) - verifying each
    against the digest of its own bytes, then compares it, the architecture and the image labels
    with the pin.
  - Refuses an archive the engine could read differently - member names that clean to the same name
    or escape the archive, metadata that is a link or oversized, ambiguous or absurd tar headers.
  - Needs no Docker engine, so the roles run it on the control node before copying an archive to
    a rank; nothing is copied or loaded when it fails.
  - Plain tar archives are read by seeking from header to header (a 30 GB archive costs a few
    hundred small reads); gzip, bzip2 and xz archives are streamed once. Memory stays bounded.
extends_documentation_fragment:
  - gb10.dspark._attributes.read_only
  - gb10.dspark._rank
options:
  path:
    description: The archive.
    type: path
    required: true
  pin:
    description: The identity pin (C(dspark_pin)); see M(gb10.dspark.image_identity).
    type: dict
    required: true
  verify_sha256:
    description:
      - When the pin has C(image_archive_sha256), hash the whole archive and compare (one full read).
      - M(gb10.dspark.image_identity) requires C(image_archive_sha256) before any load from an archive
        (fill it with C(sha256sum <archive>)), so set it in the pin even where this check is skipped.
    type: bool
    default: true
  check_labels:
    description: Whether the archive's image labels must match the pin.
    type: bool
    default: true
  check_architecture:
    description: Whether the archive's architecture must equal the pin's C(image_architecture).
    type: bool
    default: true
seealso:
  - module: gb10.dspark.image_identity
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: The archive on the control node is the pinned image
  gb10.dspark.image_archive:
    rank: control node
    path: "{{ dspark_image_archive }}"
    pin: "{{ dspark_pin }}"
  delegate_to: localhost
  run_once: true
  register: __dspark_archive

- name: Show its ID
  ansible.builtin.debug:
    msg: "{{ __dspark_archive.archive.image_id }} ({{ __dspark_archive.archive.size }} bytes)"
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
archive:
  description: The archive's identity.
  returned: success
  type: dict
  sample:
    path: /srv/images/dspark-v026.tar
    size: 10087564383
    compression: none
    image_id: sha256:2dfe24a303743722046c55bf2cf3ef9c9e6a40a008f73be16f9aa5c2ca38cf9b
    manifest_digest: null
    repo_tags: [dspark-r0b0tlab:production-v026-b12x-native-v11]
    architecture: arm64
mismatches:
  description: On failure, every difference from the pin.
  returned: failure
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import guarded, rank_name
from ansible_collections.gb10.dspark.plugins.module_utils.identity._image_identity import run_check_archive


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rank": {"type": "str"},
            "path": {"type": "path", "required": True},
            "pin": {"type": "dict", "required": True},
            "verify_sha256": {"type": "bool", "default": True},
            "check_labels": {"type": "bool", "default": True},
            "check_architecture": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    archive = guarded(module, lambda: run_check_archive(rank_name(p["rank"]), p["pin"], p["path"], p["verify_sha256"],
                                                        p["check_labels"], p["check_architecture"]))
    module.exit_json(changed=False, archive=archive.as_dict())


if __name__ == "__main__":
    main()
