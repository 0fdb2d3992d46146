"""The head's relay server, over real sockets on 127.0.0.1: the one path it serves, whole files
only counted, wrong paths refused and not counted, and each way it stops."""
from __future__ import annotations

import hashlib
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _archive_relay as relay


@pytest.fixture()
def archive(tmp_path):
    path = tmp_path / "dspark v026.tar"
    path.write_bytes(bytes(range(256)) * 40_000 + b"tail")  # ~10 MB, more than one sendfile chunk
    return path


def serving(server: relay.Relay, **run_args):
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(server.run(**run_args)), daemon=True)
    thread.start()
    return thread, out


def test_the_worker_gets_the_whole_file_once_and_the_relay_stops(archive):
    server = relay.Relay(str(archive), "127.0.0.1", 0, "c0ffee")
    thread, out = serving(server, transfers=1, idle_timeout=10, deadline=30)
    base = f"http://127.0.0.1:{server.port}"
    head = urllib.request.urlopen(urllib.request.Request(base + server.path, method="HEAD"), timeout=5)
    assert int(head.headers["Content-Length"]) == archive.stat().st_size
    with urllib.request.urlopen(base + server.path, timeout=10) as resp:
        body = resp.read()
    thread.join(10)
    assert hashlib.sha256(body).digest() == hashlib.sha256(archive.read_bytes()).digest()
    assert server.path == "/c0ffee/dspark%20v026.tar"
    assert out["reason"] == "transfers" and out["transfers"] == 1 and out["requests"] == 2
    assert out["bytes_sent"] == archive.stat().st_size


def test_another_path_is_refused_and_not_counted(archive):
    server = relay.Relay(str(archive), "127.0.0.1", 0, "right")
    thread, out = serving(server, transfers=1, idle_timeout=1, deadline=30)
    for wrong in ("/wrong/dspark%20v026.tar", "/right/other.tar", "/"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}{wrong}", timeout=5)
        assert err.value.code == 404
    thread.join(10)
    assert out["reason"] == "idle" and out["transfers"] == 0 and out["refused"] == 3 and out["bytes_sent"] == 0


def test_the_deadline_stops_a_relay_nobody_fetches_from(archive):
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t")
    out = server.run(transfers=1, idle_timeout=100, deadline=0.5)
    assert out["reason"] == "deadline" and out["transfers"] == 0 and out["seconds"] < 2


def test_what_cannot_be_served_is_refused_before_listening(tmp_path, archive):
    with pytest.raises(relay.RelayError, match="not a regular file"):
        relay.Relay(str(tmp_path / "absent.tar"), "127.0.0.1", 0, "t")
    with pytest.raises(relay.RelayError, match="cannot listen on 192.0.2.1"):
        relay.Relay(str(archive), "192.0.2.1", 0, "t")  # TEST-NET-1: never this machine's
    with pytest.raises(ValueError):
        relay.url_path("a/b", "x.tar")


def wait_until(condition, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


def connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    return sock


def ask(sock: socket.socket, path: str) -> None:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


def test_an_idle_connection_does_not_hold_the_relay_from_the_real_fetch(archive):
    """A local user connects to the relay's port and sends nothing: the worker's fetch is served
    anyway, and the idle client is dropped at the connection's idle limit."""
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t", connection_timeout=1)
    thread, out = serving(server, transfers=1, idle_timeout=30, deadline=30)
    idle = connect(server.port)
    try:
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{server.path}", timeout=5) as resp:
            body = resp.read()
        assert time.monotonic() - started < 5
        assert body == archive.read_bytes()
        thread.join(10)
        assert not thread.is_alive()
        assert out["reason"] == "transfers" and out["transfers"] == 1
        idle.settimeout(5)
        assert idle.recv(1) == b""  # the relay closed the idle connection as it stopped
    finally:
        idle.close()


def test_an_idle_connection_is_dropped_at_the_idle_limit(archive):
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t", connection_timeout=0.5)
    thread, out = serving(server, transfers=1, idle_timeout=30, deadline=30)
    idle = connect(server.port)
    try:
        idle.settimeout(5)
        started = time.monotonic()
        assert idle.recv(1) == b""  # closed by the relay, not by this side
        assert 0.4 <= time.monotonic() - started < 3
    finally:
        idle.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{server.path}", timeout=5) as resp:
        resp.read()
    thread.join(10)
    assert out["unanswered"] == 1 and out["transfers"] == 1


def test_a_reader_that_stalls_mid_transfer_is_cut_at_the_idle_limit(archive):
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t", connection_timeout=0.5)
    thread, out = serving(server, transfers=1, idle_timeout=1.5, deadline=30)
    stalled = connect(server.port, rcvbuf=4096)
    try:
        ask(stalled, server.path)
        stalled.settimeout(5)
        assert stalled.recv(65536)  # the transfer started; this reader takes nothing more
        thread.join(10)
        assert not thread.is_alive(), "a stalled reader held the relay"
    finally:
        stalled.close()
    assert out["reason"] == "idle" and out["transfers"] == 0 and out["cut"] == 1
    assert 0 < out["bytes_sent"] < archive.stat().st_size
    assert out["seconds"] < 5


def test_the_deadline_stops_a_slow_transfer(archive):
    """A reader that keeps taking bytes, slowly enough never to be idle: the deadline ends it."""
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t", connection_timeout=5)
    thread, out = serving(server, transfers=1, idle_timeout=30, deadline=1.0)
    slow = connect(server.port, rcvbuf=4096)
    try:
        ask(slow, server.path)
        slow.settimeout(5)
        started = time.monotonic()
        while thread.is_alive() and time.monotonic() - started < 8:
            assert slow.recv(1024), "the relay closed the connection before the deadline"
            time.sleep(0.01)  # about 100 kB/s: never idle, far too slow for the file
        assert not thread.is_alive()
    finally:
        slow.close()
    assert out["reason"] == "deadline" and out["transfers"] == 0 and out["cut"] == 1
    assert out["bytes_sent"] < archive.stat().st_size and out["seconds"] < 3


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "", "0:0::0", "[::]"])
def test_a_wildcard_bind_is_refused(archive, bind):
    with pytest.raises(relay.RelayError, match="refusing to listen on the wildcard address"):
        relay.Relay(str(archive), bind, 0, "t")


def test_a_bind_that_is_not_an_ip_address_is_refused(archive):
    with pytest.raises(relay.RelayError, match="'localhost' is not an IP address"):
        relay.Relay(str(archive), "localhost", 0, "t")


def test_the_port_can_be_bound_again_when_the_relay_ends_with_a_client_still_connected(archive):
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t", connection_timeout=30)
    port = server.port
    thread, out = serving(server, transfers=1, idle_timeout=0.5, deadline=30)
    idle = connect(port)
    stalled = connect(port, rcvbuf=4096)
    try:
        ask(stalled, server.path)
        thread.join(10)
        assert not thread.is_alive(), "a connected client kept the relay running"
        again = relay.Relay(str(archive), "127.0.0.1", port, "t2")
        again.run(transfers=1, idle_timeout=0.1, deadline=1)
    finally:
        idle.close()
        stalled.close()
    assert out["reason"] == "idle"


def test_a_stop_request_on_the_path_ends_the_relay(archive):
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t")
    thread, out = serving(server, transfers=1, idle_timeout=30, deadline=30)
    base = f"http://127.0.0.1:{server.port}"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(base + "/other/x.tar", method="POST", data=b""), timeout=5)
    assert err.value.code == 404
    assert thread.is_alive()
    with urllib.request.urlopen(urllib.request.Request(base + server.path, method="POST", data=b""), timeout=5) as r:
        assert r.status == 200
    thread.join(5)
    assert not thread.is_alive() and out["reason"] == "stopped" and out["transfers"] == 0


def test_the_stop_request_is_answered_before_the_relay_shuts_its_connections(archive, monkeypatch):
    """The answer to a stop request is slow to go out (a busy machine): the relay still answers it 200 before its
    main loop, which shuts every open connection on a stop, sees the stop."""
    slow = relay._Handler._status

    def slow_status(self, code):
        time.sleep(3 * relay.POLL)
        slow(self, code)

    monkeypatch.setattr(relay._Handler, "_status", slow_status)
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t")
    thread, out = serving(server, transfers=1, idle_timeout=30, deadline=30)
    with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{server.port}{server.path}", method="POST",
                                                       data=b""), timeout=5) as r:
        assert r.status == 200
    thread.join(5)
    assert not thread.is_alive() and out["reason"] == "stopped"


def test_connections_beyond_the_limit_are_turned_away(archive):
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t", connection_timeout=5, max_connections=2)
    thread, out = serving(server, transfers=1, idle_timeout=30, deadline=30)
    held = [connect(server.port) for _ in range(2)]
    try:
        wait_until(lambda: len(server._open) == 2)
        extra = connect(server.port)
        extra.settimeout(5)
        assert extra.recv(1) == b""
        extra.close()
    finally:
        for sock in held:
            sock.close()
    wait_until(lambda: not server._open)
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{server.path}", timeout=5) as resp:
        resp.read()
    thread.join(10)
    assert out["turned_away"] == 1 and out["transfers"] == 1
