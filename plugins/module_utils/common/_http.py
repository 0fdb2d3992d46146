# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one HTTP client (stdlib ``http.client`` only): every call to a head's API goes through
:func:`open_http`. On it: :func:`read` (one request read whole), :func:`json_client` (the serving guard, NIAH,
the systems suite, the liveness check), :func:`fetch_client` (the gate's pytest suite: status and raw bytes),
:func:`get_text` (the engine probe's and the audit's GET of /v1/models and /metrics), and the systems suite's
streamed reads over :func:`open_http` itself. The key becomes a header in one place, :func:`auth_headers`.
No other module of the collection imports an HTTP client (tests/unit/docs/test_architecture.py).

No proxy, no netrc, no redirect followed, no content encoding: the engine is on the pair's own network, a
redirect is an answer (the bearer never follows it elsewhere), and a caller that times streamed lines must
see the bytes as the server sends them."""
from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse

from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import api_key_problem

# What http.client refuses in a header value (and whitespace at either end, which it would strip or refuse).
_BAD_HEADER_VALUE = re.compile(r"[\x00-\x1f\x7f]|^\s|\s$")


class RequestNotSent(ValueError):
    """A request that could not be built (a header value a server would never see as sent, a URL that is not
    http(s)). The message names what is wrong and never a header's value: a value may be the API key, and
    http.client's own error text (``Invalid header value b'Bearer KEY\\n'``) would print it."""


def auth_headers(api_key: str | None, variable: str = "dspark_api_key") -> dict:
    """The Authorization header for ``api_key`` (none without a key): the one place a key becomes a header.
    A key that cannot be one raises :class:`RequestNotSent` naming ``variable``, never the value."""
    problem = api_key_problem(api_key, variable)
    if problem:
        raise RequestNotSent(problem)
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Inflight:
    """The requests a caller has in flight, so that it can end them all at its own bound: :meth:`abort`
    shuts every open connection (a thread blocked reading a frozen server wakes at once) and refuses new
    ones. A request ended this way raises ``TimeoutError`` (through :func:`json_client`, an
    :class:`ApiUnreachable` naming the stalled state)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._conns: set = set()
        self.aborted = False

    def add(self, conn) -> None:
        with self._lock:
            if self.aborted:
                raise TimeoutError("not sent: the caller's bound had ended")
            self._conns.add(conn)

    def discard(self, conn) -> None:
        with self._lock:
            self._conns.discard(conn)

    def check(self) -> None:
        if self.aborted:
            raise TimeoutError("no answer before the caller's bound")

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            conns = list(self._conns)
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@contextlib.contextmanager
def open_http(method: str, url: str, body: bytes | None = None, headers: dict | None = None,
              timeout: float = 10.0, inflight: Inflight | None = None):
    """Send one request and yield its ``http.client.HTTPResponse`` whatever the status (the caller
    reads ``status``). Transport failures (refused, reset, timeout, a malformed status line, a body cut
    short while the caller reads it) raise ``OSError``, never http.client's own exceptions; a URL that is not
    http(s), or a header value http.client would refuse, raises
    :class:`RequestNotSent` (a ``ValueError``) whose message never holds a header's value. With ``inflight``,
    the connection is registered there while it is open: once the caller aborts it, the request (connecting,
    sending or reading) raises ``TimeoutError``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RequestNotSent(f"not an http(s) URL: {url!r}")
    for name, value in (headers or {}).items():
        if not isinstance(value, str) or _BAD_HEADER_VALUE.search(value):
            raise RequestNotSent(f"{method} {url}: the {name} header holds a line ending, a control character or "
                                 f"surrounding whitespace (its value is not shown); the request was not sent")
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        if inflight is not None:
            inflight.add(conn)
        try:
            conn.connect()
            if inflight is not None:
                inflight.check()  # aborted while connecting, before the socket could be shut
            conn.request(method, target, body=body, headers=headers or {})
        except ValueError as exc:  # http.client's text may quote a header value: never passed on
            raise RequestNotSent(f"{method} {url}: the request could not be built ({type(exc).__name__}); "
                                 f"it was not sent") from None
        except OSError:
            if inflight is not None:
                inflight.check()  # the socket shut by the caller's abort while the request was being sent
            raise
        try:
            resp = conn.getresponse()
        except http.client.HTTPException as exc:
            if inflight is not None:
                inflight.check()
            if isinstance(exc, OSError):
                raise
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
        except OSError:
            if inflight is not None:
                inflight.check()
            raise
        with resp:
            try:
                yield resp
            except (OSError, http.client.HTTPException) as exc:
                if inflight is not None:
                    inflight.check()  # the body cut short by the caller's abort
                if isinstance(exc, OSError):
                    raise
                # a body cut short (IncompleteRead) or a broken chunk: a transport failure like any other
                raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        if inflight is not None:
            inflight.discard(conn)
        conn.close()


def read(method: str, url: str, body: bytes | None = None, headers: dict | None = None, timeout: float = 10.0,
         inflight: Inflight | None = None) -> tuple[int, bytes]:
    """One request through :func:`open_http`, its body read whole: ``(status, bytes)`` whatever the status.
    Raises as :func:`open_http` does: ``OSError`` for a transport failure, :class:`RequestNotSent` for a request
    that could not be built; with ``inflight``, a request ended by the caller's abort raises ``TimeoutError``,
    even when the cut-short body read without an error."""
    with open_http(method, url, body, headers, timeout, inflight) as resp:
        status, data = resp.status, resp.read()
    if inflight is not None:
        inflight.check()  # a body that ends at the close reads short, without an error
    return status, data


def fetch_client(base_url: str, api_key: str | None, variable: str = "dspark_api_key"):
    """``fetch(method, path, body, timeout)`` -> ``(status, bytes)`` against ``base_url``, whatever the status
    (a redirect is an answer, never followed): the runtime gate's ``Fetch``. ``body`` is bytes (sent as JSON) or
    ``None``. The key goes only into the Authorization header (:func:`auth_headers`); a key that cannot be one
    raises :class:`RequestNotSent` naming ``variable`` at each call, before any request, so that a caller which
    records each step's failure (the gate) records it. Transport failures raise ``OSError`` as they come."""
    base = base_url.rstrip("/")

    def fetch(method: str, path: str, body: bytes | None, timeout: float) -> tuple[int, bytes]:
        headers = {"Accept": "application/json", **auth_headers(api_key, variable)}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return read(method, base + path, body, headers, timeout)
    return fetch


def get_text(url: str, timeout: float, api_key: str | None = None) -> tuple[int | None, str | None, str]:
    """GET ``url`` with the key as the bearer: ``(status, text, "")`` whatever the status, or ``(None, None, why)``
    when no answer came - the engine's state and the error (:func:`transport_state`, as ``refused the connection:
    ... ([Errno 111] Connection refused)``), or why the request could not be built (a key that cannot be a header,
    named, never shown). Never raises for either."""
    try:
        status, data = read("GET", url, None, auth_headers(api_key), timeout)
    except OSError as exc:
        return None, None, f"{transport_state(exc, timeout)} ({exc})"
    except ValueError as exc:  # RequestNotSent: its text never holds a header's value
        return None, None, str(exc)
    return status, data.decode("utf-8", "replace"), ""


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


def json_client(base_url: str, api_key: str | None, head: str | None = None, inflight: Inflight | None = None):
    """``call(method, path, body, timeout)`` -> (status, body) against ``base_url``: the parsed JSON, the raw
    text of a streamed answer (``body["stream"]``) or of a non-JSON one; for an HTTP error status the
    error document (vLLM's ``{"error": {...}}``) when it is JSON, else ``None``. ``body=None`` sends no body.
    Transport errors (refused, reset, timeout) raise :class:`ApiUnreachable` (an ``OSError``) whose message
    names ``head`` (the head's inventory name, when given), the URL and the engine's state; the key goes only
    into the Authorization header, and a key that cannot be one raises :class:`RequestNotSent` (a ``ValueError``)
    here, naming the variable, before any request. With ``inflight`` (:class:`Inflight`), the caller can end
    every request in flight at its own bound: each one raises :class:`ApiUnreachable` as stalled, naming how long
    it waited."""
    authorization = auth_headers(api_key)  # a key that cannot be a header is refused here, before any request

    def call(method: str, path: str, body: dict | None, timeout: float):
        headers = {"Content-Type": "application/json", **authorization}
        data = None if body is None else json.dumps(body).encode()
        url = base_url.rstrip("/") + path
        started = time.monotonic()
        try:
            status, raw = read(method, url, data, headers, timeout, inflight)
            text = raw.decode("utf-8", "replace")
        except ApiUnreachable:
            raise
        except OSError as exc:
            who = f"head {head}: " if head else ""
            # ended by the caller's bound: it waited as long as it could, which may be less than timeout
            waited = round(time.monotonic() - started, 1) if inflight is not None and inflight.aborted else timeout
            raise ApiUnreachable(f"{who}{method} {url} {transport_state(exc, waited)} ({exc})",
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
