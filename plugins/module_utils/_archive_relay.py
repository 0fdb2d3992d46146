# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The head's side of the image relay: one file served over plain HTTP on the pair's own link.

A pair's head holds the image archive (copied once from the control node, or fetched from a site
mirror); its worker fetches it from the head over the fabric link instead of from the control node,
so the control node's uplink carries the archive once per pair, not twice. The server here:

- listens on one address and port (the head's fabric address), and answers ``GET`` and ``HEAD`` of
  exactly one path, ``/<token>/<file name>``, where the token is random per run; anything else is
  404 and is not counted;
- sends the file with ``sendfile`` (no copy through user space), with its length, so a reader knows
  a short transfer for what it is; the reader (``ansible.builtin.get_url`` with the pin's sha256)
  keeps nothing it could not verify;
- stops after ``transfers`` complete transfers, after ``idle_timeout`` seconds without a request,
  or at ``deadline`` seconds, whichever comes first, and says which.

Nothing here trusts the bytes: the worker checks the archive's sha256 and image ID before loading.
"""
from __future__ import annotations

import http.server
import os
import time
import urllib.parse

CHUNK = 8 * 1024 * 1024


class RelayError(Exception):
    """The file cannot be served (missing, not a regular file, or the address cannot be bound)."""


def url_path(token: str, name: str) -> str:
    """The one path the relay answers: ``/<token>/<quoted file name>``."""
    if not token or "/" in token:
        raise ValueError(f"relay token must be a non-empty path segment, got {token!r}")
    return f"/{token}/{urllib.parse.quote(name)}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "gb10-dspark-relay"
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        return None  # the module reports counts; nothing goes to stderr

    def _answer(self, body: bool) -> None:
        relay = self.server.relay  # type: ignore[attr-defined]
        relay.requests += 1
        if urllib.parse.urlsplit(self.path).path != relay.path:
            relay.refused += 1
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()
            return
        size = os.stat(relay.file).st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/x-tar")
        self.send_header("Content-Length", str(size))
        self.send_header("Connection", "close")
        self.end_headers()
        if not body:
            return
        sent = 0
        with open(relay.file, "rb") as handle:
            while sent < size:
                n = self.connection.sendfile(handle, offset=sent, count=min(CHUNK, size - sent))
                if not n:
                    break
                sent += n
        relay.bytes_sent += sent
        if sent == size:
            relay.transfers += 1

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._answer(body=True)

    def do_HEAD(self):  # noqa: N802
        self._answer(body=False)


class Relay:
    """Serve ``file`` at ``url_path(token, basename)`` on ``bind``:``port`` until done."""

    def __init__(self, file: str, bind: str, port: int, token: str):
        if not os.path.isfile(file):
            raise RelayError(f"{file} is not a regular file")
        self.file, self.path = file, url_path(token, os.path.basename(file))
        self.requests = self.refused = self.transfers = self.bytes_sent = 0
        try:
            self._server = http.server.HTTPServer((bind, port), _Handler)
        except OSError as exc:
            raise RelayError(f"cannot listen on {bind}:{port}: {exc.strerror or exc}") from None
        self._server.relay = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]

    def run(self, transfers: int = 1, idle_timeout: float = 120.0, deadline: float = 3600.0,
            clock=time.monotonic) -> dict:
        """Answer requests until ``transfers`` complete ones, ``idle_timeout`` s without a request
        or ``deadline`` s in all; the counts and why it stopped."""
        start = last = clock()
        self._server.timeout = 0.5
        reason = "transfers"
        try:
            while self.transfers < transfers:
                now = clock()
                if now - start >= deadline:
                    reason = "deadline"
                    break
                if now - last >= idle_timeout:
                    reason = "idle"
                    break
                seen = self.requests
                self._server.handle_request()
                if self.requests != seen:
                    last = clock()
        finally:
            self._server.server_close()
        return {"reason": reason, "transfers": self.transfers, "requests": self.requests,
                "refused": self.refused, "bytes_sent": self.bytes_sent,
                "seconds": round(clock() - start, 3)}
