#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: niah_wait
short_description: Wait for a NIAH run on a head to finish, printing its progress
version_added: 0.1.0
description:
  - An action plugin, run on the head. Every I(interval) seconds it reads the run's status with
    M(gb10.dspark.niah) (C(state=status)) and, when I(jid) is given, the async job's state, and
    prints a progress line when the depth changes or every I(progress_every) seconds.
  - The run is an async job on the head, so it outlives an interrupted control node. Without I(jid)
    the wait attaches to whatever run holds the lock in I(output_dir), so a second playbook run
    waits for a healthy long run instead of restarting it.
  - Returns the run's summary when it ends; fails when the job failed, when it ended without a
    summary, or when I(budget) runs out (the run keeps going on the head).
extends_documentation_fragment:
  - gb10.dspark._attributes.wait
options:
  output_dir:
    description: The run's folder on the head (rows, progress, summary).
    type: path
    required: true
  jid:
    description: The async job ID of the run this play started, if it started one.
    type: str
  budget:
    description: Seconds to wait in all.
    type: float
    default: 86400
  interval:
    description: Seconds between status reads.
    type: float
    default: 30
  progress_every:
    description: Seconds between progress lines when nothing changes.
    type: float
    default: 300
  progress_results:
    description:
      - "Hand each progress line to the C(gb10.dspark.progress) callback in the task's results instead of
        printing it. The wait returns at each line with C(waiting=true) and the line in C(dspark_progress),
        and the task's C(until) runs it again, going on where it stopped; each line then is a
        C(v2_runner_retry) event, which every callback sees and AWX records as a job event."
      - "Needs C(until) on the task (for example C(until: not (result.waiting | default(false)))), C(delay: 0)
        and at least I(budget) / I(interval) + 3 C(retries)."
      - Without it the wait prints its progress lines itself.
    type: bool
    default: false
seealso:
  - module: gb10.dspark.niah
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Start the NIAH ladder as an async job on the head
  gb10.dspark.niah:
    model: deepseek-v4-flash-dspark
    output_dir: /var/lib/dspark/niah/long-1m-0123456789ab
    run_key: long-1m-0123456789ab
  async: 172800
  poll: 0
  register: __dspark_niah_job

- name: Wait for it, with progress
  gb10.dspark.niah_wait:
    output_dir: /var/lib/dspark/niah/long-1m-0123456789ab
    jid: "{{ __dspark_niah_job.ansible_job_id }}"
  register: __dspark_niah_done

- name: Show the verdict
  ansible.builtin.debug:
    msg: "{{ __dspark_niah_done.summary.status }}"
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
summary:
  description: The run's summary (niah.json), see M(gb10.dspark.niah).
  returned: success
  type: dict
elapsed_s:
  description: Seconds waited.
  returned: success, and on a progress line with progress_results
  type: float
waiting:
  description: True on a progress line with I(progress_results); the wait goes on at the task's next retry.
  returned: with progress_results, on a progress line
  type: bool
dspark_progress:
  description: The progress line, for the C(gb10.dspark.progress) callback.
  returned: with progress_results, on a progress line
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.serving._niah import WAIT_ARGUMENT_SPEC


def main() -> None:
    module = AnsibleModule(argument_spec=WAIT_ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="gb10.dspark.niah_wait runs through its action plugin; it cannot run as a plain module")


if __name__ == "__main__":
    main()
