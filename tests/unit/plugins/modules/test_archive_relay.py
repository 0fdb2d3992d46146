"""The archive_relay module: a wildcard bind is refused with a clear message before anything listens;
a relay that ends without its transfer fails, naming why it stopped."""
from __future__ import annotations

import threading
import urllib.request

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _archive_relay
from ansible_collections.gb10.dspark.plugins.modules import archive_relay


@pytest.fixture()
def archive(tmp_path):
    path = tmp_path / "dspark-v026.tar"
    path.write_bytes(b"x" * 4096)
    return path


@pytest.mark.parametrize("bind", ["0.0.0.0", "::"])
def test_a_wildcard_bind_is_refused_with_a_clear_message(run_module, archive, bind):
    res = run_module(archive_relay, {"path": str(archive), "bind": bind, "port": 0, "token": "t"})
    assert res["failed"]
    assert res["msg"] == (f"relay on {bind}:0: refusing to listen on the wildcard address {bind!r} "
                          "(every interface); expected the head's fabric address")


def test_a_stop_request_ends_the_relay_and_the_task_says_why(run_module, archive, monkeypatch):
    made = []
    real = _archive_relay.Relay

    def relay_then_stop(*args, **kwargs):
        server = real(*args, **kwargs)
        made.append(server)
        url = f"http://127.0.0.1:{server.port}{server.path}"
        threading.Timer(0.3, lambda: urllib.request.urlopen(
            urllib.request.Request(url, method="POST", data=b""), timeout=5).read()).start()
        return server

    monkeypatch.setattr(archive_relay, "Relay", relay_then_stop)
    res = run_module(archive_relay, {"path": str(archive), "bind": "127.0.0.1", "port": 0, "token": "t",
                                     "connection_timeout": 2, "idle_timeout": 30, "timeout": 30})
    assert res["failed"] and res["relay"]["reason"] == "stopped" and made
    assert "stopped (asked to stop: the worker's fetch ended) after 0 of 1 whole transfer(s)" in res["msg"]
