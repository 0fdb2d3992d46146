#!/usr/bin/python
# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_report
short_description: Write the fleet audit report (JSON, Markdown and one static HTML page) of every GB10 pair
version_added: 0.1.0
description:
  - "Runs on the control node (C(delegate_to: localhost), C(run_once: true)) at the end of the fleet audit.
    Takes one verdict document per pair and writes four files into O(dest): C(audit.json), C(audit.md),
    C(audit.html) and C(audit.txt)."
  - "C(audit.json) holds C(schema_version) (1), C(title), C(generated), C(counts) per verdict, C(exit_code)
    (0 when every pair is C(OK), else 2), C(not_ok) and the C(pairs) sorted by name."
  - "C(audit.md) holds a table (pair, verdict, head image, worker image, profile, number of differences)
    and one section per pair that is not C(OK), listing each difference as
    C(<rank>: <item> is <actual>, expected <expected>), each reason and, for a pair that carries
    C(logs), each rank's last log lines as a code block."
  - "C(audit.txt) is the same table in fixed-width plain text for a terminal or a cron mail (the C(dspark audit)
    command prints it): one line per pair, each difference and reason indented below it (and the last three
    log lines of each rank of a pair that carries C(logs)), and a count line."
  - "C(audit.html) is one static, self-contained HTML5 page (inline CSS, no script, no external resource):
    a table C(id=fleet) with one C(tr data-pair=<name>) row per pair (verdict with the class C(ok),
    C(drift), C(down), C(hung), C(unreachable) or C(failed), image IDs shortened to 12 hex digits with the full ID in a
    C(title) attribute, profile, start times, restart counts), each row linking to the pair's details
    section C(id=pair-<name>) (differences table rank, item, expected, actual; reasons; each rank's last log
    lines in a C(pre class=logs data-rank=<rank>); rank summaries).
    Every value is HTML-escaped."
  - "Fails closed, writing nothing, when a verdict document is not well formed: an empty O(pairs), a pair
    name that is missing, repeated or not made of letters, digits, C(.), C(_) and C(-), a verdict other than
    C(OK), C(DRIFT), C(DOWN), C(HUNG), C(UNREACHABLE) or C(FAILED), an C(OK) pair that lists differences or reasons, a C(DRIFT)
    pair without differences, a C(DOWN), C(HUNG), C(UNREACHABLE) or C(FAILED) pair without a reason, a difference without
    C(rank), C(item), C(expected) or C(actual), rank summaries other than C(head) and C(worker), C(logs) that
    is not a mapping of C(head) and C(worker) to lists of strings."
  - "A fleet that is not all C(OK) does not fail the module; RV(exit_code) and RV(not_ok) say so, and the
    playbook decides."
extends_documentation_fragment:
  - gb10.dspark._attributes
options:
  pairs:
    description:
      - "The per-pair verdict documents of the audit, each C({pair, verdict, differences: [{rank, item,
        expected, actual}], reasons: [str], ranks: {head: {...}, worker: {...}}}). The rank summaries may
        hold C(image_id), C(profile), C(profile_sha256), C(started_at), C(restart_count), C(running),
        C(kv_cache_size_tokens) and other keys; all are shown in the HTML details."
      - "C(logs) (optional, as the audit gives it for a C(DOWN) or C(HUNG) pair): C({head: [str], worker: [str]}),
        each rank's last log lines."
      - Missing C(differences), C(reasons) and C(ranks) count as empty. Other keys are kept in C(audit.json).
    type: list
    elements: dict
    required: true
  dest:
    description:
      - The folder to write the four files into. Created (0755) when missing, with its parents.
      - Must not be a file.
    type: path
    required: true
  title:
    description: The report's title, used in the Markdown heading and the HTML page.
    type: str
    default: GB10 fleet audit
  generated:
    description:
      - When the report was made, a UTC time such as C(2026-08-05T12:00:00Z) (fractions of a second allowed,
        the C(Z) is required). Defaults to now.
      - It does not count as a change; see the C(idempotent) attribute.
    type: str
  expected_pairs:
    description:
      - Every pair the audit set out to judge. A pair here without a verdict document in O(pairs) (its
        audit failed before the verdict) is reported as C(FAILED) with the reason, so the report and
        RV(exit_code) never read OK for a fleet that was not all judged.
    type: list
    elements: str
attributes:
  check_mode:
    support: full
    details: Checks the input, renders the four files and compares them with O(dest), but writes nothing;
      RV(changed) says whether a real run would write.
  diff_mode:
    support: full
    details: Before and after are the content of C(audit.md) (before is empty when it does not exist).
  idempotent:
    support: full
    details:
      - The files are compared with what O(dest) holds while ignoring the C(generated) timestamp. When only the
        timestamp would differ nothing is written, RV(changed) is V(false) and the files keep their old timestamp.
      - When anything else differs, all four files are rewritten, each atomically, with the new timestamp.
notes:
  - Files are written with mode 0644 through a temporary file and a rename; C(audit.json) is written last.
  - The Markdown table shows image IDs shortened to 12 hex digits; C(audit.json) and the HTML C(title)
    attributes keep the full IDs.
  - "Failures read like C(rank control node: pair sim02 verdict is BROKEN, expected one of OK, DRIFT, DOWN, HUNG, UNREACHABLE, FAILED)."
seealso:
  - module: gb10.dspark.pair_identity
  - module: gb10.dspark.evidence_pack
author:
  - gb10.dspark contributors (!UNKNOWN)
"""

EXAMPLES = r"""
---
- name: Write the fleet audit report
  gb10.dspark.fleet_report:
    pairs: "{{ groups['dspark_heads'] | map('extract', hostvars, '__dspark_verdict') | list }}"
    dest: "{{ dspark_evidence_dir }}/fleet"
    title: GB10 fleet audit
  delegate_to: localhost
  run_once: true
  register: __dspark_fleet

- name: Show which pairs are not OK
  ansible.builtin.debug:
    msg: "{{ __dspark_fleet.counts }}; not OK: {{ __dspark_fleet.not_ok | join(', ') or 'none' }}"
  run_once: true

- name: The whole fleet must be OK
  ansible.builtin.assert:
    that: __dspark_fleet.exit_code == 0
    fail_msg: "fleet audit: {{ __dspark_fleet.not_ok | join(', ') }} not OK, see {{ __dspark_fleet.files.html }}"
  run_once: true
"""

RETURN = r"""
changed:
  description: Whether any of the four files was (in check mode, would be) written; the C(generated) timestamp alone is no change.
  returned: always
  type: bool
  sample: false
exit_code:
  description: 0 when every pair is C(OK), else 2 (the code a CLI exits with).
  returned: success
  type: int
  sample: 2
counts:
  description: The number of pairs per verdict; every verdict is present.
  returned: success
  type: dict
  sample: {OK: 3, DRIFT: 1, DOWN: 0, UNREACHABLE: 1}
not_ok:
  description: The names of the pairs whose verdict is not C(OK), sorted.
  returned: success
  type: list
  elements: str
  sample: [sim02, sim05]
files:
  description: The absolute paths of the four files.
  returned: success
  type: dict
  contains:
    json:
      description: Path of C(audit.json).
      returned: success
      type: str
      sample: /srv/dspark/evidence/fleet/audit.json
    md:
      description: Path of C(audit.md).
      returned: success
      type: str
      sample: /srv/dspark/evidence/fleet/audit.md
    html:
      description: Path of C(audit.html).
      returned: success
      type: str
      sample: /srv/dspark/evidence/fleet/audit.html
    txt:
      description: Path of C(audit.txt).
      returned: success
      type: str
      sample: /srv/dspark/evidence/fleet/audit.txt
  sample:
    json: /srv/dspark/evidence/fleet/audit.json
    md: /srv/dspark/evidence/fleet/audit.md
    html: /srv/dspark/evidence/fleet/audit.html
generated:
  description: The timestamp the files hold after the run; the old one when nothing changed.
  returned: success
  type: str
  sample: "2026-08-05T12:00:00Z"
changes:
  description: What differed from the files in O(dest) (empty when nothing changed).
  returned: success
  type: list
  elements: str
  sample: [audit.json differs]
mismatches:
  description: On failure, every fault in the input, each with C(rank) (C(control node)), C(item), C(expected), C(actual) and C(message).
  returned: failure
  type: list
  elements: dict
  sample:
    - rank: control node
      item: pair sim02 verdict
      expected: one of OK, DRIFT, DOWN, HUNG, UNREACHABLE, FAILED
      actual: BROKEN
      reason: ""
      expected_word: expected
      message: "rank control node: pair sim02 verdict is BROKEN, expected one of OK, DRIFT, DOWN, HUNG, UNREACHABLE, FAILED"
diff:
  description: With C(--diff), the content of C(audit.md) before and after.
  returned: when diff mode is on and the module succeeds
  type: dict
  sample: {before: "", after: "# GB10 fleet audit\n...", before_header: /srv/dspark/evidence/fleet/audit.md,
           after_header: /srv/dspark/evidence/fleet/audit.md}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._fleet_report import DEFAULT_TITLE, fleet_report
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import guarded


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "pairs": {"type": "list", "elements": "dict", "required": True},
            "dest": {"type": "path", "required": True},
            "title": {"type": "str", "default": DEFAULT_TITLE},
            "generated": {"type": "str"},
            "expected_pairs": {"type": "list", "elements": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    plan = guarded(module, lambda: fleet_report(p["dest"], p["pairs"], title=p["title"], generated=p["generated"],
                                                check_mode=module.check_mode,
                                                expected_pairs=p["expected_pairs"]))
    doc = plan.document
    result = {
        "changed": plan.changed,
        "exit_code": doc["exit_code"],
        "counts": doc["counts"],
        "not_ok": doc["not_ok"],
        "files": dict(plan.paths),
        "generated": doc["generated"],
        "changes": plan.changes,
    }
    if module._diff:
        result["diff"] = {"before": plan.before_md, "after": plan.after_md,
                          "before_header": plan.paths["md"], "after_header": plan.paths["md"]}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
