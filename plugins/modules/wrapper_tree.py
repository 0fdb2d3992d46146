#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: wrapper_tree
short_description: Prove the checkout a deployment runs from is a clean tree at a known revision
version_added: 0.1.0
description:
  - "Runs on the control node (C(delegate_to: localhost), C(run_once: true)). Checks the collection or
    playbook tree at O(path) the way the original wrapper's release checks did, refusing a dirty tree
    unless O(allow_dirty) is set."
  - "For a git checkout: the revision is C(git rev-parse HEAD); the tree is clean when
    C(git status --porcelain=v1 -z --untracked-files=all) lists nothing. Untracked files count unless
    O(ignore_untracked); gitignored files never count. Renames and copies are listed as C(R old -> new)."
  - "Git runs with C(GIT_OPTIONAL_LOCKS=0), so the check never rewrites the index, even in a checkout
    others share; variables that would point git at another repository (C(GIT_DIR), C(GIT_WORK_TREE), ...)
    are dropped first."
  - "For an installed collection (no C(.git), but the C(MANIFEST.json) and C(FILES.json) that
    C(ansible-galaxy collection install) leaves): every file C(FILES.json) lists must exist with its sha256,
    C(FILES.json) must match the checksum C(MANIFEST.json) records for it, and files it does not list count
    as untracked (except C(__pycache__) and C(*.pyc)). The revision is C(<namespace>.<name>:<version>)."
  - A tree that is neither is unverifiable and fails, unless O(allow_dirty) is set.
  - Every fault is reported in one run, each as C(<what> is <actual>, expected <expected>).
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  path:
    description: The collection or playbook tree the deployment runs from.
    type: path
    required: true
  expected_revision:
    description:
      - The revision the tree must be at. A revision mismatch always fails, whatever O(allow_dirty) says.
      - For a git checkout, a full commit sha (40 hex digits, 64 in a sha256 repository), or a tag or branch
        name, resolved with C(git rev-parse --verify <ref>^{commit}) in the checkout itself.
      - For an installed collection, C(<namespace>.<name>:<version>), for example C(gb10.dspark:0.1.0).
    type: str
  allow_dirty:
    description:
      - Accept a dirty (or unverifiable) tree. The run then succeeds, but RV(tree.publishable) is C(false),
        RV(tree.publication_blockers) says why, and a warning says the run is not valid for publication.
    type: bool
    default: false
  ignore_untracked:
    description:
      - Do not count untracked files (git) or files C(FILES.json) does not list (installed collection).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: The module only reads; check mode runs the same checks and returns the same result.
  diff_mode:
    support: none
    details: Nothing is changed, so there is nothing to show as a diff.
  idempotent:
    support: full
    details: Read-only; always reports C(changed=false).
notes:
  - "Failures read like \"wrapper tree /work/main is dirty (3 paths: M plugins/x.py, ?? notes.txt, R a.py -> b.py),
    expected clean\" or \"wrapper tree /work/main: revision is 4d9a358..., expected v0.1.0 (6f0010b...)\".
    At most 20 paths are named in the message, 200 in RV(tree.dirty_paths)."
  - Git must be installed on the control node to check a git checkout. A checkout owned by another user may
    be refused by git (C(safe.directory)); the module reports git's complaint rather than overriding it.
seealso:
  - module: ansible.builtin.git
    description: Clones and updates checkouts; this module only verifies one.
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: The collection checkout is clean and at the released tag
  gb10.dspark.wrapper_tree:
    path: "{{ playbook_dir }}/.."
    expected_revision: v0.1.0
  delegate_to: localhost
  run_once: true
  register: __dspark_tree

- name: Record the revision the deployment ran from
  ansible.builtin.debug:
    msg: "deployed from {{ __dspark_tree.tree.revision }} ({{ __dspark_tree.tree.describe }})"
  run_once: true

- name: A rehearsal from a work in progress is allowed, but marked as not publishable
  gb10.dspark.wrapper_tree:
    path: /work/main
    allow_dirty: true
  delegate_to: localhost
  run_once: true
  register: __dspark_tree_wip

- name: Refuse to write evidence for publication from such a run
  ansible.builtin.assert:
    that: __dspark_tree_wip.tree.publishable
    fail_msg: "not publishable: {{ __dspark_tree_wip.tree.publication_blockers | join('; ') }}"
  run_once: true

- name: An installed collection matches its FILES.json and is the expected version
  gb10.dspark.wrapper_tree:
    path: ~/.ansible/collections/ansible_collections/gb10/dspark
    expected_revision: gb10.dspark:0.1.0
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
changed:
  description: Always false; the module only reads.
  returned: always
  type: bool
  sample: false
tree:
  description: What was found at O(path).
  returned: success, and on failure once the tree could be inspected
  type: dict
  contains:
    path:
      description: The path that was checked, as given.
      type: str
      returned: always
      sample: /work/main
    kind:
      description: C(git), C(installed_collection) or C(unknown) (unverifiable).
      type: str
      returned: always
      sample: git
    revision:
      description:
        - For git, the full sha of C(HEAD); for an installed collection, C(<namespace>.<name>:<version>);
          null when unknown.
      type: str
      returned: always
      sample: 4d9a358e0f2b6f1d6f4a4c8f1bb1b1e7c1a2d3e4
    describe:
      description:
        - C(git describe --always --tags), with C(-dirty) appended when the tree is dirty; null when git
          cannot describe HEAD.
      type: str
      returned: when RV(tree.kind) is C(git)
      sample: v0.1.0-3-g4d9a358-dirty
    dirty:
      description: Whether the tree differs from its revision (true for an unverifiable tree).
      type: bool
      returned: always
      sample: false
    dirty_paths:
      description:
        - What differs, one C(<status> <path>) string per path (git porcelain codes; for an installed
          collection C(M) modified, C(D) missing, C(T) wrong type, C(??) not listed). At most 200.
      type: list
      elements: str
      returned: always
      sample: ["M plugins/x.py", "?? notes.txt", "R old.py -> new.py"]
    dirty_count:
      description: How many paths differ in all (may exceed the length of RV(tree.dirty_paths)).
      type: int
      returned: always
      sample: 3
    allowed_dirty:
      description: The value of O(allow_dirty).
      type: bool
      returned: always
      sample: false
    publishable:
      description: Whether a run from this tree is valid for publication (clean, verifiable, revision as expected).
      type: bool
      returned: always
      sample: true
    publication_blockers:
      description: Why the run is not publishable, when it is not.
      type: list
      elements: str
      returned: always
      sample: ["tree dirty: 3 paths, allowed by allow_dirty"]
mismatches:
  description: On failure, every fault found, each with rank (C(control node)), item, expected, actual and message.
  returned: failure
  type: list
  elements: dict
  sample:
    - rank: control node
      item: revision
      expected: v0.1.0 (6f0010b7d2c4a1e9f8b3c5d7e9f1a3b5c7d9e1f3)
      actual: 4d9a358e0f2b6f1d6f4a4c8f1bb1b1e7c1a2d3e4
      reason: ""
      expected_word: expected
      tree: /work/main
      message: "wrapper tree /work/main: revision is 4d9a358e0f2b6f1d6f4a4c8f1bb1b1e7c1a2d3e4, expected v0.1.0 (6f0010b7d2c4a1e9f8b3c5d7e9f1a3b5c7d9e1f3)"
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import end
from ansible_collections.gb10.dspark.plugins.module_utils.identity._wrapper_tree import (
    ARGUMENT_SPEC,
    check,
    clean_git_environment,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    clean_git_environment(os.environ)

    def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        return module.run_command(argv, environ_update=env)

    end(module, check(module.params, run, module.get_bin_path("git")))


if __name__ == "__main__":
    main()
