#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: runtime_manifest
short_description: Verify a vLLM runtime manifest file against the pin, changing nothing
version_added: 0.1.0
description:
  - Verifies the runtime manifest (the JSON file the frozen vLLM image audits at start, mounted read-only at
    C(/opt/r0b0tlab/runtime-manifest.json)) where the module runs. Roles run it on the control node on the source
    file before anything is copied, and on each rank on the placed copy; the fleet audit runs it on the ranks.
  - Computes the sha256 of the file's bytes in one streamed read and parses those same bytes as strict JSON
    (duplicate keys at any depth, C(NaN) and C(Infinity) are refused; the top level must be an object).
  - Compares C(schema_version), the identity fields in O(expected) (top level) and the keys of O(profile) (inside
    O(profile_section)) with the manifest.
  - Collects every difference rather than stopping at the first. A wrong sha256 does not stop the field checks, so
    the result shows which fields were changed.
  - Values compare by JSON type. Numbers compare numerically (C(16) equals C(16.0)), but a number never equals a
    string (C(16) is not C("16")) and a boolean never equals a number (C(true) is not C(1)).
  - A missing or unreadable file, or one that is not strict JSON, is reported as a mismatch that names the path and
    the reason.
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._rank
options:
  path:
    description: The manifest file to verify.
    type: path
    required: true
  expected_sha256:
    description:
      - The pin's C(runtime_manifest_sha256), 64 hex characters, with or without a C(sha256:) prefix.
      - Anything else fails the task before the file is read.
    type: str
    required: true
  expected:
    description:
      - Identity fields from the pin that must be present at the top level of the manifest with equal values, for
        example C(vllm_version), C(integrated_vllm_commit), C(model_id), C(model_revision), C(kv_cache_dtype) and
        C(speculative_method).
      - Their mismatches say C(pinned).
    type: dict
    default: {}
  profile_section:
    description:
      - The manifest section that holds the profile, for example C(production_profile), C(long_context_profile) or
        C(c1_qualification_profile). When set, the section must exist and be an object.
      - Required when O(profile) is not empty.
    type: str
  profile:
    description:
      - Values that must be present in O(profile_section) with equal values, for example C(max_model_len),
        C(max_num_seqs), C(gpu_memory_utilization) or C(cudagraph_implementation).
      - Pass native YAML types. A templated C("16") does not match the manifest's C(16).
      - Their mismatches say C(expected).
    type: dict
    default: {}
  expected_schema_version:
    description: The manifest's C(schema_version). The v026 manifest is schema 3.
    type: int
    default: 3
  fail_on_mismatch:
    description:
      - When V(true), any mismatch fails the task.
      - When V(false), the task succeeds and returns the mismatches in RV(mismatches), for audits that collect
        findings from every rank. Invalid options still fail the task.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: The module only reads. Check mode runs the same checks and returns the same result.
  diff_mode:
    support: none
    details: Nothing changes, so there is no diff to show.
  idempotent:
    support: full
    details: Never changes anything; always returns C(changed=false).
notes:
  - "Every mismatch message names the rank, the actual value and the expected value, for example
    C(rank sim01-worker: runtime manifest production_profile.max_num_seqs is 8, expected 16)."
  - Files larger than 16 MiB are hashed but not parsed, and are reported as mismatches.
  - Needs only the Python standard library on the host where it runs.
seealso:
  - module: gb10.dspark.image_identity
  - module: ansible.builtin.stat
    description: Also returns a checksum, but does not parse the content or compare fields.
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Verify the source manifest on the control node before copying it
  gb10.dspark.runtime_manifest:
    rank: controller
    path: "{{ dspark_runtime_manifest_src }}"
    expected_sha256: "{{ dspark_pin.runtime_manifest_sha256 }}"
    expected:
      vllm_version: "{{ dspark_pin.vllm_version }}"
      integrated_vllm_commit: "{{ dspark_pin.integrated_vllm_commit }}"
      model_id: "{{ dspark_pin.model_id }}"
      model_revision: "{{ dspark_pin.model_revision }}"
      kv_cache_dtype: "{{ dspark_pin.kv_cache_dtype }}"
      speculative_method: "{{ dspark_pin.speculative_method }}"
    profile_section: production_profile
    profile:
      max_model_len: 327680
      max_num_seqs: 16
      gpu_memory_utilization: 0.835
      cudagraph_implementation: regular
  delegate_to: localhost
  run_once: true

- name: Audit the placed copy on every rank without failing
  gb10.dspark.runtime_manifest:
    rank: "{{ inventory_hostname }}"
    path: "{{ dspark_pin.runtime_manifest_path }}"
    expected_sha256: "sha256:{{ dspark_pin.runtime_manifest_sha256 }}"
    fail_on_mismatch: false
  register: __dspark_manifest

- name: Report what differs
  ansible.builtin.debug:
    msg: "{{ __dspark_manifest.mismatches | map(attribute='message') | list }}"
  when: __dspark_manifest.mismatches | length > 0
"""

RETURN = r"""
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
sha256:
  description: The sha256 (hex, no prefix) of the file's bytes; V(null) when the file could not be read.
  returned: always
  type: str
  sample: f6777b31e8c8977361d629ca99c37a199d3b52b9abc134f1de624eb202f083a9
manifest:
  description:
    - A subset of the manifest. It holds C(schema_version), the identity fields (the standard six plus any key of
      O(expected)) that are present, and the O(profile_section) section when it is an object.
    - Empty when the file could not be read or parsed.
  returned: always
  type: dict
  sample:
    schema_version: 3
    vllm_version: 0.26.0+dspark.sm121.3
    integrated_vllm_commit: fbad93432ebf60c8345397b3032fe03bf5d239cc
    model_id: deepseek-ai/DeepSeek-V4-Flash-0731
    model_revision: 9e165c30e2704aec5d9d593cce3eebd58bbef1cb
    kv_cache_dtype: nvfp4_ds_mla
    speculative_method: dspark
    production_profile: {max_model_len: 327680, max_num_seqs: 16, gpu_memory_utilization: 0.835}
mismatches:
  description:
    - Every difference found, each with C(rank), C(item), C(expected), C(actual), C(reason), C(expected_word) and
      C(message). Empty when the manifest matches.
    - When O(fail_on_mismatch=true), a non-empty list fails the task and C(msg) holds all the messages.
  returned: always
  type: list
  elements: dict
  sample:
    - rank: sim01-worker
      item: runtime manifest production_profile.max_num_seqs
      expected: 16
      actual: 8
      reason: ""
      expected_word: expected
      message: "rank sim01-worker: runtime manifest production_profile.max_num_seqs is 8, expected 16"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import end
from ansible_collections.gb10.dspark.plugins.module_utils.identity._runtime_manifest import ARGUMENT_SPEC, check


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    end(module, check(module.params))


if __name__ == "__main__":
    main()
