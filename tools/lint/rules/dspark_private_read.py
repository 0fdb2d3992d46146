"""ansible-lint rule ``dspark-private-read``: a role's internal variables are its own.

A variable ``__dspark_<role>_...`` is internal to role ``<role>``: its defaults, vars, registers
and set_facts. Another role, or a playbook, that reads it depends on that role's inner workings,
which may change without notice. Results meant for others are published under a public name
(``dspark_<role>_result``, ``dspark_niah_busy``, ``dspark_profile_active``) and read from there.

Checked in every YAML file of a role and in playbooks: a ``__dspark_<name>`` where ``<name>`` is
another role of the collection is reported. Internal names of no role (``__dspark_render_...`` in
playbooks/render.yml) are the file's own and pass.

Loaded through ``rulesdir`` in .ansible-lint (see tools/lint/ansible_lint.sh).
"""

from __future__ import annotations

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
        if str(file.base_kind) != "text/yaml" or not file.content:
            return []
        roles_dir, own = roles_dir_of(Path(str(file.path)))
        if roles_dir is None or not roles_dir.is_dir():
            return []
        roles = {p.name for p in roles_dir.iterdir() if p.is_dir()}
        lines = file.content.splitlines()
        results = []
        for lineno, name, owner in foreign_reads(file.content, own, roles):
            if self.id in get_rule_skips_from_line(line=lines[lineno - 1], lintable=file):
                continue
            where = f"role {own!r}" if own else "this playbook"
            results.append(self.create_matcherror(
                message=f"{where} reads {name!r}, internal to role {owner!r}; read a public result of that role instead.",
                lineno=lineno, tag=self.id, filename=file))
        return results
