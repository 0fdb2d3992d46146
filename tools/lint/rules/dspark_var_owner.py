"""ansible-lint rule ``dspark-var-owner``: a role's variables carry the collection's role prefix.

gb10.dspark names every variable ``dspark_...``; a variable a role owns is ``dspark_<role>_...``
and one internal to it ``__dspark_<role>_...`` (``dspark_<role>`` / ``__dspark_<role>`` alone are
accepted too). ansible-lint's own ``var-naming[no-role-prefix]`` asks for ``<role>_...`` instead,
so .ansible-lint skips that sub-rule and enables this one, which checks the same places with the
collection's prefix:

- the keys of a role's defaults/ and vars/ files;
- the names a role's tasks register (internal: ``__dspark_<role>_...``) or set with set_fact
  (internal, or public like ``dspark_profile_active`` that other roles read);
- the internal (``__``) names a role's tasks or blocks set in ``vars:``. Public names there are
  inputs of the roles or task files the task includes (``dspark_profile`` for serve.yml, say) and
  are left to ``var-naming[pattern]`` (``var_naming_pattern`` in .ansible-lint).

Loaded through ``rulesdir`` in .ansible-lint (see tools/lint/ansible_lint.sh).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ansiblelint.rules import AnsibleLintRule
from ansiblelint.skip_utils import get_rule_skips_from_line
from ansiblelint.utils import parse_yaml_from_file

if TYPE_CHECKING:
    from ansiblelint.errors import MatchError
    from ansiblelint.file_utils import Lintable
    from ansiblelint.utils import Task

_INCLUDE_ROLE = {"include_role", "import_role"}


def _names(mapping: Any) -> list[str]:
    """The variable names of a mapping, without ansible-lint's markers (__line__, __file__, ...)."""
    if not isinstance(mapping, dict):
        return []
    return [k for k in mapping if isinstance(k, str) and not (k.startswith("__") and k.endswith("__"))]


def owned(name: str, role: str, *, internal: bool = False) -> bool:
    """True when ``name`` is ``__dspark_<role>[_...]``, or (unless ``internal``) ``dspark_<role>[_...]``."""
    lead = "__" if internal else "(__)?"
    return re.fullmatch(rf"{lead}dspark_{re.escape(role)}(_[a-z0-9_]*)?", name) is not None


class DsparkVarOwnerRule(AnsibleLintRule):
    """A role's variables are named dspark_<role>_... (internal ones __dspark_<role>_...)."""

    id = "dspark-var-owner"
    description = (
        "gb10.dspark: variables a role defines (defaults/, vars/, register, set_fact, internal "
        "task vars) start with dspark_<role>_ or __dspark_<role>_."
    )
    severity = "MEDIUM"
    tags = ["idiom"]
    version_changed = "26.10.0"

    def _error(self, name: str, role: str, where: str, file: Lintable | None, *, internal: bool = False,
               **kw: Any) -> MatchError:
        want = f"__dspark_{role}_" if internal else f"dspark_{role}_ (or __dspark_{role}_)"
        return self.create_matcherror(
            message=f"{where} {name!r} in role {role!r} should start with {want}.",
            tag=self.id,
            filename=file,
            **kw,
        )

    def matchyaml(self, file: Lintable) -> list[MatchError]:
        if str(file.kind) != "vars" or not file.role or not file.data:
            return []
        data = parse_yaml_from_file(str(file.path))
        if not isinstance(data, dict):
            return []
        lines = file.content.splitlines()
        results = []
        for key in data:
            if isinstance(key, str) and not owned(key, file.role):
                match = self._error(key, file.role, "variable", file, data=key)
                skips = get_rule_skips_from_line(line=lines[match.lineno - 1], lintable=file)
                if self.id not in skips:
                    results.append(match)
        return results

    def matchtask(self, task: Task, file: Lintable | None = None) -> list[MatchError]:
        role = file.role if file else ""
        if not role:
            return []
        action = task["action"]
        module = action["__ansible_module__"]
        found: list[tuple[str, str, bool]] = []  # name, what it is, whether it must be internal
        registered = task.get("register")
        if isinstance(registered, str):
            found.append((registered, "registered variable", True))
        if module == "set_fact":
            found += [(k, "set_fact variable", False) for k in _names(action) if k != "cacheable"]
        if module not in _INCLUDE_ROLE:
            found += [(k, "internal task variable", True) for k in _names(task.get("vars")) if k.startswith("__")]
        return [self._error(name, role, where, file, internal=internal, lineno=task.line)
                for name, where, internal in found if not owned(name, role, internal=internal)]
