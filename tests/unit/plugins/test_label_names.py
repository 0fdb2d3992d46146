"""One table of label names: no file of the collection but module_utils/identity/_labels.py spells one.

Every file under plugins/, roles/ and playbooks/ is read - code, YAML, templates, comments alike -
for the label namespace (``io.gb10.dspark``, with or without a label name after it). Roles take a
label name from the ``gb10.dspark.label_name`` / ``engine_labels`` / ``label_record`` filters,
Python from ``_labels.LABELS``.

The one exception is a module's documentation (the DOCUMENTATION, EXAMPLES and RETURN strings,
found by parsing the module, not by a pattern): a RETURN sample shows real labels to its reader.
Even there, every label name spelled must be one of the table, so the documentation cannot drift
from it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _labels
from tests.unit.plugins.conftest import REPO

SCANNED = ("plugins", "roles", "playbooks")
THE_TABLE = REPO / "plugins" / "module_utils" / "identity" / "_labels.py"
DOC_NAMES = ("DOCUMENTATION", "EXAMPLES", "RETURN")
NAMESPACE = re.compile(r"(?<!\w)io\.gb10\.dspark\b[\w.*]*")


def files() -> list[Path]:
    out = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".png"):
                out.append(path)
    return out


def doc_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of a module's DOCUMENTATION / EXAMPLES / RETURN strings."""
    tree = ast.parse(text)
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    spans = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in DOC_NAMES and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            value = node.value
            spans.append((offsets[value.lineno - 1] + value.col_offset,
                          offsets[value.end_lineno - 1] + value.end_col_offset))
    return spans


def spelled(rel: str, text: str) -> tuple[list[str], list[str]]:
    """(where ``text`` spells the label namespace outside module documentation, the names spelled
    inside it). Module documentation is only recognised in plugins/modules/*.py."""
    spans = doc_spans(text) if rel.startswith("plugins/modules/") and rel.endswith(".py") else []
    outside, documented = [], []
    for match in NAMESPACE.finditer(text):
        if any(start <= match.start() < end for start, end in spans):
            documented.append(match.group(0))
        else:
            line = text.count("\n", 0, match.start()) + 1
            outside.append(f"{rel}:{line}: {match.group(0)}")
    return outside, documented


def test_only_the_table_spells_a_label_name():
    offenders, documented = [], []
    for path in files():
        if path == THE_TABLE:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            text = path.read_bytes().decode("latin-1")
        outside, inside = spelled(path.relative_to(REPO).as_posix(), text)
        offenders += outside
        documented += inside
    assert offenders == [], "spell these through plugins/module_utils/identity/_labels.py:\n" + "\n".join(offenders)
    names = set(_labels.LABELS.values())
    unknown = sorted({d for d in documented if d not in names and d.rstrip("*") != _labels.PREFIX})
    assert unknown == [], f"module documentation names labels that are not in the table: {unknown}"


def test_the_table_spells_the_namespace_once():
    assert len(NAMESPACE.findall(THE_TABLE.read_text())) == 1  # PREFIX; every name is built from it


def test_the_scan_finds_what_it_must_and_only_lets_module_docs_through():
    code = ('DOCUMENTATION = r"""\nsample: {"io.gb10.dspark.pair": "a"}\n"""\n'
            'LABEL = "io.gb10.dspark.pair"\n'
            'OTHER = "io.gb10.dspark" + ".rank"\n'
            'RETURN = r"""\n  labels: {"io.gb10.dspark.rank": "0"}\n"""\n')
    outside, inside = spelled("plugins/modules/x.py", code)
    assert outside == ["plugins/modules/x.py:4: io.gb10.dspark.pair", "plugins/modules/x.py:5: io.gb10.dspark"]
    assert inside == ["io.gb10.dspark.pair", "io.gb10.dspark.rank"]
    # no exception outside modules: a role's comment, a module_utils docstring, a filter's doc file
    for rel in ("roles/engine/tasks/orphans.yml", "plugins/module_utils/fleet/_audit.py", "plugins/filter/labels.yml"):
        assert spelled(rel, code)[0] != [] and spelled(rel, code)[1] == []
    assert spelled("roles/x/tasks/main.yml", "# the io.gb10.dspark.* labels\n")[0] == [
        "roles/x/tasks/main.yml:1: io.gb10.dspark.*"]
    assert spelled("playbooks/x.yml", "name: gb10.dspark.rank_audit\n") == ([], [])  # an FQCN is not a label
    assert spelled("playbooks/x.yml", "scenario.gb10.dspark.x\n") == ([], [])  # nor a longer word
