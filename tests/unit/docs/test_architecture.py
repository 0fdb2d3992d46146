# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/architecture.md's claims that code can check, held by tests (one clearly named test per claim)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# ---- one HTTP client: plugins/module_utils/_http.py ---------------------------------------------
HTTP_CLIENT = "plugins/module_utils/_http.py"
# The modules that speak HTTP as a client; only _http.py may import them.
HTTP_CLIENT_MODULES = ("http.client", "urllib.request", "requests", "urllib3", "httpx", "aiohttp")
# Real exceptions, each with its reason. Nothing here talks to a head.
HTTP_CLIENT_ALLOWED = {
    "plugins/module_utils/_docker_engine.py": "the rank's Docker Engine API over its Unix socket (unix:// only), not a "
                                               "head's HTTP API; issue 31 replaces it with the docker SDK",
}


def _python_files() -> list[Path]:
    """Every Python module of the product: plugins/, roles/*/files/ and cli/."""
    roots = [REPO / "plugins", REPO / "cli", *sorted((REPO / "roles").glob("*/files"))]
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
                   "from http.client import HTTPConnection", "import urllib.request", "from urllib import request",
                   "import requests", "import importlib\nimportlib.import_module('http.client')",
                   "c = conn.HTTPSConnection('h')", "__import__('urllib.request')"):
        assert http_client_uses(source), source
    for source in ("import http.server", "import urllib.parse", "from urllib.parse import quote",
                   "from http import HTTPStatus", "import socket"):
        assert http_client_uses(source) == [], source


def test_one_http_client_no_module_but_http_opens_its_own():
    """docs/architecture.md: every call to a head goes through _http. No module of plugins/, roles/*/files/ or
    cli/ but _http.py (and the allow-listed, each with its reason) imports an HTTP client or opens a connection."""
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
        assert (REPO / rel).is_file() and reason, f"{rel}: an allow-listed file that no longer exists"
        assert http_client_uses((REPO / rel).read_text(encoding="utf-8")), f"{rel} needs no exception any more"


def test_one_http_client_the_architecture_page_says_so():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "`plugins/module_utils/_http.py`" in text and "one HTTP client" in text
