"""How each rank of a pair gets the image archive (roles/image/vars/main.yml), rendered with
Ansible's own templar from the role's vars and defaults: with relay staging the source sends a pair
one copy at most, to its head, and a worker takes it from its head; nothing is sent to a rank that
holds the image, a worker that already holds the pinned archive, or a rank where it is staged."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit.plugins._templar import render

ROLE = Path(__file__).resolve().parents[3] / "roles" / "image"
SHA = "ab" * 32
HEAD, WORKER = "spark-a", "spark-b"


def plan(head_needs: bool, worker_needs: bool, *, staging: str = "relay", worker_held: str = "",
         staged: frozenset = frozenset(), members: tuple = (HEAD, WORKER)) -> dict:
    """{host: how it gets the archive}, rendered in the order the role's two set_fact tasks run."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    needs = {HEAD: head_needs, WORKER: worker_needs}
    hosts = {h: {"dspark_rank": i, "dspark_image_archive_staged": h in staged,
                 "__dspark_image_probe": {"needs_archive": needs[h]},
                 "__dspark_image_held": {"stat": {"checksum": worker_held}} if i == 1 and worker_held else {}}
             for i, h in enumerate(members)}

    def variables(host: str, hostvars: dict) -> dict:
        return {**defaults, **role_vars, "dspark_image_archive": "/srv/release/dspark-v026.tar",
                "dspark_image_staging": staging, "dspark_pin": {"image_archive_sha256": SHA},
                "dspark_pair_members": list(members), "hostvars": hostvars, **hosts[host]}

    wanted = render([(variables(h, {}), "{{ __dspark_image_wants_relay }}") for h in members])
    for h, w in zip(members, wanted):  # the first set_fact: each host's own fact, seen by the others too
        hosts[h]["__dspark_image_relay_wanted"] = w
    hostvars = {h: dict(hosts[h]) for h in members}
    got = render([(variables(h, hostvars), "{{ __dspark_image_receive_plan }}") for h in members])
    return dict(zip(members, (g.strip() for g in got)))


def test_a_new_pair_takes_one_copy_at_its_head_and_the_worker_takes_it_from_there():
    assert plan(True, True) == {HEAD: "source", WORKER: "head"}


def test_a_head_holding_the_image_still_takes_the_copy_its_worker_needs():
    assert plan(False, True) == {HEAD: "source", WORKER: "head"}


def test_only_the_head_lacking_the_image_takes_it_from_the_source():
    assert plan(True, False) == {HEAD: "source", WORKER: "none"}


def test_a_converged_pair_receives_nothing():
    assert plan(False, False) == {HEAD: "none", WORKER: "none"}


def test_a_worker_already_holding_the_pinned_archive_is_not_relayed_to():
    assert plan(False, True, worker_held=SHA) == {HEAD: "none", WORKER: "none"}
    assert plan(False, True, worker_held="cd" * 32) == {HEAD: "source", WORKER: "head"}  # another file: relayed


def test_a_head_with_the_archive_staged_by_hand_relays_it_without_a_copy():
    assert plan(True, True, staged=frozenset({HEAD})) == {HEAD: "none", WORKER: "head"}
    assert plan(True, True, staged=frozenset({HEAD, WORKER})) == {HEAD: "none", WORKER: "none"}


@pytest.mark.parametrize("needs", [(True, True), (False, True), (True, False)])
def test_direct_staging_sends_each_rank_that_lacks_the_image_its_own_copy(needs):
    want = {h: ("source" if n else "none") for h, n in zip((HEAD, WORKER), needs)}
    assert plan(*needs, staging="direct") == want


def test_a_rank_without_a_partner_in_the_play_is_sent_its_copy_directly():
    assert plan(True, False, members=(HEAD,)) == {HEAD: "source"}
