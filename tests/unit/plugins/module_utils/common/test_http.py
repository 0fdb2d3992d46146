"""The guard's and NIAH's HTTP client against a real local server."""
import contextlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.common._http import (
    ApiUnreachable,
    RequestNotSent,
    auth_headers,
    json_client,
    open_http,
)

SEEN = []


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, text, ctype="application/json"):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        SEEN.append(("GET", self.path, self.headers.get("Authorization"), self.headers.get("Content-Length")))
        if self.path == "/metrics":
            return self._send(200, "vllm:x 1\n", "text/plain")
        return self._send(200, json.dumps({"data": [{"id": "m"}]}))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append(("POST", self.path, self.headers.get("Authorization"), body))
        if self.path == "/bad":
            return self._send(400, json.dumps({"error": {"message": "too long", "code": 400}}))
        if self.path == "/plain500":
            return self._send(500, "Internal Server Error", "text/plain")
        if body.get("stream"):
            return self._send(200, 'data: {"x": 1}\n\ndata: [DONE]\n\n', "text/event-stream")
        return self._send(200, json.dumps({"echo": body}))


@pytest.fixture(scope="module")
def base_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_json_round_trip_and_bearer_key(base_url):
    SEEN.clear()
    call = json_client(base_url, "sk-secret")
    assert call("POST", "/v1/completions", {"a": 1}, 5) == (200, {"echo": {"a": 1}})
    assert SEEN[-1] == ("POST", "/v1/completions", "Bearer sk-secret", {"a": 1})


def test_get_sends_no_body_and_no_key_when_none(base_url):
    SEEN.clear()
    status, doc = json_client(base_url, None)("GET", "/v1/models", None, 5)
    assert (status, doc) == (200, {"data": [{"id": "m"}]})
    assert SEEN[-1] == ("GET", "/v1/models", None, None)


def test_text_bodies_stay_text(base_url):
    call = json_client(base_url, None)
    assert call("GET", "/metrics", None, 5) == (200, "vllm:x 1\n")
    assert call("POST", "/s", {"stream": True}, 5) == (200, 'data: {"x": 1}\n\ndata: [DONE]\n\n')


def test_http_errors_keep_the_error_document(base_url):
    call = json_client(base_url, None)
    assert call("POST", "/bad", {}, 5) == (400, {"error": {"message": "too long", "code": 400}})
    assert call("POST", "/plain500", {}, 5) == (500, None)


def test_transport_errors_raise_oserror():
    with pytest.raises(OSError):
        json_client("http://127.0.0.1:9", None)("GET", "/v1/models", None, 2)


def _free_port() -> int:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_refused_head_is_named_with_its_address_and_state_never_a_bare_errno():
    port = _free_port()
    with pytest.raises(ApiUnreachable) as err:
        json_client(f"http://127.0.0.1:{port}", "sk-never-shown", head="sim01-head")("POST", "/tokenize", {"x": 1}, 2)
    text = str(err.value)
    assert text.startswith(f"head sim01-head: POST http://127.0.0.1:{port}/tokenize refused the connection: nothing "
                           "listens there (the engine is down or not started) (")
    assert "sk-never-shown" not in text and isinstance(err.value, OSError)


def test_a_stalled_head_is_named_as_stalled_with_the_bound():
    import socket
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen()
    port = lsock.getsockname()[1]
    held = []
    t = threading.Thread(target=lambda: held.append(lsock.accept()), daemon=True)  # accepts, never answers
    t.start()
    try:
        with pytest.raises(ApiUnreachable, match=r"^head h0: POST http://127\.0\.0\.1:\d+/v1/completions took the request "
                                                 r"but sent no answer within 0\.3 s: the engine is stalled \(hung\)"):
            json_client(f"http://127.0.0.1:{port}", None, head="h0")("POST", "/v1/completions", {"x": 1}, 0.3)
    finally:
        t.join(5)
        for conn, _addr in held:
            conn.close()
        lsock.close()


# ---- open_http: the one opener every engine client uses ----------------------------------------

def test_open_http_yields_error_statuses_instead_of_raising(base_url):
    with open_http("POST", f"{base_url}/bad", json.dumps({}).encode(), {"Content-Type": "application/json"}, 5) as resp:
        assert resp.status == 400
        assert json.loads(resp.read())["error"]["message"] == "too long"


def test_open_http_keeps_the_query_string_and_the_headers(base_url):
    SEEN.clear()
    with open_http("GET", f"{base_url}/v1/models?x=1", headers={"Authorization": "Bearer k"}, timeout=5) as resp:
        assert resp.status == 200
    assert SEEN[-1][:3] == ("GET", "/v1/models?x=1", "Bearer k")


def test_open_http_refused_is_an_oserror():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ConnectionRefusedError):
        with open_http("GET", f"http://127.0.0.1:{port}/", timeout=2):
            pass


def test_open_http_a_server_that_hangs_up_is_an_oserror():
    import socket
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen()
    port = lsock.getsockname()[1]

    def hang_up():
        conn, _addr = lsock.accept()
        conn.recv(65536)
        conn.close()  # no status line at all

    t = threading.Thread(target=hang_up, daemon=True)
    t.start()
    try:
        with pytest.raises(OSError):
            with open_http("GET", f"http://127.0.0.1:{port}/", timeout=5):
                pass
    finally:
        t.join(5)
        lsock.close()


@pytest.mark.parametrize("url", ["ftp://h/x", "file:///etc/passwd", "http:///nohost"])
def test_open_http_only_speaks_http(url):
    with pytest.raises(ValueError, match="not an http"):
        with open_http("GET", url):
            pass


# ---- a key that cannot be a header: refused, never printed -------------------------------------
NEWLINE_KEY = "sk-secret-0123456789\n"


def test_a_key_with_a_newline_is_refused_before_any_request_naming_the_variable(base_url):
    SEEN.clear()
    with pytest.raises(RequestNotSent) as err:
        json_client(base_url, NEWLINE_KEY)
    assert str(err.value).startswith("dspark_api_key holds a line feed (\\n) at its end")
    assert "0123456789" not in str(err.value)
    assert SEEN == []


def test_a_header_value_http_client_would_refuse_never_reaches_the_message(base_url):
    """http.client says "Invalid header value b'Bearer KEY\\n'": the value would be printed."""
    for value in (f"Bearer {NEWLINE_KEY}", "Bearer sk-secret-0123456789\r\nX-Injected: 1", " Bearer sk-secret-0123456789"):
        with pytest.raises(RequestNotSent) as err:
            with open_http("GET", base_url + "/v1/models", headers={"Authorization": value}):
                pass
        assert "0123456789" not in str(err.value) and "Authorization header" in str(err.value)
        assert err.value.__cause__ is None


def test_auth_headers_is_the_one_bearer():
    assert auth_headers(None) == {} and auth_headers("") == {}
    assert auth_headers("sk-1") == {"Authorization": "Bearer sk-1"}
    with pytest.raises(ValueError):
        auth_headers("sk-1 2")


@pytest.mark.parametrize(("url", "clean", "user", "password"), [
    ("https://alice:s3cret@mirror.site/img/x.tar", "https://mirror.site/img/x.tar", "alice", "s3cret"),
    ("https://al%69ce:p%40ss%3Aw@mirror.site:8443/x.tar?v=1#f", "https://mirror.site:8443/x.tar?v=1#f", "alice", "p@ss:w"),
    ("http://u:p@w@[fd00::1]:80/x.tar", "http://[fd00::1]:80/x.tar", "u", "p@w"),  # the last @ ends the userinfo
    ("https://token@mirror.site/x.tar", "https://mirror.site/x.tar", "token", None),
    ("https://u:@mirror.site/x.tar", "https://mirror.site/x.tar", "u", ""),
    ("https://mirror.site/x.tar?who=a@b", "https://mirror.site/x.tar?who=a@b", None, None),  # @ outside the authority
    ("http://mirror.site/x.tar", "http://mirror.site/x.tar", None, None),
    ("", "", None, None),
])
def test_url_credentials_takes_user_and_password_out_of_the_url(url, clean, user, password):
    from ansible_collections.gb10.dspark.plugins.module_utils.common._http import url_credentials
    assert url_credentials(url) == (clean, user, password)


@contextlib.contextmanager
def _aborted_request(body: dict, before_abort: float = 0.0):
    """A server that takes the connection and never reads or answers, a request to it through an ``Inflight`` in
    another thread, and the abort once the server holds the connection (``before_abort`` seconds later). Yields
    ``(call, port, caught, took)``: the client, the server's port, what the request raised and its seconds."""
    import socket
    import time

    from ansible_collections.gb10.dspark.plugins.module_utils.common._http import Inflight
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen()
    port = lsock.getsockname()[1]
    held = []
    t = threading.Thread(target=lambda: held.append(lsock.accept()), daemon=True)  # accepts, never reads
    t.start()
    inflight = Inflight()
    call = json_client(f"http://127.0.0.1:{port}", None, head="h0", inflight=inflight)
    caught: list = []

    def ask():
        try:
            call("POST", "/v1/completions", body, 300)
        except ApiUnreachable as exc:
            caught.append(exc)
    asker = threading.Thread(target=ask, daemon=True)
    try:
        started = time.monotonic()
        asker.start()
        while not held and time.monotonic() - started < 30:  # the server has taken the connection
            time.sleep(0.01)
        time.sleep(before_abort)
        inflight.abort()
        asker.join(60)
        assert not asker.is_alive()
        yield call, port, caught, time.monotonic() - started
    finally:
        t.join(5)
        for conn, _addr in held:
            conn.close()
        lsock.close()


@pytest.mark.timeout(180)
def test_an_aborted_inflight_ends_a_request_a_frozen_server_holds_as_stalled():
    """A caller's bound: Inflight.abort() ends a request blocked on a server that took it and never answers
    (however long its own timeout), as a stalled head naming how long it waited; later requests are not sent."""
    with _aborted_request({"x": 1}) as (call, port, caught, took):
        # ended by the abort, not by its own 300 s timeout (a loose bound: a loaded CI host is slow)
        assert took < 90
        assert len(caught) == 1 and caught[0].stalled
        assert re.match(rf"head h0: POST http://127\.0\.0\.1:{port}/v1/completions took the request but sent no "
                        r"answer within [\d.]+ s: the engine is stalled \(hung\) \(no answer before the caller's bound\)$",
                        str(caught[0])), str(caught[0])
        with pytest.raises(ApiUnreachable, match="not sent: the caller's bound had ended"):
            call("POST", "/v1/completions", {"x": 1}, 300)


@pytest.mark.timeout(180)
def test_an_abort_while_the_request_is_still_being_sent_is_the_caller_s_bound_not_a_broken_pipe():
    """A body far larger than the sockets' buffers (64 MiB) blocks the send to a server that reads nothing; the
    caller's abort half a second later ends it as its bound (stalled), never as 'could not be reached'."""
    with _aborted_request({"prompt": "x" * (64 << 20)}, before_abort=0.5) as (_call, _port, caught, _took):
        assert len(caught) == 1 and caught[0].stalled, caught
        assert "no answer before the caller's bound" in str(caught[0]) and "could not be reached" not in str(caught[0])


# ---- the byte fetch (the gate's suite) and the GET reader (the engine probe) --------------------

def _cut_short_server(declared: int = 100, sent: bytes = b"0123456789"):
    """A server that promises ``declared`` bytes of body, sends ``sent`` and hangs up."""
    import socket
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen()

    def serve():
        conn, _addr = lsock.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (declared, sent))
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return lsock, t, f"http://127.0.0.1:{lsock.getsockname()[1]}"


def test_a_body_cut_short_is_a_transport_error_every_caller_catches_as_oserror():
    """http.client raises IncompleteRead (an HTTPException, not an OSError) for a body cut short: open_http makes
    it a ConnectionError like every other transport failure, so json_client names the head's state and no caller
    needs http.client's exceptions."""
    from ansible_collections.gb10.dspark.plugins.module_utils.common._http import read
    lsock, t, url = _cut_short_server()
    try:
        with pytest.raises(ConnectionError, match=r"^IncompleteRead: "):
            read("GET", url + "/metrics", timeout=5)
    finally:
        t.join(5)
        lsock.close()
    lsock, t, url = _cut_short_server()
    try:
        with pytest.raises(ApiUnreachable, match=r"^head h0: GET http://127\.0\.0\.1:\d+/v1/models could not be reached "
                                                 r"\(IncompleteRead: "):
            json_client(url, None, head="h0")("GET", "/v1/models", None, 5)
    finally:
        t.join(5)
        lsock.close()


def test_fetch_client_answers_status_and_bytes_follows_no_redirect_and_no_proxy(base_url, monkeypatch):
    """The gate's fetch: (status, raw bytes) whatever the status, a redirect is an answer (the bearer never
    follows it), the environment's proxy is not used, the key is only the bearer."""
    from ansible_collections.gb10.dspark.plugins.module_utils.common._http import fetch_client
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there: a request through it would fail
    SEEN.clear()
    fetch = fetch_client(base_url + "/", "sk-secret")
    assert fetch("GET", "/v1/models", None, 5) == (200, b'{"data": [{"id": "m"}]}')
    assert fetch("POST", "/bad", b"{}", 5) == (400, b'{"error": {"message": "too long", "code": 400}}')
    assert SEEN == [("GET", "/v1/models", "Bearer sk-secret", None), ("POST", "/bad", "Bearer sk-secret", {})]
    assert fetch_client(base_url, None)("GET", "/v1/models", None, 5)[0] == 200
    assert SEEN[-1][2] is None

    class _Redirect(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            self.send_response(302)
            self.send_header("Location", base_url + "/v1/models")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        SEEN.clear()
        assert fetch_client(f"http://127.0.0.1:{server.server_address[1]}", "sk-secret")("GET", "/x", None, 5) == (302, b"")
        assert SEEN == []  # not followed
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_client_refuses_a_key_that_cannot_be_a_header_at_each_call_naming_the_variable(base_url):
    """The gate records a failed step rather than failing to start: the key's problem is raised by the call,
    before any request, naming dspark_api_key and never the value; a refused head is the bare OSError."""
    from ansible_collections.gb10.dspark.plugins.module_utils.common._http import fetch_client
    SEEN.clear()
    fetch = fetch_client(base_url, NEWLINE_KEY)
    with pytest.raises(RequestNotSent) as err:
        fetch("GET", "/v1/models", None, 5)
    assert "dspark_api_key holds a line feed" in str(err.value) and "0123456789" not in str(err.value)
    assert SEEN == []
    with pytest.raises(ConnectionRefusedError):
        fetch_client(f"http://127.0.0.1:{_free_port()}", None)("GET", "/v1/models", None, 2)


def test_get_text_answers_status_and_text_or_why_there_is_none(base_url):
    """The probe's GET reader: (status, text, "") whatever the status, else (None, None, why): the engine's state
    and the error, or the key's problem (never its value)."""
    from ansible_collections.gb10.dspark.plugins.module_utils.common._http import get_text
    SEEN.clear()
    assert get_text(base_url + "/metrics", 5, "sk-secret") == (200, "vllm:x 1\n", "")
    assert SEEN[-1][:3] == ("GET", "/metrics", "Bearer sk-secret")
    port = _free_port()
    status, text, why = get_text(f"http://127.0.0.1:{port}/metrics", 2)
    assert (status, text) == (None, None)
    assert why.startswith("refused the connection: nothing listens there (the engine is down or not started) (")
    status, text, why = get_text(base_url + "/metrics", 2, NEWLINE_KEY)
    assert (status, text) == (None, None) and why.startswith("dspark_api_key holds a line feed")
    assert "0123456789" not in why
