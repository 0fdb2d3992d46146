"""ansible-lint rule ``dspark-private-read``: a role's internal variables are its own.

A variable ``__dspark_<role>_...`` is internal to role ``<role>``: its defaults, vars, registers
and set_facts. Another role, or a playbook, that reads it depends on that role's inner workings,
which may change without notice. Results meant for others are published under a public name
(``dspark_<role>_result``, ``dspark_niah_busy``, ``dspark_profile_active``) and read from there.

Checked in every YAML file of a role and in playbooks: a ``__dspark_<name>`` where ``<name>`` is
another role of the collection is reported. Internal names of no role (``__dspark_render_...`` in
playbooks/render.yml) are the file's own and pass.

Checked in the collection's Python plugins too (``plugins/**/*.py``: filters, lookups, actions,
modules, module_utils), which belong to no role: every string in their code that names a role's
internal variable is reported (:func:`python_reads`). Their DOCUMENTATION, EXAMPLES and RETURN
texts, docstrings and comments are documentation, not reads, and pass.

Loaded through ``rulesdir`` in .ansible-lint (see tools/lint/ansible_lint.sh).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ansiblelint.rules import AnsibleLintRule
from ansiblelint.skip_utils import get_rule_skips_from_line

if TYPE_CHECKING:
    from ansiblelint.errors import MatchError
    from ansiblelint.file_utils import Lintable

_PRIVATE = re.compile(r"(?<![A-Za-z0-9_])__dspark_([a-z0-9]+)(?![a-z0-9])")


def roles_dir_of(path: Path) -> tuple[Path | None, str | None]:
    """(the collection's roles folder, the role ``path`` belongs to or None) for a role or playbook file."""
    parts = path.resolve().parts
    if "roles" in parts:
        i = len(parts) - 1 - parts[::-1].index("roles")
        if i + 1 < len(parts):
            return Path(*parts[: i + 1]), parts[i + 1]
    if "playbooks" in parts:
        i = len(parts) - 1 - parts[::-1].index("playbooks")
        return Path(*parts[:i]) / "roles", None
    return None, None


def plugin_roles_dir(path: Path) -> Path | None:
    """The collection's roles folder for a Python file under its ``plugins/`` folder, else None."""
    parts = path.resolve().parts
    if path.suffix != ".py" or "plugins" not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index("plugins")
    return Path(*parts[:i]) / "roles"


_DOC_NAMES = {"DOCUMENTATION", "EXAMPLES", "RETURN"}


def _documentation_nodes(tree: ast.AST) -> set[int]:
    """ids of the string nodes that document (module DOCUMENTATION/EXAMPLES/RETURN, docstrings)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in _DOC_NAMES for t in node.targets):
            out.update(id(n) for n in ast.walk(node.value))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def python_reads(text: str, roles: set[str]) -> list[tuple[int, str, str]]:
    """(line number, variable, its role) for every string in a plugin's code naming a role's internal
    variable: a plugin belongs to no role, so each such name is another role's internals."""
    tree = ast.parse(text)
    docs = _documentation_nodes(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            for match in _PRIVATE.finditer(node.value):
                if match.group(1) in roles:
                    name = re.match(r"[A-Za-z0-9_]+", node.value[match.start():])
                    out.append((node.lineno, name.group(0) if name else match.group(0), match.group(1)))
    return sorted(out)


def foreign_reads(text: str, own: str | None, roles: set[str]) -> list[tuple[int, str, str]]:
    """(line number, variable, its role) for every internal variable of another role in ``text``."""
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        for match in _PRIVATE.finditer(line):
            owner = match.group(1)
            if owner in roles and owner != own:
                name = re.match(r"[A-Za-z0-9_]+", line[match.start():])
                out.append((lineno, name.group(0) if name else match.group(0), owner))
    return out


def python_reads_of(text: str, _own: str | None, roles: set[str]) -> list[tuple[int, str, str]]:
    """:func:`python_reads` with :func:`foreign_reads`' signature; a file that does not parse has no reads."""
    try:
        return python_reads(text, roles)
    except SyntaxError:
        return []


class DsparkPrivateReadRule(AnsibleLintRule):
    """No role or playbook reads another role's __dspark_<role>_ variables."""

    id = "dspark-private-read"
    description = (
        "gb10.dspark: __dspark_<role>_ variables are internal to <role>; other roles and playbooks "
        "read the role's public results (dspark_<role>_...) instead."
    )
    severity = "MEDIUM"
    tags = ["idiom"]
    version_changed = "26.10.0"

    def matchyaml(self, file: Lintable) -> list[MatchError]:
        # ansible-lint hands every file to matchyaml, Python plugins included (their kind is "plugin")
        if not file.content:
            return []
        path = Path(str(file.path))
        if str(file.base_kind) == "text/yaml":
            roles_dir, own = roles_dir_of(path)
            reads = foreign_reads
        else:
            roles_dir, own = plugin_roles_dir(path), None
            reads = python_reads_of  # type: ignore[assignment]
        if roles_dir is None or not roles_dir.is_dir():
            return []
        roles = {p.name for p in roles_dir.iterdir() if p.is_dir()}
        lines = file.content.splitlines()
        results = []
        for lineno, name, owner in reads(file.content, own, roles):
            if self.id in get_rule_skips_from_line(line=lines[lineno - 1], lintable=file):
                continue
            where = f"role {own!r}" if own else ("this plugin" if path.suffix == ".py" else "this playbook")
            results.append(self.create_matcherror(
                message=f"{where} reads {name!r}, internal to role {owner!r}; read a public result of that role instead.",
                lineno=lineno, tag=self.id, filename=file))
        return results
