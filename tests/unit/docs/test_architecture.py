# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/architecture.md's claims that code can check, held by tests (one clearly named test per claim)."""
from __future__ import annotations

import ast
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
