# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small Docker Engine API client over the engine's Unix socket, standard library only.

The identity modules run on the ranks with the system Python, which has no Docker SDK; this
client speaks the few endpoints they need. Bodies are streamed in both directions, so an image
archive of 30 GB and more is sent in fixed-size chunks and never held in memory. It never
pulls and never builds: there is no method for either.

:meth:`Engine.exec_run` and :meth:`Engine.logs` answer what ``docker exec`` and ``docker logs``
print; both read Docker's multiplexed stream (:func:`demux`).
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import time
from typing import Callable, Iterator
from urllib.parse import quote, urlencode

CHUNK = 1 << 20  # bytes per read and per send
API_PREFIX = "/v1.41"  # Docker 20.10; newer engines accept it (minimum is 1.24)
EXEC_MAX_BYTES = 16 << 20  # stdout + stderr kept of one exec; the rest is read and dropped
_JSON_HEADERS = {"Content-Type": "application/json"}
_FRAME_HEADER = 8
_EXIT_CODE_POLLS = 50  # GET /exec/{id}/json until it no longer runs: at most 50 × 0.1 s after the output ended


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


DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


class Engine:
    """One Docker engine, reached over its Unix socket."""

    def __init__(self, docker_host: str = DEFAULT_DOCKER_HOST, timeout: float = 3600.0):
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

    def logs(self, container: str, tail: int, tty: bool = False) -> tuple[bytes, bytes]:
        """(stdout, stderr) of the last ``tail`` lines of the container's log, as ``docker logs --tail``
        prints them. ``tty``: the container runs with a TTY, so its log is one raw stream (all of it
        stdout); else the log is Docker's multiplexed stream (:func:`demux`)."""
        data = self._log_bytes(container, tail)
        return (data, b"") if tty else demux(data)

    def log_text(self, container: str, tail: int, tty: bool = False) -> bytes:
        """The last ``tail`` lines of the container's log, both streams in the order the container
        wrote them (as ``docker logs --tail`` shows them on one terminal): what an operator reads to
        see what came before what. ``tty`` and errors as :meth:`logs`."""
        data = self._log_bytes(container, tail)
        if tty:
            return data
        frames = _Demux(merge=True)
        frames.feed(data)
        frames.finish()
        return bytes(frames.merged or b"")

    def _log_bytes(self, container: str, tail: int) -> bytes:
        if isinstance(tail, bool) or not isinstance(tail, int) or tail < 0:
            raise ValueError(f"tail must be a whole number >= 0, not {tail!r}")
        path = f"/containers/{quote(container, safe='')}/logs"
        status, data = self._request("GET", path, {"stdout": 1, "stderr": 1, "tail": tail})
        if status != 200:
            raise EngineError(f"reading the logs of container {container}: HTTP {status}: {_error_text(data)}", status)
        return data

    # -- exec (runs a command in a container; changes nothing the engine keeps but the exec record)
    def exec_run(self, container: str, argv: list[str], max_bytes: int = EXEC_MAX_BYTES) -> tuple[int, bytes, bytes]:
        """Run ``argv`` in the running container ``container`` as ``docker exec`` would (no TTY, no
        stdin); (exit code, stdout, stderr). At most ``max_bytes`` of output are kept (stdout first
        as it comes); the rest is read and dropped, and stderr ends with a line saying so.

        :class:`EngineError` when it cannot run: status 404 (no such container), 409 (the
        container is not running or paused), or any other engine error."""
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"argv must be a non-empty list of strings, not {argv!r}")
        body = json.dumps({"AttachStdout": True, "AttachStderr": True, "Tty": False, "Cmd": list(argv)}).encode()
        status, data = self._request("POST", f"/containers/{quote(container, safe='')}/exec", body=body,
                                     headers=_JSON_HEADERS)
        if status != 201:
            raise EngineError(f"exec in container {container}: HTTP {status}: {_error_text(data)}", status)
        try:
            exec_id = json.loads(data)["Id"]
        except (ValueError, TypeError, KeyError) as exc:
            raise EngineError(f"exec in container {container}: the engine's answer names no exec ID: "
                              f"{_error_text(data)}", status) from exc
        if not isinstance(exec_id, str) or not exec_id or "/" in exec_id:
            raise EngineError(f"exec in container {container}: the engine's answer names no exec ID", status)
        frames = _Demux(max_bytes)
        self._exec_start(container, exec_id, frames)
        out, err = frames.finish()
        rc = self._exec_exit_code(container, exec_id)
        if frames.dropped:
            err += (f"\n[gb10.dspark: output cut at {max_bytes} bytes; {frames.dropped} more bytes were not "
                    f"returned]\n").encode()
        return rc, out, err

    def _exec_start(self, container: str, exec_id: str, frames: _Demux) -> None:
        body = json.dumps({"Detach": False, "Tty": False}).encode()
        conn = self._conn()
        try:
            conn.request("POST", f"{API_PREFIX}/exec/{exec_id}/start", body=body, headers=_JSON_HEADERS)
            resp = conn.getresponse()
            if resp.status != 200:
                data = resp.read()
                raise EngineError(f"exec in container {container}: starting it: HTTP {resp.status}: "
                                  f"{_error_text(data)}", resp.status)
            while True:
                chunk = resp.read1(CHUNK) if hasattr(resp, "read1") else resp.read(CHUNK)
                if not chunk:
                    break
                frames.feed(chunk)
        except (OSError, http.client.HTTPException) as exc:
            raise EngineError(f"exec in container {container}: reading its output from the Docker engine at "
                              f"{self.socket_path}: {exc}") from exc
        finally:
            conn.close()

    def _exec_exit_code(self, container: str, exec_id: str) -> int:
        for attempt in range(_EXIT_CODE_POLLS):
            doc = self._json("GET", f"/exec/{exec_id}/json")
            if not isinstance(doc, dict):
                raise EngineError(f"exec in container {container}: inspecting it: expected a mapping")
            code = doc.get("ExitCode")
            if not doc.get("Running") and isinstance(code, int) and not isinstance(code, bool):
                return code
            if attempt + 1 < _EXIT_CODE_POLLS:
                time.sleep(0.1)
        raise EngineError(f"exec in container {container}: no exit code: still running after its output ended")

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


class _Demux:
    """Docker's multiplexed stream, fed in pieces: frames of an 8-byte header (byte 0: the stream,
    0 stdin / 1 stdout / 2 stderr / 3 the engine's own error; bytes 1-3 zero; bytes 4-7 the
    payload's length, big-endian) and the payload. Keeps at most ``max_bytes`` of payload (None:
    all) and counts what it drops; ``merge``: also keeps both streams' payload in the frames' order
    (``merged``)."""

    def __init__(self, max_bytes: int | None = None, merge: bool = False):
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._out = (bytearray(), bytearray())
        self.merged: bytearray | None = bytearray() if merge else None
        self.kept = 0
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        self._buf += data
        start = 0
        while len(self._buf) - start >= _FRAME_HEADER:
            header = self._buf[start:start + _FRAME_HEADER]
            if header[0] > 3 or any(header[1:4]):
                raise EngineError(f"not a multiplexed Docker stream: frame header {bytes(header)!r}")
            size = int.from_bytes(header[4:8], "big")
            end = start + _FRAME_HEADER + size
            if len(self._buf) < end:
                break
            self._add(header[0], bytes(self._buf[start + _FRAME_HEADER:end]))
            start = end
        del self._buf[:start]

    def _add(self, stream: int, payload: bytes) -> None:
        if stream == 3:
            raise EngineError("the Docker engine reported: " + payload.decode("utf-8", "replace").strip())
        if self.max_bytes is not None:
            room = max(self.max_bytes - self.kept, 0)
            if len(payload) > room:
                self.dropped += len(payload) - room
                payload = payload[:room]
        self.kept += len(payload)
        self._out[1 if stream == 2 else 0].extend(payload)
        if self.merged is not None:
            self.merged.extend(payload)

    def finish(self) -> tuple[bytes, bytes]:
        if self._buf:
            raise EngineError(f"truncated multiplexed Docker stream: {len(self._buf)} bytes of an incomplete frame")
        return bytes(self._out[0]), bytes(self._out[1])


def demux(data: bytes) -> tuple[bytes, bytes]:
    """(stdout, stderr) of a whole multiplexed Docker stream (``docker logs`` and ``docker exec``
    of a container without TTY). :class:`EngineError` for a truncated frame, a frame that is not
    one, or the engine's own error frame."""
    frames = _Demux()
    frames.feed(data)
    return frames.finish()


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
