#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: archive_relay
short_description: Serve the image archive from a pair's head to its worker over the pair's own link
version_added: 0.2.0
description:
  - Runs on the head (rank 0) as an asynchronous task (C(async), C(poll=0)) while the worker fetches the
    archive with M(ansible.builtin.get_url) and the pin's sha256; the control node then sends a pair the
    archive once, to its head, and the pair's own link carries the second copy.
  - Serves exactly one file, at C(http://<bind>:<port>/<token>/<file name>), over plain HTTP with its length;
    any other path gets 404 and is not counted. Nothing is trusted on the strength of the transfer - the
    worker checks the sha256 as it receives and the image ID before it loads.
  - Listens on I(bind) only, which must be an IP address; a wildcard address (C(0.0.0.0), C(::), empty) is
    refused before anything listens.
  - Each connection is handled on its own, so no client can hold the relay - a connection that sends no
    request within I(connection_timeout) seconds, or whose reader takes nothing for that long mid-transfer,
    is dropped; at most 32 connections are open at once, more are closed at once.
  - Stops after I(transfers) whole transfers, after I(idle_timeout) seconds in which no request came and no
    byte was sent, when a C(POST) of its own URL asks it to (the run does once the worker's fetch is done or
    has failed), or after I(timeout) seconds - also in the middle of a transfer - and reports which; the task
    fails unless every transfer was made. When it stops, every connection is shut and the port is free.
  - Changes nothing on the head. In check mode nothing is served.
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  path:
    description: The archive on the head.
    type: path
    required: true
  bind:
    description: The address to listen on - the head's address on the pair's fabric link, never a public one.
    type: str
    required: true
  port:
    description: The TCP port to listen on.
    type: int
    default: 25101
  token:
    description:
      - The first path segment of the URL, random per run, so that only the run's own worker asks for the file.
      - One path segment - no C(/).
    type: str
    required: true
  transfers:
    description: Whole transfers to make before stopping (one per worker).
    type: int
    default: 1
  idle_timeout:
    description:
      - Seconds without any request or byte sent after which the relay stops (the worker's fetch failed or never
        came).
    type: int
    default: 120
  connection_timeout:
    description:
      - Seconds one connection may send no request, or its reader take no byte mid-transfer, before the relay
        drops it.
    type: int
    default: 30
  timeout:
    description: Seconds after which the relay stops in any case; give the task an C(async) larger than this.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    details: Serves nothing and reports no change.
  diff_mode:
    support: none
    details: Changes nothing on the head.
  idempotent:
    support: full
    details: Changes nothing on the head.
seealso:
  - module: gb10.dspark.image_identity
  - module: ansible.builtin.get_url
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Serve the archive to the worker (head)
  gb10.dspark.archive_relay:
    path: /var/lib/dspark/images/dspark-v026-native-v11.tar
    bind: "{{ dspark_pair_head_fabric_ip }}"
    token: "{{ __dspark_image_relay_token }}"
  async: 3700
  poll: 0
  register: __dspark_image_relay_job
  when: dspark_rank == 0

- name: Fetch it from the head over the pair's link (worker)
  ansible.builtin.get_url:
    url: "http://{{ dspark_pair_head_fabric_ip }}:25101/{{ __dspark_image_relay_token }}/dspark-v026-native-v11.tar"
    dest: /var/lib/dspark/images/dspark-v026-native-v11.tar
    checksum: "sha256:{{ dspark_pin.image_archive_sha256 }}"
    mode: "0640"
  when: dspark_rank == 1
"""

RETURN = r"""
changed:
  description: Always false - serving a copy of a file changes nothing on the rank.
  returned: always
  type: bool
  sample: false
relay:
  description: What the relay did.
  returned: success or failure, outside check mode
  type: dict
  contains:
    reason:
      description: Why it stopped - C(transfers) (all made), C(idle), C(stopped) (asked to) or C(deadline).
      type: str
      sample: transfers
    transfers:
      description: Whole transfers made.
      type: int
      sample: 1
    requests:
      description: Requests answered, refused ones included.
      type: int
      sample: 1
    refused:
      description: Requests for another path (404).
      type: int
      sample: 0
    bytes_sent:
      description: Bytes of the archive sent, partial transfers included.
      type: int
      sample: 30064771072
    unanswered:
      description: Connections closed without a request (port probes, idle or garbled clients).
      type: int
      sample: 1
    cut:
      description: Transfers cut short (a stalled or vanished reader, the deadline, or the relay stopping).
      type: int
      sample: 0
    turned_away:
      description: Connections closed at once because 32 were open already.
      type: int
      sample: 0
    seconds:
      description: How long the relay ran.
      type: float
      sample: 151.2
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.identity._archive_relay import Relay, RelayError


WHY = {"transfers": "all transfers made", "idle": "idle: no request and no byte sent in idle_timeout",
       "stopped": "asked to stop: the worker's fetch ended", "deadline": "timeout reached"}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "bind": {"type": "str", "required": True},
            "port": {"type": "int", "default": 25101},
            "token": {"type": "str", "required": True, "no_log": False},
            "transfers": {"type": "int", "default": 1},
            "idle_timeout": {"type": "int", "default": 120},
            "connection_timeout": {"type": "int", "default": 30},
            "timeout": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, msg="check mode: nothing served")
    try:
        server = Relay(p["path"], p["bind"], p["port"], p["token"], connection_timeout=p["connection_timeout"])
    except (RelayError, ValueError) as exc:
        module.fail_json(msg=f"relay on {p['bind']}:{p['port']}: {exc}")
    relay = server.run(transfers=p["transfers"], idle_timeout=p["idle_timeout"], deadline=p["timeout"])
    if relay["transfers"] < p["transfers"]:
        module.fail_json(msg=(f"relay on {p['bind']}:{p['port']} stopped ({WHY[relay['reason']]}) after "
                              f"{relay['transfers']} of {p['transfers']} whole transfer(s), {relay['bytes_sent']} bytes sent"),
                         relay=relay)
    module.exit_json(changed=False, relay=relay)


if __name__ == "__main__":
    main()
