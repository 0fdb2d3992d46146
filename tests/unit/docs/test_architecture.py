# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/architecture.md's claims that code can check, held by tests (one clearly named test per claim)."""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]

# ---- one HTTP client: plugins/module_utils/_http.py ---------------------------------------------
HTTP_CLIENT = "plugins/module_utils/_http.py"
# The modules that speak HTTP as a client; only _http.py may import them.
HTTP_CLIENT_MODULES = ("http.client", "urllib.request", "requests", "urllib3", "httpx", "aiohttp",
                       "ansible.module_utils.urls")
# Real exceptions, each with its reason. Nothing here talks to a head.
HTTP_CLIENT_ALLOWED = {
    "plugins/module_utils/_docker_engine.py": "the rank's Docker Engine API over its Unix socket (unix:// only), not a "
                                               "head's HTTP API; issue 31 replaces it with the docker SDK",
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
    assert offenders == {}, f"speak HTTP through plugins/module_utils/_http.py, not on their own: {offenders}"
    assert http_client_uses((REPO / HTTP_CLIENT).read_text(encoding="utf-8")), "_http.py is the client"
    for rel, reason in HTTP_CLIENT_ALLOWED.items():
        assert (REPO / rel).is_file() and reason, f"{rel} no longer exists: remove it from HTTP_CLIENT_ALLOWED"
        assert http_client_uses((REPO / rel).read_text(encoding="utf-8")), \
            f"{rel} imports no HTTP client any more: remove it from HTTP_CLIENT_ALLOWED"


def test_one_http_client_the_architecture_page_says_so():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "`plugins/module_utils/_http.py`" in text and "one HTTP client" in text


# Ansible's own HTTP modules in the roles and playbooks: none speaks to a head's API. Each use is named by its
# file and task name, with its reason.
HTTP_TASK_MODULES = ("ansible.builtin.uri", "ansible.builtin.get_url", "uri", "get_url")
HTTP_TASKS_ALLOWED = {
    ("roles/image/tasks/main.yml", "Image | Size of the archive on the site mirror, as the head sees it"):
        "a HEAD of the site's image mirror (the operator's server, with its own credentials), not a head's API",
    ("roles/image/tasks/main.yml", "Image | Fetch the archive from the site mirror, checked against the pin's sha256"):
        "the image archive from the site's mirror, checked against the pin's sha256, not a head's API",
    ("roles/image/tasks/main.yml", "Image | Fetch the archive from the head over the pair's link, checked against the "
                                   "pin's sha256"):
        "the worker's download from the head's archive relay (_archive_relay, a file server), not the engine's API",
    ("roles/image/tasks/main.yml", "Image | Stop the head's relay, the worker's fetch being done or failed (frees the "
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
    assert found - set(HTTP_TASKS_ALLOWED) == set(), "speak to a head through plugins/module_utils/_http.py"
    assert set(HTTP_TASKS_ALLOWED) - found == set(), "allow-listed tasks that no longer exist: remove them"


# ---- one redaction rule: plugins/module_utils/_secrets.py ------------------------------------------
# Each claim has its own test functions, named after it (``test_redaction_...``, ...), so that more
# claims can be added here without touching the others. The checks read the Python sources of the
# product (plugins/, cli/, the roles' files) with :mod:`ast`; they never import them.
# 
# Redaction (docs/architecture.md, "Secrets"): ``plugins/module_utils/_secrets.py`` holds the one
# rule for secret NAMES (``is_secret_name``), the one redactor of VALUES (``redact``,
# ``redact_document``, ``redact_secrets_text``), the one placeholder (``REDACTED``) and the one
# minimum length (``MIN_SECRET_LENGTH``). No other module defines its own.
SECRETS_MODULE = REPO / "plugins" / "module_utils" / "_secrets.py"
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
    assert offenders == [], "secret-name rules outside plugins/module_utils/_secrets.py (use is_secret_name):\n" + \
        "\n".join(offenders)


def test_redaction_no_module_defines_its_own_redaction_function():
    """Values are redacted by _secrets.redact / redact_document / redact_secrets_text alone."""
    offenders = [f"{path} line {node.lineno}: def {node.name}" for path, tree in outside_secrets()
                 for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and re.search(r"redact|secretish|is_secret", node.name, re.IGNORECASE)]
    assert offenders == [], "redaction functions outside plugins/module_utils/_secrets.py (use _secrets):\n" + \
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
