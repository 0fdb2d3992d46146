"""bench/_common.py: parsing Ansible's output and sampling a module's peak memory from /proc."""
from __future__ import annotations

import pytest

import _common as common

ONELINE = """\
[DEPRECATION WARNING]: The oneline callback plugin is deprecated.
sim01-head | CHANGED => {    "changed": true,    "loaded": true,    "image_store": "overlay2"}
sim01-worker | SUCCESS => {"changed": false,"loaded": false}
sim02-head | FAILED! => {"changed": false,"msg": "rank sim02-head: image x is sha256:a, pinned sha256:b"}
sim02-worker | UNREACHABLE!: Failed to connect to the host via ssh: timed out
An exception occurred during task execution.
"""


def test_parse_oneline_reads_every_host():
    hosts = common.parse_oneline(ONELINE)
    assert set(hosts) == {"sim01-head", "sim01-worker", "sim02-head", "sim02-worker"}
    assert hosts["sim01-head"] == {"status": "CHANGED", "ok": True,
                                   "result": {"changed": True, "loaded": True, "image_store": "overlay2"}}
    assert hosts["sim01-worker"]["ok"] and hosts["sim01-worker"]["result"]["loaded"] is False
    assert hosts["sim02-head"]["status"] == "FAILED" and not hosts["sim02-head"]["ok"]
    assert "pinned sha256:b" in hosts["sim02-head"]["result"]["msg"]
    assert hosts["sim02-worker"] == {"status": "UNREACHABLE", "ok": False,
                                     "result": {"msg": "Failed to connect to the host via ssh: timed out"}}


def test_parse_oneline_ignores_other_output():
    assert common.parse_oneline("PLAY [x]\nok: [sim01-head]\n") == {}


# ansible ends recap lines in blanks; the last blank of each is written \x20 (no trailing whitespace in the source).
RECAP = """\
TASK [audit | The fleet's verdict (the run fails unless every pair is OK)] ***
ok: [sim01-head]

PLAY RECAP *********************************************************************
sim01-head                 : ok=12   changed=1    unreachable=0    failed=0    skipped=3    rescued=0    ignored=0  \x20
sim01-worker               : ok=9    changed=0    unreachable=0    failed=2    skipped=4    rescued=0    ignored=1  \x20
"""


def test_parse_recap_reads_the_counts_of_every_host():
    recap = common.parse_recap(RECAP)
    assert recap["sim01-head"]["changed"] == 1 and recap["sim01-head"]["ok"] == 12
    assert recap["sim01-worker"]["failed"] == 2 and recap["sim01-worker"]["ignored"] == 1
    assert common.parse_recap("ok: [x]\n") == {}


def test_playbook_run_counts_changed_tasks():
    run = common.PlaybookRun([], 0, 1.0, RECAP, "", common.parse_recap(RECAP))
    assert run.changed() == 1


def _proc(tmp_path, pid: str, cmdline: bytes, status: str | None):
    d = tmp_path / pid
    d.mkdir()
    (d / "cmdline").write_bytes(cmdline)
    if status is not None:
        (d / "status").write_text(status)


def test_scan_vmhwm_reads_the_marked_processes_only(tmp_path):
    mark = "AnsiballZ_image_identity"
    _proc(tmp_path, "101", b"/usr/bin/python3\0/root/.ansible/tmp/x/AnsiballZ_image_identity.py\0",
          "Name:\tpython3\nVmPeak:\t 90000 kB\nVmHWM:\t   41234 kB\nVmRSS:\t 40000 kB\n")
    _proc(tmp_path, "102", b"/usr/bin/python3\0/root/.ansible/tmp/y/AnsiballZ_image_identity.py\0",
          "VmHWM:\t 1024 kB\n")
    _proc(tmp_path, "103", b"/usr/bin/dockerd\0", "VmHWM:\t 999999 kB\n")
    _proc(tmp_path, "104", b"python3 AnsiballZ_image_identity.py", None)  # exited between the two reads
    (tmp_path / "self").mkdir()
    assert common.scan_vmhwm(mark, tmp_path) == {101: 41234, 102: 1024}


def test_scan_vmhwm_of_a_missing_proc_is_empty(tmp_path):
    assert common.scan_vmhwm("x", tmp_path / "absent") == {}


def test_peak_rss_while_returns_the_result_and_stops_its_sampler(tmp_path):
    result, peaks = common.peak_rss_while(lambda: 42, "nothing-runs-this", proc=tmp_path)
    assert result == 42 and peaks == {}

    def boom():
        raise RuntimeError("the module failed")

    with pytest.raises(RuntimeError, match="the module failed"):
        common.peak_rss_while(boom, "x", proc=tmp_path)
