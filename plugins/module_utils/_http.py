# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The JSON-over-HTTP client the serving guard and NIAH use against the head's OpenAI API (stdlib only)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request


def json_client(base_url: str, api_key: str | None):
    """``call(method, path, body, timeout)`` -> (status, body) against ``base_url``: the parsed JSON, the raw
    text of a streamed answer (``body["stream"]``) or of a non-JSON one; for an HTTP error status the
    error document (vLLM's ``{"error": {...}}``) when it is JSON, else ``None``. ``body=None`` sends no body.
    Transport errors (refused, reset, timeout) raise ``OSError``; the key goes only into the Authorization
    header."""
    def call(method: str, path: str, body: dict | None, timeout: float):
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        req = urllib.request.Request(base_url.rstrip("/") + path, data=None if body is None else json.dumps(body).encode(),
                                     headers=headers,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read().decode("utf-8", "replace")
                status = resp.status
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read().decode("utf-8", "replace"))
            except (OSError, ValueError):
                return exc.code, None
        if body and body.get("stream"):
            return status, text
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text
    return call
