"""The head's relay server, over real sockets on 127.0.0.1: the one path it serves, whole files
only counted, wrong paths refused and not counted, and each way it stops."""
from __future__ import annotations

import hashlib
import threading
import urllib.error
import urllib.request

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils import _archive_relay as relay


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
    ticks = iter([0.0, 0.0, 5.0, 11.0, 11.0])
    server = relay.Relay(str(archive), "127.0.0.1", 0, "t")
    out = server.run(transfers=1, idle_timeout=100, deadline=10, clock=lambda: next(ticks))
    assert out["reason"] == "deadline" and out["transfers"] == 0


def test_what_cannot_be_served_is_refused_before_listening(tmp_path, archive):
    with pytest.raises(relay.RelayError, match="not a regular file"):
        relay.Relay(str(tmp_path / "absent.tar"), "127.0.0.1", 0, "t")
    with pytest.raises(relay.RelayError, match="cannot listen on 192.0.2.1"):
        relay.Relay(str(archive), "192.0.2.1", 0, "t")  # TEST-NET-1: never this machine's
    with pytest.raises(ValueError):
        relay.url_path("a/b", "x.tar")
