# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report logic: input checks, the three renderings, the terminal table and idempotent writing."""
from __future__ import annotations

import copy
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _fleet_report as fr
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError

PINNED = "sha256:" + "3f1a9c0be2d4" + "7e" * 26
STALE = "sha256:" + "b07c55aa19de" + "4c" * 26
T0 = "2026-08-05T12:00:00Z"
T1 = "2026-08-06T09:30:00Z"


def rank(image: str | None = PINNED, profile: str = "production", started: str = "2026-08-01T08:00:00Z",
         restarts: int = 0, **more) -> dict:
    summary = {"image_id": image, "profile": profile, "profile_sha256": "b9" * 32, "started_at": started,
               "restart_count": restarts, "running": True, "kv_cache_size_tokens": 1048576}
    summary.update(more)
    return summary


def fleet() -> list[dict]:
    """One pair per verdict, deliberately not in name order."""
    return [
        {"pair": "spark-d", "verdict": "UNREACHABLE", "differences": [],
         "reasons": ["worker spark-d1: ssh timed out after 30 s"], "ranks": {"head": rank(), "worker": None}},
        {"pair": "spark-b", "verdict": "DRIFT",
         "differences": [{"rank": "worker", "item": "image_id", "expected": PINNED, "actual": STALE},
                         {"rank": "head", "item": "profile", "expected": "production", "actual": "production-k8"}],
         "reasons": [],
         "ranks": {"head": rank(profile="production-k8", restarts=2), "worker": rank(image=STALE, restarts=1)}},
        {"pair": "spark-a", "verdict": "OK", "differences": [], "reasons": [],
         "ranks": {"head": rank(), "worker": rank()}},
        {"pair": "spark-c", "verdict": "DOWN", "differences": [],
         "reasons": ["head: container dspark_vllm is not running (exited 137)"],
         "ranks": {"head": rank(running=False, restarts=5), "worker": rank()}},
    ]


def document(pairs: list[dict] | None = None, generated: str = T0, title: str = fr.DEFAULT_TITLE) -> dict:
    return fr.build_document(fr.normalize_pairs(fleet() if pairs is None else pairs), generated, title)


class Page(HTMLParser):
    """Collects what a browser test would look for: the fleet rows, ids, links, and tags that must not exist."""

    VOID = {"meta", "br", "hr", "img", "link", "input", "wbr", "source", "area", "base", "col", "embed", "track"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.ids: list[str] = []
        self.links: list[str] = []
        self.rows: dict[str, dict] = {}
        self.in_fleet = False
        self.row: dict | None = None
        self.cell: dict | None = None
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if "id" in attrs:
            self.ids.append(attrs["id"])
        if tag == "a":
            self.links.append(attrs.get("href", ""))
        if tag == "table" and attrs.get("id") == "fleet":
            self.in_fleet = True
        if self.in_fleet and tag == "tr" and "data-pair" in attrs:
            self.row = {"cells": [], "attrs": attrs}
            self.rows[attrs["data-pair"]] = self.row
        if self.row is not None and tag == "td":
            self.cell = {"class": attrs.get("class", ""), "text": "", "titles": []}
            self.row["cells"].append(self.cell)
        if self.cell is not None and "title" in attrs:
            self.cell["titles"].append(attrs["title"])
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()
        if tag == "td":
            self.cell = None
        if tag == "tr":
            self.row = None
        if tag == "table":
            self.in_fleet = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    assert page.errors == [] and page.stack == [], (page.errors, page.stack)
    return page


# ---------------------------------------------------------------- input checks


def test_document_sorts_counts_and_exit_code():
    doc = document()
    assert [p["pair"] for p in doc["pairs"]] == ["spark-a", "spark-b", "spark-c", "spark-d"]
    assert doc["counts"] == {"OK": 1, "DRIFT": 1, "DOWN": 1, "HUNG": 0, "UNREACHABLE": 1, "FAILED": 0}
    assert doc["exit_code"] == 2
    assert doc["not_ok"] == ["spark-b", "spark-c", "spark-d"]
    assert doc["schema_version"] == 1 and doc["generated"] == T0
    # the unreachable worker's missing summary is an empty dict, the input is not modified
    assert doc["pairs"][3]["ranks"]["worker"] == {}
    assert fleet()[0]["ranks"]["worker"] is None


def test_all_ok_exits_zero():
    pairs = [p for p in fleet() if p["verdict"] == "OK"]
    pairs.append(dict(copy.deepcopy(pairs[0]), pair="spark-e"))
    doc = document(pairs)
    assert doc["exit_code"] == 0 and doc["not_ok"] == []
    assert doc["counts"] == {"OK": 2, "DRIFT": 0, "DOWN": 0, "HUNG": 0, "UNREACHABLE": 0, "FAILED": 0}


def test_missing_lists_count_as_empty_and_extra_keys_are_kept():
    doc = document([{"pair": "spark-a", "verdict": "OK", "checked_at": "2026-08-05T11:59:00Z"}])
    pair = doc["pairs"][0]
    assert pair["differences"] == [] and pair["reasons"] == []
    assert pair["ranks"] == {"head": {}, "worker": {}}
    assert pair["checked_at"] == "2026-08-05T11:59:00Z"


@pytest.mark.parametrize("change, item, expected, actual", [
    ({"verdict": "BROKEN"}, "pair spark-b verdict", "one of OK, DRIFT, DOWN, HUNG, UNREACHABLE, FAILED", "BROKEN"),
    ({"verdict": "drift"}, "pair spark-b verdict", "one of OK, DRIFT, DOWN, HUNG, UNREACHABLE, FAILED", "drift"),
    ({"verdict": "OK"}, "pair spark-b differences", "none for verdict OK", "2 listed"),
    ({"differences": []}, "pair spark-b differences", "at least one for verdict DRIFT", "none"),
    ({"differences": [{"rank": "worker", "item": "image_id", "actual": STALE}]},
     "pair spark-b differences[0].expected", "present (null is allowed)", None),
    ({"differences": [{"rank": "", "item": "image_id", "expected": PINNED, "actual": STALE}]},
     "pair spark-b differences[0].rank", "a non-empty string", ""),
    ({"ranks": {"head": rank(), "rank2": rank()}}, "pair spark-b ranks.rank2", "only head and worker", "present"),
    ({"pair": "spark b"}, "pairs[1].pair", "a name of letters, digits, '.', '_' and '-'", "spark b"),
    ({"pair": '"><x'}, "pairs[1].pair", "a name of letters, digits, '.', '_' and '-'", '"><x'),
    ({"reasons": "not a list"}, "pair spark-b reasons", "a list", "str"),
    ({"logs": ["line"]}, "pair spark-b logs", "a dict of head and worker log lines", "list"),
    ({"logs": {"rank2": []}}, "pair spark-b logs.rank2", "only head and worker", "present"),
    ({"logs": {"head": "one line"}}, "pair spark-b logs.head", "a list of strings", "str"),
    ({"logs": {"head": [1]}}, "pair spark-b logs.head", "a list of strings", "list"),
])
def test_malformed_pair_fails_naming_expected_and_actual(change, item, expected, actual):
    pairs = fleet()
    pairs[1].update(change)
    with pytest.raises(IdentityError) as err:
        fr.normalize_pairs(pairs)
    found = {(m.item, m.expected, m.actual) for m in err.value.mismatches}
    assert (item, expected, actual) in found
    assert all(m.rank == "control node" for m in err.value.mismatches)
    assert f"is {'absent' if actual is None else actual}, expected {expected}" in str(err.value)


@pytest.mark.parametrize("verdict", ["DOWN", "UNREACHABLE", "FAILED"])
def test_down_and_unreachable_need_a_reason(verdict):
    with pytest.raises(IdentityError, match=f"pair spark-x reasons is none, expected at least one for verdict {verdict}"):
        fr.normalize_pairs([{"pair": "spark-x", "verdict": verdict, "reasons": []}])


def test_ok_with_reasons_duplicates_and_empty_fail():
    with pytest.raises(IdentityError, match="reasons is 1 listed, expected none for verdict OK"):
        fr.normalize_pairs([{"pair": "spark-a", "verdict": "OK", "reasons": ["odd"]}])
    twice = fleet() + [fleet()[2]]
    with pytest.raises(IdentityError, match=r"pairs\[4\]\.pair is spark-a again, expected a name given once"):
        fr.normalize_pairs(twice)
    with pytest.raises(IdentityError, match="pairs is an empty list, expected at least one pair"):
        fr.normalize_pairs([])


def test_every_fault_is_reported_at_once():
    pairs = fleet()
    pairs[0]["verdict"] = "GONE"
    pairs[1]["differences"] = []
    with pytest.raises(IdentityError) as err:
        fr.normalize_pairs(pairs)
    assert {m.item for m in err.value.mismatches} == {"pair spark-d verdict", "pair spark-b differences"}


def test_non_json_values_are_refused():
    pairs = fleet()
    pairs[2]["ranks"]["head"]["kv_cache_size_tokens"] = float("nan")
    with pytest.raises(IdentityError, match="pair spark-a content .*not a finite number"):
        fr.normalize_pairs(pairs)


@pytest.mark.parametrize("value, ok", [
    ("2026-08-05T12:00:00Z", True), ("2026-08-05T12:00:00.123Z", True),
    ("2026-08-05T12:00:00+00:00", False), ("2026-08-05 12:00:00Z", False), ("2026-13-05T12:00:00Z", False),
    ("yesterday", False),
])
def test_generated_must_be_utc(value, ok):
    if ok:
        assert fr.check_generated(value) == value
    else:
        with pytest.raises(IdentityError, match=re.escape(f"generated is {value}, expected a UTC time")):
            fr.check_generated(value)


def test_generated_defaults_to_now():
    assert fr.check_generated(None, now=lambda: T1) == T1
    assert fr.GENERATED.match(fr.utc_now())


# ---------------------------------------------------------------- presentation helpers


def test_short_id_and_profile():
    assert fr.short_id(PINNED) == "3f1a9c0be2d4"
    assert fr.short_id(PINNED.upper().replace("SHA256", "sha256")) == "3f1a9c0be2d4"
    assert fr.short_id("dspark:prod-v026") == "dspark:prod-v026"
    assert fr.short_id(None) == "absent"
    drift = document()["pairs"][1]
    assert fr.profile_of(drift) == "production-k8 / production"
    assert fr.profile_of(document()["pairs"][0]) == "production"
    assert fr.profile_of({"ranks": {"head": {}, "worker": {}}}) == "absent"


def test_difference_line():
    assert fr.difference_line({"rank": "worker", "item": "image_id", "expected": PINNED, "actual": STALE}) == \
        f"worker: image_id is {STALE}, expected {PINNED}"
    assert fr.difference_line({"rank": "head", "item": "running", "expected": True, "actual": None}) == \
        "head: running is absent, expected true"


# ---------------------------------------------------------------- Markdown


def test_markdown_table_and_sections():
    text = fr.render_markdown(document())
    lines = text.splitlines()
    assert lines[0] == "# GB10 fleet audit"
    assert f"Generated {T0}." in lines[2] and "exit code 2" in lines[2]
    header = lines.index("| pair | verdict | head image | worker image | profile | differences |")
    rows = lines[header + 2:header + 6]
    assert rows == [
        "| spark-a | OK | 3f1a9c0be2d4 | 3f1a9c0be2d4 | production | 0 |",
        "| spark-b | DRIFT | 3f1a9c0be2d4 | b07c55aa19de | production-k8 / production | 2 |",
        "| spark-c | DOWN | 3f1a9c0be2d4 | 3f1a9c0be2d4 | production | 0 |",
        "| spark-d | UNREACHABLE | 3f1a9c0be2d4 | absent | production / absent | 0 |",
    ]
    sections = [line for line in lines if line.startswith("## ")]
    assert sections == ["## spark-b: DRIFT", "## spark-c: DOWN", "## spark-d: UNREACHABLE"]  # no OK section
    assert f"- worker: image\\_id is {STALE}, expected {PINNED}" not in text  # underscores stay readable
    assert f"- worker: image_id is {STALE}, expected {PINNED}" in lines
    assert "- head: profile is production-k8, expected production" in lines
    assert "- head: container dspark\\_vllm is not running (exited 137)" not in text
    assert "- head: container dspark_vllm is not running (exited 137)" in lines
    assert "- worker spark-d1: ssh timed out after 30 s" in lines
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_markdown_cells_cannot_break_the_table_or_inject_html():
    pairs = fleet()
    pairs[2]["ranks"]["head"]["profile"] = "a|b\n<script>alert(1)</script>"
    pairs[2]["ranks"]["worker"]["profile"] = "a|b\n<script>alert(1)</script>"
    text = fr.render_markdown(document(pairs))
    row = next(line for line in text.splitlines() if line.startswith("| spark-a "))
    assert row.count(" | ") == 5  # still six cells
    assert "a\\|b &lt;script&gt;alert(1)&lt;/script&gt;" in row
    assert "<script>" not in text


# ---------------------------------------------------------------- HTML


def test_html_fleet_table_has_one_row_per_pair_with_verdict_class():
    page = parse(fr.render_html(document()))
    assert list(page.rows) == ["spark-a", "spark-b", "spark-c", "spark-d"]
    for name, verdict in (("spark-a", "ok"), ("spark-b", "drift"), ("spark-c", "down"), ("spark-d", "unreachable")):
        row = page.rows[name]
        assert row["attrs"]["data-verdict"] == verdict.upper()
        assert row["cells"][1]["class"].split() == ["verdict", verdict]
        assert row["cells"][1]["text"] == verdict.upper()
        assert f"#pair-{name}" in page.links
        assert f"pair-{name}" in page.ids
    drift = page.rows["spark-b"]["cells"]
    assert drift[2]["text"] == "3f1a9c0be2d4" and drift[2]["titles"] == [PINNED]
    assert drift[3]["text"] == "b07c55aa19de" and drift[3]["titles"] == [STALE]
    assert [c["text"] for c in drift[4:]] == ["production-k8 / production", "2026-08-01T08:00:00Z",
                                              "2026-08-01T08:00:00Z", "2", "1", "2"]
    assert page.rows["spark-d"]["cells"][3]["text"] == "absent"
    assert len(page.ids) == len(set(page.ids))


def test_html_is_static_and_self_contained():
    text = fr.render_html(document())
    page = parse(text)
    assert text.startswith("<!DOCTYPE html>\n")
    assert "script" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert "iframe" not in page.tags and "object" not in page.tags
    assert "http://" not in text and "https://" not in text and "url(" not in text and " src=" not in text
    assert all(link.startswith("#") for link in page.links)
    assert "style" in page.tags and "fleet" in page.ids


def test_html_details_list_differences_and_reasons():
    text = fr.render_html(document())
    drift = text[text.index('id="pair-spark-b"'):text.index('id="pair-spark-c"')]
    assert ("<tr><td>worker</td><td>image_id</td>"
            f"<td><code>{PINNED}</code></td><td><code>{STALE}</code></td></tr>") in drift
    down = text[text.index('id="pair-spark-c"'):text.index('id="pair-spark-d"')]
    assert "<li>head: container dspark_vllm is not running (exited 137)</li>" in down
    assert "No differences." in down
    assert "<th>running</th><td><code>false</code></td><td><code>true</code></td>" in down


def test_html_escapes_every_value():
    evil = '<script>alert("x")</script>'
    pairs = fleet()
    pairs[1]["differences"][0]["actual"] = evil
    pairs[1]["differences"][1]["item"] = evil
    pairs[1]["ranks"]["head"]["image_id"] = evil
    pairs[1]["ranks"]["worker"]["started_at"] = evil
    pairs[2]["ranks"]["head"]["profile"] = evil
    pairs[3]["reasons"] = [evil]
    text = fr.render_html(document(pairs, title=evil))
    assert "<script" not in text
    assert text.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") >= 8
    page = parse(text)
    assert "script" not in page.tags
    row = page.rows["spark-b"]["cells"]
    assert row[2]["titles"] == [evil] and row[2]["text"] == evil  # the parser gets the value back, as text
    assert row[6]["text"] == evil


# ---------------------------------------------------------------- terminal


def test_terminal_table():
    text = fr.terminal_table(document())
    lines = text.splitlines()
    assert lines[0].split() == ["PAIR", "VERDICT", "HEAD", "IMAGE", "WORKER", "IMAGE", "PROFILE", "DIFFS"]
    assert set(lines[1]) == {"-", " "}
    pair_lines = [line for line in lines if line.startswith("spark-")]
    assert [line.split()[:2] for line in pair_lines] == [["spark-a", "OK"], ["spark-b", "DRIFT"],
                                                         ["spark-c", "DOWN"], ["spark-d", "UNREACHABLE"]]
    # fixed width: each column starts at the same offset on every line
    start = lines[0].index("HEAD IMAGE")
    assert all(line[start:start + 12] in ("3f1a9c0be2d4",) for line in pair_lines)
    profile_col = lines[0].index("PROFILE")
    assert pair_lines[1][profile_col:].startswith("production-k8 / production")
    after_b = lines[lines.index(pair_lines[1]) + 1:lines.index(pair_lines[2])]
    assert after_b == [f"    worker: image_id is {STALE}, expected {PINNED}",
                       "    head: profile is production-k8, expected production"]
    after_d = lines[lines.index(pair_lines[3]) + 1:-1]
    assert after_d == ["    reason: worker spark-d1: ssh timed out after 30 s"]
    assert lines[-1] == "4 pairs: 1 OK, 1 DRIFT, 1 DOWN, 0 HUNG, 1 UNREACHABLE, 0 FAILED; exit code 2"


def test_terminal_table_neutralises_escape_sequences():
    pairs = fleet()
    pairs[3]["reasons"] = ["\x1b[2Jcleared"]
    text = fr.terminal_table(document(pairs))
    assert "\x1b" not in text and "\\x1b[2Jcleared" in text


def test_terminal_table_reads_the_written_json(tmp_path):
    fr.write_report(fr.plan_report(str(tmp_path), fleet(), generated=T0))
    doc = json.loads((tmp_path / "audit.json").read_text())
    assert fr.terminal_table(doc) == fr.terminal_table(document())


# ---------------------------------------------------------------- files


def mtimes(folder: Path) -> dict[str, int]:
    return {name: (folder / name).stat().st_mtime_ns for name in fr.FILES.values()}


def test_first_run_writes_four_files(tmp_path):
    dest = tmp_path / "reports" / "fleet"
    plan = fr.fleet_report(str(dest), fleet(), generated=T0)
    assert plan.changed is True and plan.create_dest is True
    assert sorted(os.listdir(dest)) == ["audit.html", "audit.json", "audit.md", "audit.txt"]
    doc = json.loads((dest / "audit.json").read_text())
    assert doc == document() and doc["generated"] == T0
    assert (dest / "audit.md").read_text() == fr.render_markdown(doc)
    assert (dest / "audit.html").read_text() == fr.render_html(doc)
    assert (dest / "audit.txt").read_text() == fr.terminal_table(doc)
    assert oct((dest / "audit.md").stat().st_mode & 0o777) == "0o644"
    assert plan.before_md == "" and plan.after_md == (dest / "audit.md").read_text()


def test_same_fleet_later_is_not_a_change(tmp_path):
    fr.fleet_report(str(tmp_path), fleet(), generated=T0)
    before = mtimes(tmp_path)
    contents = {name: (tmp_path / name).read_text() for name in fr.FILES.values()}
    plan = fr.fleet_report(str(tmp_path), list(reversed(fleet())), generated=T1)
    assert plan.changed is False and plan.changes == []
    assert plan.document["generated"] == T0  # the files keep the time they were made
    assert mtimes(tmp_path) == before
    assert {name: (tmp_path / name).read_text() for name in fr.FILES.values()} == contents
    assert plan.before_md == plan.after_md == contents["audit.md"]


def test_changed_fleet_rewrites_all_with_new_time(tmp_path):
    fr.fleet_report(str(tmp_path), fleet(), generated=T0)
    pairs = fleet()
    pairs[1]["differences"].pop()
    plan = fr.fleet_report(str(tmp_path), pairs, generated=T1)
    assert plan.changed is True and plan.changes == ["audit.json differs"]
    doc = json.loads((tmp_path / "audit.json").read_text())
    assert doc["generated"] == T1 and len(doc["pairs"][1]["differences"]) == 1
    assert f"Generated {T1}." in (tmp_path / "audit.md").read_text()
    assert T1 in (tmp_path / "audit.html").read_text()
    assert "profile is production-k8" in plan.before_md and "profile is production-k8" not in plan.after_md


@pytest.mark.parametrize("name, edit", [
    ("audit.html", lambda text: text.replace("spark-b", "spark-x")),
    ("audit.md", lambda text: text + "tampered\n"),
    ("audit.json", lambda text: text.replace('"generated"', '"made"')),
    ("audit.json", lambda text: "{not json"),
])
def test_edited_or_missing_file_is_rewritten(tmp_path, name, edit):
    fr.fleet_report(str(tmp_path), fleet(), generated=T0)
    path = tmp_path / name
    path.write_text(edit(path.read_text()))
    plan = fr.fleet_report(str(tmp_path), fleet(), generated=T1)
    assert plan.changed is True
    assert json.loads((tmp_path / "audit.json").read_text()) == document(generated=T1)
    assert (tmp_path / "audit.html").read_text() == fr.render_html(document(generated=T1))
    (tmp_path / "audit.md").unlink()
    assert fr.fleet_report(str(tmp_path), fleet(), generated=T1).changes == ["audit.md differs"]


def test_title_is_part_of_the_report(tmp_path):
    fr.fleet_report(str(tmp_path), fleet(), generated=T0)
    plan = fr.fleet_report(str(tmp_path), fleet(), generated=T0, title="Lab fleet")
    assert plan.changed is True
    assert (tmp_path / "audit.md").read_text().startswith("# Lab fleet\n")


def test_check_mode_writes_nothing(tmp_path):
    dest = tmp_path / "fleet"
    plan = fr.fleet_report(str(dest), fleet(), generated=T0, check_mode=True)
    assert plan.changed is True and not dest.exists()
    dest.mkdir()
    plan = fr.fleet_report(str(dest), fleet(), generated=T0, check_mode=True)
    assert plan.changed is True and os.listdir(dest) == []
    fr.fleet_report(str(dest), fleet(), generated=T0)
    before = mtimes(dest)
    pairs = fleet()
    pairs[2]["verdict"] = "DOWN"
    pairs[2]["reasons"] = ["head: engine down"]
    plan = fr.fleet_report(str(dest), pairs, generated=T1, check_mode=True)
    assert plan.changed is True and mtimes(dest) == before
    assert json.loads((dest / "audit.json").read_text())["counts"]["OK"] == 1


def test_bad_input_writes_nothing(tmp_path):
    pairs = fleet()
    pairs[0]["verdict"] = "MAYBE"
    with pytest.raises(IdentityError):
        fr.fleet_report(str(tmp_path / "fleet"), pairs, generated=T0)
    assert not (tmp_path / "fleet").exists()


def test_dest_must_be_a_folder(tmp_path):
    target = tmp_path / "audit"
    target.write_text("")
    with pytest.raises(IdentityError, match=f"report folder {target} is a file, expected a folder"):
        fr.fleet_report(str(target), fleet(), generated=T0)


def test_unreadable_existing_file_fails(tmp_path):
    (tmp_path / "audit.md").mkdir()  # unreadable as a file, whoever runs the test
    with pytest.raises(CheckError, match="rank control node: cannot read .*audit.md"):
        fr.fleet_report(str(tmp_path), fleet(), generated=T0)
    assert not (tmp_path / "audit.json").exists()


def test_a_pair_the_audit_failed_to_judge_is_reported_failed_never_left_out(tmp_path):
    ok = {"pair": "spark-a", "verdict": "OK"}
    plan = fr.fleet_report(str(tmp_path), [ok], generated="2026-08-05T12:00:00Z", expected_pairs=["spark-a", "spark-b"])
    doc = plan.document
    assert doc["exit_code"] == fr.EXIT_NOT_OK and doc["not_ok"] == ["spark-b"]
    assert doc["counts"]["FAILED"] == 1 and doc["counts"]["OK"] == 1
    failed = doc["pairs"][1]
    assert failed["pair"] == "spark-b" and failed["verdict"] == "FAILED" and failed["reasons"] == [fr.NO_VERDICT]
    assert "spark-b" in (tmp_path / "audit.html").read_text()
    # a FAILED verdict made by the audit role keeps its own reason; expected pairs with verdicts add nothing
    own = {"pair": "spark-b", "verdict": "FAILED", "reasons": ["rank b-head: bad override"]}
    doc = fr.fleet_report(str(tmp_path), [ok, own], generated="2026-08-05T12:00:00Z",
                          expected_pairs=["spark-a", "spark-b"]).document
    assert doc["pairs"][1]["reasons"] == ["rank b-head: bad override"] and len(doc["pairs"]) == 2


# ---------------------------------------------------------------- both ranks' last log lines


def hung_fleet() -> list[dict]:
    """A HUNG pair whose report carries both ranks' last lines (one of them hostile), beside an OK pair."""
    return [
        {"pair": "spark-h", "verdict": "HUNG", "differences": [],
         "reasons": ["rank spark-h0: generation is stalled, expected one token (no token came within 30 s)"],
         "ranks": {"head": rank(rank="spark-h0"), "worker": rank(rank="spark-h1")},
         "logs": {"head": ["INFO GET /metrics 200", "<script>alert(1)</script>"],
                  "worker": ["INFO step 42 started", "\x1b[2Jcleared", "third", "fourth"]}},
        {"pair": "spark-a", "verdict": "OK", "differences": [], "reasons": [],
         "ranks": {"head": rank(), "worker": rank()}},
    ]


def test_logs_are_kept_in_the_json_document():
    doc = document(hung_fleet())
    hung = next(p for p in doc["pairs"] if p["pair"] == "spark-h")
    assert hung["logs"]["worker"] == ["INFO step 42 started", "\x1b[2Jcleared", "third", "fourth"]
    assert "logs" not in next(p for p in doc["pairs"] if p["pair"] == "spark-a")


def test_markdown_shows_each_ranks_last_lines_as_code():
    text = fr.render_markdown(document(hung_fleet()))
    head = text.index("Last log lines of head spark-h0:")
    worker = text.index("Last log lines of worker spark-h1:")
    assert head < worker
    assert "\n    INFO GET /metrics 200\n    <script>alert(1)</script>\n" in text  # inside a code block: shown, inert
    assert "\n    INFO step 42 started\n    \\x1b[2Jcleared\n    third\n    fourth\n" in text
    assert "\x1b" not in text


def test_html_shows_each_ranks_last_lines_escaped():
    text = fr.render_html(document(hung_fleet()))
    page = parse(text)
    assert "script" not in page.tags and "<script" not in text
    assert ('<pre class="logs" data-rank="head">INFO GET /metrics 200\n&lt;script&gt;alert(1)&lt;/script&gt;</pre>'
            in text)
    assert '<pre class="logs" data-rank="worker">INFO step 42 started\n' in text
    assert "<h4>Last log lines of worker <code>spark-h1</code></h4>" in text


def test_a_rank_whose_logs_could_not_be_read_says_so():
    pairs = hung_fleet()
    pairs[0]["logs"]["head"] = []
    assert "Last log lines of head spark-h0:\n\n(none could be read)" in fr.render_markdown(document(pairs))
    assert '<p class="none">None could be read.</p>' in fr.render_html(document(pairs))


def test_terminal_shows_each_ranks_last_three_lines():
    lines = fr.terminal_table(document(hung_fleet())).splitlines()
    logged = [line for line in lines if " logged: " in line]
    assert logged == ["    head spark-h0 logged: INFO GET /metrics 200",
                      "    head spark-h0 logged: <script>alert(1)</script>",
                      "    worker spark-h1 logged: \\x1b[2Jcleared",
                      "    worker spark-h1 logged: third",
                      "    worker spark-h1 logged: fourth"]
