#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: release_record
short_description: The release a pair's rank runs and the one before it
version_added: 0.1.0
description:
  - Keeps, on a rank, the record of the release its pair serves (C(current)) and the one it served before
    (C(previous)), each with its whole pin, its profile and since when; and the older releases (C(retired)),
    whose images may be removed (O(keep_releases)).
  - A release is a whole C(dspark_pin); two pins are one release when they are equal.
  - With O(state=present) (the converge role, once the pair's gate passed) the same pin again changes nothing (a
    new profile is written in place); the previous release's pin swaps current and previous (a release
    rollback); another pin becomes current and the old current becomes previous.
  - With O(state=read) it changes nothing; O(require_previous) fails a rank without a previous release and
    O(expect) fails a rank whose current or previous release differs from its pair's other rank's record. Each
    message names the rank, the expected and the actual release.
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  rank:
    description: The rank's name, for messages (C(inventory_hostname)).
    type: str
    default: this rank
  path:
    description: The record on the rank.
    type: path
    default: /var/lib/dspark/release.json
  state:
    description:
      - C(present) - the record says O(pin) with O(profile) is current.
      - C(read) - the record is read and checked, never written.
    type: str
    choices: [present, read]
    default: present
  pin:
    description: The pin the pair now serves (C(dspark_pin)); required with O(state=present).
    type: dict
  profile:
    description: The profile the pair now serves; required with O(state=present).
    type: str
  keep_releases:
    description:
      - How many releases' images the rank keeps. C(0) keeps every image (nothing is pruned). C(2) or more keeps
        the current, the previous and the newest retired ones; the retired releases beyond are dropped from the
        record and returned in RV(prune) for the caller to remove. C(1) is refused (the previous release's image
        always stays).
    type: int
    default: 0
  require_previous:
    description: With O(state=read), fail when the rank has no record or no previous release.
    type: bool
    default: false
  expect:
    description:
      - With O(state=read), the record of the pair's other rank (its RV(record)); fail when this rank's current or
        previous release differs from it.
    type: dict
  expect_from:
    description: The rank O(expect) was read from, for the message.
    type: str
    default: the pair's other rank
attributes:
  check_mode:
    support: full
    details: Says what it would write (RV(record), RV(changed), RV(prune)) and writes nothing.
  diff_mode:
    support: full
    details: The record's current and previous release names and profiles, before and after.
  idempotent:
    support: full
    details: The same pin and profile again change nothing.
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: The pair now serves this release (after its gate passed)
  gb10.dspark.release_record:
    rank: "{{ inventory_hostname }}"
    pin: "{{ dspark_pin }}"
    profile: production
  register: release

- name: The rank has a previous release to go back to
  gb10.dspark.release_record:
    rank: "{{ inventory_hostname }}"
    state: read
    require_previous: true
  register: release
"""

RETURN = r"""
changed:
  description: Whether the record was (or, in check mode, would be) written.
  returned: always
  type: bool
record:
  description: The record after this task (null when a read finds none); C(schema), C(current), C(previous), C(retired).
  returned: success
  type: dict
current:
  description: The current release's entry (C(release), C(pin), C(profile), C(since)).
  returned: when the rank has a record
  type: dict
previous:
  description: The previous release's entry, or null.
  returned: when the rank has a record
  type: dict
prune:
  description: The retired releases' entries whose images go, by O(keep_releases) (never current's or previous's image).
  returned: success
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.common._clock import utc_now
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import write_json_atomic
from ansible_collections.gb10.dspark.plugins.module_utils.identity import _release


def _summary(record: dict | None) -> str:
    if not record:
        return "no record\n"
    return "".join(f"{k}: {_release.shown(record[k])}, profile {record[k]['profile']}\n" if record.get(k)
                   else f"{k}: none\n" for k in ("current", "previous"))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rank": {"type": "str", "default": "this rank"},
            "path": {"type": "path", "default": _release.DEFAULT_PATH},
            "state": {"type": "str", "choices": ["present", "read"], "default": "present"},
            "pin": {"type": "dict"},
            "profile": {"type": "str"},
            "keep_releases": {"type": "int", "default": 0},
            "require_previous": {"type": "bool", "default": False},
            "expect": {"type": "dict"},
            "expect_from": {"type": "str", "default": "the pair's other rank"},
        },
        required_if=[("state", "present", ("pin", "profile"))],
        supports_check_mode=True,
    )
    p = module.params
    rank = p["rank"]
    try:
        before = _release.load(p["path"])
        if p["state"] == "read":
            problem = (_release.rollback_problem(rank, before, p["path"]) if p["require_previous"] else None) or (
                _release.disagreement(rank, before, p["expect"], p["expect_from"]) if p["expect"] is not None else None)
            if problem:
                module.fail_json(msg=problem, record=before)
            result = {"changed": False, "record": before, "prune": []}
            if before:
                result.update(current=before["current"], previous=before.get("previous"))
            module.exit_json(**result)
        after = _release.advance(before, p["pin"], p["profile"], utc_now())
        after, prune = _release.prune(after, p["keep_releases"])
    except _release.ReleaseRecordError as exc:
        module.fail_json(msg=str(exc))
    changed = after != before
    if changed and not module.check_mode:
        try:
            write_json_atomic(p["path"], after, mode=0o644, make_dirs=True)
        except OSError as exc:
            module.fail_json(msg=f"{p['path']}: cannot be written ({exc.strerror})")
    result = {"changed": changed, "record": after, "current": after["current"], "previous": after.get("previous"),
              "prune": prune}
    if module._diff:
        result["diff"] = {"before": _summary(before), "after": _summary(after),
                          "before_header": p["path"], "after_header": p["path"]}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
