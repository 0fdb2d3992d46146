# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options of a rank's GPU and fabric check (``_gpu_facts.GPU_OPTIONS``): gb10.dspark.gpu_facts and
gb10.dspark.rank_preflight take them."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  expected_compute_capability:
    description:
      - The compute capability every GPU must report, as C(MAJOR.MINOR). GB10 is C(12.1).
      - Always checked; it cannot be switched off.
    type: str
    default: "12.1"
  expected_gpu_count:
    description:
      - How many GPUs the rank must have. A DGX Spark has one GB10.
      - Always checked; it cannot be switched off.
    type: int
    default: 1
  expected_gpu_name:
    description:
      - The name every GPU must report, for example C(NVIDIA GB10). Not checked when omitted.
    type: str
  expected_netdevs:
    description:
      - RoCE network devices (for example C(enp1s0f1np1)) that C(ibdev2netdev) must list, every one Up.
      - Giving any makes C(ibdev2netdev) required.
    type: list
    elements: str
    default: []
  expected_hcas:
    description:
      - RDMA devices (for example C(rocep1s0f1)) that C(ibdev2netdev) must list, with every listed port Up.
      - Giving any makes C(ibdev2netdev) required.
    type: list
    elements: str
    default: []
  nvidia_smi_path:
    description:
      - The C(nvidia-smi) executable, a name looked up in E(PATH) and the sbin directories, or an absolute path.
    type: str
    default: nvidia-smi
  ibdev2netdev_path:
    description:
      - The C(ibdev2netdev) executable, a name looked up in E(PATH) and the sbin directories, or an absolute path.
    type: str
    default: ibdev2netdev
"""
