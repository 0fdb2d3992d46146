# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP against a rank's engine (stdlib ``http.client`` only): one opener for every caller, and the
JSON client the serving guard, NIAH and the systems suite use against the head's OpenAI API.

No proxy, no netrc, no content encoding: the engine is on the pair's own network, and a caller that
times streamed lines must see the bytes as the server sends them."""
from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import urllib.parse


@contextlib.contextmanager
def open_http(method: str, url: str, body: bytes | None = None, headers: dict | None = None,
              timeout: float = 10.0):
    """Send one request and yield its ``http.client.HTTPResponse`` whatever the status (the caller
    reads ``status``). Transport failures (refused, reset, timeout, a malformed status line) raise
    ``OSError``; a URL that is not http(s) raises ``ValueError``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        try:
            conn.request(method, target, body=body, headers=headers or {})
            resp = conn.getresponse()
        except http.client.HTTPException as exc:
            if isinstance(exc, OSError):
                raise
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
        with resp:
            yield resp
    finally:
        conn.close()


def url_credentials(url: str) -> tuple[str, str | None, str | None]:
    """``(url without its user and password, user, password)``: the collection's one way to take the
    credentials out of a URL (``https://user:pass@mirror/x.tar``) before the URL is shown anywhere - a
    message, a module argument, a log - and to pass them on apart (``url_username``/``url_password``).

    The user and the password come back percent-decoded (``p%40ss`` is ``p@ss``), ``None`` when absent
    (an empty password, ``user:@host``, is ``""``); the host, port, path, query and fragment are kept
    as written. A URL without ``@`` in its authority comes back unchanged, with ``(None, None)``."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None, None
    user, colon, password = userinfo.partition(":")
    clean = urllib.parse.urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return clean, urllib.parse.unquote(user), (urllib.parse.unquote(password) if colon else None)


class ApiUnreachable(ConnectionError):
    """The head's API did not answer a request; the message names the head (when known), the address
    and the state (refused, stalled, reset), never a bare errno. ``stalled``: it took the request and
    sent nothing back in time (a hung engine), as opposed to refusing or dropping it."""

    def __init__(self, message: str, stalled: bool = False):
        super().__init__(message)
        self.stalled = stalled


def transport_state(exc: BaseException, timeout: float) -> str:
    """What a transport failure says about the engine behind the address."""
    if isinstance(exc, ConnectionRefusedError):
        return "refused the connection: nothing listens there (the engine is down or not started)"
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
        return f"took the request but sent no answer within {timeout:g} s: the engine is stalled (hung)"
    if isinstance(exc, ConnectionResetError):
        return "reset the connection: the engine went away mid-request"
    return "could not be reached"


def json_client(base_url: str, api_key: str | None, head: str | None = None):
    """``call(method, path, body, timeout)`` -> (status, body) against ``base_url``: the parsed JSON, the raw
    text of a streamed answer (``body["stream"]``) or of a non-JSON one; for an HTTP error status the
    error document (vLLM's ``{"error": {...}}``) when it is JSON, else ``None``. ``body=None`` sends no body.
    Transport errors (refused, reset, timeout) raise :class:`ApiUnreachable` (an ``OSError``) whose message
    names ``head`` (the head's inventory name, when given), the URL and the engine's state; the key goes only
    into the Authorization header."""
    def call(method: str, path: str, body: dict | None, timeout: float):
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        data = None if body is None else json.dumps(body).encode()
        url = base_url.rstrip("/") + path
        try:
            with open_http(method, url, data, headers, timeout) as resp:
                status = resp.status
                text = resp.read().decode("utf-8", "replace")
        except ApiUnreachable:
            raise
        except OSError as exc:
            who = f"head {head}: " if head else ""
            raise ApiUnreachable(f"{who}{method} {url} {transport_state(exc, timeout)} ({exc})",
                                 stalled=isinstance(exc, TimeoutError)) from exc
        if status >= 400:
            try:
                return status, json.loads(text)
            except ValueError:
                return status, None
        if body and body.get("stream"):
            return status, text
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text
    return call
