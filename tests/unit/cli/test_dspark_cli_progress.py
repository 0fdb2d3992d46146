"""dspark CLI: progress lines from synthetic ansible-runner events, exit codes, failing pairs, audit report."""
from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "cli"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "collections"))

from dspark_cli import main as cli  # noqa: E402
from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _pair  # noqa: E402
from ansible_collections.gb10.dspark.plugins.module_utils.engine import _pair_wait  # noqa: E402
from ansible_collections.gb10.dspark.plugins.callback import progress as progress_callback  # noqa: E402
from dspark_cli.progress import (  # noqa: E402
    Progress, decide_exit, failing_pairs, failing_pairs_line, host_counts, pair_map, pair_of)

PAIRS = {"sim01-head": "sim01", "sim01-worker": "sim01", "sim02-head": "sim02"}


def event(kind, host="sim01-head", task="engine | Start", res=None, **extra):
    data = {"host": host, "task": task, "play": "Provision GB10 pairs", "res": res or {}}
    data.update(extra)
    return {"event": kind, "event_data": data}


def lines(*events, mapping=None, texts=None):
    mapping = PAIRS if mapping is None else mapping
    out = io.StringIO()
    handler = Progress(mapping, out, texts=texts)
    for ev in events:
        assert handler(ev) is True  # every event is kept for job_events (the stats come from there)
    return out.getvalue().splitlines()


def test_ok_and_changed():
    assert lines(event("runner_on_ok", res={"changed": False}),
                 event("runner_on_ok", host="sim01-worker", res={"changed": True})) == [
        "[sim01] sim01-head ok engine | Start",
        "[sim01] sim01-worker changed engine | Start",
    ]


def test_failed_and_unreachable_print_msg():
    got = lines(event("runner_on_failed", res={"msg": "image ID differs", "stderr": "do-not-print"}),
                event("runner_on_unreachable", host="sim02-head", res={"msg": "ssh: connect\nrefused"}))
    assert got == [
        "[sim01] sim01-head FAILED engine | Start -- image ID differs",
        "[sim02] sim02-head UNREACHABLE engine | Start -- ssh: connect refused",
    ]


def test_ignored_failure_and_silent_events():
    got = lines(event("runner_on_start"), event("runner_on_skipped"),
                event("runner_on_failed", res={"msg": "nope"}, ignore_errors=True),
                event("runner_item_on_ok", res={"changed": True}), event("verbose"),
                {"event": "playbook_on_stats", "event_data": {"failures": {}}})
    assert got == ["[sim01] sim01-head failed (ignored) engine | Start"]


def test_play_start():
    got = lines({"event": "playbook_on_play_start", "event_data": {"play": "Fleet audit", "name": "Fleet audit"}})
    assert got == ["== Fleet audit"]


def test_no_log_hides_msg():
    got = lines(event("runner_on_failed", res={"msg": "key sk-123 rejected", "_ansible_no_log": True}),
                event("runner_on_failed", res={"censored": "the output has been hidden"}))
    assert got == ["[sim01] sim01-head FAILED engine | Start -- (output hidden: no_log)"] * 2
    assert "sk-123" not in "\n".join(got)


def test_long_multiline_msg_is_one_truncated_line():
    msg = "first line\n" + "x" * 1000
    (line,) = lines(event("runner_on_failed", res={"msg": msg}))
    shown = line.split(" -- ", 1)[1]
    assert len(shown) == 300 and shown.startswith("first line xxx") and shown.endswith("...")


def test_hosts_without_pair_and_control():
    got = lines(event("runner_on_ok", host="localhost"), event("runner_on_ok", host="lonely"),
                event("runner_on_ok", host="sim02-head", task=""))
    assert got == ["[control] localhost ok engine | Start", "[lonely] lonely ok engine | Start",
                   "[sim02] sim02-head ok (unnamed task)"]


def test_malformed_event_does_not_raise():
    assert lines({"event": "runner_on_ok", "event_data": None}, {"no": "event"}) == ["[?] ? ok (unnamed task)"]


def test_pair_map_from_inventory_list():
    doc = {"_meta": {"hostvars": {"a": {"dspark_pair": "p1", "x": 1}, "b": {"dspark_pair": "p1"},
                                  "c": {"other": 1}, "localhost": {}}},
           "all": {"children": ["ungrouped"]}}
    mapping = pair_map(doc, _pair)
    assert mapping == {"a": "p1", "b": "p1"}
    assert pair_of("c", mapping) == "c" and pair_of("localhost", mapping) == "control"
    assert pair_of("localhost", {"localhost": "p9"}) == "p9"
    assert pair_map(None, _pair) == {} and pair_map({}, _pair) == {}


def test_pair_map_groups_through_the_collections_pairing_only():
    """The CLI keeps no grouping of its own: without the collection's _pair no host has a pair, and a host the
    topology would refuse (a pair name that could leave a folder) is shown by its name, as the topology groups it."""
    doc = {"_meta": {"hostvars": {"a": {"dspark_pair": "p1"}, "b": {"dspark_pair": "../p1"}}}}
    assert pair_map(doc) == {}
    assert pair_map(doc, _pair) == {"a": "p1"}
    assert pair_map(doc, _pair) == _pair.pairs_of(_pair.host_records(["a", "b"], doc["_meta"]["hostvars"]))


def test_the_cli_loads_the_collections_pairing_where_ansible_playbook_finds_the_collection(tmp_path):
    """dspark is installed beside the collection: it imports _pair.py through ansible-core's collection loader from
    the configured collections path, the file ansible-playbook's topology action runs."""
    import os
    import subprocess
    repo = Path(__file__).resolve().parents[3]
    code = ("from dspark_cli import main; m = main.collection_pairing(); "
            "print(m.__file__ if m else None); print(main.pair_map({'_meta': {'hostvars': {'h': {'dspark_pair': 'p'}}}}, m))")
    env = {**os.environ, "PYTHONPATH": str(repo / "cli"), "ANSIBLE_COLLECTIONS_PATH": str(repo / "collections")}
    env.pop("ANSIBLE_CONFIG", None)
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    path, mapping = res.stdout.splitlines()
    assert Path(path).resolve() == (repo / "plugins" / "module_utils" / "fleet" / "_pair.py").resolve()
    assert mapping == "{'h': 'p'}"
    env["ANSIBLE_COLLECTIONS_PATH"] = str(tmp_path)
    env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "false"
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.splitlines() == ["None", "{}"], res.stdout + res.stderr


def stats(**kw):
    base = {"ok": {}, "changed": {}, "skipped": {}, "failures": {}, "dark": {}, "ignored": {}, "rescued": {},
            "processed": {}}
    base.update(kw)
    return base


def test_failing_pairs_line():
    st = stats(failures={"sim01-worker": 1, "sim01-head": 0}, dark={"sim02-head": 1, "localhost": 1},
               ignored={"lonely": 3})
    assert failing_pairs_line(st, PAIRS) == (
        "failing pairs: control (localhost: unreachable), sim01 (sim01-worker: failed), sim02 (sim02-head: unreachable)")
    both = stats(failures={"sim01-head": 1, "sim01-worker": 2})
    assert failing_pairs_line(both, PAIRS) == "failing pairs: sim01 (sim01-head: failed, sim01-worker: failed)"
    assert failing_pairs_line(stats(ignored={"sim01-head": 1}), PAIRS) is None
    assert failing_pairs_line(None, PAIRS) is None


@pytest.mark.parametrize("status, rc, st, canceled, expected", [
    ("successful", 0, stats(ignored={"sim01-head": 1}), False, 0),
    ("failed", 2, stats(failures={"sim01-head": 1}), False, 2),
    ("failed", 4, stats(dark={"sim02-head": 1}), False, 4),
    ("failed", 0, None, False, 1),
    ("timeout", None, None, False, 1),
    ("successful", 0, None, True, 130),
    ("canceled", 254, None, False, 130),
])
def test_decide_exit_codes(status, rc, st, canceled, expected):
    code, line = decide_exit(status, rc, st, PAIRS, canceled=canceled)
    assert code == expected
    assert (line is None) == (expected in (0, 130))


def test_decide_exit_line_names_pairs():
    code, line = decide_exit("failed", 2, stats(failures={"sim01-worker": 1}), PAIRS)
    assert (code, line) == (2, "failing pairs: sim01 (sim01-worker: failed)")
    code, line = decide_exit("failed", 4, None, PAIRS)
    assert code == 4 and line.startswith("failing pairs: none in the play recap")


def test_decide_exit_audit_document():
    drift = {"exit_code": 2, "not_ok": ["sim02", "sim03"]}
    assert decide_exit("failed", 2, stats(failures={"localhost": 1}), PAIRS, audit=drift) == (
        2, "failing pairs: sim02, sim03")
    assert decide_exit("successful", 0, stats(), PAIRS, audit=drift) == (2, "failing pairs: sim02, sim03")
    clean = {"exit_code": 0, "not_ok": []}
    assert decide_exit("successful", 0, stats(), PAIRS, audit=clean) == (0, None)
    # audit.json says OK but the run failed elsewhere: the playbook's rc and its failing hosts
    assert decide_exit("failed", 2, stats(dark={"sim01-head": 1}), PAIRS, audit=clean) == (
        2, "failing pairs: sim01 (sim01-head: unreachable)")
    assert decide_exit("canceled", 254, None, PAIRS, audit=drift)[0] == 130


def test_host_counts_per_host_with_its_pair():
    st = stats(processed={"sim01-head": 1, "localhost": 1}, ok={"sim01-head": 5, "localhost": 1},
               changed={"sim01-head": 2}, skipped={"sim01-head": 1}, failures={"localhost": 1},
               dark={"sim02-head": 1})
    assert host_counts(st, PAIRS) == {
        "localhost": {"pair": "control", "ok": 1, "changed": 0, "failed": 1, "unreachable": 0, "skipped": 0},
        "sim01-head": {"pair": "sim01", "ok": 5, "changed": 2, "failed": 0, "unreachable": 0, "skipped": 1},
        "sim02-head": {"pair": "sim02", "ok": 0, "changed": 0, "failed": 0, "unreachable": 1, "skipped": 0},
    }
    assert host_counts(None, PAIRS) == {} and host_counts(stats(), PAIRS) == {}


def test_failing_pairs_follow_decide_exit():
    st = stats(failures={"sim01-worker": 1}, dark={"sim02-head": 1, "localhost": 1}, ignored={"lonely": 1})
    assert failing_pairs("failed", 2, st, PAIRS) == ["control", "sim01", "sim02"]
    assert failing_pairs("successful", 0, stats(ignored={"sim01-head": 1}), PAIRS) == []
    assert failing_pairs("failed", 4, None, PAIRS) == []
    assert failing_pairs("failed", 2, st, PAIRS, canceled=True) == []
    drift = {"exit_code": 2, "not_ok": ["sim03", "sim02"]}
    assert failing_pairs("failed", 2, stats(failures={"localhost": 1}), PAIRS, audit=drift) == ["sim03", "sim02"]
    assert failing_pairs("failed", 2, stats(dark={"sim01-head": 1}), PAIRS, audit={"exit_code": 0}) == ["sim01"]


def test_report_audit_prints_table_and_paths(tmp_path):
    (tmp_path / "audit.txt").write_text("pair   verdict\nsim01  OK\nsim02  DRIFT\n  head: image_id is a, expected b")
    (tmp_path / "audit.html").write_text("<html></html>")
    (tmp_path / "audit.json").write_text(json.dumps({"exit_code": 2, "not_ok": ["sim02"]}))
    out = io.StringIO()
    doc = cli.report_audit(str(tmp_path), out)
    assert doc == {"exit_code": 2, "not_ok": ["sim02"]}
    text = out.getvalue()
    assert text.startswith("pair   verdict\nsim01  OK\nsim02  DRIFT\n  head: image_id is a, expected b\n")
    assert f"audit html: {tmp_path / 'audit.html'}" in text
    assert f"audit json: {tmp_path / 'audit.json'}" in text


def test_report_audit_missing_or_broken(tmp_path):
    out = io.StringIO()
    assert cli.report_audit(str(tmp_path), out) is None
    assert out.getvalue() == f"no audit report in {tmp_path}\n"
    (tmp_path / "audit.json").write_text("{broken")
    out = io.StringIO()
    assert cli.report_audit(str(tmp_path), out) is None
    assert "not readable JSON" in out.getvalue()


def test_niah_lines_and_nothing_else_verbose():
    """NIAH's progress reaches the operator through ansible-runner's verbose events; any other verbose
    output stays in the run's stdout artifact, the progress callback's own lines too (dspark prints
    those from the results, below: never twice)."""
    phase_line = "[sim01-head] 18:52:03 waited 35/3600 s; head loading weights 12/48; worker loading weights 12/48"
    got = lines({"event": "verbose", "stdout": phase_line},
                {"event": "verbose", "stdout": "[sim01-head] READY served=m kv_cache_size_tokens=4096 after 41 s"},
                {"event": "verbose", "stdout": "[sim02-head] NIAH running: depth 0.5 (2/3), 1 row(s) written"},
                {"event": "verbose", "stdout": "<10.231.0.11> ESTABLISH SSH CONNECTION FOR USER: root"},
                {"event": "verbose", "stdout": "[sim01-head] secret=sk-1 something else"})
    assert got == ["[sim02] sim02-head NIAH running: depth 0.5 (2/3), 1 row(s) written"]


def test_a_pairs_start_up_progress_goes_through_the_progress_callback():
    """The wait's reports come as retries and its READY line in its last result; dspark prints them with
    the gb10.dspark.progress callback's own function (what main.collection_progress loads), its pair in front."""
    assert cli.collection_progress() is progress_callback.texts
    record = _pair_wait.progress_record(35.4, 3600, {"phase_text": "loading weights 12/48"},
                                        {"phase_text": "loading weights 12/48"},
                                        time.mktime((2026, 12, 5, 18, 52, 3, 0, 0, -1)))
    retry = event("runner_retry", task="Engine | Wait", res={"waiting": True, "dspark_progress": record})
    ready = event("runner_on_ok", task="Engine | Wait", task_action="gb10.dspark.pair_ready",
                  res={"msg": "READY served=m kv_cache_size_tokens=4096 after 41 s",
                       "dspark_progress": {"kind": "line", "text": "READY served=m kv_cache_size_tokens=4096 after 41 s"}})
    worker = event("runner_on_ok", host="sim01-worker", task="Engine | Wait", res={"msg": "the head serves"})
    expected = [
        "[sim01] sim01-head 18:52:03 waited 35/3600 s; head loading weights 12/48; worker loading weights 12/48",
        "[sim01] sim01-head READY served=m kv_cache_size_tokens=4096 after 41 s",
        "[sim01] sim01-head ok Engine | Wait",
        "[sim01] sim01-worker ok Engine | Wait",
    ]
    assert lines(retry, ready, worker, texts=cli.collection_progress()) == expected
    # through the callback's function, not a copy of its format: a changed format changes dspark's lines
    assert lines(retry, texts=lambda res: ["via the callback"]) == ["[sim01] sim01-head via the callback"]
    assert lines(retry, ready) == ["[sim01] sim01-head ok Engine | Wait"]  # without the callback: results only


def test_the_gate_verdict_of_the_runtime_gate_action_is_printed():
    got = lines(event("runner_on_ok", task="Gate | Run the runtime gate suite", task_action="gb10.dspark.runtime_gate",
                      res={"msg": "pair sim01: RUNTIME_GATE status=PASS errors=0 output=/e/runtime-gate.json"}))
    assert got == ["[sim01] sim01-head ok Gate | Run the runtime gate suite -- pair sim01: RUNTIME_GATE status=PASS "
                   "errors=0 output=/e/runtime-gate.json"]


def test_the_gate_verdict_of_a_debug_summary_is_printed():
    got = lines(event("runner_on_ok", task="Gate | Summary", task_action="ansible.builtin.debug",
                      res={"msg": "pair sim01: RUNTIME_GATE status=PASS errors=0 output=/e/runtime-gate.json"}),
                event("runner_on_ok", task="Engine | Start", task_action="community.docker.docker_container",
                      res={"msg": "not shown"}))
    assert got == ["[sim01] sim01-head ok Gate | Summary -- pair sim01: RUNTIME_GATE status=PASS errors=0 "
                   "output=/e/runtime-gate.json", "[sim01] sim01-head ok Engine | Start"]


def test_a_line_shown_from_a_result_is_not_shown_again_from_the_callbacks_own_output():
    """A wait run with progress_results: dspark prints its line from the retry, and the progress callback's
    own copy of it (a verbose event, as the callback prints beside the stdout callback) is not printed twice;
    a wait that still prints its lines itself is shown from its verbose lines."""
    niah = "NIAH running: depth 0.5 (2/3), 1 row(s) written; waited 60 s"
    got = lines(event("runner_retry", host="sim02-head", task="Niah | Wait",
                      res={"waiting": True, "dspark_progress": {"kind": "line", "text": niah}}),
                {"event": "verbose", "stdout": f"[sim02-head] {niah}"},
                {"event": "verbose", "stdout": f"[sim01-head] {niah}"},
                texts=progress_callback.texts)
    assert got == [f"[sim02] sim02-head {niah}", f"[sim01] sim01-head {niah}"]
