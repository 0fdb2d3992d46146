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
    and the engine role (the runtime manifest, the cache folders), one task each; the evidence role
    reads the rendered profiles back with O(read).
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
  read:
    description:
      - Folders whose files to return in RV(read) (regular files directly in the folder whose names
        match a pattern; links and subfolders are not read; an absent folder gives none). Reading
        changes nothing. A file over 1 MiB is refused.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the folder.
        type: path
        required: true
      patterns:
        description: Shell patterns matched against the file names.
        type: list
        elements: str
        default: ["*"]
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
- name: Evidence | Read this rank's rendered profiles
  gb10.dspark.rank_files:
    read:
      - {path: /etc/dspark/profiles, patterns: ["*.env", "*.json"]}
  register: profiles
  no_log: true  # an operator's extra env could hold a token

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
  description: Whether a folder or file was (or would be) made or changed; reading never changes anything.
  returned: always
  type: bool
read:
  description: The files of O(read), sorted by path, each with its C(path) and base64 C(content).
  returned: always
  type: list
  elements: dict
  sample: [{path: /etc/dspark/profiles/production.env, content: VkxMTV9VU0VfVjE9MQo=}]
changes:
  description: What was (or would be) changed, one line per folder or file.
  returned: always
  type: list
  elements: str
  sample: ["file /etc/dspark/profile/engine.env: content"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.engine._rank_files import RankFilesError, ensure, read_files


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
            "read": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "patterns": {"type": "list", "elements": "str", "default": ["*"]},
            }},
        },
        supports_check_mode=True,
    )
    try:
        outcome = ensure(module.params["directories"], module.params["files"], module.check_mode)
        read = read_files(module.params["read"])
    except (RankFilesError, OSError) as exc:
        module.fail_json(msg=str(exc), changes=[], read=[])
    result = {"changed": outcome.changed, "changes": outcome.changes, "read": read}
    if module._diff and outcome.diff:
        result["diff"] = outcome.diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
