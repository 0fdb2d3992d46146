# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gb10.dspark.fleet_report end to end: real files under tmp_path, the module's main() in-process."""
from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.gb10.dspark.plugins.modules import fleet_report

IMAGE = "sha256:" + "9d0e4b7a21c3" + "5a" * 26
OLD = "sha256:" + "c4e8d2f61a07" + "19" * 26
T0 = "2026-08-05T12:00:00Z"
T1 = "2026-08-05T18:00:00Z"
FILES = ("audit.html", "audit.json", "audit.md", "audit.txt")


def summary(image: str = IMAGE, restarts: int = 0) -> dict:
    return {"image_id": image, "profile": "production", "profile_sha256": "b9" * 32,
            "started_at": "2026-08-04T07:15:00Z", "restart_count": restarts, "running": True,
            "kv_cache_size_tokens": 1048576}


def pairs() -> list[dict]:
    return [
        {"pair": "lab-02", "verdict": "DRIFT", "reasons": [],
         "differences": [{"rank": "worker", "item": "image_id", "expected": IMAGE, "actual": OLD}],
         "ranks": {"head": summary(), "worker": summary(OLD, restarts=3)}},
        {"pair": "lab-01", "verdict": "OK", "differences": [], "reasons": [],
         "ranks": {"head": summary(), "worker": summary()}},
        {"pair": "lab-03", "verdict": "UNREACHABLE", "differences": [], "reasons": ["head lab-03a: no route to host"],
         "ranks": {}},
    ]


def args(dest: Path, **changes) -> dict:
    base = {"pairs": pairs(), "dest": str(dest), "generated": T0}
    base.update(changes)
    return base


def stamps(dest: Path) -> dict[str, int]:
    return {name: (dest / name).stat().st_mtime_ns for name in FILES}


def test_report_is_written(tmp_path, run_module):
    dest = tmp_path / "fleet"
    result = run_module(fleet_report, args(dest))
    assert result["failed"] is False, result.get("msg")
    assert result["changed"] is True
    assert result["exit_code"] == 2
    assert result["counts"] == {"OK": 1, "DRIFT": 1, "DOWN": 0, "HUNG": 0, "UNREACHABLE": 1, "FAILED": 0}
    assert result["not_ok"] == ["lab-02", "lab-03"]
    assert result["files"] == {"json": str(dest / "audit.json"), "md": str(dest / "audit.md"),
                               "html": str(dest / "audit.html"), "txt": str(dest / "audit.txt")}
    assert result["generated"] == T0
    assert "diff" not in result
    assert sorted(p.name for p in dest.iterdir()) == list(FILES)
    doc = json.loads((dest / "audit.json").read_text())
    assert [p["pair"] for p in doc["pairs"]] == ["lab-01", "lab-02", "lab-03"]
    assert doc["exit_code"] == 2 and doc["schema_version"] == 1 and doc["title"] == "GB10 fleet audit"
    md = (dest / "audit.md").read_text()
    assert f"- worker: image_id is {OLD}, expected {IMAGE}" in md
    assert "- head lab-03a: no route to host" in md
    html_text = (dest / "audit.html").read_text()
    assert '<table id="fleet">' in html_text and html_text.count("<tr data-pair=") == 3
    assert '<td class="verdict drift">DRIFT</td>' in html_text


def test_all_ok_fleet_exits_zero(tmp_path, run_module):
    ok = [p for p in pairs() if p["verdict"] == "OK"]
    result = run_module(fleet_report, args(tmp_path, pairs=ok))
    assert result["failed"] is False
    assert result["exit_code"] == 0 and result["not_ok"] == []
    assert json.loads((tmp_path / "audit.json").read_text())["exit_code"] == 0


def test_second_run_is_not_changed_and_touches_nothing(tmp_path, run_module):
    assert run_module(fleet_report, args(tmp_path))["changed"] is True
    before = stamps(tmp_path)
    content = {name: (tmp_path / name).read_bytes() for name in FILES}
    again = run_module(fleet_report, args(tmp_path, generated=T1))
    assert again["failed"] is False
    assert again["changed"] is False and again["changes"] == []
    assert again["generated"] == T0
    assert stamps(tmp_path) == before
    assert {name: (tmp_path / name).read_bytes() for name in FILES} == content
    without_time = run_module(fleet_report, {"pairs": pairs(), "dest": str(tmp_path)})
    assert without_time["changed"] is False and stamps(tmp_path) == before


def test_changed_fleet_is_rewritten(tmp_path, run_module):
    run_module(fleet_report, args(tmp_path))
    fixed = pairs()
    fixed[0].update(verdict="OK", differences=[])
    fixed[0]["ranks"]["worker"]["image_id"] = IMAGE
    result = run_module(fleet_report, args(tmp_path, pairs=fixed, generated=T1), diff=True)
    assert result["changed"] is True and "audit.json differs" in result["changes"]
    assert result["counts"]["DRIFT"] == 0 and result["not_ok"] == ["lab-03"]
    assert json.loads((tmp_path / "audit.json").read_text())["generated"] == T1
    assert "## lab-02: DRIFT" in result["diff"]["before"] and "## lab-02" not in result["diff"]["after"]
    assert result["diff"]["after"] == (tmp_path / "audit.md").read_text()


def test_check_mode_writes_nothing(tmp_path, run_module):
    dest = tmp_path / "fleet"
    result = run_module(fleet_report, args(dest), check_mode=True, diff=True)
    assert result["failed"] is False
    assert result["changed"] is True and not dest.exists()
    assert result["diff"]["before"] == ""
    assert result["diff"]["after"].startswith("# GB10 fleet audit\n")
    assert "## lab-02: DRIFT" in result["diff"]["after"]
    assert result["diff"]["before_header"] == result["diff"]["after_header"] == str(dest / "audit.md")

    run_module(fleet_report, args(dest))
    before = stamps(dest)
    same = run_module(fleet_report, args(dest, generated=T1), check_mode=True, diff=True)
    assert same["changed"] is False
    assert same["diff"]["before"] == same["diff"]["after"] == (dest / "audit.md").read_text()
    other = run_module(fleet_report, args(dest, title="Lab fleet"), check_mode=True)
    assert other["changed"] is True
    assert stamps(dest) == before
    assert (dest / "audit.md").read_text().startswith("# GB10 fleet audit\n")


def test_html_escaping_through_the_module(tmp_path, run_module):
    evil = pairs()
    evil[0]["differences"][0]["actual"] = "<script>alert(1)</script>"
    result = run_module(fleet_report, args(tmp_path, pairs=evil, title="<b>fleet</b>"))
    assert result["failed"] is False
    html_text = (tmp_path / "audit.html").read_text()
    assert "<script>" not in html_text and "<b>" not in html_text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_text and "&lt;b&gt;fleet&lt;/b&gt;" in html_text


def test_malformed_verdict_fails_and_writes_nothing(tmp_path, run_module):
    bad = pairs()
    bad[1]["verdict"] = "FINE"
    bad[2]["reasons"] = []
    dest = tmp_path / "fleet"
    result = run_module(fleet_report, args(dest, pairs=bad))
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("2 identity mismatches:")
    assert "rank control node: pair lab-01 verdict is FINE, expected one of OK, DRIFT, DOWN, HUNG, UNREACHABLE, FAILED" in result["msg"]
    assert "rank control node: pair lab-03 reasons is none, expected at least one for verdict UNREACHABLE" \
        in result["msg"]
    assert {(m["item"], m["actual"]) for m in result["mismatches"]} == {("pair lab-01 verdict", "FINE"),
                                                                        ("pair lab-03 reasons", "none")}
    assert not dest.exists()


def test_bad_timestamp_and_empty_fleet_fail(tmp_path, run_module):
    result = run_module(fleet_report, args(tmp_path, generated="05/08/2026 12:00"))
    assert result["failed"] is True
    assert result["msg"] == ("rank control node: generated is 05/08/2026 12:00, "
                             "expected a UTC time like 2026-08-05T12:00:00Z")
    result = run_module(fleet_report, args(tmp_path, pairs=[]))
    assert result["failed"] is True
    assert result["msg"] == "rank control node: pairs is an empty list, expected at least one pair"
    assert list(tmp_path.iterdir()) == []


def test_dest_that_is_a_file_fails(tmp_path, run_module):
    target = tmp_path / "fleet"
    target.write_text("keep me")
    result = run_module(fleet_report, args(target))
    assert result["failed"] is True
    assert result["msg"] == f"rank control node: report folder {target} is a file, expected a folder"
    assert target.read_text() == "keep me"
