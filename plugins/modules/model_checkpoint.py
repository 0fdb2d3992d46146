#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_checkpoint
short_description: Verify that a rank's DeepSeek-V4-Flash checkpoint directory matches the pin
version_added: 0.1.0
description:
  - Runs on a rank, on both ranks before anything starts. Verifies a model checkpoint directory the way
    the original wrapper's C(verify_model_checkpoint.py) did, and reports B(every) difference at once
    instead of stopping at the first.
  - "Checks, in order: the directory is present, a directory and readable; the revision marker
    I(revision_marker) holds I(expected_revision); C(config.json) is strict JSON (no duplicate keys, no
    NaN or Infinity) and holds every key of I(expected_config) with an equal value; the index
    I(index_file) is strict JSON with a C(weight_map) object naming exactly the shards
    C(model-00001-of-000NN.safetensors) to C(model-000NN-of-000NN.safetensors); every one of those
    shard files is present, a regular file and non-empty; C(metadata.total_size) of the index equals
    I(expected_total_size) when given."
  - By default the shards are only C(stat)ed, never read, so the check takes well under a second on
    a 160 GB checkpoint.
  - With I(deep=true) every shard is also hashed with sha256 (1 MiB reads, bounded memory) and
    compared with I(expected_shard_sha256) when given. That reads the whole checkpoint; run it async
    and follow I(progress_path).
  - Changes nothing on the rank (the progress file aside).
extends_documentation_fragment:
  - gb10.dspark._checkpoint
  - gb10.dspark._attributes
  - gb10.dspark._rank
options:
  fail_on_mismatch:
    description:
      - When true, any difference fails the task. When false the module succeeds and returns the
        differences in RV(mismatches) (for fleet audits).
      - Options that cannot be right (a malformed revision, a progress file that cannot be written)
        fail the task either way.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: The module only reads, so check mode runs the same checks and returns the same result.
  diff_mode:
    support: none
    details: Nothing is changed, so there is nothing to diff; differences are in RV(mismatches).
  idempotent:
    support: full
    details: Read-only; always reports C(changed=false).
notes:
  - "Every difference names the rank, the actual and the pinned value, for example
    C(rank worker-01: shard model-00007-of-00048.safetensors is absent, pinned present and non-empty)."
  - Shards that are symlinks (as in a Hugging Face cache) are followed; a dangling one counts as absent.
  - The directory readability check uses C(os.access), which always says yes for root.
seealso:
  - module: gb10.dspark.image_identity
  - module: gb10.dspark.pair_identity
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: The rank holds the pinned checkpoint (stat only, fast)
  gb10.dspark.model_checkpoint:
    rank: "{{ inventory_hostname }}"
    path: /models/DeepSeek-V4-Flash-0731
    expected_revision: 9e165c30e2704aec5d9d593cce3eebd58bbef1cb
    expected_config:
      architectures: [DeepseekV4ForCausalLM]
      model_type: deepseek_v4
      expert_dtype: fp4
      max_position_embeddings: 1048576
      n_routed_experts: 256
      num_experts_per_tok: 6
      num_hidden_layers: 43
      num_nextn_predict_layers: 1
  register: __dspark_checkpoint

- name: Show what the rank holds
  ansible.builtin.debug:
    msg: "{{ __dspark_checkpoint.checkpoint.shard_count }} shards, {{ __dspark_checkpoint.checkpoint.bytes_on_disk }} bytes"

- name: Hash every shard in the background
  gb10.dspark.model_checkpoint:
    rank: "{{ inventory_hostname }}"
    path: /models/DeepSeek-V4-Flash-0731
    expected_revision: "{{ dspark_pin.model_revision }}"
    deep: true
    expected_shard_sha256: "{{ dspark_pin.shard_sha256 }}"
    progress_path: /var/tmp/dspark-checkpoint-progress.json
  async: 7200
  poll: 0
  register: __dspark_deep

- name: Fleet audit, collect differences without failing
  gb10.dspark.model_checkpoint:
    path: /models/DeepSeek-V4-Flash-0731
    expected_revision: "{{ dspark_pin.model_revision }}"
    fail_on_mismatch: false
  register: __dspark_audit

- name: Report the differences
  ansible.builtin.debug:
    msg: "{{ __dspark_audit.mismatches | map(attribute='message') | list }}"
"""

RETURN = r"""
changed:
  description: Always false; the module only reads.
  returned: always
  type: bool
  sample: false
checkpoint:
  description: What the rank holds.
  returned: when the options were valid
  type: dict
  contains:
    path:
      description: The absolute checkpoint directory.
      type: str
      sample: /models/DeepSeek-V4-Flash-0731
    revision:
      description: The stripped content of the revision marker, null when it could not be read.
      type: str
      sample: 9e165c30e2704aec5d9d593cce3eebd58bbef1cb
    shard_count:
      description: How many distinct shard files the index's C(weight_map) names, null without a usable index.
      type: int
      sample: 48
    total_size:
      description: C(metadata.total_size) of the index, null when absent.
      type: int
      sample: 166878536440
    bytes_on_disk:
      description: The summed sizes of the pinned shard files that are regular files.
      type: int
      sample: 166895310848
    config:
      description: The actual C(config.json) value of every key in I(expected_config) (null when absent).
      type: dict
      sample: {"model_type": "deepseek_v4", "num_hidden_layers": 43}
    deep:
      description: Whether the shards were hashed.
      type: bool
      sample: false
    shard_sha256:
      description: Shard file name to its sha256, for every shard that could be hashed.
      returned: when I(deep=true)
      type: dict
      sample: {"model-00001-of-00048.safetensors": "5f0c...e1"}
mismatches:
  description: Every difference found, in check order; empty when the checkpoint matches.
  returned: always
  type: list
  elements: dict
  contains:
    rank:
      description: The rank.
      type: str
    item:
      description: What differs.
      type: str
      sample: shard model-00007-of-00048.safetensors
    expected:
      description: The pinned (or expected) value.
      type: raw
      sample: present and non-empty
    actual:
      description: What the rank holds; null for absent.
      type: raw
    reason:
      description: Further detail, may be empty.
      type: str
    expected_word:
      description: C(pinned), or C(expected) where the expectation is structural rather than from the pin.
      type: str
    message:
      description: The whole difference in one line.
      type: str
      sample: "rank worker-01: shard model-00007-of-00048.safetensors is absent, pinned present and non-empty"
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import finish, guarded, rank_name
from ansible_collections.gb10.dspark.plugins.module_utils.identity._model_checkpoint import (
    CHECKPOINT_OPTIONS,
    expected_of,
    verify,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rank": {"type": "str"},
            **CHECKPOINT_OPTIONS,
            "fail_on_mismatch": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    rank = rank_name(params["rank"])
    report = guarded(module, lambda: verify(params["path"], expected_of(params), rank))
    finish(module, {"checkpoint": report.checkpoint()}, report.mismatches, params["fail_on_mismatch"], report.warnings)


if __name__ == "__main__":
    main()
