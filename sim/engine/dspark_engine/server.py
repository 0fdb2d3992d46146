"""HTTP server of the head (ThreadingHTTPServer, HTTP/1.1 keep-alive, chunked SSE).

Routes as vLLM's API server; unknown paths give FastAPI's ``{"detail": "Not Found"}``.  With
an API key (``--api-key`` or ``VLLM_API_KEY``) every ``/v1/*`` path needs ``Authorization:
Bearer <key>`` (vLLM's middleware leaves the other paths open) and answers 401
``{"error": "Unauthorized"}`` without it.  ``/metrics`` is served as prometheus_client 0.22+
does (``text/plain; version=1.0.0``).  Access lines are logged in uvicorn's format.
"""
import hmac
import json
import select
import socket
import socketserver
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from .api import REQUEST, Api, ApiError, Json, Sse
from .engine import DEAD_MESSAGE, ClientGone, EngineDead
from .strict_json import StrictJSONError, loads

MAX_BODY = 256 * 2 ** 20
METRICS_CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"


def _health(api, _body):
    return Json(None, 503 if api.engine.dead else 200)


def _load(api, _body):
    return Json({"server_load": api.engine.metrics.running})


def _metrics(api, _body):
    return api.engine.metrics.render()


ROUTES = {
    "/health": (("GET",), _health),
    "/load": (("GET",), _load),
    "/ping": (("GET", "POST"), _health),
    "/tokenize": (("POST",), Api.tokenize),
    "/detokenize": (("POST",), Api.detokenize),
    "/v1/models": (("GET",), Api.models),
    "/version": (("GET",), Api.version),
    "/v1/chat/completions": (("POST",), Api.chat),
    "/v1/completions": (("POST",), Api.completions),
    "/metrics": (("GET",), _metrics),
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, fmt, *args):  # replaced by uvicorn-style access lines
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    # ---- plumbing --------------------------------------------------------------------------
    def _send(self, status, body=b"", content_type="application/json"):
        self.status = status
        self.send_response(status)
        if body or content_type != "application/json":
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _send_json(self, status, obj):
        body = b"" if obj is None else json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
        self._send(status, body)

    def _send_sse(self, events):
        self.status = 200
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for event in events:
                data = event.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        finally:
            events.close()

    def _read_raw(self):
        """Read the whole request body (so keep-alive stays in sync whatever the answer)."""
        length = self.headers.get("content-length")
        try:
            length = int(length) if length is not None else 0
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            raise ApiError(400, f"invalid or too large Content-Length (limit {MAX_BODY} bytes)")
        return self.rfile.read(length) if length else b""

    @staticmethod
    def _parse_body(raw):
        try:
            body = loads(raw, allow_duplicate_keys=True)
        except StrictJSONError as exc:
            raise ApiError(400, f"JSON decode error: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "1 validation error: body: Input should be a valid dictionary")
        return body

    def _authorized(self, path):
        key = self.server.api.cfg.api_key
        if not key or not path.startswith("/v1"):
            return True
        given = self.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {key}".encode())

    def _client_gone(self):
        """The client has closed its end: the socket reads as ended (a keep-alive client's next request, already
        sent, reads as data and is no end)."""
        try:
            if not select.select([self.connection], [], [], 0)[0]:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def _answer_quietly(self, status, obj):
        """An error answer to a client that may have gone (a timed-out client of a stalled engine): as
        uvicorn, a vanished client is no error of the server's and logs nothing."""
        try:
            self._send_json(status, obj)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _dispatch(self, method):
        path = urlsplit(self.path).path
        api = self.server.api
        self.status = 500
        try:
            raw = self._read_raw() if method == "POST" else b""
            route = ROUTES.get(path)
            if route is None:
                return self._send_json(404, {"detail": "Not Found"})
            if method not in route[0]:
                return self._send_json(405, {"detail": "Method Not Allowed"})
            if not self._authorized(path):
                return self._send_json(401, {"error": "Unauthorized"})
            body = self._parse_body(raw) if method == "POST" and path != "/ping" else {}
            REQUEST.client_gone = self._client_gone
            try:
                result = route[1](api, body)
            finally:
                REQUEST.client_gone = None
            if isinstance(result, Sse):
                return self._send_sse(result.events)
            if isinstance(result, str):
                return self._send(200, result.encode(), METRICS_CONTENT_TYPE)
            return self._send_json(result.status, result.obj)
        except ApiError as exc:
            self._answer_quietly(exc.status, exc.body())
        except EngineDead:
            self._answer_quietly(500, ApiError(500, DEAD_MESSAGE).body())
        except ClientGone:  # aborted; uvicorn writes no access line for a client that has gone
            self.status = None
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - a server must answer 500, not die
            api.engine.procs.api.error("api_server.py:1305", f"Exception in {method} {path}\n"
                                       + traceback.format_exc().rstrip())
            try:
                self._send_json(500, ApiError(500, f"{type(exc).__name__}: {exc}").body())
            except OSError:
                self.close_connection = True
        finally:
            if self.status is not None:
                self._access_line(method)

    def _access_line(self, method):
        client = self.client_address
        phrase = HTTPStatus(self.status).phrase if self.status in HTTPStatus._value2member_map_ else ""
        self.server.api.engine.procs.api.raw(f'INFO:     {client[0]}:{client[1]} - "{method} {self.path} '
                                             f'{self.request_version}" {self.status} {phrase}')


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, host, port, api):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.api = api
        super().__init__((host, port), Handler)

    def server_bind(self):
        # HTTPServer.server_bind resolves the FQDN, which can hang without DNS; skip it.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def start(engine):
    """Bind the API port (OSError if impossible) and serve in a background thread."""
    server = Server(engine.cfg.host, engine.cfg.port, Api(engine))
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
