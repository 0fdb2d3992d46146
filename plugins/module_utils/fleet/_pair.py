# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pair-level identity: an inventory forms pairs, and both ranks of a pair hold the same image.

Input is one record per host, as the roles collect it from ``hostvars`` after
``gb10.dspark.image_identity`` ran on each rank::

    {"name": "sim01-worker", "pair": "sim01", "rank": 1,
     "image_id": "sha256:...", "image_store": "classic"}

``image_id`` and ``image_store`` may be left out when only the pairing is checked.
"""
from __future__ import annotations

import re
from collections import defaultdict

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import Mismatch, outcome

# A pair name (and a run id) reaches paths on the control node and the head: evidence folders, the
# lock, report file names. Nothing that could leave a folder or break a record is accepted: no "/",
# no leading "." (so neither ".." nor a hidden file), one line, short. The run ids the lock role
# makes (20260102T030405Z-4294967295) and inventory pair names pass.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SAFE_NAME_EXPECTED = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"

RANKS = (0, 1)
ROLE = {0: "head", 1: "worker"}


def check_pairs(hosts: list[dict], expected_image_id: str | None = None,
                check_images: bool = True) -> tuple[dict, list[Mismatch]]:
    """Return (pairs summary, mismatches). Every problem is listed, not just the first."""
    by_pair, problems = _group(hosts)
    summary = {}
    for pair, members in sorted(by_pair.items()):
        members = _unique(members)
        summary[pair] = {ROLE.get(m.get("rank"), str(m.get("rank"))): m["name"] for m in members}
        problems += _pairing(pair, members)
        if check_images:
            problems += _images(pair, members, expected_image_id)
    return summary, problems


def _group(hosts: list[dict]) -> tuple[dict[str, list[dict]], list[Mismatch]]:
    """The one grouping of hosts into pairs: ``({pair: [record, ...]}, mismatches)``; a host without a
    usable pair name, or named in two pairs, is listed as a mismatch and grouped nowhere."""
    problems: list[Mismatch] = []
    by_pair: dict[str, list[dict]] = defaultdict(list)
    seen: dict[str, str] = {}
    for host in hosts:
        name = str(host.get("name"))
        pair = host.get("pair")
        if not pair:
            problems.append(Mismatch(name, "pair", "a pair name (dspark_pair)", None, expected_word="expected"))
            continue
        if not isinstance(pair, str) or not SAFE_NAME.fullmatch(pair):
            problems.append(Mismatch(name, "dspark_pair", SAFE_NAME_EXPECTED, pair, expected_word="expected"))
            continue
        if name in seen and seen[name] != pair:
            problems.append(Mismatch(name, "pair", seen[name], pair, reason="a host may belong to one pair only",
                                     expected_word="already in"))
            continue
        seen[name] = pair
        by_pair[str(pair)].append(host)
    return by_pair, problems


def _unique(members: list[dict]) -> list[dict]:
    out, names = [], set()
    for m in members:
        if m["name"] not in names:
            names.add(m["name"])
            out.append(m)
    return out


def _pairing(pair: str, members: list[dict]) -> list[Mismatch]:
    out = []
    for m in members:
        if m.get("rank") not in RANKS:
            out.append(Mismatch(m["name"], "dspark_rank", "0 (head) or 1 (worker)", m.get("rank"), expected_word="expected"))
    for rank in RANKS:
        holders = [m["name"] for m in members if m.get("rank") == rank]
        if len(holders) != 1:
            out.append(Mismatch(f"{ROLE[rank]} of pair {pair}", f"{ROLE[rank]} hosts", "exactly one",
                                f"{len(holders)} ({', '.join(holders) or 'none'})", expected_word="expected"))
    return out


def _images(pair: str, members: list[dict], expected: str | None) -> list[Mismatch]:
    out = []
    for m in members:
        if not m.get("image_id"):
            out.append(Mismatch(m["name"], "image ID", expected or "an image ID", None,
                                reason="the image check did not run on this rank",
                                expected_word="pinned" if expected else "expected"))
        elif expected and m["image_id"] != expected:
            out.append(Mismatch(m["name"], "image ID", expected, m["image_id"]))
    ids = {m.get("image_id") for m in members if m.get("image_id")}
    stores = {m.get("image_store") for m in members if m.get("image_store")}
    if len(ids) > 1:
        head = next((m for m in members if m.get("rank") == 0), members[0])
        for m in members:
            if m is not head and m.get("image_id") and m["image_id"] != head.get("image_id"):
                out.append(Mismatch(m["name"], "image ID", head.get("image_id"), m["image_id"],
                                    reason="the ranks of a pair must hold the identical image",
                                    expected_word=f"its head {head['name']} holds"))
    if len(stores) > 1:
        detail = ", ".join(f"{m['name']}={m.get('image_store')}" for m in members)
        out.append(Mismatch(f"pair {pair}", "image store", "the same on both ranks", detail,
                            reason="image IDs from different stores are not comparable", expected_word="expected"))
    return out


# What each host contributes to the pairing: the record's key and the host variable it is read from.
HOST_VARIABLES = {"pair": "dspark_pair", "rank": "dspark_rank", "fabric_ip": "dspark_fabric_ip"}


def _rank(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def host_records(names, hostvars) -> list[dict]:
    """One record per host (``{"name", "pair", "rank", "fabric_ip"}``), read from each host's variables:
    ``hostvars`` as a play gives it to an action, or ``_meta.hostvars`` of ``ansible-inventory --list``. A
    host without variables contributes an empty record."""
    records = []
    for name in names:
        hv = hostvars.get(name) if hasattr(hostvars, "get") else None
        hv = hv if hasattr(hv, "get") else {}
        record = {"name": name}
        for key, var in HOST_VARIABLES.items():
            record[key] = hv.get(var)
        record["rank"] = _rank(record["rank"])
        records.append(record)
    return records


def pairs_of(hosts: list[dict]) -> dict[str, str]:
    """Host -> pair for every host that names a usable pair (the grouping :func:`topology` makes; a host
    it would refuse is left out): what a report shows beside a host name, where nothing is refused."""
    by_pair, _problems = _group(hosts)
    return {str(member["name"]): pair for pair, members in by_pair.items() for member in members}


def play_pairs(facts: dict) -> dict[str, dict]:
    """``{pair: {"head": name or None, "worker": name or None}}`` from :func:`topology`'s facts, sorted by
    pair: the one mapping of the play's pairs that every host gets (``dspark_play_pairs``)."""
    return {f["pair"]: {"head": f["head"], "worker": f["worker"]}
            for f in sorted(facts.values(), key=lambda f: f["pair"])}


# The inventory groups the head-only and worker-only plays run on (guard, NIAH, systems, the
# fleet report). A head missing from dspark_heads would be skipped by them without a word.
GROUP_OF_RANK = {0: "dspark_heads", 1: "dspark_workers"}


def topology(hosts: list[dict], groups: dict[str, list[str]], partial_ok: bool = False,
             outside: list[dict] | None = None) -> tuple[dict, list[Mismatch]]:
    """The pairs of the play, worked out once: ``({host: facts}, mismatches)``.

    ``hosts``: one record per play host, ``{"name", "pair", "rank", "fabric_ip"}``; ``groups``:
    the inventory's groups (only ``dspark_heads`` and ``dspark_workers`` are read); ``outside``:
    one record per host of the inventory that is not in the play (None when not known; see
    :func:`half_pairs`). Each host's facts name its pair, the pair's head and worker (None when
    absent from the play and ``partial_ok``), both members in rank order and the head's fabric
    address (the rendezvous address of both ranks). Every problem is listed: the pairing (exactly
    one head and one worker per pair, unless ``partial_ok`` lets a pair miss one of them that the
    inventory holds outside the play), a rank that the groups place elsewhere, and a pair whose
    other rank the inventory does not hold at all - a sliced job's half pair, refused even with
    ``partial_ok``.
    """
    summary, problems = check_pairs(hosts, check_images=False)
    problems = _half_pairs_named(problems, half_pairs(hosts), outside)
    if partial_ok:
        problems = [m for m in problems if not (m.item.endswith(" hosts") and str(m.actual).startswith("0 "))]
    problems += _groups_agree(hosts, groups)
    by_name = {str(h.get("name")): h for h in hosts}
    facts = {}
    for pair, members in summary.items():
        head, worker = members.get("head"), members.get("worker")
        head_rec = by_name.get(head, {}) if head else {}
        for name in (head, worker):
            if name:
                facts[name] = {
                    "pair": pair,
                    "head": head,
                    "worker": worker,
                    "members": [n for n in (head, worker) if n],
                    "head_fabric_ip": head_rec.get("fabric_ip"),
                }
    return facts, problems


def _groups_agree(hosts: list[dict], groups: dict[str, list[str]]) -> list[Mismatch]:
    out = []
    heads = set(groups.get(GROUP_OF_RANK[0]) or [])
    workers = set(groups.get(GROUP_OF_RANK[1]) or [])
    for host in hosts:
        name, rank = str(host.get("name")), host.get("rank")
        if rank not in RANKS:
            continue  # the pairing reports it
        want, other = GROUP_OF_RANK[rank], GROUP_OF_RANK[1 - rank]
        member_of = [g for g, members in ((want, heads if rank == 0 else workers),
                                          (other, workers if rank == 0 else heads)) if name in members]
        if member_of != [want]:
            out.append(Mismatch(name, "inventory groups", f"{want} only (dspark_rank {rank}, {ROLE[rank]})",
                                ", ".join(member_of) or "neither group",
                                reason=f"plays on {GROUP_OF_RANK[0]} and {GROUP_OF_RANK[1]} would skip or misuse this rank",
                                expected_word="expected"))
    return out


# ---- a fleet is a set of independent pairs: gb10.dspark.pair_barrier ------------------------------------------
# The plays run without any_errors_fatal: a rank that fails leaves the play at once (Ansible drops it from
# ansible_play_hosts), and its pair's other rank stops at the next barrier, before anything changes. No other pair
# is affected. A pair budget stops the batches not yet started.

def barrier(me: str, task_vars, before: str) -> tuple[str, str | None]:
    """``(pair, why me must stop before `before`)``: a rank of its pair (the topology's ``dspark_pair_members``)
    is no longer among the play's hosts (``ansible_play_hosts``: it failed or was unreachable). The reason is
    None when the pair is whole."""
    task_vars = task_vars if hasattr(task_vars, "get") else {}
    pair = str(task_vars.get(HOST_VARIABLES["pair"]))
    left = set(map(str, task_vars.get("ansible_play_hosts") or []))
    batch = set(map(str, task_vars.get("ansible_play_batch") or left))
    members = [str(m) for m in (task_vars.get("dspark_pair_members") or []) if str(m) != me]
    gone = [m for m in members if m not in left]
    if gone:
        return pair, (f"rank {me}: pair {pair} stops before {before}: rank {', '.join(gone)} of the pair failed or "
                      f"was unreachable, expected both ranks in the run (no other pair is affected)")
    apart = [m for m in members if m not in batch]
    if apart:  # the play's serial cut the pair: its ranks would run in different batches
        return pair, (f"rank {me}: pair {pair} stops before {before}: rank {', '.join(apart)} of the pair is in "
                      f"another batch of the play (serial), expected both ranks in one batch (a serial of whole "
                      f"pairs: an even number of hosts, the inventory listing each pair's ranks together)")
    return pair, None


def failure_budget(value) -> tuple[int | None, float | None]:
    """``dspark_fleet_max_failed_pairs``: a count of pairs (``2``) or a percentage of the run's pairs (``'25%'``);
    empty or None means no budget. Returns ``(count, percent)``, one of them set. Anything else raises ValueError."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None, None
    wrong = ValueError(f"dspark_fleet_max_failed_pairs is {value!r}, expected a count of pairs (0 or more) "
                       f"or a percentage ('25%')")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise wrong
    text = str(value).strip()
    try:
        number = float(text[:-1]) if text.endswith("%") else int(text)
    except ValueError:
        raise wrong from None
    if number < 0 or (text.endswith("%") and number > 100):
        raise wrong
    return (None, float(number)) if text.endswith("%") else (int(number), None)


def budget_problem(play_hosts_all, play_hosts, batch, hostvars, value) -> str | None:
    """Why the ranks of this batch must not start: the pairs that failed so far in the play (a rank in
    ``play_hosts_all`` but no longer in ``play_hosts``) exceed the budget ``value`` (:func:`failure_budget`)
    over all the play's pairs. None when the batch may start."""
    count, percent = failure_budget(value)
    if count is None and percent is None:
        return None
    everyone = [str(h) for h in play_hosts_all or []]
    left = set(map(str, play_hosts or []))
    if all(h in left for h in everyone):  # nothing failed yet: no pair to count (every rank runs this at a batch's start)
        return None
    pair_of = pairs_of(host_records(everyone, hostvars))
    failed = sorted({pair_of.get(h, h) for h in everyone if h not in left})
    total = len(set(pair_of.values())) or len(everyone)
    over = len(failed) > count if count is not None else bool(total) and len(failed) * 100.0 / total > percent
    if not over:
        return None
    waiting = sorted({pair_of.get(str(h), str(h)) for h in batch or []})
    return (f"pair {', '.join(waiting)} not started: {len(failed)} of {total} pairs failed ({', '.join(failed)}), "
            f"expected at most {value} (dspark_fleet_max_failed_pairs)")


# AWX/AAP job slicing (docs/fleet-scale.md, "Job slicing"): a job template with job_slice_count N above 1
# runs N jobs, and slice k's inventory holds only the hosts at k-1, k-1+N, k-1+2N, ... of the inventory's
# enabled hosts sorted by name (AWX's Inventory.get_sliced_hosts over get_script_data's host list); every
# group is kept, with only that slice's hosts in it. A pair's head and worker sort next to each other
# under the usual names, so every slice then holds half pairs, and a play cannot tell a slice from an
# inventory that lacks a rank: either way the other rank is in no group and has no variables here.
SLICING_FIX = ("a sliced AWX/AAP job (job_slice_count above 1) gives each slice every Nth host of the inventory "
               "sorted by name, so heads and workers land in different slices: launch the job template with "
               "job_slice_count 1 and spread the fleet with forks and rollout waves, or name the hosts so that "
               "every slice holds whole pairs (docs/fleet-scale.md, Job slicing); otherwise add the missing rank "
               "to the inventory")


def half_pairs(hosts: list[dict]) -> list[tuple[str, int, str]]:
    """``[(pair, missing rank, the rank present), ...]`` for every pair of ``hosts`` that has one of
    its two ranks only, sorted by pair: what :func:`topology` asks the rest of the inventory about."""
    by_pair, _problems = _group(hosts)
    out = []
    for pair, members in sorted(by_pair.items()):
        members = _unique(members)
        for rank in RANKS:
            present = [m["name"] for m in members if m.get("rank") == 1 - rank]
            if present and not any(m.get("rank") == rank for m in members):
                out.append((pair, rank, present[0]))
    return out


def _half_pairs_named(problems: list[Mismatch], halves: list[tuple[str, int, str]],
                      outside: list[dict] | None) -> list[Mismatch]:
    """The pairing's "0 (none)" for each half pair, told apart (when the rest of the inventory is
    known): the missing rank is in the inventory outside the play (a --limit: its name is added), or
    absent from the inventory (a slice of a sliced job: a problem of its own, with the fix, that
    ``partial_ok`` does not lift)."""
    if outside is None or not halves:
        return problems
    by_pair_rank: dict[tuple[str, object], list[str]] = defaultdict(list)
    for host in outside:
        by_pair_rank[(host.get("pair"), _rank(host.get("rank")))].append(str(host.get("name")))
    absent, limited = [], {}
    for pair, rank, present in halves:
        names = by_pair_rank.get((pair, rank))
        if names:
            limited[f"{ROLE[rank]} of pair {pair}"] = names
        else:
            absent.append((pair, rank, present))
    out = []
    for m in problems:
        if m.rank in limited and m.item.endswith(" hosts"):
            m = Mismatch(m.rank, m.item, m.expected, m.actual, expected_word=m.expected_word,
                         reason=f"{', '.join(limited[m.rank])} is in the inventory but not in this play: "
                                "a --limit or the play's hosts leave it out")
        elif any(m.rank == f"{ROLE[r]} of pair {p}" and m.item == f"{ROLE[r]} hosts" for p, r, _h in absent):
            continue  # said below, with what is missing and the fix
        out.append(m)
    for pair, rank, present in absent:
        out.append(Mismatch(f"{ROLE[rank]} of pair {pair}", f"{ROLE[rank]} (dspark_rank {rank})",
                            f"in it beside its {ROLE[1 - rank]} {present}", "absent from the run's inventory",
                            expected_word="expected"))
    if absent:
        out.append(Mismatch("inventory", "half pairs", "none (every pair whole)",
                            f"{len(absent)} ({', '.join(f'{p} without its {ROLE[r]}' for p, r, _h in absent)})",
                            reason=SLICING_FIX, expected_word="expected"))
    return out


# The options of gb10.dspark.pair_identity: the module and its action (pure computation, done in the controller's
# worker process) validate them alike.
PAIR_IDENTITY_SPEC = {
    "hosts": {"type": "list", "elements": "dict", "required": True},
    "expected_image_id": {"type": "str"},
    "check_images": {"type": "bool", "default": True},
}


def check_pair_identity(params: dict) -> dict:
    """The task result of gb10.dspark.pair_identity for validated ``params`` (module and action alike)."""
    pairs, mismatches = check_pairs(params["hosts"], params["expected_image_id"], params["check_images"])
    return outcome({"pairs": pairs}, mismatches)
