# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one Docker client: the docker SDK for Python (``docker.APIClient``), wrapped.

This is the only file of the collection that imports ``docker``. The collection's own modules on
the ranks (image identity, the fleet audit, the engine probe, the evidence and orphan reads, the
image teardown) reach the rank's engine through :class:`Engine`, which speaks the few endpoints
they need over the engine's Unix socket and turns every SDK or transport error into
:class:`EngineError` (with the HTTP status when the engine answered one). On a rank the SDK comes
from the distribution (Debian's ``python3-docker``, which brings ``python3-requests``); preflight
says which is missing (:func:`sdk_mismatches`). community.docker stays for container lifecycle only.

An image archive of 30 GB and more is streamed into the engine in fixed-size chunks (a generator
handed to the SDK's ``load_image``) and never held in memory. It never pulls and never builds:
there is no method for either.

:meth:`Engine.exec_run` and :meth:`Engine.logs` answer what ``docker exec`` and ``docker logs``
print; :func:`demux` reads Docker's multiplexed stream where the SDK cannot (:meth:`Engine._log_bytes`).
"""
from __future__ import annotations

import json
import os
import sys
import time
import warnings
from typing import Callable, Iterator
from urllib.parse import quote

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import Mismatch


def _stdlib_distutils() -> None:
    """The one workaround of the SDK's import (called before it is imported): Debian 12's ``python3-docker``
    (5.0.3) imports ``distutils``, and setuptools' shim (``distutils-precedence.pth``) answers that import with setuptools' own
    copy, importing setuptools and ``pkg_resources`` on the way: 0.1 s of CPU of the 0.2 s that importing the SDK
    costs, in every module run on a rank that reads its engine. Where the standard library still has
    ``distutils`` (Python < 3.12) it is imported first, past the shim, so the SDK finds it loaded. Newer SDKs
    import no ``distutils``; on any error the import is left to the shim, as before."""
    if sys.version_info >= (3, 12) or "distutils" in sys.modules:
        return
    shims = [f for f in sys.meta_path if type(f).__module__ == "_distutils_hack"]
    if not shims:
        return
    for shim in shims:
        sys.meta_path.remove(shim)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import distutils.spawn  # noqa: F401  pylint: disable=deprecated-module
            import distutils.version  # noqa: F401  pylint: disable=deprecated-module
    except ImportError:
        pass
    finally:
        sys.meta_path[0:0] = shims


# The SDK, imported by the first Engine: a module that imports this file but never reaches an engine (the NIAH
# ladder, the serving guard) never pays the 0.1 s of CPU the import costs on a rank.
docker = None
_docker_errors = None
_requests_errors = None
_IMPORT_ERROR: ImportError | None = None  # reported by Engine() and by preflight (missing_sdk), never at import


def _load_sdk() -> None:
    """Import the SDK once (the first Engine() does)."""
    global docker, _docker_errors, _requests_errors, _IMPORT_ERROR  # pylint: disable=global-statement
    if docker is not None or _IMPORT_ERROR is not None:
        return
    _stdlib_distutils()
    try:
        import docker as sdk  # pylint: disable=import-outside-toplevel
        from docker import errors as docker_errors  # pylint: disable=import-outside-toplevel
        from requests import exceptions as requests_errors  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        _IMPORT_ERROR = exc
        return
    docker, _docker_errors, _requests_errors = sdk, docker_errors, requests_errors


CHUNK = 1 << 20  # bytes per read and per send
# Docker 20.10's, as the collection's client spoke before the SDK; a fixed version costs no /version
# round trip (Engine(api_version="auto") speaks the engine's own)
API_VERSION = "1.41"
EXEC_MAX_BYTES = 16 << 20  # stdout + stderr kept of one exec; the rest is read and dropped
_FRAME_HEADER = 8
_EXIT_CODE_POLLS = 50  # GET /exec/{id}/json until it no longer runs: at most 50 × 0.1 s after the output ended
# What the SDK needs on a rank, and the Debian package that brings it (tools/deps/apt.sh)
SDK_PACKAGES = {"docker": "python3-docker", "requests": "python3-requests"}


class EngineError(Exception):
    """The engine could not be reached, or answered with an error."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def missing_sdk() -> list[str]:
    """The Debian packages this Python lacks for the docker SDK (``python3-docker``,
    ``python3-requests``); empty when ``import docker`` works."""
    missing = []
    _stdlib_distutils()
    for name, package in SDK_PACKAGES.items():
        try:
            __import__(name)
        except ImportError:
            missing.append(package)
    return missing


def sdk_mismatches(rank: str) -> list[Mismatch]:
    """Preflight's check (``gb10.dspark.gpu_facts`` with ``docker_sdk``): one mismatch per Python module
    of the SDK this Python cannot import, naming the rank and the Debian package that brings it."""
    return [Mismatch(rank, f"Python module {name} (for the docker SDK, the collection's Docker client)", "importable",
                     "missing", reason=f"install {package} on the rank", expected_word="expected")
            for name, package in SDK_PACKAGES.items() if package in missing_sdk()]


def socket_path_of(docker_host: str) -> str:
    """``unix:///run/docker.sock`` or a bare path → the socket path. Other schemes are refused."""
    if docker_host.startswith("unix://"):
        return docker_host[len("unix://"):]
    if docker_host.startswith("/"):
        return docker_host
    raise EngineError(f"docker_host {docker_host!r} is not a unix socket (unix:///path)")


DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


class Engine:
    """One Docker engine, reached over its Unix socket through the docker SDK. Making one does not
    contact the engine.

    ``api_version``: the Engine API version spoken, :data:`API_VERSION` by default; ``auto`` speaks the
    engine's own (asked once, at the first call), as community.docker's modules do: the evidence's
    inspect record is read that way, so the pack holds the document those modules returned."""

    def __init__(self, docker_host: str = DEFAULT_DOCKER_HOST, timeout: float = 3600.0,
                 api_version: str = API_VERSION):
        self.socket_path = socket_path_of(docker_host)
        self.timeout = timeout
        self.api_version = api_version
        self._info: dict | None = None
        self._client = None
        _load_sdk()
        if docker is None:
            raise EngineError(f"the docker SDK for Python is missing on this rank ({_IMPORT_ERROR}): install "
                              f"{' and '.join(missing_sdk()) or 'python3-docker'} for the rank's Python")
        if api_version != "auto":
            self._client = self._connect()  # a fixed version: nothing is asked of the engine yet

    def _connect(self):
        try:
            return docker.APIClient(base_url=f"unix://{self.socket_path}", version=self.api_version,
                                    timeout=self.timeout)
        except (_docker_errors.DockerException, _requests_errors.RequestException, OSError) as exc:
            raise EngineError(f"cannot reach the Docker engine at {self.socket_path}: {exc}") from exc

    @property
    def _api(self):
        if self._client is None:
            self._client = self._connect()  # ``auto``: asks the engine for its version (GET /version)
        return self._client

    # -- plumbing -------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable, *args, missing_ok: bool = False, **kwargs):
        """``fn(*args, **kwargs)`` with the SDK's errors as EngineError ``what: HTTP <status>: <message>``;
        a 404 is None when ``missing_ok``."""
        try:
            return fn(*args, **kwargs)
        except _docker_errors.NotFound as exc:
            if missing_ok:
                return None
            raise EngineError(f"{what}: HTTP 404: {_explanation(exc)}", 404) from exc
        except _docker_errors.APIError as exc:
            raise EngineError(f"{what}: HTTP {exc.status_code}: {_explanation(exc)}", exc.status_code) from exc
        except (_docker_errors.DockerException, _requests_errors.RequestException, OSError, ValueError) as exc:
            raise EngineError(f"cannot reach the Docker engine at {self.socket_path}: {exc}") from exc

    # -- reads ------------------------------------------------------------------------------
    def info(self) -> dict:
        if self._info is None:
            self._info = self._call("GET /info", self._api.info)
        return self._info  # type: ignore[return-value]

    def version(self) -> dict:
        return self._call("GET /version", self._api.version, api_version=False)

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
        return self._call(f"inspecting image {ref}", self._api.inspect_image, ref, missing_ok=True)

    def list_images(self) -> list[dict]:
        """``GET /images/json``: one record per image (``Id``, ``RepoTags``, ...), as ``docker image ls``
        lists them (intermediate images left out)."""
        images = self._call("GET /images/json", self._api.images)
        if not isinstance(images, list):
            raise EngineError(f"listing images: expected a list, got {type(images).__name__}")
        return images

    def list_containers(self, label: str) -> list[dict]:
        """``GET /containers/json?all=1`` of the containers carrying ``label`` (running or not), one
        record each (``Id``, ``Names`` with their leading ``/``, ``Labels``, ``State``, ...)."""
        rows = self._call("listing containers", self._api.containers, all=True, filters={"label": label})
        if not isinstance(rows, list):
            raise EngineError(f"listing containers: expected a list, got {type(rows).__name__}")
        return rows

    def inspect_container(self, name: str) -> dict | None:
        """The engine's inspect record of a container (by name or ID), as ``docker container
        inspect`` prints it in its list, or None when there is no such container."""
        doc = self._call(f"inspecting container {name}", self._api.inspect_container, name, missing_ok=True)
        if doc is not None and not isinstance(doc, dict):
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
        # The one place the SDK is not enough: APIClient.logs() joins a non-TTY container's stdout
        # and stderr into one byte string (its demux option exists for exec_start only), and asks
        # the engine for the container's inspect record first to learn whether it has a TTY, which
        # the callers already know. `docker logs --tail N` keeps the streams apart and counts N lines
        # over both, so two reads (one per stream) would not do either. The log is therefore asked
        # of the same endpoint through the SDK's own HTTP session (APIClient is a requests.Session,
        # with its base URL and API version), and demultiplexed here (:func:`demux`).
        if isinstance(tail, bool) or not isinstance(tail, int) or tail < 0:
            raise ValueError(f"tail must be a whole number >= 0, not {tail!r}")
        url = f"{self._api.base_url}/v{self._api.api_version}/containers/{quote(container, safe='')}/logs"
        what = f"reading the logs of container {container}"
        res = self._call(what, self._api.get, url, params={"stdout": 1, "stderr": 1, "tail": tail},
                         timeout=self.timeout)
        if res.status_code != 200:
            raise EngineError(f"{what}: HTTP {res.status_code}: {_error_text(res.content)}", res.status_code)
        return res.content

    # -- exec (runs a command in a container; changes nothing the engine keeps but the exec record)
    def exec_run(self, container: str, argv: list[str], max_bytes: int = EXEC_MAX_BYTES) -> tuple[int, bytes, bytes]:
        """Run ``argv`` in the running container ``container`` as ``docker exec`` would (no TTY, no
        stdin); (exit code, stdout, stderr). At most ``max_bytes`` of output are kept (stdout first
        as it comes); the rest is read and dropped, and stderr ends with a line saying so.

        :class:`EngineError` when it cannot run: status 404 (no such container), 409 (the
        container is not running or paused), or any other engine error."""
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"argv must be a non-empty list of strings, not {argv!r}")
        what = f"exec in container {container}"
        created = self._call(what, self._api.exec_create, container, list(argv), stdout=True, stderr=True,
                             stdin=False, tty=False)
        exec_id = created.get("Id") if isinstance(created, dict) else None
        if not isinstance(exec_id, str) or not exec_id or "/" in exec_id:
            raise EngineError(f"{what}: the engine's answer names no exec ID")
        kept = [bytearray(), bytearray()]
        room, dropped = max_bytes, 0
        try:
            # demux: (stdout, stderr) pairs, one side None, read from the socket as they come
            for out, err in self._call(f"{what}: starting it", self._api.exec_start, exec_id, tty=False,
                                       stream=True, demux=True):
                for i, payload in ((0, out), (1, err)):
                    if payload:
                        take = payload[:max(room, 0)]
                        kept[i] += take
                        room -= len(take)
                        dropped += len(payload) - len(take)
        except (_docker_errors.DockerException, _requests_errors.RequestException, OSError, ValueError) as exc:
            raise EngineError(f"{what}: reading its output from the Docker engine at {self.socket_path}: "
                              f"{exc}") from exc
        rc = self._exec_exit_code(container, exec_id)
        err_bytes = bytes(kept[1])
        if dropped:
            err_bytes += (f"\n[gb10.dspark: output cut at {max_bytes} bytes; {dropped} more bytes were not "
                          f"returned]\n").encode()
        return rc, bytes(kept[0]), err_bytes

    def _exec_exit_code(self, container: str, exec_id: str) -> int:
        for attempt in range(_EXIT_CODE_POLLS):
            doc = self._call(f"exec in container {container}: inspecting it", self._api.exec_inspect, exec_id)
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
        """Stream the archive at ``path`` into ``POST /images/load`` in :data:`CHUNK`-sized pieces (a
        generator: the SDK sends it chunked, never the whole archive at once); return the engine's
        message lines. Raises :class:`EngineError` on any error line."""
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as handle:
                answer = self._api.load_image(_chunks(handle, size, progress), quiet=True)
                lines = [_line(x) for x in answer]
        except _docker_errors.APIError as exc:
            raise EngineError(f"image load: HTTP {exc.status_code}: {_explanation(exc)}", exc.status_code) from exc
        except (_docker_errors.DockerException, _requests_errors.RequestException, OSError, ValueError) as exc:
            raise EngineError(f"image load from {path} failed: {exc}") from exc
        err = _lines_error(lines)
        if err:
            raise EngineError(f"image load from {path} failed: {err}")
        return lines

    def tag(self, image: str, repo: str, tag: str) -> None:
        self._call(f"POST /images/{image}/tag", self._api.tag, image, repo, tag)

    def remove_image(self, image: str, force: bool = False) -> None:
        """``DELETE /images/<image>``; ``force``: every tag of an image ID too (``docker rmi -f``).
        The engine refuses an image a running container uses either way (HTTP 409)."""
        self._call(f"DELETE /images/{image}", self._api.remove_image, image, force=force, noprune=False)


def _chunks(handle, size: int, progress: Callable[[int, int], None] | None) -> Iterator[bytes]:
    sent = 0
    while True:
        chunk = handle.read(CHUNK)
        if not chunk:
            return
        sent += len(chunk)
        yield chunk
        if progress:
            progress(sent, size)


def _line(item: object) -> dict:
    return item if isinstance(item, dict) else {"stream": str(item)}


def _explanation(exc: Exception) -> str:
    text = getattr(exc, "explanation", None)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text or exc)


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
    """(stdout, stderr) of a whole multiplexed Docker stream (``docker logs`` of a container
    without TTY). :class:`EngineError` for a truncated frame, a frame that is not one, or the
    engine's own error frame."""
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
