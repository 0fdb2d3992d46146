#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_key_label
short_description: The engine's API-key label, keyed with a secret the rank keeps for itself
version_added: 0.1.0
description:
  - Returns the value of the engine container's C(io.gb10.dspark.api_key) label. It changes when the API
    key is added, rotated or removed, so that the engine role replaces the engine; it is an HMAC-SHA256 of
    the key under a random secret of this rank, so that nobody who sees the label (C(docker ps), an audit)
    but not the secret can test guessed keys against it.
  - The secret is a file only root can read (I(secret_file), mode 0600, in a folder made 0700 if absent).
    It is made once, the first time a key is set, and never leaves the rank; the result holds only the label.
  - A secret file that is a link, not a regular file, owned by another user, or readable by group or
    others is refused, naming the path, the expected and the found value; nothing is changed.
  - Without a key the label is C(none) and no secret is read or made.
  - The engine role runs it under the pair's lock, before it plans the container.
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  api_key:
    description: The engine's API key (C(dspark_api_key)); empty or absent for none.
    type: str
  secret_file:
    description: The rank's label secret.
    type: path
    default: /var/lib/dspark/engine-label.key
attributes:
  check_mode:
    support: full
    details: A missing secret is not made; the label is then C(hmac-sha256:pending), which matches no engine, so
      the plan reports that the engine would change.
  diff_mode:
    support: none
    details: The secret is never shown.
  idempotent:
    support: full
    details: The secret is made once; the label is the same for the same key.
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: This rank's API-key label
  gb10.dspark.engine_key_label:
    api_key: "{{ dspark_api_key }}"
  register: key_label

- name: Label the engine with it
  ansible.builtin.debug:
    msg: "{{ {'pair': 'lab01'} | combine({'io.gb10.dspark.api_key': key_label.label}) }}"
"""

RETURN = r"""
changed:
  description: Whether the rank's secret was made by this run, or (check mode) would be.
  returned: always
  type: bool
label:
  description: The label value - C(none), C(hmac-sha256:) and 32 hex digits, or C(hmac-sha256:pending) in
    check mode before the rank has a secret.
  returned: success
  type: str
  sample: hmac-sha256:5e0c1f0f3a2b4c6d8e9f00112233aabb
secret_created:
  description: Whether this run made the rank's secret (then C(changed)).
  returned: success
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _labels


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "api_key": {"type": "str", "no_log": True},
            "secret_file": {"type": "path", "default": "/var/lib/dspark/engine-label.key"},
        },
        supports_check_mode=True,
    )
    api_key = module.params["api_key"]
    if not api_key:
        module.exit_json(changed=False, label=_labels.NO_API_KEY, secret_created=False)
    try:
        secret, created = _labels.label_secret(module.params["secret_file"], create=not module.check_mode)
    except _labels.LabelSecretError as exc:
        module.fail_json(msg=f"the engine's label secret: {exc}")
    label = _labels.api_key_label(api_key, secret)
    module.exit_json(changed=created or secret is None, label=label, secret_created=created)


if __name__ == "__main__":
    main()
