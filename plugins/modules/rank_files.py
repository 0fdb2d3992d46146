#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: rank_files
short_description: The collection's own folders and small files on a rank, in one call
version_added: 0.1.0
description:
  - Makes each folder of O(directories), then writes each file of O(files), owned by root, with the given
    modes; only what differs is changed, so a converged rank reports no change.
  - Used by the profile role (the profile folder, the engine's environment file, the compilation config)
    and the engine role (the runtime manifest, the cache folders), one task each. The evidence role
    reads the rendered profiles back with M(gb10.dspark.engine_probe)'s O(gb10.dspark.engine_probe#module:read),
    in the same call as the engine's container.
  - A file is written to a temporary file in its folder and renamed over the old one.
  - A symbolic link where a folder or file belongs is refused, never followed; so is a relative path,
    a file whose folder is absent and not listed, and a bad mode. Every entry is checked before
    anything is written.
  - The content of a file marked O(files[].secret) is never in the diff or a message; the task
    that passes it should also set C(no_log), since the content is one of its arguments.
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  directories:
    description: Folders to keep, made with their parents if absent.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      mode:
        description: Octal mode, as a string.
        type: str
        default: "0755"
  files:
    description: Files to keep, each with its whole content.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path; its folder exists or is listed in O(directories).
        type: path
        required: true
      content:
        description: The file's text (written as UTF-8).
        type: str
        required: true
      mode:
        description: Octal mode, as a string.
        type: str
        default: "0644"
      secret:
        description: The content holds secrets; it is never shown in the diff.
        type: bool
        default: false
attributes:
  check_mode:
    support: full
    details: Reports what would change; writes nothing.
  diff_mode:
    support: full
    details: Before and after of each changed folder (state, mode) and file (content; a secret file's is not shown).
  idempotent:
    support: full
    details: A second run with the same arguments changes nothing.
seealso:
  - module: ansible.builtin.copy
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Profile | The profile folder, the engine's environment file and the compilation config
  gb10.dspark.rank_files:
    directories:
      - {path: /etc/dspark/profile, mode: "0755"}
    files:
      - {path: /etc/dspark/profile/engine.env, content: "VLLM_USE_V1=1\n", mode: "0600", secret: true}
      - {path: /etc/dspark/profile/compilation-config.json, content: "{}\n", mode: "0644"}
  no_log: true  # the environment file's content may hold secret-named values
"""

RETURN = r"""
changed:
  description: Whether a folder or file was (or would be) made or changed.
  returned: always
  type: bool
changes:
  description: What was (or would be) changed, one line per folder or file.
  returned: always
  type: list
  elements: str
  sample: ["file /etc/dspark/profile/engine.env: content"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.engine._rank_files import RankFilesError, ensure


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "mode": {"type": "str", "default": "0755"},
            }},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "content": {"type": "str", "required": True},
                "mode": {"type": "str", "default": "0644"},
                "secret": {"type": "bool", "default": False},
            }},
        },
        supports_check_mode=True,
    )
    try:
        outcome = ensure(module.params["directories"], module.params["files"], module.check_mode)
    except (RankFilesError, OSError) as exc:
        module.fail_json(msg=str(exc), changes=[])
    result = {"changed": outcome.changed, "changes": outcome.changes}
    if module._diff and outcome.diff:
        result["diff"] = outcome.diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
