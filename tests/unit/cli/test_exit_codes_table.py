"""docs/operator-guide.md §2.4 is the one table of exit codes: every code ansible-core's ansible-playbook and the
dspark CLI end with is a row, each row says what the code means in both, and the CLI decides as the row says."""
from __future__ import annotations

import io
import re
from pathlib import Path

from ansible.errors import ExitCode
from dspark_cli import main as cli
from dspark_cli import progress

GUIDE = Path(cli.__file__).resolve().parents[2] / "docs" / "operator-guide.md"


def table() -> dict[int, tuple[str, str]]:
    """code -> (the ansible-playbook cell, the dspark cell), one entry per code of a row."""
    text = GUIDE.read_text()
    section = text[text.index("### 2.4 Exit codes"):text.index("## 3. ")]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"\d+(, \d+)*", cells[0]):
            for code in cells[0].split(", "):
                rows[int(code)] = (cells[1], cells[2])
    return rows


def test_every_code_of_ansible_core_and_of_the_cli_has_its_row_and_no_other_code_does():
    ansible = {int(c) for c in ExitCode if c is not ExitCode.UNICODE_ERROR}  # 6: "obsolete, no longer used"
    dspark = {cli.EX_UNAVAILABLE, cli.EXIT_SIGINT, cli.EXIT_SIGTERM, cli.EXIT_SIGHUP, cli.EXIT_SIGQUIT, 64}
    assert set(table()) == ansible | dspark


def test_the_rows_say_what_ansible_core_means():
    rows = table()
    assert "failed" in rows[ExitCode.HOST_FAILED][0]
    assert "unreachable" in rows[ExitCode.HOST_UNREACHABLE][0] and "parse" in rows[ExitCode.PARSER_ERROR][0]
    assert "options" in rows[ExitCode.INVALID_CLI_OPTION][0] and "interrupted" in rows[ExitCode.KEYBOARD_INTERRUPT][0]
    for code in (64, 69, 129, 130, 131, 143):
        assert rows[code][0] == "—", code  # the CLI's own
    assert "ansible-playbook" in rows[69][1] and "--version" in rows[69][1]


def test_the_cli_decides_as_the_rows_say():
    rows = table()
    mapping = {"lab01-head": "lab01", "lab01-worker": "lab01", "lab02-head": "lab02"}
    failed = {"failures": {"lab01-head": 1}, "ok": {"lab02-head": 3}}
    unreachable = {"failures": {"lab01-head": 1}, "dark": {"lab02-head": 1}}
    code, line = progress.decide_exit("failed", ExitCode.HOST_FAILED, failed, mapping)
    assert code == 2 and "lab01" in line and "failing pairs" in rows[2][1]
    code, line = progress.decide_exit("failed", ExitCode.HOST_UNREACHABLE, unreachable, mapping)
    assert code == 4 and "lab02" in line and "failing pairs" in rows[4][1]
    # the audit: audit.json decides, an unreachable rank included
    audit = {"exit_code": 2, "not_ok": ["lab02"]}
    assert progress.decide_exit("failed", ExitCode.HOST_FAILED, unreachable, mapping, audit=audit)[0] == 2
    assert "audit.json" in rows[2][1] and "UNREACHABLE" in rows[2][1]
    assert progress.decide_exit("canceled", None, None, mapping, canceled=True)[0] == 130
    assert progress.decide_exit("successful", 0, {"ok": {"lab01-head": 1}}, mapping) == (0, None)
    assert rows[0][1] == "the same" and rows[5][1] == "the same"
    err = io.StringIO()
    assert cli.run(["provision"], environ={}, cwd="/", out=io.StringIO(), err=err) == 64 and "usage" in rows[64][1]


def test_the_help_and_the_cli_readme_point_at_the_table_and_agree_with_it():
    epilog = cli.build_parser().epilog
    assert "operator-guide.md, 2.4" in epilog
    stated = {int(n) for n in re.findall(r"\b(\d+) (?:failed|an unreachable|usage|no ansible|interrupted|on SIG)", epilog)}
    assert stated == {2, 4, 64, 69, 130, 143, 129, 131} and stated <= set(table())
    readme = (GUIDE.parents[1] / "cli" / "README.md").read_text()
    assert "docs/operator-guide.md §2.4" in readme
