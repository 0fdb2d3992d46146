# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small Docker Engine API client over the engine's Unix socket, standard library only.

The identity modules run on the ranks with the system Python, which has no Docker SDK; this
client speaks the few endpoints they need. Bodies are streamed in both directions, so an image
archive of 30 GB and more is sent in fixed-size chunks and never held in memory. It never
pulls and never builds: there is no method for either.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
from typing import Callable, Iterator
from urllib.parse import quote, urlencode

CHUNK = 1 << 20  # bytes per read and per send
API_PREFIX = "/v1.41"  # Docker 20.10; newer engines accept it (minimum is 1.24)


class EngineError(Exception):
    """The engine could not be reached, or answered with an error."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def socket_path_of(docker_host: str) -> str:
    """``unix:///run/docker.sock`` or a bare path → the socket path. Other schemes are refused."""
    if docker_host.startswith("unix://"):
        return docker_host[len("unix://"):]
    if docker_host.startswith("/"):
        return docker_host
    raise EngineError(f"docker_host {docker_host!r} is not a unix socket (unix:///path)")


class Engine:
    """One Docker engine, reached over its Unix socket."""

    def __init__(self, docker_host: str = "unix:///var/run/docker.sock", timeout: float = 3600.0):
        self.socket_path = socket_path_of(docker_host)
        self.timeout = timeout
        self._info: dict | None = None

    # -- plumbing -------------------------------------------------------------------------
    def _conn(self) -> _UnixConnection:
        return _UnixConnection(self.socket_path, self.timeout)

    def _request(self, method: str, path: str, query: dict | None = None,
                 body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
        url = API_PREFIX + path + ("?" + urlencode(query) if query else "")
        conn = self._conn()
        try:
            conn.request(method, url, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise EngineError(f"cannot reach the Docker engine at {self.socket_path}: {exc}") from exc
        finally:
            conn.close()

    def _json(self, method: str, path: str, query: dict | None = None, ok=(200,)) -> object:
        status, data = self._request(method, path, query)
        if status not in ok:
            raise EngineError(f"{method} {path}: HTTP {status}: {_error_text(data)}", status)
        try:
            return json.loads(data) if data else None
        except ValueError as exc:
            raise EngineError(f"{method} {path}: the engine's answer is not JSON: {exc}", status) from exc

    # -- reads ------------------------------------------------------------------------------
    def info(self) -> dict:
        if self._info is None:
            self._info = self._json("GET", "/info")  # type: ignore[assignment]
        return self._info  # type: ignore[return-value]

    def version(self) -> dict:
        return self._json("GET", "/version")  # type: ignore[return-value]

    def image_store(self) -> str:
        """``containerd`` when the engine keeps images in containerd's store (the default of
        Docker 29 on a fresh install: image ID = manifest digest), else ``classic`` (overlay2 and
        friends: image ID = config digest)."""
        info = self.info()
        for pair in info.get("DriverStatus") or []:
            if len(pair) == 2 and pair[0] == "driver-type" and "containerd.snapshotter" in str(pair[1]):
                return "containerd"
        return "classic"

    def inspect_image(self, ref: str) -> dict | None:
        """The engine's inspect record of an image (by ID or name), or None when it has none."""
        status, data = self._request("GET", f"/images/{quote(ref, safe='/:@')}/json")
        if status == 404:
            return None
        if status != 200:
            raise EngineError(f"inspecting image {ref}: HTTP {status}: {_error_text(data)}", status)
        return json.loads(data)

    def list_images(self) -> list[dict]:
        """``GET /images/json``: one record per image (``Id``, ``RepoTags``, ...), as ``docker image ls``
        lists them (intermediate images left out)."""
        images = self._json("GET", "/images/json")
        if not isinstance(images, list):
            raise EngineError(f"listing images: expected a list, got {type(images).__name__}")
        return images

    def inspect_container(self, name: str) -> dict | None:
        """The engine's inspect record of a container (by name or ID), as ``docker container
        inspect`` prints it in its list, or None when there is no such container."""
        status, data = self._request("GET", f"/containers/{quote(name, safe='')}/json")
        if status == 404:
            return None
        if status != 200:
            raise EngineError(f"inspecting container {name}: HTTP {status}: {_error_text(data)}", status)
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise EngineError(f"inspecting container {name}: the engine's answer is not JSON: {exc}", status) from exc
        if not isinstance(doc, dict):
            raise EngineError(f"inspecting container {name}: expected a mapping, got {type(doc).__name__}")
        return doc

    # -- writes -----------------------------------------------------------------------------
    def load(self, path: str, progress: Callable[[int, int], None] | None = None) -> list[dict]:
        """Stream the archive at ``path`` into ``POST /images/load``; return the engine's
        message lines. Raises :class:`EngineError` on any error line."""
        size = os.path.getsize(path)
        conn = self._conn()
        try:
            conn.putrequest("POST", API_PREFIX + "/images/load?quiet=1")
            conn.putheader("Content-Type", "application/x-tar")
            conn.putheader("Content-Length", str(size))
            conn.endheaders()
            sent = 0
            with open(path, "rb") as f:
                while True:
                    chunk = f.read(CHUNK)
                    if not chunk:
                        break
                    conn.send(chunk)
                    sent += len(chunk)
                    if progress:
                        progress(sent, size)
            resp = conn.getresponse()
            lines = list(_json_lines(resp))
            if resp.status != 200:
                raise EngineError(f"image load: HTTP {resp.status}: {_lines_error(lines)}", resp.status)
        except OSError as exc:
            raise EngineError(f"image load from {path} failed: {exc}") from exc
        finally:
            conn.close()
        err = _lines_error(lines)
        if err:
            raise EngineError(f"image load from {path} failed: {err}")
        return lines

    def tag(self, image: str, repo: str, tag: str) -> None:
        self._json("POST", f"/images/{quote(image, safe='/:@')}/tag", {"repo": repo, "tag": tag}, ok=(200, 201))

    def remove_image(self, image: str) -> None:
        self._json("DELETE", f"/images/{quote(image, safe='/:@')}", {"noprune": "false"}, ok=(200,))


def loaded_references(lines: list[dict]) -> tuple[list[str], list[str]]:
    """(image IDs, names) that ``/images/load`` reports in its ``Loaded image…`` lines."""
    ids, names = [], []
    for line in lines:
        text = str(line.get("stream", ""))
        for row in text.splitlines():
            row = row.strip()
            if row.startswith("Loaded image ID:"):
                ids.append(row.split(":", 1)[1].strip())
            elif row.startswith("Loaded image:"):
                names.append(row.split(":", 1)[1].strip())
    return ids, names


def split_tag(ref: str) -> tuple[str, str]:
    """``repo:tag`` → (repo, tag); a registry port is not a tag; no tag → ``latest``."""
    if "@" in ref:
        raise ValueError(f"{ref!r} is a digest reference, not a tag")
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1:]
    return ref, "latest"


def _json_lines(resp: http.client.HTTPResponse) -> Iterator[dict]:
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            parsed = _parse_line(line)
            if parsed is not None:
                yield parsed
    parsed = _parse_line(buf)
    if parsed is not None:
        yield parsed


def _parse_line(line: bytes) -> dict | None:
    line = line.strip()
    if not line:
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return {"stream": line.decode("utf-8", "replace")}
    return obj if isinstance(obj, dict) else {"stream": str(obj)}


def _lines_error(lines: list[dict]) -> str:
    for line in lines:
        if line.get("error") or line.get("errorDetail"):
            detail = line.get("errorDetail") or {}
            return str(line.get("error") or detail.get("message") or detail)
    return ""


def _error_text(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message", data[:200]))
    except (ValueError, AttributeError):
        return data[:200].decode("utf-8", "replace")
