# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather and check a rank's GPU and RoCE fabric facts
version_added: 0.1.0
description:
  - Runs C(nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total,memory.used
    --format=csv,noheader,nounits) on the rank and returns one fact dict per GPU.
  - With O(source=xml) it also runs C(nvidia-smi -q -x) and takes the name, UUID, PCI bus id, driver version,
    CUDA version and framebuffer memory from the XML. The XML has no compute capability, so that one still comes
    from the CSV query (matched by GPU UUID).
  - Runs C(ibdev2netdev) and returns one dict per HCA port line (HCA, port, netdev and its C(Up) or C(Down) state).
  - Checks the facts against the expectations of a DGX Spark rank (one C(NVIDIA GB10) of compute capability
    C(12.1)) and the expected RoCE netdevs and HCAs, collecting every mismatch, not just the first.
  - "Each mismatch message names the rank, the actual and the expected value, for example
    C(rank sim01-head: GPU 0 compute capability is 9.0, expected 12.1)."
  - Fails closed when a tool is missing, exits non-zero (nvidia-smi exit 9 driver not loaded, 6 no GPU found)
    or prints something it cannot parse; the message names the rank and the tool's first line of output.
  - Never changes anything on the rank.
extends_documentation_fragment:
  - gb10.dspark._gpu_check
  - gb10.dspark._attributes
  - gb10.dspark._rank
options:
  source:
    description:
      - Which nvidia-smi output the GPU facts come from.
      - V(csv) runs only the C(--query-gpu) CSV query; RV(gpu_facts.cuda_version) is then V(null).
      - V(xml) also runs C(nvidia-smi -q -x) (which gives the CUDA version); the compute capability and the GPU
        index still come from the CSV query because the XML does not carry them.
    type: str
    choices: [csv, xml]
    default: csv
  gather_fabric:
    description:
      - Run C(ibdev2netdev) and return RV(gpu_facts.fabric) even when no netdev or HCA is expected.
      - When V(true), nothing is expected of the fabric and C(ibdev2netdev) is not installed, RV(gpu_facts.fabric)
        is V(null) and the module warns instead of failing.
      - When V(false) and nothing is expected of the fabric, C(ibdev2netdev) is not run at all.
    type: bool
    default: true
  fail_on_mismatch:
    description:
      - Fail when any expectation is not met.
      - Set to V(false) for audits that want the mismatches as data; they are returned in RV(mismatches) and the
        module succeeds. A tool that is missing or fails still fails the module.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: The module only reads; check mode runs the same commands and returns the same result.
  diff_mode:
    support: full
    details: Reports no diff, the module changes nothing.
  idempotent:
    support: full
    details: Read-only; always returns C(changed=false).
notes:
  - GB10 has unified memory, so nvidia-smi reports its memory as not available; RV(gpu_facts.gpus[].memory_total_mib)
    and RV(gpu_facts.gpus[].memory_used_mib) are then V(null).
  - Values nvidia-smi prints as C([N/A]), C([Not Supported]) or C(N/A) are returned as V(null).
  - The facts are also set as the host fact C(dspark_gpu).
requirements:
  - nvidia-smi (NVIDIA driver) on the rank
  - ibdev2netdev (Mellanox/NVIDIA OFED tools) on the rank when netdevs or HCAs are expected
author:
  - gb10.dspark contributors (!UNKNOWN)
seealso:
  - name: nvidia-smi documentation
    description: The C(--query-gpu) fields and exit codes.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
---
- name: Check that the rank has one GB10 with its RoCE ports up
  gb10.dspark.gpu_facts:
    rank: "{{ inventory_hostname }}"
    expected_gpu_name: NVIDIA GB10
    expected_netdevs:
      - enp1s0f1np1
      - enP2p1s0f1np1
    expected_hcas:
      - rocep1s0f1
      - roceP2p1s0f1
  register: gb10_gpu

- name: Show the driver
  ansible.builtin.debug:
    msg: "{{ gb10_gpu.gpu_facts.gpus[0].name }} driver {{ gb10_gpu.gpu_facts.driver_version }}"

- name: Audit the fleet without failing, with the CUDA version from the XML
  gb10.dspark.gpu_facts:
    rank: "{{ inventory_hostname }}"
    source: xml
    fail_on_mismatch: false
  register: gb10_audit

- name: List what differs
  ansible.builtin.debug:
    msg: "{{ gb10_audit.mismatches | map(attribute='message') | list }}"
  when: gb10_audit.mismatches | length > 0

- name: Use the host fact set by the module
  ansible.builtin.assert:
    that:
      - ansible_facts.dspark_gpu.gpu_count == 1
"""

RETURN = r"""
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
gpu_facts:
  description: The GPU and fabric facts of the rank. Also returned when the module fails on a mismatch.
  returned: success, or failure on a mismatch
  type: dict
  contains:
    gpu_count:
      description: Number of GPUs nvidia-smi lists.
      type: int
      sample: 1
    driver_version:
      description: NVIDIA driver version.
      type: str
      sample: 580.126.09
    cuda_version:
      description: CUDA version the driver supports; V(null) unless O(source=xml).
      type: str
      sample: "13.0"
    gpus:
      description: One entry per GPU.
      type: list
      elements: dict
      contains:
        index:
          description: nvidia-smi GPU index.
          type: int
          sample: 0
        name:
          description: Product name.
          type: str
          sample: NVIDIA GB10
        uuid:
          description: GPU UUID.
          type: str
          sample: GPU-6faee8e8-987e-7235-a966-59c455f7b4ff
        pci_bus_id:
          description: PCI bus id.
          type: str
          sample: 0000000F:01:00.0
        compute_cap:
          description: Compute capability, C(MAJOR.MINOR).
          type: str
          sample: "12.1"
        driver_version:
          description: Driver version reported for this GPU.
          type: str
          sample: 580.126.09
        memory_total_mib:
          description: Framebuffer memory in MiB; V(null) when not available (GB10 unified memory).
          type: int
          sample: null
        memory_used_mib:
          description: Used framebuffer memory in MiB; V(null) when not available (GB10 unified memory).
          type: int
          sample: null
    fabric:
      description:
        - One entry per line of C(ibdev2netdev).
        - V(null) when C(ibdev2netdev) was not run or is not installed.
      type: list
      elements: dict
      contains:
        hca:
          description: RDMA device name.
          type: str
          sample: rocep1s0f1
        port:
          description: HCA port number.
          type: int
          sample: 1
        netdev:
          description: Network device of the port.
          type: str
          sample: enp1s0f1np1
        state:
          description: Link state as ibdev2netdev prints it, V(Up) or V(Down).
          type: str
          sample: Up
mismatches:
  description:
    - Every expectation that is not met, empty when all are.
    - Each entry has C(rank), C(item), C(expected), C(actual), C(reason), C(expected_word) and C(message).
  returned: success, or failure on a mismatch
  type: list
  elements: dict
  sample:
    - rank: sim01-head
      item: GPU 0 compute capability
      expected: "12.1"
      actual: "9.0"
      reason: ""
      expected_word: expected
      message: "rank sim01-head: GPU 0 compute capability is 9.0, expected 12.1"
ansible_facts:
  description: Host facts set by the module.
  returned: success
  type: dict
  contains:
    dspark_gpu:
      description: The same dict as RV(gpu_facts).
      type: dict
      sample: {}
msg:
  description: What failed; one line per mismatch, or why the check could not be carried out.
  returned: failure
  type: str
  sample: "rank sim01-worker: HCA rocep1s0f1 link is Down, expected Up"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.identity._gpu_facts import GPU_OPTIONS, check_module
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import finish, guarded, rank_name


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rank": {"type": "str"},
            "source": {"type": "str", "choices": ["csv", "xml"], "default": "csv"},
            **GPU_OPTIONS,
            "gather_fabric": {"type": "bool", "default": True},
            "fail_on_mismatch": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    rank = rank_name(params["rank"])
    report = guarded(module, lambda: check_module(module, params, rank, source=params["source"],
                                                  fabric=params["gather_fabric"]))
    finish(module, {"gpu_facts": report.facts, "ansible_facts": {"dspark_gpu": report.facts}},
           report.mismatches, params["fail_on_mismatch"], report.warnings)


if __name__ == "__main__":
    main()
