#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: evidence_pack
short_description: Write the evidence pack of one pair and run, once, with its publication verdict
version_added: 0.1.0
description:
  - "Runs on the control node (C(delegate_to: localhost), C(run_once: true)) at the end of the provision,
    guard and NIAH playbooks. Assembles one folder O(dest) holding the run's artifacts (identity pin,
    runtime manifest, rendered profile and compilation config, runtime gate, serving guard and NIAH
    results, container inspect data of both ranks, ...), an C(index.json), an C(index.md) and a
    C(SHA256SUMS) file over every other file of the pack (C(sha256sum -c SHA256SUMS) verifies it)."
  - "A pack is written once: when O(dest) exists and is not an empty folder the module fails and
    changes nothing."
  - "Every copied or rendered artifact is redacted: each O(redact_prefixes) path is replaced by its
    placeholder (longest prefix first), and one secret rule applies to every file of the pack (env
    files, inspect data, any JSON or text). A variable - a C(NAME=value) line or C(Env) entry, a
    C(NAME=value) inside text or a JSON string, a JSON member, a flag and its value (C(--api-key K),
    C(--hf-token=K)), a profile departure of C(env.NAME) - has its value replaced by C(<redacted>) when
    its NAME looks secret, or when its value is one of the O(secrets) (or O(secret_env) values)."
  - "A NAME looks secret (any case, judged by its words split at C(_), C(-), C(.) and camelCase) when it
    holds C(SECRET), C(PASSWORD), C(PASSWD), C(PASSPHRASE), C(CREDENTIAL), C(APIKEY), C(ACCESSKEY),
    C(PRIVATEKEY), C(COOKIE), C(BEARER) or C(SESSIONID); when one of its words is C(AUTH),
    C(AUTHORIZATION), C(OAUTH), C(CRED), C(CREDS), C(PRIVATE), C(SIGNATURE), C(CERT), C(CERTS),
    C(CERTIFICATE), C(JWT), C(SALT) or C(DSN); when its last word is C(TOKEN) (or ends in it), C(PASS),
    C(PWD) or C(SESSION); or when its last word is C(KEY) or C(KEYS) after a qualifier (C(VLLM_API_KEY);
    not a bare C(key), nor C(run_key), C(sort_key), C(cache_key) and the like). Counters and knobs that
    merely contain a word - C(MTP_NUM_TOKENS), C(DSPARK_SIM_TOKEN_DELAY_S), C(pass_count),
    C(KV_CACHE_DTYPE) - are not secret."
  - "The pack is written into a hidden staging folder beside O(dest), every file is hashed again from
    disk and scanned for every O(secrets) and O(secret_env) value and the O(redact_prefixes) paths (also
    in their JSON escaped spellings), and for any variable whose NAME looks secret and whose value is
    not C(<redacted>). Only a clean folder is renamed to O(dest). On any finding the module fails,
    removes what it wrote, and names the file and the variable (never the value)."
  - "The run is judged for publication. RV(invalid_for_publish) is V(true), with one reason per fault in
    RV(reasons), when: the wrapper tree is dirty; the profile is experimental or departs from the
    qualified profile; the runtime gate result is missing or not C(PASS); a serving guard or NIAH result
    is present (or has a status in O(facts)) and is missing from the pack or not C(PASS); the guard or
    NIAH counted infra errors; result rows mix C(regular) and C(breakable) CUDA graphs (or differ from
    the profile's); result rows mix client kinds - C(vllm-bench) and C(openai_portable) (the reason names
    both kinds and where their rows came from: O(facts.client_kinds) and the C(client_kind) of each row of
    the pack's C(systems) reports) - or one is of an unknown kind; a required artifact is missing; the runtime manifest sha256 differs from the pin's;
    or any of the pin identity, manifest sha256, profile or tree state is not recorded. Statuses are read
    from O(facts) and from the C(status) key of the pack's own gate, guard and NIAH files; a disagreement
    is a reason too. An invalid pack is still written, and a warning is shown."
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  dest:
    description:
      - The pack folder to create, for example C(<dspark_evidence_dir>/<pair>/runs/<run_id>). Missing parent
        folders are created (0755).
      - Must not exist, or be an empty folder.
    type: path
    required: true
  pair:
    description: The pair the run belongs to, as recorded in the index.
    type: str
    required: true
  run_id:
    description: The run's identifier, as recorded in the index (a new one per run).
    type: str
    required: true
  playbook:
    description: The playbook that wrote the pack, for example C(provision), C(guard), C(niah) or C(evidence).
    type: str
    required: true
  artifacts:
    description:
      - The files of the pack. Each has exactly one of O(artifacts[].src) and O(artifacts[].content).
      - A source that does not exist is recorded as C(missing) for a required artifact (and makes the run
        invalid for publication) or as C(absent) for an optional one; the module does not fail. A source
        that exists but cannot be read, or is a folder, fails the module.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - The file's path inside the pack, relative, with no C(..), C(.) or empty components, no
            backslash or control character. C(index.json), C(index.md) and C(SHA256SUMS) are reserved.
        type: str
        required: true
      src:
        description:
          - A control-node file to copy. UTF-8 text is copied with the O(redact_prefixes) replaced; other
            files are copied byte for byte (and still scanned). Inspect data is parsed, redacted and
            written back as JSON.
        type: path
      content:
        description:
          - The content to write instead of a file. A dict or list is written as JSON (sorted keys,
            indent 2); a string is written as text.
        type: raw
      kind:
        description: What the file is; C(gate), C(guard) and C(niah) files are read for their C(status).
        type: str
        default: other
        choices: [pin, manifest, profile, compilation_config, gate, guard, niah, niah_row, systems, inspect, readiness, tree,
          log, other]
      required:
        description: Whether a missing source makes the run invalid for publication.
        type: bool
        default: false
  facts:
    description: What the run established, summarised in the index and judged for publication.
    type: dict
    default: {}
    suboptions:
      pin:
        description: The identity pin (C(dspark_pin)); C(image_id), C(model_revision), C(model_id), C(release)
          and C(runtime_manifest_sha256) are recorded.
        type: dict
      manifest_sha256:
        description:
          - The sha256 of the runtime manifest the run used.
          - When not given, the one the runtime gate of this run measured on the head (O(run_files)).
        type: str
      profile:
        description: The profile the run served, as resolved by M(gb10.dspark.profile_resolve).
        type: dict
        suboptions:
          name:
            description: The profile's name.
            type: str
          sha256:
            description: The profile's sha256 (RV(gb10.dspark.profile_resolve#module:profile_sha256)).
            type: str
          experimental:
            description: Whether the profile is experimental.
            type: bool
          departures:
            description: Its departures from the qualified profile (strings, or dicts with C(key),
              C(qualified) and C(actual)).
            type: list
            elements: raw
          cudagraph_implementation:
            description: The profile's CUDA-graph implementation.
            type: str
            choices: [regular, breakable]
          fabric_env:
            description:
              - The site's RoCE fabric settings each rank ran with (C(dspark_fabric_env)), C(head) and
                C(worker) to C(NCCL_IB_GID_INDEX) and the other fabric names. Recorded in the index; never a
                reason against publication.
            type: dict
      tree:
        description: The wrapper tree the run was deployed from (RV(gb10.dspark.wrapper_tree#module:tree)).
        type: dict
        suboptions:
          dirty:
            description: Whether the tree was dirty.
            type: bool
          allow_dirty:
            description: Whether a dirty tree was allowed.
            type: bool
          commit:
            description: The tree's revision.
            type: str
      gate_status:
        description: The runtime gate's status (C(PASS) or C(FAIL)).
        type: str
      guard_status:
        description: The serving guard's status.
        type: str
      guard_infra_errors:
        description: Infrastructure errors (timeouts, connection faults) the guard counted.
        type: int
      guard_model_failures:
        description: Answers the guard judged wrong (model failures), counted apart from infra errors.
        type: int
      niah_status:
        description: The NIAH run's status.
        type: str
      niah_infra_errors:
        description: Infrastructure errors the NIAH run counted.
        type: int
      niah_model_failures:
        description: NIAH rows the model failed, counted apart from infra errors.
        type: int
      systems_status:
        description: Status of the systems lanes (C(systems.json)), when they ran.
        type: str
      systems_infra_errors:
        description: Systems lane rows that ended in an error (no figure recorded).
        type: int
      systems_model_failures:
        description: Systems lane rows the model failed (the canary).
        type: int
      systems_not_implemented:
        description: Systems lane rows that were not measured (C(NOT_IMPLEMENTED)); shown, counted neither as
          failures nor as infra errors.
        type: int
      row_kinds:
        description: The CUDA-graph implementations of the result rows in the pack.
        type: list
        elements: str
        choices: [regular, breakable]
      client_kinds:
        description:
          - "The kinds of client that measured the result rows, each with where its rows came from - a mapping of
            C(openai_portable) or C(vllm-bench) to a list of sources, for example
            C({\"vllm-bench\": [\"bench/vllm-serve.json\"]})."
          - The rows of every C(systems) artifact in the pack add their own C(client_kind) to it.
        type: dict
  run_files:
    description:
      - This run's own result files, as M(gb10.dspark.evidence_record) listed them while the producing
        roles wrote them (the C(dspark_evidence_run_files) fact) - each with its name in the pack, its
        path on the control node, its kind and the sha256 the run recorded. Only these files are read -
        the pack never looks for results by file name, so a file an earlier run left in the pair's
        folder can never enter it.
      - A file that no longer holds the recorded bytes (a later run rewrote it) is left out, in state
        C(stale), and makes the pack invalid for publication. A required result the run did not produce
        - C(readiness.json), C(runtime-gate.json), C(wrapper-tree.json) - is listed in state
        C(not_in_run) and makes the pack invalid for publication too.
      - The facts are read from these files - the profile (name, sha256, experimental, departures) from
        readiness, the CUDA-graph implementation of each result (gate, guard context, NIAH context),
        infra and model failure counts of the guard and NIAH, the systems lanes' counts (errors,
        failures, NOT_IMPLEMENTED rows), the wrapper tree (dirty, allowed dirty, revision), and the
        client kind the guard's or NIAH's context states (C(client_kind)), when it states one.
      - Facts given in I(facts) win over the ones read from the files.
    type: list
    elements: dict
  secrets:
    description:
      - Values that must never appear in the pack (API keys, tokens). Not logged. Empty strings are ignored.
      - Where one is the whole value of a variable it is redacted, whatever the variable's name; anywhere
        else it is searched for, and a pack that holds one is not written.
      - Values shorter than 6 characters are not searched for (they would match ordinary values such as
        C(1)); a warning says how many were left out. Their variables are still redacted by name.
    type: list
    elements: str
    default: []
  secret_env:
    description:
      - C(NAME=value) entries of an environment that may hold secrets, typically the engine's extra env
        (C(dspark_engine_extra_env)) of both ranks. Not logged.
      - The value of each entry whose NAME looks secret is added to O(secrets) (and named by its NAME in a
        failure); the other entries are ignored.
    type: list
    elements: str
    default: []
  redact_prefixes:
    description:
      - Control-node paths to replace inside the copied and rendered content, each also under its
        symlink-resolved spelling. Longer prefixes are replaced first.
    type: list
    elements: dict
    default: []
    suboptions:
      prefix:
        description: An absolute control-node path other than C(/).
        type: path
        required: true
      placeholder:
        description: What stands in its place, for example C(<evidence>); no quotes, backslashes or line breaks.
        type: str
        required: true
attributes:
  check_mode:
    support: full
    details:
      - Reads every source, hashes, redacts, judges and scans exactly as a real run, but writes nothing;
        returns C(changed=true) (a run would write a pack) with the planned RV(artifacts), RV(files) and RV(index).
  diff_mode:
    support: full
    details: Before is empty; after lists the path and every file of the pack.
  idempotent:
    support: partial
    details:
      - A pack is written once. Re-running with the same O(dest) fails instead of overwriting; each run is
        meant to get a new O(run_id) and so a new O(dest), and always reports C(changed=true).
notes:
  - Files are written with mode 0644, folders 0755. JSON is written atomically, sorted, indent 2.
  - Only relative paths appear in C(index.json) and C(index.md); source paths are never recorded.
  - "Failures read like C(rank control node: pack file inspect/head.json is carrying secret #1 (value withheld),
    expected free of secrets) or C(rank control node: pack file profiles/head/production.env is carrying an
    unredacted value of DB_PASSWD (value withheld), expected <redacted> in its place)."
seealso:
  - module: gb10.dspark.wrapper_tree
  - module: gb10.dspark.profile_resolve
  - module: gb10.dspark.serving_guard
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Write the provision run's evidence pack
  gb10.dspark.evidence_pack:
    dest: "{{ dspark_evidence_dir }}/{{ dspark_pair }}/runs/{{ dspark_run_id }}"
    pair: "{{ dspark_pair }}"
    run_id: "{{ dspark_run_id }}"
    playbook: provision
    artifacts:
      - {name: pin.json, content: "{{ dspark_pin }}", kind: pin, required: true}
      - {name: profile/production.env, content: "{{ __dspark_profile.env_file }}", kind: profile, required: true}
      - {name: profile/compilation-config.json, content: "{{ __dspark_profile.profile.compilation_config }}",
         kind: compilation_config}
      - {name: runtime-gate.json, src: "{{ dspark_evidence_dir }}/{{ dspark_pair }}/runtime-gate.json",
         kind: gate, required: true}
      - {name: readiness.json, src: "{{ dspark_evidence_dir }}/{{ dspark_pair }}/readiness.json", kind: readiness}
      - {name: inspect/head.json, content: "{{ __dspark_inspect_head }}", kind: inspect, required: true}
      - {name: inspect/worker.json, content: "{{ __dspark_inspect_worker }}", kind: inspect, required: true}
    facts:
      pin: "{{ dspark_pin }}"
      manifest_sha256: "{{ dspark_pin.runtime_manifest_sha256 }}"
      profile:
        name: "{{ __dspark_profile.profile.name }}"
        sha256: "{{ __dspark_profile.profile_sha256 }}"
        experimental: "{{ __dspark_profile.experimental }}"
        departures: "{{ __dspark_profile.departures }}"
        cudagraph_implementation: "{{ __dspark_profile.profile.compilation_config.cudagraph_implementation }}"
      tree:
        dirty: "{{ __dspark_tree.tree.dirty }}"
        allow_dirty: "{{ __dspark_tree.tree.allowed_dirty }}"
        commit: "{{ __dspark_tree.tree.revision }}"
      row_kinds: ["{{ __dspark_profile.profile.compilation_config.cudagraph_implementation }}"]
    secrets: "{{ [dspark_api_key] if dspark_api_key | default('') else [] }}"
    secret_env: "{{ dspark_engine_extra_env | default({}) | dict2items | map(attribute='key')
      | zip(dspark_engine_extra_env | default({}) | dict2items | map(attribute='value')) | map('join', '=') | list }}"
    redact_prefixes:
      - {prefix: "{{ dspark_evidence_dir }}", placeholder: "<evidence>"}
      - {prefix: "{{ playbook_dir | dirname }}", placeholder: "<checkout>"}
  delegate_to: localhost
  run_once: true
  register: __dspark_pack

- name: Say whether the run may be published, and why not
  ansible.builtin.debug:
    msg: >-
      {{ __dspark_pack.dest }}: invalid_for_publish={{ __dspark_pack.invalid_for_publish }}
      {{ __dspark_pack.reasons | join('; ') }}
  run_once: true

- name: A release run must be publishable
  ansible.builtin.assert:
    that: not __dspark_pack.invalid_for_publish
    fail_msg: "not publishable: {{ __dspark_pack.reasons | join('; ') }}"
  run_once: true
  when: dspark_release_run | default(false) | bool
"""

RETURN = r"""
changed:
  description: Always V(true) - a run writes a new pack; in check mode one would be written.
  returned: always
  type: bool
  sample: true
dest:
  description: The absolute path of the pack folder.
  returned: success
  type: str
  sample: /srv/dspark/evidence/sim01/runs/20260805T120000Z
invalid_for_publish:
  description: Whether the run may not be published; V(true) whenever RV(reasons) is not empty.
  returned: success
  type: bool
  sample: true
reasons:
  description: Every reason the run may not be published, one short sentence each, naming the value.
  returned: success
  type: list
  elements: str
  sample: ["wrapper tree at 4d9a358e0f2b6f1d6f4a4c8f1bb1b1e7c1a2d3e4 is dirty (allowed by allow_dirty)",
           "profile production-k8 is experimental"]
artifacts:
  description: Every artifact, sorted by name, as written to the pack (after redaction).
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: Relative path inside the pack.
      type: str
      returned: always
      sample: inspect/head.json
    kind:
      description: The artifact's kind.
      type: str
      returned: always
      sample: inspect
    required:
      description: Whether the artifact was required.
      type: bool
      returned: always
      sample: true
    state:
      description:
        - C(present), C(missing) (a required source does not exist), C(absent) (an optional one),
          C(not_in_run) (a required result this run did not produce) or C(stale) (a run file rewritten
          after the run recorded it; left out).
      type: str
      returned: always
      sample: present
    bytes:
      description: Size of the file in the pack; null unless present.
      type: int
      returned: always
      sample: 4096
    sha256:
      description: sha256 of the file in the pack; null unless present.
      type: str
      returned: always
      sample: 8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4
    source_sha256:
      description: sha256 of the O(artifacts[].src) file as read; null for O(artifacts[].content) or a missing source.
      type: str
      returned: always
      sample: 0a6d83961dd3c1ac88b59b2dc327aa48f434346648f6b96df89dda901c5176b1
    recorded_sha256:
      description: For a C(stale) artifact, the sha256 the run recorded (RV(artifacts[].source_sha256) is what the file holds now); null otherwise.
      type: str
      returned: always
      sample: null
    redacted:
      description: Whether redaction changed the content.
      type: bool
      returned: always
      sample: false
files:
  description: Every file of the pack, relative and sorted, including C(index.json), C(index.md) and C(SHA256SUMS).
  returned: success
  type: list
  elements: str
  sample: [SHA256SUMS, index.json, index.md, inspect/head.json, runtime-gate.json]
index:
  description:
    - The C(index.json) document - C(schema_version), C(pair), C(run_id), C(playbook), C(created_utc),
      C(identity), C(manifest_sha256), C(profile), C(tree), C(invalid_for_publish), C(reasons),
      C(results) (C(gate), C(guard), C(niah) each with C(status), C(ran) and C(sources); guard and NIAH
      also C(infra_errors) and C(model_failures), systems also C(not_implemented); C(row_kinds);
      C(client_kinds)), C(artifacts) and C(generated).
  returned: success
  type: dict
  sample:
    schema_version: 1
    pair: sim01
    run_id: 20260805T120000Z
    playbook: provision
    created_utc: "2026-08-05T12:00:03Z"
    invalid_for_publish: false
    reasons: []
    results: {gate: {status: PASS, ran: true, sources: [facts, runtime-gate.json]}, row_kinds: [regular],
              client_kinds: [openai_portable]}
mismatches:
  description: On failure, every fault, each with C(rank) (C(control node)), C(item), C(expected), C(actual) and C(message).
  returned: failure
  type: list
  elements: dict
  sample:
    - rank: control node
      item: evidence pack /srv/dspark/evidence/sim01/runs/20260805T120000Z
      expected: absent or an empty folder (packs are never overwritten)
      actual: a non-empty folder (6 entries)
      reason: ""
      expected_word: expected
      message: "rank control node: evidence pack /srv/dspark/evidence/sim01/runs/20260805T120000Z is a non-empty folder
        (6 entries), expected absent or an empty folder (packs are never overwritten)"
diff:
  description: With C(--diff), before is empty and after holds C(path) and C(files).
  returned: when diff mode is on and the module succeeds
  type: dict
  sample: {before: {}, after: {path: /srv/dspark/evidence/sim01/runs/20260805T120000Z, files: [SHA256SUMS, index.json]}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.evidence._evidence_pack import ARGUMENT_SPEC, pack
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import end


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    end(module, pack(module.params, check_mode=module.check_mode, diff=module._diff))


if __name__ == "__main__":
    main()
