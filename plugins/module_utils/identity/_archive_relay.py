# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The head's side of the image relay: one file served over plain HTTP on the pair's own link.

A pair's head holds the image archive (copied once from the control node, or fetched from a site
mirror); its worker fetches it from the head over the fabric link instead of from the control node,
so the control node's uplink carries the archive once per pair, not twice. The server here:

- listens on one address and port: the head's fabric address, an IP address; a wildcard address
  (``0.0.0.0``, ``::``, empty) is refused before anything listens;
- answers ``GET`` and ``HEAD`` of exactly one path, ``/<token>/<file name>``, where the token is
  random per run; anything else is 404 and is not counted. ``POST`` of that path stops the relay
  (the run's own way to end it once the worker's fetch is done or has failed);
- handles each connection in a thread of its own, so that one client cannot hold the relay: a
  connection that sends no request within ``connection_timeout`` seconds, or whose reader takes
  nothing for that long mid-transfer, is dropped; at most ``MAX_CONNECTIONS`` are open at once
  (more are closed at once);
- sends the file with ``sendfile`` (no copy through user space), with its length, so a reader knows
  a short transfer for what it is; the reader (``ansible.builtin.get_url`` with the pin's sha256)
  keeps nothing it could not verify;
- stops after ``transfers`` complete transfers, after ``idle_timeout`` seconds in which no request
  came and no byte was sent, when asked to, or at ``deadline`` seconds - checked inside the send
  loop too, so a slow transfer does not outlive it - whichever comes first, and says which. When it
  stops, every open connection is shut and the port is closed: nothing of it outlives ``run``.

Nothing here trusts the bytes: the worker checks the archive's sha256 and image ID before loading.
"""
from __future__ import annotations

import http.server
import ipaddress
import os
import selectors
import socket
import socketserver
import threading
import time
import urllib.parse

CHUNK = 1024 * 1024  # at most this much per sendfile call: the deadline is checked between calls
MAX_CONNECTIONS = 32
CONNECTION_TIMEOUT = 30.0
POLL = 0.2  # seconds between the main loop's (and a stalled send's) checks of the deadline and the stop


class RelayError(Exception):
    """The file cannot be served (missing, not a regular file, a wildcard or non-IP bind address, or
    the address cannot be bound)."""


def url_path(token: str, name: str) -> str:
    """The one path the relay answers: ``/<token>/<quoted file name>``."""
    if not token or "/" in token:
        raise ValueError(f"relay token must be a non-empty path segment, got {token!r}")
    return f"/{token}/{urllib.parse.quote(name)}"


def listen_address(bind: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``bind`` as an IP address, refused when it is not one or is a wildcard (every interface)."""
    try:
        address = ipaddress.ip_address((bind or "").strip("[]"))
    except ValueError:
        if not bind:
            raise RelayError("refusing to listen on the wildcard address '' (every interface); expected "
                             "the head's fabric address") from None
        raise RelayError(f"bind {bind!r} is not an IP address; expected the head's fabric address") from None
    if address.is_unspecified:
        raise RelayError(f"refusing to listen on the wildcard address {bind!r} (every interface); expected "
                         "the head's fabric address")
    return address


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "gb10-dspark-relay"
    protocol_version = "HTTP/1.1"

    def setup(self):
        self.timeout = self.server.relay.connection_timeout  # type: ignore[attr-defined]
        self.answered = False
        super().setup()

    def finish(self):
        relay = self.server.relay  # type: ignore[attr-defined]
        if not self.answered:
            relay.count("unanswered")
        try:
            super().finish()
        except OSError:
            pass  # the reader is gone, or the relay shut the connection

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        return None  # the module reports counts; nothing goes to stderr

    def _status(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _own_path(self) -> bool:
        """Count the request; answer 404 (and say False) unless it asks for the relay's own random path."""
        relay = self.server.relay  # type: ignore[attr-defined]
        self.answered = True
        relay.count("requests")
        if urllib.parse.urlsplit(self.path).path != relay.path:
            relay.count("refused")
            self._status(404)
            return False
        return True

    def _answer(self, body: bool) -> None:
        if not self._own_path():
            return
        relay = self.server.relay  # type: ignore[attr-defined]
        size = os.stat(relay.file).st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/x-tar")
        self.send_header("Content-Length", str(size))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if not body:
            return
        self.wfile.flush()
        sent, whole = relay.send(self.connection, size)
        relay.count("bytes_sent", sent)
        if whole:
            relay.count("transfers")

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._answer(body=True)

    def do_HEAD(self):  # noqa: N802
        self._answer(body=False)

    def do_POST(self):  # noqa: N802
        if not self._own_path():
            return
        # answered first: once the stop is asked, the main loop may shut this connection at any moment
        self._status(200)
        self.wfile.flush()
        self.server.relay.stop_asked.set()  # type: ignore[attr-defined]


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    block_on_close = False  # run() shuts every connection and waits for their threads itself
    allow_reuse_address = True

    def server_bind(self):
        socketserver.TCPServer.server_bind(self)  # no reverse lookup of the address (HTTPServer's getfqdn)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = host, port

    def process_request(self, request, client_address):
        relay = self.relay  # type: ignore[attr-defined]
        if not relay.admit(request):
            relay.count("turned_away")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.relay.release(request)  # type: ignore[attr-defined]

    def handle_error(self, request, client_address):
        return None  # a reader gone mid-request is counted, not printed


class Relay:
    """Serve ``file`` at ``url_path(token, basename)`` on ``bind``:``port`` until done."""

    def __init__(self, file: str, bind: str, port: int, token: str,
                 connection_timeout: float = CONNECTION_TIMEOUT, max_connections: int = MAX_CONNECTIONS):
        if not os.path.isfile(file):
            raise RelayError(f"{file} is not a regular file")
        address = listen_address(bind)
        if connection_timeout <= 0:
            raise ValueError(f"connection_timeout must be positive, got {connection_timeout}")
        self.file, self.path = file, url_path(token, os.path.basename(file))
        self.connection_timeout, self.max_connections = float(connection_timeout), max_connections
        self.requests = self.refused = self.transfers = self.bytes_sent = 0
        self.unanswered = self.cut = self.turned_away = 0
        self.stop_asked = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified as each connection's thread ends
        self._open: set[socket.socket] = set()
        self.clock = time.monotonic
        self.deadline_at = float("inf")
        self.last_activity = 0.0
        server_class = type("_RelayServer", (_Server,), {
            "address_family": socket.AF_INET6 if address.version == 6 else socket.AF_INET})
        try:
            self._server = server_class((str(address), port), _Handler)
        except OSError as exc:
            raise RelayError(f"cannot listen on {bind}:{port}: {exc.strerror or exc}") from None
        self._server.relay = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]

    # -- bookkeeping, from the connection threads --------------------------------------------
    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)
            if name == "requests":
                self.last_activity = self.clock()

    def admit(self, conn: socket.socket) -> bool:
        with self._lock:
            if self._stopping.is_set() or len(self._open) >= self.max_connections:
                return False
            self._open.add(conn)
            return True

    def release(self, conn: socket.socket) -> None:
        with self._lock:
            self._open.discard(conn)
            self._idle.notify_all()

    def send(self, conn: socket.socket, size: int) -> tuple[int, bool]:
        """Send the file on ``conn``: (bytes sent, whether all of them). Cut when the reader takes
        nothing for ``connection_timeout`` s, at the deadline, when the relay stops, or when the
        reader goes away; the deadline and the stop are checked between any two ``sendfile`` calls
        and at least every ``POLL`` s while the reader takes nothing."""
        sent = 0
        moved_at = self.clock()
        conn.setblocking(False)
        with open(self.file, "rb") as handle, selectors.DefaultSelector() as sel:
            sel.register(conn, selectors.EVENT_WRITE)
            while sent < size:
                now = self.clock()
                if now >= self.deadline_at or self._stopping.is_set():
                    break
                if now - moved_at >= self.connection_timeout:
                    break  # the reader stalled
                if not sel.select(min(POLL, self.deadline_at - now, self.connection_timeout - (now - moved_at))):
                    continue
                try:
                    n = os.sendfile(conn.fileno(), handle.fileno(), sent, min(CHUNK, size - sent))
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    break  # the reader went away (reset, broken pipe) or the relay shut the connection
                if not n:
                    break
                sent += n
                moved_at = self.clock()
                with self._lock:
                    self.last_activity = moved_at
        if sent < size:
            self.count("cut")
        return sent, sent == size

    # -- the main loop -------------------------------------------------------------------------
    def run(self, transfers: int = 1, idle_timeout: float = 120.0, deadline: float = 3600.0,
            clock=time.monotonic) -> dict:
        """Answer requests until ``transfers`` complete ones, ``idle_timeout`` s without a request or
        a byte sent, a stop request, or ``deadline`` s in all; the counts and why it stopped."""
        self.clock = clock
        start = clock()
        self.last_activity = start
        self.deadline_at = start + deadline
        self._server.timeout = POLL
        reason = "transfers"
        try:
            while self.transfers < transfers:
                now = clock()
                if now >= self.deadline_at:
                    reason = "deadline"
                    break
                if self.stop_asked.is_set():
                    reason = "stopped"
                    break
                if now - self.last_activity >= idle_timeout:
                    reason = "idle"
                    break
                self._server.handle_request()
        finally:
            self._close()
        return {"reason": reason, "transfers": self.transfers, "requests": self.requests,
                "refused": self.refused, "bytes_sent": self.bytes_sent, "unanswered": self.unanswered,
                "cut": self.cut, "turned_away": self.turned_away,
                "seconds": round(clock() - start, 3)}

    def _close(self) -> None:
        """Stop listening, shut every open connection, and wait (briefly) for their threads."""
        self._stopping.set()
        self._server.server_close()
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._idle:
            self._idle.wait_for(lambda: not self._open, timeout=2.0)
