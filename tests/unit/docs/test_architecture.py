# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/architecture.md's claims that code can check, held by tests (one clearly named test per claim).

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
from functools import lru_cache
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]

# ---- one HTTP client: plugins/module_utils/common/_http.py ---------------------------------------------
HTTP_CLIENT = "plugins/module_utils/common/_http.py"
# The modules that speak HTTP as a client; only _http.py may import them.
HTTP_CLIENT_MODULES = ("http.client", "urllib.request", "requests", "urllib3", "httpx", "aiohttp",
                       "ansible.module_utils.urls")
# Real exceptions, each with its reason. Nothing here talks to a head.
HTTP_CLIENT_ALLOWED = {
    "plugins/module_utils/engine/_docker_engine.py": "the collection's one Docker client (the docker SDK, over the rank's "
                                               "Docker socket): it reads the SDK's transport errors, and its log "
                                               "read goes through the SDK's own session; not a head's HTTP API",
}


def _python_files() -> list[Path]:
    """Every Python module of the product: plugins/, cli/ and roles/ (the Python a role ships is in its files/)."""
    roots = [REPO / "plugins", REPO / "cli", REPO / "roles"]
    files = [p for root in roots if root.is_dir() for p in root.rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(set(files))


def _client_module(name: str) -> str | None:
    for module in HTTP_CLIENT_MODULES:
        if name == module or name.startswith(module + "."):
            return module
    return None


def http_client_uses(source: str) -> list[str]:
    """What in ``source`` speaks HTTP as a client on its own: an import of an HTTP client module (``import
    http.client``, ``from http import client``, ``from urllib import request``, ``importlib.import_module(
    "http.client")``) or an ``HTTPConnection``/``HTTPSConnection`` named at all."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _client_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(_client_module(n) for n in names):
                found.append(f"line {node.lineno}: from {node.module} import "
                             f"{', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and _client_module(node.args[0].value):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                found.append(f"line {node.lineno}: {called}({node.args[0].value!r})")
        elif isinstance(node, (ast.Name, ast.Attribute)):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in ("HTTPConnection", "HTTPSConnection"):
                found.append(f"line {node.lineno}: {name}")
    return found


def test_one_http_client_the_checker_sees_every_way_in():
    """The check itself: each way of opening an HTTP client is seen, a server or a URL parser is not."""
    for source in ("import http.client", "import http.client as hc", "from http import client",
                   "from ansible.module_utils.urls import fetch_url",
                   "from http.client import HTTPConnection", "import urllib.request", "from urllib import request",
                   "import requests", "import importlib\nimportlib.import_module('http.client')",
                   "c = conn.HTTPSConnection('h')", "__import__('urllib.request')"):
        assert http_client_uses(source), source
    for source in ("import http.server", "import urllib.parse", "from urllib.parse import quote",
                   "from http import HTTPStatus", "import socket"):
        assert http_client_uses(source) == [], source


def test_one_http_client_no_module_but_http_opens_its_own():
    """docs/architecture.md: every call to a head goes through _http. No module of plugins/, roles/ or cli/ but
    _http.py (and the allow-listed, each with its reason) imports an HTTP client or opens a connection."""
    files = _python_files()
    assert REPO / HTTP_CLIENT in files and any("roles" in p.parts for p in files) and any("cli" in p.parts for p in files)
    offenders = {}
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        if rel == HTTP_CLIENT or rel in HTTP_CLIENT_ALLOWED:
            continue
        uses = http_client_uses(path.read_text(encoding="utf-8"))
        if uses:
            offenders[rel] = uses
    assert offenders == {}, f"speak HTTP through plugins/module_utils/common/_http.py, not on their own: {offenders}"
    assert http_client_uses((REPO / HTTP_CLIENT).read_text(encoding="utf-8")), "_http.py is the client"
    for rel, reason in HTTP_CLIENT_ALLOWED.items():
        assert (REPO / rel).is_file() and reason, f"{rel} no longer exists: remove it from HTTP_CLIENT_ALLOWED"
        assert http_client_uses((REPO / rel).read_text(encoding="utf-8")), \
            f"{rel} imports no HTTP client any more: remove it from HTTP_CLIENT_ALLOWED"


def test_one_http_client_the_architecture_page_says_so():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "`plugins/module_utils/common/_http.py`" in text and "one HTTP client" in text


# Ansible's own HTTP modules in the roles and playbooks: none speaks to a head's API. Each use is named by its
# file and task name, with its reason.
HTTP_TASK_MODULES = ("ansible.builtin.uri", "ansible.builtin.get_url", "uri", "get_url")
HTTP_TASKS_ALLOWED = {
    ("roles/image/tasks/load.yml", "Image | Size of the archive on the site mirror, as the head sees it"):
        "a HEAD of the site's image mirror (the operator's server, with its own credentials), not a head's API",
    ("roles/image/tasks/load.yml", "Image | Fetch the archive from the site mirror, checked against the pin's sha256"):
        "the image archive from the site's mirror, checked against the pin's sha256, not a head's API",
    ("roles/image/tasks/load.yml", "Image | Fetch the archive from the head over the pair's link, checked against the "
                                   "pin's sha256"):
        "the worker's download from the head's archive relay (_archive_relay, a file server), not the engine's API",
    ("roles/image/tasks/load.yml", "Image | Stop the head's relay, the worker's fetch being done or failed (frees the "
                                   "port now)"):
        "the archive relay's stop request (its POST), not the engine's API",
}


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(node.get(key))


def test_one_http_client_no_task_calls_a_head_with_ansibles_own_http_modules():
    """A head's API is not called from YAML either (ansible.builtin.uri/get_url would bypass _http): every such
    task in roles/ and playbooks/ is one of the allow-listed, named with its reason."""
    found = set()
    for path in sorted([*(REPO / "roles").rglob("*.yml"), *(REPO / "playbooks").rglob("*.yml")]):
        text = path.read_text(encoding="utf-8")
        if not any(module in text for module in HTTP_TASK_MODULES):
            continue
        for task in _tasks(yaml.safe_load(text)):
            if any(module in task for module in HTTP_TASK_MODULES):
                found.add((path.relative_to(REPO).as_posix(), task.get("name")))
    assert found, "the image role's mirror and relay tasks are not seen: the check reads nothing"
    assert found - set(HTTP_TASKS_ALLOWED) == set(), "speak to a head through plugins/module_utils/common/_http.py"
    assert set(HTTP_TASKS_ALLOWED) - found == set(), "allow-listed tasks that no longer exist: remove them"


# ---- one redaction rule: plugins/module_utils/common/_secrets.py ------------------------------------------
# Each claim has its own test functions, named after it (``test_redaction_...``, ...), so that more
# claims can be added here without touching the others. The checks read the Python sources of the
# product (plugins/, cli/, the roles' files) with :mod:`ast`; they never import them.
# 
# Redaction (docs/architecture.md, "Secrets"): ``plugins/module_utils/common/_secrets.py`` holds the one
# rule for secret NAMES (``is_secret_name``), the one redactor of VALUES (``redact``,
# ``redact_document``, ``redact_secrets_text``), the one placeholder (``REDACTED``) and the one
# minimum length (``MIN_SECRET_LENGTH``). No other module defines its own.
SECRETS_MODULE = REPO / "plugins" / "module_utils" / "common" / "_secrets.py"
PRODUCT_DIRS = ("plugins", "cli", "roles")


@lru_cache(maxsize=None)
def product_sources() -> tuple[tuple[str, ast.Module], ...]:
    """(path relative to the repository, parsed module) of every Python file of the product."""
    files = sorted(path for top in PRODUCT_DIRS for path in (REPO / top).rglob("*.py")
                   if "__pycache__" not in path.parts)
    assert any(path == SECRETS_MODULE for path in files)
    return tuple((str(path.relative_to(REPO)), ast.parse(path.read_text(encoding="utf-8"), str(path)))
                 for path in files)


def outside_secrets():
    """Every product module but _secrets.py, with its parsed source."""
    secrets_path = str(SECRETS_MODULE.relative_to(REPO))
    return [(path, tree) for path, tree in product_sources() if path != secrets_path]


# --------------------------------------------------------------------------------------------
# redaction: one rule, one redactor, one placeholder, one minimum length (_secrets.py)
# --------------------------------------------------------------------------------------------
# A word of a secret-NAME rule, as a rule spells it: an element of a tuple of words, a suffix
# tested with endswith, a word looked for with ``in``, or a word in a regular expression.
SECRET_WORD = re.compile(r"_?(?:SECRETS?|TOKENS?|PASS|PASSWORD|PASSWD|PASSPHRASE|CREDS?|CREDENTIALS?|API_?KEY|"
                         r"ACCESS_?KEY|PRIVATE_?KEY|AUTH|AUTHORIZATION|BEARER|COOKIE|SESSION)_?", re.IGNORECASE)
# ... in a regular expression: spelled in capitals as a NAME is (``API_KEY=``), or several as alternatives.
SECRET_WORD_IN_REGEX = re.compile(r"(?:SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|"
                                  r"PRIVATE_?KEY|AUTH|BEARER)(?![a-z])")
SECRET_ALTERNATIVES = re.compile(r"(?i)(?:secret|token|pass(?:word|wd)?|cred\w*|api_?key|auth)\s*\|"
                                 r"\s*(?:secret|token|pass(?:word|wd)?|cred\w*|api_?key|auth)")
REGEX_FUNCTIONS = {"compile", "match", "fullmatch", "search", "sub", "subn", "findall", "finditer", "split"}
MIN_LENGTH_NAME = re.compile(r"(?i)^_*(?:\w*(?:SECRET|SCRUB|REDACT|TOLD|DERIVED)\w*MIN\w*|MIN\w*(?:SECRET|SCRUB|REDACT|"
                             r"TOLD|DERIVED)\w*)$")


def _strings(nodes) -> list[str]:
    return [node.value for node in nodes if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def _is_secret_word(text: str) -> bool:
    return bool(SECRET_WORD.fullmatch(text))


def secret_name_rules(tree: ast.Module) -> list[str]:
    """Where a module spells a rule for secret NAMES of its own: a tuple, list or set with two or more
    secret words (``("PASS", "TOKEN", ...)``), an ``in`` test or ``startswith``/``endswith`` call with a
    secret word, or a regular expression that names a secret word."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            words = [s for s in _strings(node.elts) if _is_secret_word(s)]
            if len(words) >= 2:
                found.append(f"line {node.lineno}: a collection of secret words {words}")
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            words = [s for s in _strings([node.left]) if _is_secret_word(s)]
            if words:
                found.append(f"line {node.lineno}: a test for the secret word {words[0]!r} in a name")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in ("endswith", "startswith"):
                args = [e for a in node.args for e in (a.elts if isinstance(a, ast.Tuple) else [a])]
                words = [s for s in _strings(args) if _is_secret_word(s)]
                if words:
                    found.append(f"line {node.lineno}: {name}({words[0]!r})")
            elif name in REGEX_FUNCTIONS and node.args:
                for pattern in _strings(node.args[:1]):
                    if SECRET_WORD_IN_REGEX.search(pattern) or SECRET_ALTERNATIVES.search(pattern):
                        found.append(f"line {node.lineno}: a regular expression naming a secret word {pattern!r}")
    return found


def test_redaction_no_module_defines_its_own_secret_name_pattern():
    """Whether a NAME is secret is decided by _secrets.is_secret_name alone."""
    offenders = [f"{path} {where}" for path, tree in outside_secrets() for where in secret_name_rules(tree)]
    assert offenders == [], "secret-name rules outside plugins/module_utils/common/_secrets.py (use is_secret_name):\n" + \
        "\n".join(offenders)


def test_redaction_no_module_defines_its_own_redaction_function():
    """Values are redacted by _secrets.redact / redact_document / redact_secrets_text alone."""
    offenders = [f"{path} line {node.lineno}: def {node.name}" for path, tree in outside_secrets()
                 for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and re.search(r"redact|secretish|is_secret", node.name, re.IGNORECASE)]
    assert offenders == [], "redaction functions outside plugins/module_utils/common/_secrets.py (use _secrets):\n" + \
        "\n".join(offenders)


def test_redaction_placeholder_is_spelled_only_in_secrets():
    """The placeholder is _secrets.REDACTED; a module that writes it imports it."""
    offenders = [f"{path} line {node.lineno}" for path, tree in outside_secrets() for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and node.value == "<redacted>"]
    assert offenders == [], "'<redacted>' spelled outside _secrets.py (import REDACTED):\n" + "\n".join(offenders)


def test_redaction_has_one_minimum_length():
    """A secret value's minimum length is _secrets.MIN_SECRET_LENGTH; no module keeps a minimum of its own."""
    secrets_tree = dict(product_sources())[str(SECRETS_MODULE.relative_to(REPO))]
    own = [node for node in ast.walk(secrets_tree) if isinstance(node, ast.Assign)
           and any(isinstance(t, ast.Name) and t.id == "MIN_SECRET_LENGTH" for t in node.targets)]
    assert len(own) == 1 and isinstance(own[0].value, ast.Constant) and isinstance(own[0].value.value, int)
    offenders = []
    for path, tree in product_sources():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id != "MIN_SECRET_LENGTH" \
                        and MIN_LENGTH_NAME.match(target.id):
                    offenders.append(f"{path} line {node.lineno}: {target.id}")
    assert offenders == [], "minimum lengths of secrets other than _secrets.MIN_SECRET_LENGTH:\n" + "\n".join(offenders)


def test_redaction_checks_catch_what_they_are_for():
    """The scans above find each kind of private rule they look for (so that a passing scan means something)."""
    source = '''
SECRETISH = ("PASS", "TOKEN", "SECRET")
def f(name):
    return "TOKEN" in name.upper() or name.endswith("_PASSWORD") or re.match(r"^[A-Z_]*API_KEY=", name) \\
        or re.search(r"(?i)password|secret", name)
def g():
    return ("prompt_tokens", "completion_tokens"), re.compile(r"KV cache size: ([\\d,]+) tokens"), "PASS"
'''
    found = secret_name_rules(ast.parse(source))
    assert [line.split(":")[0] for line in found] == ["line 2", "line 4", "line 4", "line 4", "line 5"], found
    assert MIN_LENGTH_NAME.match("SCRUB_MIN") and MIN_LENGTH_NAME.match("SECRET_VALUE_MIN")
    assert MIN_LENGTH_NAME.match("_MIN_DERIVED") and not MIN_LENGTH_NAME.match("DEFAULT_MIN_DEPTH")


# ---- values once ---------------------------------------------------------------------------------
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin  # noqa: E402
from ansible_collections.gb10.dspark.plugins.module_utils.common import _site  # noqa: E402

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
    plugins/module_utils/identity/_pin.py; the profile logic, the gate, the catalog and every role read them."""
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
    assert users >= {"audit", "engine", "evidence", "guard", "niah", "systems"}, users  # the gate action asks _site itself


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


# ---- module_utils by domain (docs/architecture.md, section 8) -------------------------------------------------
# Every module_utils file lives in a domain folder that the page's table names, each folder a package with an empty
# __init__.py (ansible-test's empty-init), every file the table names for a domain is there, and no file is over
# MAX_LINES lines unless the first lines of its docstring say why ("Why this file is long: <the reason>").
MODULE_UTILS = REPO / "plugins" / "module_utils"
MAX_LINES = 600
LONG_REASON = "Why this file is long:"
REASON_WITHIN = 6  # lines of the module docstring
_DOMAIN_ROW = re.compile(r"^\|\s*`(\w+)/`\s*\|(.*)\|\s*$")


def architecture_domains(text: str) -> dict[str, set[str]]:
    """{domain: the ``_names`` its row lists} from the table of the page's "module_utils by domain" section."""
    section = re.search(r"^## [^\n]*module_utils by domain\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    if not section:
        return {}
    rows = [_DOMAIN_ROW.match(line) for line in section.group(1).splitlines()]
    return {m.group(1): set(re.findall(r"`(_\w+)`", m.group(2).rsplit("|", 1)[-1])) for m in rows if m}


def module_utils_layout_problems(root: Path, domains: dict[str, set[str]]) -> list[str]:
    """What in the module_utils folder ``root`` breaks the layout the page's table describes."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts:
            continue
        if len(rel.parts) != 2:
            problems.append(f"{rel}: not in a domain folder (module_utils/<domain>/_name.py)")
        elif rel.parts[0] not in domains:
            problems.append(f"{rel}: the folder {rel.parts[0]}/ is no domain of docs/architecture.md's table")
        elif path.name == "__init__.py":
            if path.read_text(encoding="utf-8").strip():
                problems.append(f"{rel}: not empty (ansible-test sanity wants empty __init__.py files)")
        elif not path.name.startswith("_"):
            problems.append(f"{rel}: not private (module_utils files are _name.py)")
    for domain, names in sorted(domains.items()):
        if not (root / domain / "__init__.py").is_file():
            problems.append(f"{domain}/: no __init__.py (or no such folder)")
        problems += [f"{domain}/{name}.py: named in the table, not in the folder" for name in sorted(names)
                     if not (root / domain / f"{name}.py").is_file()]
    return problems


def long_file_problems(root: Path) -> list[str]:
    """The module_utils files over MAX_LINES lines whose docstring's first lines give no reason."""
    problems = []
    for path in sorted(root.rglob("_*.py")):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines <= MAX_LINES:
            continue
        doc = (ast.get_docstring(ast.parse(text)) or "").splitlines()[:REASON_WITHIN]
        reason = next((line.split(LONG_REASON, 1)[1].strip() for line in doc if LONG_REASON in line), "")
        if len(reason) < 20:
            problems.append(f"{path.relative_to(root)}: {lines} lines, over {MAX_LINES}, and the first "
                            f"{REASON_WITHIN} lines of its docstring do not say '{LONG_REASON} <the reason>'")
    return problems


def test_module_utils_by_domain_every_file_lives_in_a_domain_of_the_page():
    domains = architecture_domains((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert {"common", "identity", "engine", "fleet", "serving", "gate", "evidence"} <= set(domains), domains
    assert all(domains.values()), f"a domain row names no file: {domains}"
    assert module_utils_layout_problems(MODULE_UTILS, domains) == []


def test_module_utils_by_domain_no_file_is_long_without_a_reason():
    assert list(MODULE_UTILS.rglob("_*.py"))
    assert long_file_problems(MODULE_UTILS) == []


def test_module_utils_by_domain_the_checks_see_what_they_are_for(tmp_path):
    """The checks above are not vacuous: a flat file, a folder the page does not name, a non-empty __init__.py,
    a file the table names but the folder lacks, and a long file without a reason are each found."""
    page = ("## 8. module_utils by domain\ntext\n\n| domain | what | files |\n|---|---|---|\n"
            "| `common/` | all | `_clock`, `_http` |\n| `gate/` | the gate | `_runtime_gate` |\n\n## Who owns what\n"
            "| `other/` | not in the section | `_x` |\n")
    domains = architecture_domains(page)
    assert domains == {"common": {"_clock", "_http"}, "gate": {"_runtime_gate"}}
    root = tmp_path / "module_utils"
    for rel, text in {"common/__init__.py": "", "common/_clock.py": "", "common/_http.py": "",
                      "gate/__init__.py": "", "gate/_runtime_gate.py": ""}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert module_utils_layout_problems(root, domains) == []
    (root / "_flat.py").write_text("")
    (root / "serving").mkdir()
    (root / "serving" / "_niah.py").write_text("")
    (root / "gate" / "__init__.py").write_text("import os\n")
    (root / "gate" / "_runtime_gate.py").unlink()
    (root / "common" / "public.py").write_text("")
    found = module_utils_layout_problems(root, domains)
    assert [f.split(":")[0] for f in found] == ["_flat.py", "common/public.py", "gate/__init__.py",
                                                "serving/_niah.py", "gate/_runtime_gate.py"], found

    body = "\n".join(f"X{i} = {i}" for i in range(MAX_LINES))
    (root / "common" / "_clock.py").write_text(f'"""The clock."""\n{body}\n')
    (root / "common" / "_http.py").write_text(f'"""The client.\n\nWhy this file is long: one protocol, read '
                                              f'top to bottom, would be harder to follow in two files.\n"""\n{body}\n')
    (root / "gate" / "_short.py").write_text('"""Short."""\nX = 1\n')
    (root / "gate" / "_bare.py").write_text(f'"""Why this file is long: because."""\n{body}\n')  # no real reason
    late = "\n".join(["The gate."] + ["more"] * REASON_WITHIN + ["Why this file is long: said too late to count."])
    (root / "gate" / "_late.py").write_text(f'"""{late}\n"""\n{body}\n')
    assert [f.split(":")[0] for f in long_file_problems(root)] == ["common/_clock.py", "gate/_bare.py",
                                                                   "gate/_late.py"]
# ---- one Docker client: plugins/module_utils/engine/_docker_engine.py (the docker SDK) -----------------
# docs/architecture.md, "One Docker client": the collection's own code reaches a rank's Docker engine
# through the docker SDK for Python, imported in _docker_engine.py only; community.docker is used for
# container lifecycle (docker_container) only; no product code runs the docker CLI.
DOCKER_CLIENT = "plugins/module_utils/engine/_docker_engine.py"
COMMUNITY_DOCKER_ALLOWED = {"docker_container"}
# Calls that run a program: a docker argv given to one of them runs the docker CLI.
RUNNERS = {"run_command", "Popen", "check_output", "check_call", "call", "system", "execvp", "execv", "spawnvp",
           "getoutput", "getstatusoutput", "get_bin_path", "which"}


def docker_sdk_imports(tree: ast.Module) -> list[str]:
    """Where a module imports the docker SDK (``import docker``, ``from docker[.x] import y``,
    ``importlib.import_module("docker")``/``__import__("docker")``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}" for a in node.names if a.name == "docker" or a.name.startswith("docker.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and (node.module == "docker" or node.module.startswith("docker.")):
            found.append(f"line {node.lineno}")
        elif isinstance(node, ast.Call) and node.args and _strings(node.args[:1]) \
                and _strings(node.args[:1])[0].split(".")[0] == "docker":
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in ("import_module", "__import__"):
                found.append(f"line {node.lineno}")
    return found


def _is_docker_program(text: str) -> bool:
    words = text.split()
    return bool(words) and words[0].rsplit("/", 1)[-1] == "docker"


def docker_cli_runs(tree: ast.Module) -> list[str]:
    """Where a module runs the docker CLI: a program runner (``subprocess.run``, ``module.run_command``,
    ``Popen``, ``os.system``, testinfra's ``host.run``/``host.check_output``, a ``which``/``get_bin_path`` look-up)
    given ``docker`` as its program, as an argv list or a command line."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        if name not in RUNNERS and not (name == "run" and owner in ("subprocess", "host")):
            continue
        first = node.args[0]
        program = _strings(first.elts[:1]) if isinstance(first, (ast.List, ast.Tuple)) else _strings([first])
        if program and _is_docker_program(program[0]):
            found.append(f"line {node.lineno}: {name}({program[0]!r}, ...)")
    return found


def _product_tasks():
    for path in sorted([*(REPO / "roles").rglob("*.yml"), *(REPO / "playbooks").rglob("*.yml")]):
        if "meta" in path.relative_to(REPO).parts:
            continue
        for task in _tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
            yield path.relative_to(REPO).as_posix(), task


def yaml_docker_uses(tasks) -> tuple[list[str], list[str]]:
    """(community.docker modules other than docker_container, tasks running the docker CLI) among ``tasks``
    ((file, task) pairs)."""
    modules, cli = [], []
    for rel, task in tasks:
        for key, value in task.items():
            if not isinstance(key, str):
                continue
            short = key.rsplit(".", 1)[-1]
            if (key.startswith("community.docker.") or short.startswith("docker_")) \
                    and short not in COMMUNITY_DOCKER_ALLOWED:
                modules.append(f"{rel}: {task.get('name')}: {key}")
            if short in ("command", "shell", "raw", "script"):
                argv = value.get("argv") if isinstance(value, dict) else None
                line = value.get("cmd") if isinstance(value, dict) else value
                text = str(argv[0]) if isinstance(argv, list) and argv else str(line or "")
                if _is_docker_program(text.strip()):
                    cli.append(f"{rel}: {task.get('name')}: {key} {text}")
    return modules, cli


def test_one_docker_client_the_checkers_see_every_way_in():
    """The checks themselves: each way of importing the SDK, running the docker CLI or using another
    community.docker module is seen; the collection's own ways are not."""
    for source in ("import docker", "import docker.errors", "from docker import APIClient", "from docker.errors import X",
                   "importlib.import_module('docker')", "__import__('docker.errors')"):
        assert docker_sdk_imports(ast.parse(source)), source
    for source in ("import dockerfile", "from ansible_collections.x import _docker_engine", "x = 'docker'"):
        assert docker_sdk_imports(ast.parse(source)) == [], source
    for source in ("subprocess.run(['docker', 'ps'])", "module.run_command(['/usr/bin/docker', 'logs', 'x'])",
                   "subprocess.Popen('docker exec x true', shell=True)", "os.system('docker ps')",
                   "host.run('docker ps')", "host.check_output('docker inspect x')", "shutil.which('docker')",
                   "module.get_bin_path('docker', required=True)"):
        assert docker_cli_runs(ast.parse(source)), source
    for source in ("run(['docker', 'logs', '--tail', '5', 'c'])",  # the gate's record runner: nothing is run
                   "subprocess.run(['dockerd-rootless'])", "module.run_command(['nvidia-smi'])"):
        assert docker_cli_runs(ast.parse(source)) == [], source
    tasks = [("r.yml", {"name": "a", "community.docker.docker_container_info": {"name": "x"}}),
             ("r.yml", {"name": "b", "community.docker.docker_host_info": {}}),
             ("r.yml", {"name": "c", "community.docker.docker_image": {"name": "x", "state": "absent"}}),
             ("r.yml", {"name": "d", "docker_image_load": {"path": "x"}}),
             ("r.yml", {"name": "e", "ansible.builtin.command": {"argv": ["docker", "ps"]}}),
             ("r.yml", {"name": "f", "ansible.builtin.shell": "docker logs x | tail"}),
             ("r.yml", {"name": "g", "community.docker.docker_container": {"name": "x"}}),
             ("r.yml", {"name": "h", "ansible.builtin.command": {"argv": ["nvidia-smi"]}})]
    modules, cli = yaml_docker_uses(tasks)
    assert [m.split(": ")[1] for m in modules] == ["a", "b", "c", "d"]
    assert [c.split(": ")[1] for c in cli] == ["e", "f"]


def test_one_docker_client_the_sdk_is_imported_in_one_module_utils_file():
    """docs/architecture.md: the docker SDK is imported by _docker_engine.py and by no other product module."""
    importers = {rel: found for rel, tree in product_sources() if (found := docker_sdk_imports(tree))}
    assert list(importers) == [DOCKER_CLIENT], importers


def test_one_docker_client_no_product_code_runs_the_docker_cli():
    """No module of plugins/, cli/ or the roles' files, and no task of roles/ or playbooks/, runs the docker CLI."""
    runs = {rel: found for rel, tree in product_sources() if (found := docker_cli_runs(tree))}
    assert runs == {}, f"reach the engine through {DOCKER_CLIENT}, not the docker CLI: {runs}"
    tasks = list(_product_tasks())
    assert len(tasks) > 100, "the check reads no task"
    _modules, cli = yaml_docker_uses(tasks)
    assert cli == [], f"reach the engine through {DOCKER_CLIENT}, not the docker CLI: {cli}"


def test_one_docker_client_community_docker_for_container_lifecycle_only():
    """docs/architecture.md: community.docker's docker_container starts and removes containers; nothing else of
    community.docker (docker_container_info, docker_host_info, docker_image, ...) is used by a role or playbook."""
    tasks = list(_product_tasks())
    modules, _cli = yaml_docker_uses(tasks)
    assert modules == [], f"read a rank's engine through the collection's own modules ({DOCKER_CLIENT}): {modules}"
    assert any(key == "community.docker.docker_container" for _rel, task in tasks for key in task), \
        "the engine role's docker_container tasks are not seen: the check reads nothing"


def test_one_docker_client_the_architecture_page_says_so():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"`{DOCKER_CLIENT}`" in text and "one Docker client" in text and "docker SDK" in text


# ---- topology once: roles/topology/tasks/main.yml over _pair.py ----------------------------------------
TOPOLOGY_TASK_FILE = "roles/topology/tasks/main.yml"
TOPOLOGY_ACTIONS = ("gb10.dspark.pair_topology", "pair_topology")
TOPOLOGY_MODULE = "plugins/module_utils/fleet/_pair.py"
# The facts the one computation sets; a role whose tasks or vars read one of them gets the topology role.
TOPOLOGY_FACTS = re.compile(r"\bdspark_(?:pair_head|pair_worker|pair_members|pair_head_fabric_ip|play_pairs)\b")
# The host variables a pairing is made of: only _pair.py reads them by name (it builds the records from
# hostvars for the action and for the CLI alike); any other module naming them would group hosts again.
PAIRING_VARIABLES = {"dspark_pair", "dspark_rank"}
# Jinja that groups or selects hosts by their pair or rank (map/selectattr/rejectattr/groupby/sort on the
# variables a pairing is made of): the topology worked out again in a template.
JINJA_PAIRING = re.compile(r"(?:map|selectattr|rejectattr|groupby|sort|unique)\(\s*(?:attribute\s*=\s*)?['\"]"
                           r"(?:dspark_pair|dspark_rank)['\"]")


def topology_calls(tasks) -> list[str]:
    """``file: task name`` of every task among ``tasks`` ((file, task) pairs) that calls pair_topology."""
    return [f"{rel}: {task.get('name')}" for rel, task in tasks if any(key in task for key in TOPOLOGY_ACTIONS)]


def jinja_pairings(paths) -> list[str]:
    return [f"{_rel(path)} line {n}" for path in paths for n, line in _yaml_code_lines(path) if JINJA_PAIRING.search(line)]


def python_pairings(paths) -> list[str]:
    return [f"{_rel(path)} line {n}: {text!r}" for path in paths if _rel(path) != TOPOLOGY_MODULE
            for n, text in _python_code_strings(path) if text in PAIRING_VARIABLES]


def _product_python() -> list[Path]:
    return sorted(p for top in PRODUCT_DIRS for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)


def test_topology_once_one_task_file_calls_pair_topology():
    """docs/architecture.md: the topology is worked out by one task, in the topology role, which every role that
    needs it gets as a dependency (Ansible runs a dependency once per play)."""
    calls = topology_calls(_product_tasks())
    assert len(calls) == 1 and calls[0].startswith(TOPOLOGY_TASK_FILE + ":"), calls


def test_topology_once_every_role_reading_it_gets_the_topology_role():
    """A role whose tasks or vars read the topology's facts declares gb10.dspark.topology in meta/main.yml, or
    (an entry point that runs where others do not need the topology) imports it itself: each entry point works
    on its own."""
    missing = []
    for role in sorted(p for p in (REPO / "roles").iterdir() if p.is_dir() and p.name != "topology"):
        yml = [p for p in role.rglob("*.yml") if "meta" not in p.relative_to(role).parts]
        if not any(TOPOLOGY_FACTS.search(line) for p in yml for _n, line in _yaml_code_lines(p)):
            continue
        meta = yaml.safe_load((role / "meta" / "main.yml").read_text(encoding="utf-8")) if (role / "meta" / "main.yml").is_file() else {}
        deps = [d.get("role") if isinstance(d, dict) else d for d in (meta or {}).get("dependencies") or []]
        imports = [task for p in yml for task in _tasks(yaml.safe_load(p.read_text(encoding="utf-8")))
                   for key in ("ansible.builtin.import_role", "ansible.builtin.include_role")
                   if isinstance(task.get(key), dict) and task[key].get("name") == "gb10.dspark.topology"]
        if "gb10.dspark.topology" not in deps and not imports:
            missing.append(role.name)
    assert missing == [], f"these roles read the topology's facts but never get the topology role: {missing}"


def test_topology_once_no_jinja_groups_hosts_into_pairs():
    """No template in roles/ or playbooks/ groups or selects hosts by dspark_pair or dspark_rank."""
    found = jinja_pairings(_role_and_playbook_yaml())
    assert found == [], f"read the topology's facts (dspark_play_pairs, dspark_pair_members, ...) instead: {found}"


def test_topology_once_no_python_groups_hosts_into_pairs():
    """No module of plugins/, cli/ or the roles' files but _pair.py reads a host's dspark_pair or dspark_rank: the
    action, the audit's verdicts and the CLI's pair map all go through _pair.py's functions."""
    files = _product_python()
    assert REPO / TOPOLOGY_MODULE in files
    found = python_pairings(files)
    assert found == [], f"group hosts into pairs through {TOPOLOGY_MODULE} only: {found}"


def test_topology_once_checks_catch_what_they_are_for():
    task = {"name": "T", "gb10.dspark.pair_topology": None}
    assert topology_calls([("roles/a/tasks/main.yml", task), ("roles/b/tasks/main.yml", {"name": "U", "debug": 1}),
                           ("roles/c/tasks/x.yml", {"name": "V", "pair_topology": {"partial_ok": True}})]) == [
        "roles/a/tasks/main.yml: T", "roles/c/tasks/x.yml: V"]
    yml = _write(REPO / "roles" / "x" / "tasks" / "main.yml",
                 "- x: \"{{ hosts | selectattr('dspark_rank', 'equalto', 0) | map(attribute='dspark_pair') }}\"\n"
                 "- y: \"{{ hosts | groupby( 'dspark_pair') }}\"\n"
                 "# map(attribute='dspark_pair') in a comment\n"
                 "- z: \"{{ dspark_pair_members | map('extract', hostvars) }}\"\n")
    assert jinja_pairings([yml]) == ["roles/x/tasks/main.yml line 1", "roles/x/tasks/main.yml line 2"]
    py = _write(REPO / "cli" / "x.py", '"""Reads dspark_pair."""\nPAIR = "dspark_pair"\nh.get("dspark_rank")\nh.get("pair")\n')
    assert python_pairings([py]) == ["cli/x.py line 2: 'dspark_pair'", "cli/x.py line 3: 'dspark_rank'"]


def test_topology_once_the_architecture_page_says_so():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"`{TOPOLOGY_TASK_FILE}`" in text and "`dspark_play_pairs`" in text and "`_pair.py`" in text
