"""A minimal Docker Engine API server on a Unix socket, for unit tests of the stdlib client.

It keeps images and tags in memory, and ``POST /images/load`` reads the streamed body into a
file and reads the archive's identity the way dockerd would (classic store: config digest).
``fail_load`` makes the load answer with an error line, as dockerd does for a broken archive.
``GET /images/json`` lists the images with their tags; ``containers`` (name → inspect document)
answers ``GET /containers/<name>/json``, 404 for any other name.
"""
from __future__ import annotations

import json
import os
import socketserver
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlparse

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _image_archive as ia


class State:
    def __init__(self, store: str = "classic"):
        self.store = store
        self.images: dict[str, dict] = {}
        self.tags: dict[str, str] = {}
        self.requests: list[str] = []
        self.load_bytes = 0
        self.fail_load: str | None = None
        self.containers: dict[str, dict] = {}

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

    def _path(self):
        u = urlparse(self.path)
        path = unquote(u.path)
        if path.startswith("/v1."):
            path = "/" + path.split("/", 2)[2]
        return path, {k: v[0] for k, v in parse_qs(u.query).items()}

    def do_GET(self):
        path, _unused = self._path()
        self.state.requests.append(f"GET {path}")
        if path == "/info":
            status = [["driver-type", "io.containerd.snapshotter.v1"]] if self.state.store == "containerd" else \
                [["Backing Filesystem", "extfs"]]
            return self._send(200, {"Driver": "overlay2", "DriverStatus": status})
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
                left = length
                while left:
                    chunk = self.rfile.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    f.write(chunk)
                    left -= len(chunk)
            self.state.load_bytes += length
            try:
                if self.state.fail_load:
                    return self._send(200, lines=[{"errorDetail": {"message": self.state.fail_load},
                                                   "error": self.state.fail_load}])
                got = ia.read_identity(tmp)
            finally:
                os.unlink(tmp)
            image_id = got.manifest_digest if self.state.store == "containerd" else got.image_id
            self.state.images[image_id] = {"Id": image_id, "Architecture": got.architecture,
                                           "Config": {"Labels": got.labels}, "RepoTags": got.repo_tags}
            for t in got.repo_tags:
                self.state.tags[t] = image_id
            return self._send(200, lines=[{"stream": f"Loaded image: {t}\n"} for t in got.repo_tags])
        if path.startswith("/images/") and path.endswith("/tag"):
            image_id = self.state.resolve(path[len("/images/"):-len("/tag")])
            if image_id is None:
                return self._send(404, {"message": "No such image"})
            self.state.tags[f"{query['repo']}:{query.get('tag', 'latest')}"] = image_id
            return self._send(201)
        self._send(404, {"message": "page not found"})

    def do_DELETE(self):
        path, _unused = self._path()
        self.state.requests.append(f"DELETE {path}")
        ref = path[len("/images/"):]
        if ref in self.state.tags:
            image_id = self.state.tags.pop(ref)
            if image_id not in self.state.tags.values():
                self.state.images.pop(image_id, None)
            return self._send(200, [{"Untagged": ref}])
        if self.state.images.pop(ref, None):
            return self._send(200, [{"Deleted": ref}])
        self._send(404, {"message": "No such image"})


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
