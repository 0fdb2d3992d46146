# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet audit report: one verdict per GB10 pair, written as JSON, Markdown and one static HTML page.

Input is the list of per-pair verdict documents of the fleet audit::

    {"pair": "sim01", "verdict": "DRIFT",
     "differences": [{"rank": "worker", "item": "image_id", "expected": "sha256:...", "actual": "sha256:..."}],
     "reasons": [], "ranks": {"head": {"image_id": ..., "profile": ..., ...}, "worker": {...}}}

The input is checked first (fail closed: an unknown verdict, an OK pair that lists differences, a DRIFT
pair without any, a DOWN or UNREACHABLE pair without a reason, a duplicate or unsafe pair name all fail
and nothing is written). The four files are rewritten only when something other than the ``generated``
timestamp would change, so a second run over the same fleet state reports ``changed=false``.
"""
from __future__ import annotations

import html
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from ansible_collections.gb10.dspark.plugins.module_utils.fleet._audit import VERDICTS
from ansible_collections.gb10.dspark.plugins.module_utils.common._clock import utc_now
from ansible_collections.gb10.dspark.plugins.module_utils.common._files import (
    check_finite, write_json_atomic, write_text_atomic,
)
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import (
    CheckError, IdentityError, Mismatch, show as identity_show,
)
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair import SAFE_NAME

SCHEMA_VERSION = 1
RANKS = ("head", "worker")
FILES = {"json": "audit.json", "md": "audit.md", "html": "audit.html", "txt": "audit.txt"}
DEFAULT_TITLE = "GB10 fleet audit"
EXIT_OK = 0
EXIT_NOT_OK = 2
TERMINAL_LOG_LINES = 3  # of each rank of a DOWN or HUNG pair, below its reasons (the files hold all)
CONTROL = "control node"
GENERATED = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
IMAGE_ID = re.compile(r"^(?:sha256:)?([0-9a-fA-F]{12,})$")
# Rank summary keys shown first in the details, in this order; any other key follows alphabetically.
SUMMARY_ORDER = ("image_id", "profile", "profile_sha256", "running", "started_at", "restart_count",
                 "kv_cache_size_tokens")


# ---------------------------------------------------------------- input


def check_generated(value: str | None, now: Callable[[], str] = utc_now) -> str:
    """The report's timestamp: ``value`` when it is a UTC ISO 8601 time ending in ``Z``, else now."""
    if value is None or value == "":
        return now()
    text = str(value)
    valid = bool(GENERATED.match(text))
    if valid:
        try:
            datetime.fromisoformat(text[:-1])
        except ValueError:
            valid = False
    if not valid:
        raise IdentityError(Mismatch(CONTROL, "generated", "a UTC time like 2026-08-05T12:00:00Z", text,
                                     expected_word="expected"))
    return text


def _bad(where: str, expected: object, actual: object) -> Mismatch:
    return Mismatch(CONTROL, where, expected, actual, expected_word="expected")


def _check_difference(where: str, diff: object) -> list[Mismatch]:
    if not isinstance(diff, dict):
        return [_bad(where, "a dict with rank, item, expected and actual", type(diff).__name__)]
    found = []
    for key in ("rank", "item"):
        value = diff.get(key)
        if not isinstance(value, str) or not value.strip():
            found.append(_bad(f"{where}.{key}", "a non-empty string", value))
    for key in ("expected", "actual"):
        if key not in diff:
            found.append(_bad(f"{where}.{key}", "present (null is allowed)", None))
    return found


def _by_rank(where: str, value: object, expected: str, each_ok: Callable[[object], bool],
             each_expected: str) -> tuple[dict, list[Mismatch]]:
    """A mapping of head and worker to one value each (rank summaries, log lines), and its faults; a
    value that is not a mapping counts as empty."""
    if not isinstance(value, dict):
        return {}, [_bad(where, expected, type(value).__name__)]
    found = []
    for rank, item in value.items():
        if rank not in RANKS:
            found.append(_bad(f"{where}.{rank}", "only head and worker", "present"))
        elif not each_ok(item):
            found.append(_bad(f"{where}.{rank}", each_expected, type(item).__name__))
    return value, found


def _check_pair(index: int, pair: object) -> tuple[dict | None, list[Mismatch]]:
    """One verdict document, normalised (lists and dicts filled in), and every fault found in it."""
    where = f"pairs[{index}]"
    if not isinstance(pair, dict):
        return None, [_bad(where, "a dict", type(pair).__name__)]
    found: list[Mismatch] = []
    name = pair.get("pair")
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        found.append(_bad(f"{where}.pair", "a name of letters, digits, '.', '_' and '-'", name))
    else:
        where = f"pair {name}"
    verdict = pair.get("verdict")
    if verdict not in VERDICTS:
        found.append(_bad(f"{where} verdict", "one of " + ", ".join(VERDICTS), verdict))

    out = dict(pair)
    for key in ("differences", "reasons"):
        value = pair.get(key)
        if value is None:
            value = []
        if not isinstance(value, list):
            found.append(_bad(f"{where} {key}", "a list", type(value).__name__))
            value = []
        out[key] = value
    for number, diff in enumerate(out["differences"]):
        found += _check_difference(f"{where} differences[{number}]", diff)
    for number, reason in enumerate(out["reasons"]):
        if not isinstance(reason, str) or not reason.strip():
            found.append(_bad(f"{where} reasons[{number}]", "a non-empty string", reason))

    ranks, faults = _by_rank(f"{where} ranks", {} if pair.get("ranks") is None else pair.get("ranks"),
                             "a dict with head and worker",
                             lambda summary: summary is None or isinstance(summary, dict), "a dict or null")
    found += faults
    out["ranks"] = {rank: ranks.get(rank) or {} for rank in RANKS}
    if "logs" in pair:
        logs, faults = _by_rank(f"{where} logs", pair.get("logs"), "a dict of head and worker log lines",
                                lambda lines: isinstance(lines, list) and all(isinstance(x, str) for x in lines),
                                "a list of strings")
        found += faults
        out["logs"] = {rank: list(logs.get(rank) or []) for rank in RANKS if rank in logs}

    if verdict == "OK" and out["differences"]:
        found.append(_bad(f"{where} differences", "none for verdict OK", f"{len(out['differences'])} listed"))
    if verdict == "OK" and out["reasons"]:
        found.append(_bad(f"{where} reasons", "none for verdict OK", f"{len(out['reasons'])} listed"))
    if verdict == "DRIFT" and not out["differences"]:
        found.append(_bad(f"{where} differences", "at least one for verdict DRIFT", "none"))
    if verdict in ("DOWN", "HUNG", "UNREACHABLE", "FAILED") and not out["reasons"]:
        found.append(_bad(f"{where} reasons", f"at least one for verdict {verdict}", "none"))
    try:
        check_finite(out, "$")
    except ValueError as exc:
        found.append(_bad(f"{where} content", "JSON values only", str(exc)))
    return out, found


def normalize_pairs(pairs: object) -> list[dict]:
    """Every verdict document checked and normalised, sorted by pair name; raises IdentityError listing
    every fault of every pair."""
    if not isinstance(pairs, list):
        raise IdentityError(_bad("pairs", "a list of verdict documents", type(pairs).__name__))
    if not pairs:
        raise IdentityError(_bad("pairs", "at least one pair", "an empty list"))
    found: list[Mismatch] = []
    out: list[dict] = []
    seen: set[str] = set()
    for index, pair in enumerate(pairs):
        normal, faults = _check_pair(index, pair)
        found += faults
        if normal is None:
            continue
        name = normal.get("pair")
        if isinstance(name, str):
            if name in seen:
                found.append(_bad(f"pairs[{index}].pair", "a name given once", f"{name} again"))
            seen.add(name)
        out.append(normal)
    if found:
        raise IdentityError(found)
    return sorted(out, key=lambda p: p["pair"])


def build_document(pairs: list[dict], generated: str, title: str = DEFAULT_TITLE) -> dict:
    """The ``audit.json`` document of already normalised pairs."""
    counts = {verdict: 0 for verdict in VERDICTS}
    for pair in pairs:
        counts[pair["verdict"]] += 1
    not_ok = [pair["pair"] for pair in pairs if pair["verdict"] != "OK"]
    return {
        "schema_version": SCHEMA_VERSION,
        "title": title,
        "generated": generated,
        "counts": counts,
        "exit_code": EXIT_NOT_OK if not_ok else EXIT_OK,
        "not_ok": not_ok,
        "pairs": pairs,
    }


# ---------------------------------------------------------------- shared presentation


def show(value: object) -> str:
    """A value as text: null is ``absent``, dicts are compact sorted JSON, the rest as _identity shows them."""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return identity_show(value)


def _plain(value: object) -> str:
    """Terminal-safe text: control characters (escape sequences included) shown as escapes."""
    text = value if isinstance(value, str) else show(value)
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def short_id(value: object) -> str:
    """An image ID shortened to its first 12 hex digits; other values as :func:`show` gives them."""
    if isinstance(value, str):
        match = IMAGE_ID.match(value)
        if match:
            return match.group(1)[:12].lower()
    return show(value)


def _rank(pair: dict, rank: str) -> dict:
    return pair.get("ranks", {}).get(rank) or {}


def profile_of(pair: dict) -> str:
    """The pair's profile: one name when both ranks agree, else ``head / worker``."""
    head, worker = _rank(pair, "head").get("profile"), _rank(pair, "worker").get("profile")
    if head == worker:
        return show(head)
    return f"{show(head)} / {show(worker)}"


def difference_line(diff: dict) -> str:
    """``rank: item is actual, expected expected``."""
    return f"{show(diff.get('rank'))}: {show(diff.get('item'))} is {show(diff.get('actual'))}, " \
           f"expected {show(diff.get('expected'))}"


def pair_logs(pair: dict) -> list[tuple[str, str, list[str]]]:
    """(rank, its host name, its last log lines) for each rank of a pair whose report carries logs."""
    logs = pair.get("logs") or {}
    return [(rank, str(_rank(pair, rank).get("rank") or rank), logs[rank]) for rank in RANKS if rank in logs]


def _count_line(doc: dict) -> str:
    counts = doc.get("counts") or {}
    parts = ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)
    total = len(doc.get("pairs") or [])
    return f"{total} pair{'s' if total != 1 else ''}: {parts}; exit code {doc.get('exit_code')}"


# ---------------------------------------------------------------- Markdown


def _md(value: object) -> str:
    """Text safe inside a Markdown table cell or list item: one line, no raw HTML, no cell breaks."""
    text = " ".join(str(value).split())
    text = html.escape(text, quote=False)
    for char in ("\\", "|", "`", "*", "[", "]"):
        text = text.replace(char, "\\" + char)
    return text


def render_markdown(doc: dict) -> str:
    lines = [f"# {_md(doc.get('title', DEFAULT_TITLE))}", "",
             f"Generated {_md(doc.get('generated'))}. {_md(_count_line(doc))}.", "",
             "| pair | verdict | head image | worker image | profile | differences |",
             "|---|---|---|---|---|---|"]
    pairs = doc.get("pairs") or []
    for pair in pairs:
        lines.append("| " + " | ".join(_md(cell) for cell in (
            pair["pair"], pair["verdict"], short_id(_rank(pair, "head").get("image_id")),
            short_id(_rank(pair, "worker").get("image_id")), profile_of(pair), len(pair["differences"]))) + " |")
    for pair in pairs:
        if pair["verdict"] == "OK":
            continue
        lines += ["", f"## {_md(pair['pair'])}: {_md(pair['verdict'])}", ""]
        if pair["differences"]:
            lines += ["Differences:", ""] + [f"- {_md(difference_line(d))}" for d in pair["differences"]] + [""]
        if pair["reasons"]:
            lines += ["Reasons:", ""] + [f"- {_md(r)}" for r in pair["reasons"]] + [""]
        for rank, rank_name, logged in pair_logs(pair):
            lines += [f"Last log lines of {rank} {_md(rank_name)}:", ""]
            lines += [f"    {_plain(line)}" for line in logged] if logged else ["(none could be read)"]
            lines += [""]
        while lines[-1] == "":
            lines.pop()
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- HTML


def _h(value: object) -> str:
    return html.escape(show(value) if not isinstance(value, str) else value, quote=True)


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem; color: #1d2430; }
h1 { margin-bottom: .25rem; }
table { border-collapse: collapse; margin: .75rem 0 1.5rem; }
th, td { border: 1px solid #c9d1dc; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: .9em; }
.verdict { font-weight: 600; }
.ok { background: #dcf3e1; color: #14532d; }
.drift { background: #fff1c2; color: #713f12; }
.down { background: #fbd5d5; color: #7f1d1d; }
.hung { background: #fed7aa; color: #7c2d12; }
.unreachable { background: #e2e3f3; color: #312e81; }
.failed { background: #f5d0fe; color: #701a75; }
.counts span { display: inline-block; padding: .15rem .6rem; margin-right: .4rem; border-radius: .3rem; }
section.pair { border-top: 1px solid #c9d1dc; padding-top: .5rem; }
.none { color: #5b6472; font-style: italic; }
pre.logs { background: #f6f8fa; border: 1px solid #c9d1dc; padding: .5rem; overflow-x: auto; font-size: .85em; }
""".strip()


def _image_cell(value: object) -> str:
    return f'<td><code title="{_h(value)}">{_h(short_id(value))}</code></td>'


def _fleet_row(pair: dict) -> str:
    name, verdict = pair["pair"], pair["verdict"]
    head, worker = _rank(pair, "head"), _rank(pair, "worker")
    cells = [
        f'<td><a href="#pair-{_h(name)}">{_h(name)}</a></td>',
        f'<td class="verdict {verdict.lower()}">{_h(verdict)}</td>',
        _image_cell(head.get("image_id")),
        _image_cell(worker.get("image_id")),
        f"<td>{_h(profile_of(pair))}</td>",
        f"<td>{_h(head.get('started_at'))}</td>",
        f"<td>{_h(worker.get('started_at'))}</td>",
        f"<td>{_h(head.get('restart_count'))}</td>",
        f"<td>{_h(worker.get('restart_count'))}</td>",
        f"<td>{len(pair['differences'])}</td>",
    ]
    return f'<tr data-pair="{_h(name)}" data-verdict="{_h(verdict)}">' + "".join(cells) + "</tr>"


def _summary_keys(pair: dict) -> list[str]:
    keys = set(_rank(pair, "head")) | set(_rank(pair, "worker"))
    return [k for k in SUMMARY_ORDER if k in keys] + sorted(k for k in keys if k not in SUMMARY_ORDER)


def _details(pair: dict) -> list[str]:
    name, verdict = pair["pair"], pair["verdict"]
    out = [f'<section class="pair" id="pair-{_h(name)}">',
           f'<h3>{_h(name)} <span class="verdict {verdict.lower()}">{_h(verdict)}</span></h3>']
    if pair["differences"]:
        out += ['<table class="differences">',
                "<thead><tr><th>rank</th><th>item</th><th>expected</th><th>actual</th></tr></thead>", "<tbody>"]
        out += [f"<tr><td>{_h(d.get('rank'))}</td><td>{_h(d.get('item'))}</td>"
                f"<td><code>{_h(show(d.get('expected')))}</code></td><td><code>{_h(show(d.get('actual')))}</code></td></tr>"
                for d in pair["differences"]]
        out += ["</tbody>", "</table>"]
    else:
        out.append('<p class="none">No differences.</p>')
    if pair["reasons"]:
        out += ["<h4>Reasons</h4>", "<ul>"] + [f"<li>{_h(r)}</li>" for r in pair["reasons"]] + ["</ul>"]
    for rank, rank_name, logged in pair_logs(pair):
        out.append(f'<h4>Last log lines of {_h(rank)} <code>{_h(rank_name)}</code></h4>')
        out.append(f'<pre class="logs" data-rank="{_h(rank)}">' + _h("\n".join(logged)) + "</pre>" if logged
                   else '<p class="none">None could be read.</p>')
    keys = _summary_keys(pair)
    if keys:
        out += ['<table class="ranks">', "<thead><tr><th></th><th>head</th><th>worker</th></tr></thead>", "<tbody>"]
        out += [f"<tr><th>{_h(k)}</th><td><code>{_h(show(_rank(pair, 'head').get(k)))}</code></td>"
                f"<td><code>{_h(show(_rank(pair, 'worker').get(k)))}</code></td></tr>" for k in keys]
        out += ["</tbody>", "</table>"]
    out.append("</section>")
    return out


def render_html(doc: dict) -> str:
    """One static, self-contained HTML5 page: inline CSS, no script, no external resource."""
    title = doc.get("title", DEFAULT_TITLE)
    counts = doc.get("counts") or {}
    pairs = doc.get("pairs") or []
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(title)}</title>",
        f"<style>\n{_CSS}\n</style>",
        "</head>",
        "<body>",
        f"<h1>{_h(title)}</h1>",
        f'<p>Generated <time datetime="{_h(doc.get("generated"))}">{_h(doc.get("generated"))}</time>; '
        f"{len(pairs)} pair{'s' if len(pairs) != 1 else ''}; exit code {_h(doc.get('exit_code'))}.</p>",
        '<p class="counts">' + "".join(
            f'<span class="{v.lower()}">{_h(v)}: {_h(counts.get(v, 0))}</span>' for v in VERDICTS) + "</p>",
        '<table id="fleet">',
        "<thead><tr><th>pair</th><th>verdict</th><th>head image</th><th>worker image</th><th>profile</th>"
        "<th>head started</th><th>worker started</th><th>head restarts</th><th>worker restarts</th>"
        "<th>differences</th></tr></thead>",
        "<tbody>",
    ]
    lines += [_fleet_row(pair) for pair in pairs]
    lines += ["</tbody>", "</table>", '<h2 id="details">Details</h2>']
    for pair in pairs:
        lines += _details(pair)
    lines += ["</body>", "</html>"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- terminal


def terminal_table(doc: dict) -> str:
    """The audit document as a fixed-width table for a terminal: one line per pair, each difference and
    reason of a pair indented below it, and a closing count line."""
    headers = ("PAIR", "VERDICT", "HEAD IMAGE", "WORKER IMAGE", "PROFILE", "DIFFS")
    pairs = doc.get("pairs") or []
    rows = []
    for pair in pairs:
        head, worker = _rank(pair, "head"), _rank(pair, "worker")
        rows.append(tuple(_plain(cell) for cell in (
            pair.get("pair"), pair.get("verdict"), short_id(head.get("image_id")), short_id(worker.get("image_id")),
            profile_of(pair), len(pair.get("differences") or []))))
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]

    def line(cells: tuple) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()

    out = [line(headers), line(tuple("-" * w for w in widths))]
    for pair, row in zip(pairs, rows):
        out.append(line(row))
        out += [f"    {_plain(difference_line(d))}" for d in pair.get("differences") or []]
        out += [f"    reason: {_plain(r)}" for r in pair.get("reasons") or []]
        for rank, rank_name, logged in pair_logs(pair):
            out += [f"    {rank} {_plain(rank_name)} logged: {_plain(line)}" for line in logged[-TERMINAL_LOG_LINES:]]
    out.append(_count_line(doc))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- files


@dataclass
class ReportPlan:
    dest: str
    paths: dict[str, str]
    document: dict
    texts: dict[str, str]  # md, html and txt; the JSON is written from ``document``
    changed: bool
    create_dest: bool
    before_md: str
    changes: list[str] = field(default_factory=list)

    @property
    def after_md(self) -> str:
        return self.texts["md"]


def _read(path: str) -> str | None:
    """A file's text; None when it does not exist or is not UTF-8 (either way it gets rewritten)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        return None
    except OSError as exc:
        raise CheckError(CONTROL, f"cannot read {path}: {exc.strerror or exc}") from exc


def _without_generated(doc: object) -> object:
    if isinstance(doc, dict):
        return {k: v for k, v in doc.items() if k != "generated"}
    return doc


def _render(document: dict) -> dict[str, str]:
    return {"md": render_markdown(document), "html": render_html(document), "txt": terminal_table(document)}


def plan_report(dest: str, pairs: object, title: str = DEFAULT_TITLE, generated: str | None = None,
                now: Callable[[], str] = utc_now) -> ReportPlan:
    """Check the input, build the four files and compare them with what ``dest`` holds, ignoring the
    ``generated`` timestamp. Reads only; :func:`write_report` writes."""
    dest = os.path.abspath(dest)
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise IdentityError(_bad(f"report folder {dest}", "a folder", "a file"))
    stamp = check_generated(generated, now)
    document = build_document(normalize_pairs(pairs), stamp, title)
    paths = {kind: os.path.join(dest, name) for kind, name in FILES.items()}
    existing = {kind: _read(path) if os.path.isdir(dest) else None for kind, path in paths.items()}

    old_doc = None
    if existing["json"] is not None:
        try:
            old_doc = json.loads(existing["json"])
        except ValueError:
            old_doc = None
    changes = []
    if not os.path.isdir(dest):
        changes.append("report folder is missing")
    old_stamp = old_doc.get("generated") if isinstance(old_doc, dict) else None
    if _without_generated(old_doc) != _without_generated(document):
        changes.append(f"{FILES['json']} differs")
    elif not isinstance(old_stamp, str):
        changes.append(f"{FILES['json']} has no generated timestamp")
    else:
        # Same fleet state: the other files must match exactly when rendered with the old timestamp.
        kept = dict(document, generated=old_stamp)
        for kind, text in _render(kept).items():
            if existing[kind] != text:
                changes.append(f"{FILES[kind]} differs")
        if not changes:
            document = kept
    return ReportPlan(dest=dest, paths=paths, document=document, texts=_render(document), changed=bool(changes),
                      create_dest=not os.path.isdir(dest), before_md=existing["md"] or "", changes=changes)


def write_report(plan: ReportPlan) -> None:
    """Write the four files atomically (Markdown, HTML and text first, the JSON document last); nothing when
    the plan found no change."""
    if not plan.changed:
        return
    if plan.create_dest:
        os.makedirs(plan.dest, mode=0o755, exist_ok=True)
    write_text_atomic(plan.paths["md"], plan.texts["md"])
    write_text_atomic(plan.paths["html"], plan.texts["html"])
    write_text_atomic(plan.paths["txt"], plan.texts["txt"])
    write_json_atomic(plan.paths["json"], plan.document)


NO_VERDICT = ("the audit failed for this pair before it could be judged (see the failed task in the run's "
              "output); its state is unknown")


def with_missing(pairs: object, expected_pairs: list[str] | None) -> object:
    """``pairs`` plus a FAILED verdict for every expected pair that has none: a pair whose audit
    failed is reported as such, never silently left out of a report that would then say OK."""
    if not expected_pairs or not isinstance(pairs, list):
        return pairs
    judged = {p.get("pair") for p in pairs if isinstance(p, dict)}
    missing = [name for name in dict.fromkeys(expected_pairs) if name not in judged]
    return pairs + [{"pair": name, "verdict": "FAILED", "reasons": [NO_VERDICT]} for name in missing]


def fleet_report(dest: str, pairs: object, title: str = DEFAULT_TITLE, generated: str | None = None,
                 check_mode: bool = False, now: Callable[[], str] = utc_now,
                 expected_pairs: list[str] | None = None) -> ReportPlan:
    """Plan the report and, unless in check mode, write it. The module's one call."""
    plan = plan_report(dest, with_missing(pairs, expected_pairs), title=title, generated=generated, now=now)
    if not check_mode:
        write_report(plan)
    return plan
