"""A minimal Docker Engine API server on a Unix socket, for unit tests of the collection's Docker
client (the docker SDK, wrapped in ``_docker_engine``): the SDK speaks real HTTP to it.

It keeps images and tags in memory, and ``POST /images/load`` reads the streamed body (with a
Content-Length, or chunked as the SDK sends a generator) into a file, counting the body's pieces,
and reads the archive's identity the way dockerd would (classic store: config digest); it answers
chunked, as dockerd does.
``fail_load`` makes the load answer with an error line, as dockerd does for a broken archive.
``GET /images/json`` lists the images with their tags; ``containers`` (name → inspect document)
answers ``GET /containers/<name>/json``, 404 for any other name, and ``GET /containers/json``
(``all`` and a ``label`` filter only).
"""
from __future__ import annotations

import json
import os
import socketserver
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlparse

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _image_archive as ia


class State:
    def __init__(self, store: str = "classic"):
        self.store = store
        self.images: dict[str, dict] = {}
        self.tags: dict[str, str] = {}
        self.requests: list[str] = []
        self.api_versions: list[str] = []  # the version prefix of each request (/v1.41/...), "" for none
        self.engine_api_version = "1.41"  # what GET /version answers
        self.load_bytes = 0
        self.load_chunks: list[int] = []  # the size of each chunk of a chunked load body
        self.fail_load: str | None = None
        self.containers: dict[str, dict] = {}
        self.in_use: set[str] = set()  # image IDs a running container uses: DELETE answers 409

    def resolve(self, ref: str) -> str | None:
        if ref in self.images:
            return ref
        if ref in self.tags:
            return self.tags[ref]
        if ":" not in ref.rsplit("/", 1)[-1] and f"{ref}:latest" in self.tags:
            return self.tags[f"{ref}:latest"]
        return None


class _Handler(BaseHTTPRequestHandler):
    state: State

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: object = None, lines: list[dict] | None = None):
        data = b"".join(json.dumps(x).encode() + b"\n" for x in lines) if lines is not None else \
            (json.dumps(body).encode() if body is not None else b"")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_chunked(self, lines: list[dict]):
        """200 and one chunk per JSON line, as dockerd streams ``/images/load``."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in lines:
            data = json.dumps(line).encode() + b"\r\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def _body_chunks(self, length: int):
        """The request body in the pieces it came in: chunked (each chunk recorded in
        ``state.load_chunks``), or ``length`` bytes read 1 MiB at a time."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return
                chunk = self.rfile.read(size)
                self.rfile.readline()
                self.state.load_chunks.append(size)
                yield chunk
        left = length
        while left:
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk

    def _path(self):
        u = urlparse(self.path)
        path = unquote(u.path)
        if path.startswith("/v1."):
            self.state.api_versions.append(path.split("/", 2)[1][1:])
            path = "/" + path.split("/", 2)[2]
        else:
            self.state.api_versions.append("")
        return path, {k: v[0] for k, v in parse_qs(u.query).items()}

    def do_GET(self):
        path, query = self._path()
        self.state.requests.append(f"GET {path}")
        if path == "/version":
            return self._send(200, {"ApiVersion": self.state.engine_api_version, "Version": "20.10.24",
                                    "MinAPIVersion": "1.12"})
        if path == "/info":
            status = [["driver-type", "io.containerd.snapshotter.v1"]] if self.state.store == "containerd" else \
                [["Backing Filesystem", "extfs"]]
            return self._send(200, {"ID": "FAKE-ENGINE", "Name": "fake-rank", "Driver": "overlay2",
                                    "DriverStatus": status})
        if path == "/containers/json":
            filters = json.loads(query.get("filters", "{}"))
            wanted = filters.get("label") or []
            rows = []
            for name, doc in self.state.containers.items():
                labels = (doc.get("Config") or {}).get("Labels") or {}
                running = bool((doc.get("State") or {}).get("Running"))
                if (running or query.get("all") in ("1", "True", "true")) and all(
                        (w.split("=", 1)[0] in labels) if "=" not in w else labels.get(w.split("=", 1)[0]) == w.split("=", 1)[1]
                        for w in (wanted if isinstance(wanted, list) else list(wanted))):
                    rows.append({"Id": doc.get("Id"), "Names": [f"/{name}"], "Labels": labels,
                                 "State": "running" if running else "exited"})
            return self._send(200, rows)
        if path == "/images/json":
            rows = []
            for image_id, doc in self.state.images.items():
                tags = sorted(t for t, i in self.state.tags.items() if i == image_id)
                rows.append({"Id": image_id, "RepoTags": tags, "RepoDigests": [], "Size": 0,
                             "Labels": (doc.get("Config") or {}).get("Labels")})
            return self._send(200, rows)
        if path.startswith("/containers/") and path.endswith("/json"):
            name = path[len("/containers/"):-len("/json")]
            if name not in self.state.containers:
                return self._send(404, {"message": f"No such container: {name}"})
            return self._send(200, self.state.containers[name])
        if path.startswith("/images/") and path.endswith("/json"):
            image_id = self.state.resolve(path[len("/images/"):-len("/json")])
            if image_id is None:
                return self._send(404, {"message": "No such image"})
            return self._send(200, self.state.images[image_id])
        self._send(404, {"message": "page not found"})

    def do_POST(self):
        path, query = self._path()
        self.state.requests.append(f"POST {path}")
        length = int(self.headers.get("Content-Length", "0"))
        if path == "/images/load":
            fd, tmp = tempfile.mkstemp()
            with os.fdopen(fd, "wb") as f:
                for chunk in self._body_chunks(length):
                    f.write(chunk)
                    self.state.load_bytes += len(chunk)
            try:
                if self.state.fail_load:
                    return self._send_chunked([{"errorDetail": {"message": self.state.fail_load},
                                                "error": self.state.fail_load}])
                got = ia.read_identity(tmp)
            finally:
                os.unlink(tmp)
            image_id = got.manifest_digest if self.state.store == "containerd" else got.image_id
            self.state.images[image_id] = {"Id": image_id, "Architecture": got.architecture,
                                           "Config": {"Labels": got.labels}, "RepoTags": got.repo_tags}
            for t in got.repo_tags:
                self.state.tags[t] = image_id
            return self._send_chunked([{"stream": f"Loaded image: {t}\n"} for t in got.repo_tags])
        if path.startswith("/images/") and path.endswith("/tag"):
            image_id = self.state.resolve(path[len("/images/"):-len("/tag")])
            if image_id is None:
                return self._send(404, {"message": "No such image"})
            self.state.tags[f"{query['repo']}:{query.get('tag', 'latest')}"] = image_id
            return self._send(201)
        self._send(404, {"message": "page not found"})

    def do_DELETE(self):
        path, query = self._path()
        self.state.requests.append(f"DELETE {path}")
        ref = path[len("/images/"):]
        if self.state.resolve(ref) in self.state.in_use:
            return self._send(409, {"message": f"conflict: unable to delete {ref} - image is being used by "
                                               f"running container"})
        if query.get("force") in ("1", "True", "true") and ref in self.state.images:
            untagged = [{"Untagged": t} for t, i in sorted(self.state.tags.items()) if i == ref]
            for t in [t for t, i in self.state.tags.items() if i == ref]:
                del self.state.tags[t]
            del self.state.images[ref]
            return self._send(200, untagged + [{"Deleted": ref}])
        if ref in self.state.tags:
            image_id = self.state.tags.pop(ref)
            if image_id not in self.state.tags.values():
                self.state.images.pop(image_id, None)
            return self._send(200, [{"Untagged": ref}])
        if self.state.images.pop(ref, None):
            return self._send(200, [{"Deleted": ref}])
        self._send(404, {"message": "No such image"})


class ExecHandler(_Handler):
    """FakeDockerd's handler plus ``POST /containers/<n>/exec``, ``POST /exec/<id>/start``,
    ``GET /exec/<id>/json`` and ``GET /containers/<n>/logs``, answered from ``state.exec``."""

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")

    def do_POST(self):  # noqa: N802 - http.server's name
        path, _query = self._path()
        ex = self.state.exec
        if path.startswith("/containers/") and path.endswith("/exec"):
            self.state.requests.append(f"POST {path}")
            ex["create"].append(self._body())
            name = path[len("/containers/"):-len("/exec")]
            if name not in self.state.containers:
                return self._send(404, {"message": f"No such container: {name}"})
            if not self.state.containers[name].get("State", {}).get("Running"):
                return self._send(409, {"message": f"container {name} is not running"})
            return self._send(201, {"Id": "e1"})
        if path == "/exec/e1/start":
            self.state.requests.append(f"POST {path}")
            ex["start"].append(self._body())
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.docker.raw-stream")
            self.end_headers()
            self.wfile.flush()
            time.sleep(0.05)  # dockerd answers, then hijacks the connection: the SDK reads the socket itself
            data = ex["output"]
            for i in range(0, len(data), 7):  # in odd pieces: frames cross the reads
                self.wfile.write(data[i:i + 7])
            self.wfile.flush()
            self.close_connection = True
            return None
        return super().do_POST()

    def do_GET(self):  # noqa: N802 - http.server's name
        path, query = self._path()
        ex = self.state.exec
        if path == "/exec/e1/json":
            self.state.requests.append(f"GET {path}")
            running = ex["running_polls"] > 0
            ex["running_polls"] -= 1
            return self._send(200, {"ID": "e1", "Running": running, "ExitCode": None if running else ex["rc"]})
        if path.startswith("/containers/") and path.endswith("/logs"):
            self.state.requests.append(f"GET {path}?{'&'.join(f'{k}={v}' for k, v in sorted(query.items()))}")
            name = path[len("/containers/"):-len("/logs")]
            if name not in self.state.containers:
                return self._send(404, {"message": f"No such container: {name}"})
            data = ex["logs"]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        return super().do_GET()


def exec_state() -> State:
    """A State for :class:`ExecHandler`: what the exec and logs endpoints answer, and what they were sent."""
    state = State()
    state.exec = {"create": [], "start": [], "output": b"", "rc": 0, "running_polls": 0, "logs": b""}
    return state


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class FakeDockerd:
    def __init__(self, socket_path: str, store: str = "classic"):
        self.socket_path = socket_path
        self.state = State(store)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = _Server(socket_path, handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket_path}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
