#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: pair_lock
short_description: Take or release a pair's lock on its head, so that two runs cannot work on one pair at once
version_added: 0.1.0
description:
  - An action plugin with a module, run on the head (rank 0). The lock is a JSON file on the head naming the
    run that holds it - I(run_id), the control host, the C(ansible-playbook) process and its start time, the
    playbook, the user and when it was taken.
  - C(state=present) takes the lock when it is free. It is taken atomically - the record is written to a temp
    file beside the lock and hard-linked to I(path), which fails when the lock exists - so of two runs
    starting at once exactly one gets it. Taking it again with the same I(run_id) changes nothing, so one
    run may take it more than once.
  - When another run holds the lock the task fails, naming the holder, and changes nothing. A holder taken
    from this control host whose C(ansible-playbook) process is gone, or whose process ID now belongs to a
    process started at another time, is reported as stale; with I(break_stale=true) the stale lock is taken
    over (replaced in one rename) and the task warns, naming the broken holder. A holder taken from another
    control host is never called stale - its process cannot be checked from here.
  - C(state=absent) releases the lock only when this run holds it; a lock held by another run is left alone,
    so a run that was refused the lock cannot free it.
  - A lock file that is not a dspark lock (unreadable, not JSON, no C(run_id)) fails the task; remove it by
    hand after checking that no run is active.
  - The lock folder is trusted only when another local user cannot hold, replace or empty it (see I(path)),
    and its C(flock) is waited for at most I(wait) seconds, so a local user can neither block the task for
    ever nor let two runs hold one pair's lock. Its default place, C(/run/dspark), only root can create, so
    no local user can make the folder first and block every run.
  - Before taking the lock, the place earlier versions used (I(legacy_path)) is read, never changed; a lock
    there held by another run (a run of the previous version still going) is judged like a lock at I(path) -
    a live or foreign holder fails the task, naming it and the old path; a stale one is passed with a
    warning. An old folder that no version would have used (owned by another user, writable by others, a
    symlink) holds no run's lock and is ignored with a warning saying how to remove it.
extends_documentation_fragment:
  - gb10.dspark._attributes
  - gb10.dspark._attributes.action
options:
  pair:
    description:
      - The pair's name, recorded in the lock and named in messages.
      - 1 to 64 letters, digits, C(.), C(_) or C(-), starting with a letter or digit; anything else
        (a C(/), a leading C(.)) fails the task before the head is touched.
    type: str
    required: true
  state:
    description: C(present) takes the lock, C(absent) releases it.
    type: str
    default: present
    choices: [present, absent]
  path:
    description:
      - The lock file on the head; the file has mode 0644.
      - Its folder (the lock folder) and missing parent folders are created with mode 0700, owned by the
        module's user. Before use the lock folder is checked without following a symlink - it must be a
        directory (not a symlink) owned by the module's effective user and not writable by group or
        others (a root-owned 0755 folder from earlier versions is fine); otherwise the task fails, naming
        the owner and mode found, and changes nothing. Remove such a folder by hand.
    type: path
    default: /run/dspark/lock/pair.lock
  legacy_path:
    description:
      - Where earlier versions kept the lock (C(/run/lock/dspark/pair.lock)), read before the lock is taken
        so that a run of the previous version still going keeps the pair. Read only - nothing is created,
        flocked or changed there. An empty string skips the check.
    type: path
    default: /run/lock/dspark/pair.lock
  run_id:
    description:
      - One ID per run of a playbook, the same for every pair the run works on. The lock belongs to it.
      - 1 to 64 letters, digits, C(.), C(_) or C(-), starting with a letter or digit; anything else
        (a C(/), a leading C(.)) fails the task before the head is touched.
    type: str
    required: true
  wait:
    description:
      - Seconds to wait for the lock folder's C(flock), which every change holds for a few system calls.
      - The flock is polled, never waited on blindly; when another process still holds it after I(wait)
        seconds the task fails, naming the folder, and changes nothing. C(0) tries once.
    type: int
    default: 30
  playbook:
    description: The playbook or play taking the lock, recorded for messages.
    type: str
  break_stale:
    description:
      - Take over a lock whose run is no longer running on this control host (see above), with a warning.
      - Read by the action plugin; without it a stale lock fails the task.
    type: bool
    default: false
  owner:
    description:
      - Internal - filled in by the action plugin on the controller; a task cannot set it.
      - Who takes the lock. I(run_id) defaults to the task's I(run_id) and must equal it; I(playbook)
        defaults to the task's I(playbook).
    type: dict
    suboptions:
      run_id:
        description: The run.
        type: str
      control_host:
        description: The control host's name.
        type: str
      control_pid:
        description: The process ID of the run's C(ansible-playbook) process.
        type: int
      control_pid_start:
        description: That process's start time in clock ticks after boot (field 22 of C(/proc/<pid>/stat)).
        type: int
      playbook:
        description: The playbook.
        type: str
      user:
        description: The user running the playbook.
        type: str
  takeover_run_id:
    description:
      - Internal - set by the action plugin when it breaks a stale lock; a task cannot set it.
      - Replace the lock only when the run holding it is this one; otherwise fail naming the holder.
    type: str
  legacy_stale_run_id:
    description:
      - Internal - set by the action plugin when the lock at I(legacy_path) is held by a run it judged stale;
        a task cannot set it.
      - Take the lock at I(path) although the old location names this run.
    type: str
attributes:
  check_mode:
    support: full
    details: Reports whether the lock would be taken, taken over or released; changes nothing.
  diff_mode:
    support: full
    details: The lock's holder (its run ID, or C(free)) before and after.
  idempotent:
    support: full
    details: Taking a lock this run holds, or releasing a free one, changes nothing.
  action:
    support: full
    details: An action plugin - runs on the controller, which adds the owner and judges a held lock's holder.
notes:
  - The holder's process is the C(ansible-playbook) process of its run on the control host, so a run killed on
    the control host leaves a lock that the next run from that host recognises as stale.
seealso:
  - module: gb10.dspark.pair_ready
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: One ID for this run
  ansible.builtin.set_fact:
    __dspark_lock_run_id: "{{ now(utc=true, fmt='%Y%m%dT%H%M%SZ') }}-{{ 4294967295 | random }}"
  run_once: true

- name: Take the pair's lock on its head
  gb10.dspark.pair_lock:
    pair: "{{ dspark_pair }}"
    run_id: "{{ __dspark_lock_run_id }}"
    playbook: "{{ ansible_play_name }}"
    break_stale: "{{ dspark_lock_break_stale | default(false) }}"
    wait: 30
  when: dspark_rank == 0

- name: Release it (from an always section)
  gb10.dspark.pair_lock:
    pair: "{{ dspark_pair }}"
    run_id: "{{ __dspark_lock_run_id }}"
    state: absent
  when: dspark_rank == 0
"""

RETURN = r"""
changed:
  description: Whether the lock was taken, taken over or released.
  returned: always
  type: bool
acquired:
  description: Whether this run holds the lock now (C(state=present)).
  returned: always
  type: bool
released:
  description: Whether this run released the lock (C(state=absent)).
  returned: always
  type: bool
holder:
  description:
    - The lock's record - this run's after taking it, the other run's when it is held by another run,
      null when the lock is free.
  returned: always
  type: dict
  sample:
    pair: spark-a
    run_id: 20260102T030405Z-1234567
    control_host: ctl
    control_pid: 4711
    control_pid_start: 123456
    playbook: provision
    user: ops
    acquired: "2026-01-02T03:04:05Z"
path:
  description: The lock file.
  returned: always
  type: str
broke_stale:
  description: The stale holder's record, when I(break_stale) took its lock over.
  returned: when a stale lock was taken over
  type: dict
legacy_path:
  description: The old lock location that was read (null when none was).
  returned: C(state=present)
  type: str
legacy_holder:
  description: The record of a lock at I(legacy_path) held by another run (null when there is none).
  returned: C(state=present)
  type: dict
legacy_note:
  description: Why the folder at I(legacy_path) was ignored (squatted, foreign, unreadable), else null.
  returned: C(state=present)
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair_lock import ARGUMENT_SPEC, LockFailure, run


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run(module.params, check_mode=module.check_mode, diff=module._diff)
    except LockFailure as exc:
        module.fail_json(msg=exc.msg, holder=exc.holder, path=module.params["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
