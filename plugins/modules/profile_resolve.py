#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: profile_resolve
short_description: Resolve a serving profile and render one rank's vLLM launch from it, changing nothing
version_added: 0.1.0
description:
  - Looks up O(name) in the profile catalog (the role C(gb10.dspark.profile) passes its
    C(__dspark_profile_catalog)), applies O(overrides), checks the result, and renders the
    C(vllm serve /model ...) argv and the container environment of rank O(rank).
  - "Lane/profile lock: a profile that departs from its qualified values (the tuple
    C(max_model_len), C(max_num_seqs), C(max_num_batched_tokens), C(gpu_memory_utilization),
    C(kv_cache_memory_bytes), C(mtp_tokens), or the compilation config, optimization level,
    performance mode, autotune flag or environment) is refused unless O(allow_experimental=true);
    the departures are returned in RV(departures) so evidence records them."
  - "Invariants enforced even with O(allow_experimental=true): C(KV_CACHE_DTYPE) is
    C(nvfp4_ds_mla) and equals the pin's; the compilation config's C(mode) is C(0);
    C(VLLM_DSV4_ENABLE_MULTI_STREAM) is C(0); C(VLLM_USE_BREAKABLE_CUDAGRAPH) is absent;
    C(mtp_tokens) and the speculative method equal the pin's; the long-context profile batches at
    most 8192 tokens; the runtime lane is C(native-v026)."
  - O(extra_env) is merged into the environment last and the invariants are checked again on the
    merged environment, so it cannot bring in C(VLLM_USE_BREAKABLE_CUDAGRAPH) or change
    C(VLLM_DSV4_ENABLE_MULTI_STREAM).
  - "Names that hijack the loader or the interpreter are refused in O(extra_env), O(overrides) and
    the catalog, even with O(allow_experimental=true): every C(LD_*), C(PYTHONPATH), C(PYTHONHOME),
    C(PYTHONSTARTUP), C(PYTHONINSPECT), C(PYTHONUSERBASE), C(PYTHONPLATLIBDIR), C(PYTHONEXECUTABLE),
    C(PYTHONPYCACHEPREFIX), C(PYTHONBREAKPOINT), C(PATH), C(BASH_ENV), C(ENV), C(GCONV_PATH),
    C(GLIBC_TUNABLES), C(CUDA_INJECTION64_PATH), C(NCCL_NET_PLUGIN), C(NCCL_TUNER_PLUGIN),
    C(NCCL_PROFILER_PLUGIN), C(OPENSSL_CONF), C(OPENSSL_ENGINES), C(OPENSSL_MODULES); and
    C(VLLM_API_KEY), which belongs in C(dspark_api_key)."
  - "Engine settings in O(extra_env) - names starting C(VLLM_), C(NCCL_), C(TORCH_),
    C(TORCHINDUCTOR_), C(PYTORCH_), C(CUDA_), C(TRITON_), C(HF_), C(TRANSFORMERS_), C(FLASHINFER_),
    C(NVIDIA_), C(GLOO_) or C(UCX_), and every name a catalog profile sets - are treated exactly as
    an C(env) override: a departure (refused unless O(allow_experimental=true), listed in
    RV(departures)) and part of RV(profile_sha256). Any other name (the simulator's C(DSPARK_SIM_*)
    knobs, a site's own variables) is rank-local: not a departure and not hashed."
  - Every violation, of the profile and of the rank inputs, is reported in one failure.
  - Runs where it is called; roles delegate it to the control node, once per rank, because the
    argv and environment differ per rank.
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  catalog:
    description:
      - The profile catalog, profile name to settings, as in C(roles/profile/vars/main.yml).
    type: dict
    required: true
  name:
    description:
      - The profile to resolve, for example C(production), C(long-1m) or C(breakable-ab).
      - Any key of O(catalog); a name not in it fails and lists the catalog's names.
    type: str
    required: true
  overrides:
    description:
      - Settings that replace the profile's. C(compilation_config) and C(env) are merged into the
        profile's (an C(env) value of V(null) removes the variable); other keys replace.
      - Pass native YAML types; a templated C("16") is not the integer C(16) and is refused.
      - Any actual change is a departure and needs O(allow_experimental=true).
    type: dict
    default: {}
  allow_experimental:
    description:
      - Accept a profile that departs from its qualified values. The invariants still hold.
    type: bool
    default: false
  pin:
    description:
      - The identity pin (C(dspark_pin)); C(kv_cache_dtype), C(speculative_method) and
        C(speculative_tokens) are read.
    type: dict
    required: true
  rank:
    description: 0 for the head (serves the API), 1 for the headless worker.
    type: int
    required: true
    choices: [0, 1]
  eth_if:
    description: The rank's fabric netdev, exported as C(NCCL_SOCKET_IFNAME).
    type: str
    required: true
  ib_hca:
    description: The rank's RoCE HCA, exported as C(NCCL_IB_HCA).
    type: str
    required: true
  head_fabric_ip:
    description: The fabric IP address of the head of the same pair (C(--master-addr), C(MASTER_ADDR)).
    type: str
    required: true
  master_port:
    description: The port of the head's rendezvous (C(--master-port), C(MASTER_PORT)).
    type: int
    default: 25000
  api_port:
    description: The head's OpenAI API port (C(--port)); the worker has no API.
    type: int
    default: 8888
  served_model_name:
    description: The model name the API serves (C(--served-model-name)).
    type: str
    required: true
  extra_env:
    description:
      - Variables added to the environment after the profile's, for example the simulator's
        C(DSPARK_SIM_*) knobs. Checked with the rest; the per-rank variables cannot be set here.
      - Loader and interpreter hijacks (C(LD_*), C(PYTHONPATH), ...) are refused; engine settings
        (C(VLLM_*), C(NCCL_*), C(TORCH_*), ..., or a name a profile sets) are departures, as an
        O(overrides) C(env) entry would be. See the description.
    type: dict
    default: {}
  fabric_env:
    description:
      - The rank's site fabric settings, NCCL knobs that follow the site's RoCE setup rather than the
        profile - C(NCCL_IB_GID_INDEX) (0..255, required), C(NCCL_IB_TC) (0..255), C(NCCL_IB_SL) (0..15),
        C(NCCL_IB_ROCE_VERSION_NUM) (1 or 2) and C(NCCL_IB_ADDR_FAMILY) (C(AF_INET) or C(AF_INET6)).
      - Integers or their decimal text. Added to RV(env) and returned in RV(fabric_env); they are not
        departures and not part of RV(profile_sha256). Any other name is refused, and these names are
        refused in the catalog, O(overrides) and O(extra_env).
    type: dict
    default: {NCCL_IB_GID_INDEX: "3"}
attributes:
  check_mode:
    support: full
    details: The module only computes. Check mode returns the same result.
  diff_mode:
    support: none
    details: Nothing changes, so there is no diff to show.
  idempotent:
    support: full
    details: Never changes anything; always returns C(changed=false). The same inputs give the same result.
notes:
  - "Every failure message names the profile (and the rank for rank inputs), the actual and the
    expected value, for example C(rank profile production: max_num_seqs is 8, expected 16 (departs
    from the qualified profile; set allow_experimental to run it))."
  - RV(env_file) is written without quotes, because C(docker run --env-file) takes everything after
    the first C(=) literally. Values with a newline, a carriage return, a NUL, or leading or
    trailing whitespace are refused rather than quoted.
  - Needs only the Python standard library on the host where it runs.
seealso:
  - module: gb10.dspark.runtime_manifest
    description: Its O(gb10.dspark.runtime_manifest#module:profile) option takes RV(manifest_expectations).
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Resolve the production profile for this rank on the control node
  gb10.dspark.profile_resolve:
    catalog: "{{ __dspark_profile_catalog }}"
    name: production
    pin: "{{ dspark_pin }}"
    rank: "{{ dspark_rank }}"
    eth_if: "{{ dspark_eth_if }}"
    ib_hca: "{{ dspark_ib_hca }}"
    head_fabric_ip: 10.232.1.1
    served_model_name: deepseek-v4-flash-dspark
    extra_env:
      DSPARK_SIM_STARTUP_DELAY_S: "1"
  delegate_to: localhost
  register: __dspark_profile_resolved

- name: Write the rank's env file
  ansible.builtin.copy:
    content: "{{ __dspark_profile_resolved.env_file }}"
    dest: /etc/dspark/profiles/production.env
    owner: root
    group: root
    mode: "0600"

- name: Try a smaller batch as an experiment (recorded as a departure)
  gb10.dspark.profile_resolve:
    catalog: "{{ __dspark_profile_catalog }}"
    name: production
    overrides:
      max_num_seqs: 8
    allow_experimental: true
    pin: "{{ dspark_pin }}"
    rank: 0
    eth_if: enp1s0f0np0
    ib_hca: rocep1s0f0
    head_fabric_ip: 10.232.1.1
    served_model_name: deepseek-v4-flash-dspark
  delegate_to: localhost
  register: __dspark_profile_experiment

- name: Show what departs from the qualified profile
  ansible.builtin.debug:
    msg: "{{ __dspark_profile_experiment.departures }}"
"""

RETURN = r"""
changed:
  description: Always V(false); the module only computes.
  returned: always
  type: bool
  sample: false
profile:
  description:
    - The resolved, rank-independent profile - C(name), C(runtime_lane), C(manifest_section), the
      tuple, C(speculative_method), C(compilation_config), C(optimization_level),
      C(performance_mode), C(enable_flashinfer_autotune), C(env) (the profile's, with the overrides
      and the engine settings of O(extra_env)), C(extra_env) (the rest of O(extra_env) as checked;
      rank-local, so left out of RV(profile_sha256)), C(gate) (what the
      runtime gate is run with), C(manifest_exempt), C(departures) and C(experimental).
  returned: success
  type: dict
  sample:
    name: production
    runtime_lane: native-v026
    manifest_section: production_profile
    max_model_len: 327680
    max_num_seqs: 16
    max_num_batched_tokens: 16384
    gpu_memory_utilization: 0.835
    kv_cache_memory_bytes: 15998753178
    mtp_tokens: 6
    speculative_method: dspark
    compilation_config: {mode: 0, cudagraph_mode: FULL_DECODE_ONLY, cudagraph_implementation: regular,
                         cudagraph_strict: true}
    optimization_level: 2
    performance_mode: balanced
    enable_flashinfer_autotune: true
    env: {KV_CACHE_DTYPE: nvfp4_ds_mla, VLLM_DSV4_ENABLE_MULTI_STREAM: "0"}
    extra_env: {DSPARK_SIM_STARTUP_DELAY_S: "1"}
    gate: {cudagraph_implementation: regular, cudagraph_mode: FULL_DECODE_ONLY, optimization_level: 2,
           performance_mode: balanced}
    manifest_exempt: []
    departures: []
    experimental: false
argv:
  description: The rank's container command, C(vllm serve /model ...), as an argv list.
  returned: success
  type: list
  elements: str
  sample: [vllm, serve, /model, --served-model-name, deepseek-v4-flash-dspark, --host, 0.0.0.0, --port, "8888"]
env:
  description: The rank's container environment - the profile's plus RV(fabric_env), C(NODE_RANK), C(HEADLESS),
    C(NCCL_IB_HCA), C(NCCL_SOCKET_IFNAME), C(MASTER_ADDR), C(MASTER_PORT) and C(MTP_NUM_TOKENS).
  returned: success
  type: dict
  sample: {NODE_RANK: "1", HEADLESS: "1", MASTER_ADDR: 10.232.1.1, MASTER_PORT: "25000", MTP_NUM_TOKENS: "6"}
env_file:
  description: RV(env) as Docker env-file text, C(KEY=VALUE) lines sorted by name, unquoted.
  returned: success
  type: str
  sample: "HEADLESS=1\nKV_CACHE_DTYPE=nvfp4_ds_mla\n"
compilation_config_json:
  description: The C(--compilation-config) value, compact JSON.
  returned: success
  type: str
  sample: '{"mode":0,"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_implementation":"regular","cudagraph_strict":true}'
profile_sha256:
  description:
    - sha256 of the canonical JSON of RV(profile) without its C(extra_env); the same on both ranks, different when
      any profile value differs, including an engine setting given through O(extra_env). Meant for a container
      label.
  returned: success
  type: str
  sample: b9b9d4280b9e1f6a5e7e036b082d67995ea3b358b99ec84bd9618d5cde880962
departures:
  description: Every setting that differs from the qualified profile, as C(key), C(qualified) and C(actual).
  returned: success
  type: list
  elements: dict
  sample: [{key: max_num_seqs, qualified: 16, actual: 8}]
experimental:
  description: V(true) when RV(departures) is not empty.
  returned: success
  type: bool
  sample: false
fabric_env:
  description: The site fabric settings of O(fabric_env) as checked and exported in RV(env).
  returned: success
  type: dict
  sample: {NCCL_IB_GID_INDEX: "3"}
manifest_expectations:
  description:
    - What the runtime manifest's C(manifest_section) must record for this profile, manifest key to
      value; feed it to the O(gb10.dspark.runtime_manifest#module:profile) option.
    - Departed settings are expected at their qualified value; C(manifest_exempt) keys are left out.
  returned: success
  type: dict
  sample: {max_model_len: 327680, max_num_seqs: 16, cudagraph_implementation: regular, vllm_use_aot_compile: false}
mismatches:
  description: On failure, every violation, each with C(rank), C(item), C(expected), C(actual), C(reason),
    C(expected_word) and C(message).
  returned: failure
  type: list
  elements: dict
  sample:
    - rank: profile production
      item: max_num_seqs
      expected: 16
      actual: 8
      reason: departs from the qualified profile; set allow_experimental to run it
      expected_word: expected
      message: "rank profile production: max_num_seqs is 8, expected 16 (departs from the qualified profile;
        set allow_experimental to run it)"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import guarded
from ansible_collections.gb10.dspark.plugins.module_utils.engine._profile import RESOLVE_ARGUMENT_SPEC, build


def main() -> None:
    module = AnsibleModule(argument_spec=RESOLVE_ARGUMENT_SPEC, supports_check_mode=True)
    result = guarded(module, lambda: build(**module.params))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
