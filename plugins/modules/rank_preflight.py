#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: rank_preflight
short_description: Prove, read-only and in one call, that a rank is fit to serve the pin
version_added: 0.1.0
description:
  - Runs on each rank before anything changes (the preflight role's one read of a rank). In one module run it does
    what M(gb10.dspark.gpu_facts) and M(gb10.dspark.model_checkpoint) each do, and checks that the rank's Python
    can import the docker SDK for Python and C(requests) (the collection's one Docker client).
  - "Checks, in order: the GPU and its fabric links (as M(gb10.dspark.gpu_facts) with its CSV query and
    C(ibdev2netdev)); the docker SDK (each Python module missing is a mismatch naming the Debian package to install,
    C(python3-docker) or C(python3-requests)); the model checkpoint (as M(gb10.dspark.model_checkpoint))."
  - Its options are those of the two modules, with the same names, defaults and meaning.
  - Fails listing B(every) mismatch of the three, each naming the rank, the actual and the expected value. A tool
    that is missing or answers what cannot be parsed fails at once, naming the rank and the tool.
  - Never changes anything on the rank (in deep mode, the progress file aside).
extends_documentation_fragment:
  - gb10.dspark._attributes.read_only
  - gb10.dspark._rank
  - gb10.dspark._gpu_check
  - gb10.dspark._checkpoint
notes:
  - One module run per rank instead of one per check; on a fleet, every SSH round trip and Python start-up counts.
seealso:
  - module: gb10.dspark.gpu_facts
  - module: gb10.dspark.model_checkpoint
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Preflight | The rank has the pinned GPU, its fabric links are Up and it holds the pinned model checkpoint
  gb10.dspark.rank_preflight:
    rank: "{{ inventory_hostname }}"
    expected_compute_capability: "12.1"
    expected_netdevs: [enp1s0f1np1, enP2p1s0f1np1]
    expected_hcas: [rocep1s0f1, roceP2p1s0f1]
    path: /models/DeepSeek-V4-Flash-0731
    expected_revision: 9e165c30e2704aec5d9d593cce3eebd58bbef1cb
    expected_shard_count: 48
"""

RETURN = r"""
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
gpu_facts:
  description: The GPU and fabric facts of the rank, as M(gb10.dspark.gpu_facts) returns them.
  returned: success, or failure on a mismatch
  type: dict
  sample: {"gpu_count": 1, "driver_version": "580.126.09", "cuda_version": null, "gpus": [], "fabric": []}
checkpoint:
  description: What the rank's checkpoint holds, as M(gb10.dspark.model_checkpoint) returns it.
  returned: success, or failure on a mismatch
  type: dict
  sample: {"path": "/models/DeepSeek-V4-Flash-0731", "revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"}
mismatches:
  description:
    - Every expectation of the three checks that is not met, empty when all are.
    - Each entry has C(rank), C(item), C(expected), C(actual), C(reason), C(expected_word) and C(message).
  returned: success, or failure on a mismatch
  type: list
  elements: dict
  sample: [{"rank": "sim01-head", "item": "GPU 0 compute capability", "expected": "12.1", "actual": "9.0",
            "reason": "", "expected_word": "expected",
            "message": "rank sim01-head: GPU 0 compute capability is 9.0, expected 12.1"}]
ansible_facts:
  description: Host facts set by the module, C(dspark_gpu) (the same dict as RV(gpu_facts)).
  returned: success
  type: dict
  sample: {"dspark_gpu": {"gpu_count": 1}}
msg:
  description: What failed; one line per mismatch, or why a check could not be carried out.
  returned: failure
  type: str
  sample: "rank sim01-worker: shard model-00007-of-00048.safetensors is absent, pinned present and non-empty"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import sdk_mismatches
from ansible_collections.gb10.dspark.plugins.module_utils.identity._gpu_facts import GPU_OPTIONS, check_module
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import finish, guarded, rank_name
from ansible_collections.gb10.dspark.plugins.module_utils.identity._model_checkpoint import (
    CHECKPOINT_OPTIONS,
    expected_of,
    verify,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={"rank": {"type": "str"}, **GPU_OPTIONS, **CHECKPOINT_OPTIONS},
        supports_check_mode=True,
    )
    params = module.params
    rank = rank_name(params["rank"])
    gpu = guarded(module, lambda: check_module(module, params, rank))
    checkpoint = guarded(module, lambda: verify(params["path"], expected_of(params), rank))
    finish(module, {"gpu_facts": gpu.facts, "ansible_facts": {"dspark_gpu": gpu.facts},
                    "checkpoint": checkpoint.checkpoint()},
           gpu.mismatches + sdk_mismatches(rank) + checkpoint.mismatches, True, [*gpu.warnings, *checkpoint.warnings])


if __name__ == "__main__":
    main()
