# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/architecture.md's claims, held against the code: each test checks one claim a reader can look up.

This file is shared: each group of claims has its own functions, named for what they hold. The
"values once" group (``test_values_once_*``) holds "Nothing else repeats the pin's values", "the
sample's pin and site exist once", "has an API key" defined once, and "roles read site values
through the lookup". What counts as code: a Python file's string constants outside its
DOCUMENTATION, EXAMPLES and RETURN texts and docstrings (documentation may quote a value), and a
YAML file's lines outside comments and the roles' meta/argument_specs.yml (which documents options).
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.gb10.dspark.plugins.module_utils import _pin, _site  # noqa: E402

_DOC_NAMES = {"DOCUMENTATION", "EXAMPLES", "RETURN"}
_COMMENT = re.compile(r"(^|\s)#.*$")


# --- values once: helpers -----------------------------------------------------------------------

def _python_code_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant of ``path``'s code (not its documentation or docstrings)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))  # type: ignore[arg-type]
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in _DOC_NAMES for t in node.targets):
            docs.update(id(n) for n in ast.walk(node.value))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


def _collection_python() -> list[Path]:
    return sorted(REPO.glob("plugins/**/*.py")) + sorted(REPO.glob("roles/*/files/**/*.py"))


def _role_and_playbook_yaml() -> list[Path]:
    return sorted(p for p in REPO.glob("roles/**/*.yml") if p.parent.name != "meta") + sorted(
        REPO.glob("playbooks/*.yml"))


def _yaml_code_lines(path: Path) -> list[tuple[int, str]]:
    return [(n, _COMMENT.sub("", line)) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)]


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _pin_values() -> list[str]:
    """What the pin's module fixes literally: the one KV-cache dtype and the image label names."""
    return [_pin.KV_CACHE_DTYPE, *_pin.LABELS]


def pin_value_spellings(python: list[Path], yaml_files: list[Path]) -> list[str]:
    found = []
    for path in python:
        if path.name == "_pin.py":
            continue
        for line, text in _python_code_strings(path):
            found += [f"{_rel(path)}:{line} {value}" for value in _pin_values() if value in text]
    for path in yaml_files:
        for line, code in _yaml_code_lines(path):
            found += [f"{_rel(path)}:{line} {value}" for value in _pin_values() if value in code]
    return found


# --- values once --------------------------------------------------------------------------------

def test_values_once_the_pins_values_are_spelled_in_pin_py_only():
    """"Nothing else repeats the pin's values": the KV-cache dtype and the image labels are spelled in
    plugins/module_utils/_pin.py; the profile logic, the gate, the catalog and every role read them."""
    assert _pin.KV_CACHE_DTYPE == "nvfp4_ds_mla" and "io.r0b0tlab.kv-cache.dtype" in _pin.LABELS
    assert pin_value_spellings(_collection_python(), _role_and_playbook_yaml()) == []


def test_values_once_the_pin_check_finds_a_second_spelling():
    """The check above is not vacuous: a gate or a catalog that spells a pin value again is found."""
    gate = _write(REPO / "plugins" / "module_utils" / "_gate.py",
                  '"""Docs may say nvfp4_ds_mla."""\nMARKERS = ("DSpark", "nvfp4_ds_mla")\n'
                  'LABEL = labels.get("io.r0b0tlab.model.revision")\n')
    catalog = _write(REPO / "roles" / "profile" / "vars" / "main.yml",
                     "env:\n  KV_CACHE_DTYPE: nvfp4_ds_mla  # nvfp4_ds_mla\n# io.r0b0tlab.model.revision\n")
    found = pin_value_spellings([gate], [catalog])
    assert [f.split(":", 1)[1] for f in found] == ["2 nvfp4_ds_mla", "3 io.r0b0tlab.model.revision",
                                                   "2 nvfp4_ds_mla"]


def test_values_once_the_samples_pin_and_site_exist_once():
    """The sample inventories' pin and site settings are one file each, and no sample holds a link
    (a copied folder would lose what a link points at)."""
    samples = [p for p in (REPO / "inventories").iterdir() if p.name.startswith("sample")]
    assert samples
    for name in ("pin.yml", "site.yml"):
        files = [_rel(p) for folder in samples for p in folder.rglob(name)]
        assert files == [f"inventories/sample/group_vars/all/{name}"], files
    assert [_rel(p) for folder in samples for p in folder.rglob("*") if p.is_symlink()] == []


_KEY_TEST = re.compile(r"dspark_api_key\s*\||_has_key\b|dspark_api_key\s*(?:is|!=|==)|length\s*>\s*0.*api_key")


def has_key_spellings(yaml_files: list[Path]) -> list[str]:
    return [f"{_rel(path)}:{line} {code.strip()}" for path in yaml_files for line, code in _yaml_code_lines(path)
            if _KEY_TEST.search(code)]


def test_values_once_no_role_spells_has_a_key_itself():
    """"Has an API key" is one definition (_site.has_api_key, asked through the gb10.dspark.has_api_key
    lookup): no role or playbook tests dspark_api_key itself or keeps a has-key variable of its own."""
    files = _role_and_playbook_yaml()
    assert has_key_spellings(files) == []
    users = {_rel(p).split("/")[1] for p in files if "lookup('gb10.dspark.has_api_key')" in p.read_text()}
    assert users >= {"audit", "engine", "evidence", "gate", "guard", "niah", "systems"}, users


def test_values_once_the_has_key_check_finds_a_role_of_its_own():
    """The check above sees what the roles spelled before, and passes the one way."""
    found = has_key_spellings([_write(REPO / "roles" / "gate" / "tasks" / "main.yml",
                                      "x: \"{{ (dspark_api_key | default('')) | length > 0 }}\"\n"
                                      "api_key: \"{{ dspark_api_key | default(omit, true) }}\"\n"
                                      "when: __dspark_engine_has_key\n"
                                      "# __dspark_audit_has_key\n"
                                      "api_key: \"{{ dspark_api_key if lookup('gb10.dspark.has_api_key') else omit }}\"\n")])
    assert [f.split(":", 1)[1].split(" ", 1)[0] for f in found] == ["1", "2", "3"]


_SITE_READ = re.compile(r"(?<![A-Za-z0-9_'\"])(%s)(?![A-Za-z0-9_])(?!\s*:)" % "|".join(_site.VARIABLES.values()))


def raw_site_reads(yaml_files: list[Path]) -> list[str]:
    """Every read of a site variable (dspark_api_port, ...) in a role or playbook that is not the lookup:
    the variable's name outside a comment, not as the key it is set under."""
    return [f"{_rel(path)}:{line} {code.strip()}" for path in yaml_files for line, code in _yaml_code_lines(path)
            if _SITE_READ.search(code)]


def test_values_once_site_values_only_through_the_lookup():
    """"Roles read site values through the lookup": no role or playbook reads dspark_served_model_name,
    dspark_api_port, dspark_master_port, dspark_container_name or dspark_profile raw (it would break where
    the inventory leaves it unset); they ask lookup('gb10.dspark.site', '<term>')."""
    assert raw_site_reads(_role_and_playbook_yaml()) == []


class _Text:
    """A stand-in path with given text, for checking the checks."""

    def __init__(self, path: Path, text: str):
        self._path, self._text = path, text

    def read_text(self, encoding: str = "utf-8") -> str:
        return self._text

    def relative_to(self, other: Path) -> Path:
        return self._path.relative_to(other)

    @property
    def name(self) -> str:
        return self._path.name


def _write(path: Path, text: str) -> _Text:
    return _Text(path, text)


def test_values_once_the_site_read_check_finds_raw_reads():
    found = raw_site_reads([_write(REPO / "roles" / "engine" / "tasks" / "stop.yml",
                                   "model: \"{{ dspark_served_model_name }}\"\n"
                                   "base_url: \"http://127.0.0.1:{{ dspark_api_port }}\"\n"
                                   "dspark_api_port: 8888\n"
                                   "# {{ dspark_api_port }}\n"
                                   "profile: \"{{ dspark_profile | default('production') }}\"\n"
                                   "x: \"{{ lookup('gb10.dspark.site', 'api_port') }} {{ dspark_profile_active }}\"\n")])
    assert [f.split(":", 1)[1].split(" ", 1)[0] for f in found] == ["1", "2", "5"]


def test_values_once_the_site_defaults_are_spelled_in_site_py_only():
    """The container name, served model name and default profile are the site table's: no plugin code
    spells them (module DOCUMENTATION states them, checked against the table by test_site_defaults)."""
    values = {_site.SITE_DEFAULTS[t] for t in ("container_name", "served_model_name", "profile")}
    found = [f"{_rel(p)}:{line} {text}" for p in _collection_python() if p.name != "_site.py"
             for line, text in _python_code_strings(p) if text in values]
    assert found == []
