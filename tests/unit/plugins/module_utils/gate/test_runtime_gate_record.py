"""The runtime gate reads each rank from one rank_audit record (the fleet audit's collector):
``recorded_run`` answers the gate's reads from that record exactly as the per-command reads
answered them, and a rank that could not be read fails every check with the reason."""
from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate as rg
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_logs as rg_logs
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_identity as rg_identity
from tests.unit.plugins.module_utils.gate.test_runtime_gate import (
    PIN, FakeApi, FakeRank, config, container, log_fixture, serve_argv,
)

NAME = "dspark_vllm"


def record_of(rank: FakeRank, cfg: dict) -> dict:
    """The runtime section rank_audit would return for the same rank (built from FakeRank's answers)."""
    prefixes = [rg_identity.LEGACY_SELECTOR, rg_identity.MULTI_STREAM]

    def piece(argv):
        rc, out, err = rank(argv)
        return {"rc": rc, "stdout": out, "stderr": err}
    return {
        "container": rank.container,
        "image": rank.image,
        "pid1_env": piece(["docker", "exec", NAME, rg.PYTHON, "-c", rg.PID1_ENV_CODE, *prefixes]),
        "manifest_sha256": piece(["docker", "exec", NAME, rg.PYTHON, "-c", rg.SHA256_CODE, cfg["manifest_path"]]),
        "logs": piece(["docker", "logs", "--tail", str(cfg["log_tail"]), NAME]),
        "errors": {},
    }


def test_a_record_gives_the_same_identity_and_logs_as_the_commands():
    cfg = config()
    for rank_name, fake in (("head", FakeRank(log_fixture("head-regular"))),
                            ("worker", FakeRank(log_fixture("worker-regular"), container_obj=container(Args=serve_argv(1))))):
        run = rg.recorded_run(record_of(fake, cfg), NAME)
        assert rg_identity.collect_identity(rank_name, run, cfg) == rg_identity.collect_identity(rank_name, fake, cfg)
        assert rg_logs.collect_logs(rank_name, run, cfg) == rg_logs.collect_logs(rank_name, fake, cfg)


def test_a_whole_gate_over_records_passes_like_over_commands():
    cfg = config()
    head = FakeRank(log_fixture("head-regular"))
    worker = FakeRank(log_fixture("worker-regular"), container_obj=container(Args=serve_argv(1)))
    gate = rg.Gate(cfg, {"head": rg.recorded_run(record_of(head, cfg), NAME),
                         "worker": rg.recorded_run(record_of(worker, cfg), NAME)}, FakeApi())
    gate.run_all()
    document = gate.document()
    assert document["status"] == "PASS", document["errors"]
    assert document["evidence"]["runtime_identity"]["head"]["image_id"] == PIN["image_id"]


def test_a_missing_container_reads_as_the_cli_would_say_it():
    cfg = config()
    record = {"container": None, "image": None, "errors": {"container": "no such container: dspark_vllm"},
              "pid1_env": {"rc": 125, "stdout": "", "stderr": "no such container: dspark_vllm"},
              "manifest_sha256": {"rc": 125, "stdout": "", "stderr": "no such container: dspark_vllm"},
              "logs": {"rc": 1, "stdout": "", "stderr": "no such container: dspark_vllm"}}
    identity, errors = rg_identity.collect_identity("worker", rg.recorded_run(record, NAME), cfg)
    assert identity["container_id"] is None
    assert any(e.startswith("worker docker container inspect failed (exit 1): no such container") for e in errors), errors
    assert any("reading the PID 1 environment failed (exit 125)" in e for e in errors), errors


def test_an_unread_rank_fails_every_read_with_the_reason():
    record = {"errors": {"call": "gb10.dspark.rank_audit on spark-b failed: ssh refused"}}
    run = rg.recorded_run(record, NAME)
    for argv in (["docker", "container", "inspect", NAME], ["docker", "logs", "--tail", "10", NAME],
                 ["docker", "exec", NAME, rg.PYTHON, "-c", rg.SHA256_CODE, "/x"]):
        rc, out, err = run(argv)
        assert rc != 0 and out == "" and "ssh refused" in err


def test_an_image_other_than_the_recorded_one_is_not_answered():
    cfg = config()
    fake = FakeRank()
    run = rg.recorded_run(record_of(fake, cfg), NAME)
    rc, out, _err = run(["docker", "image", "inspect", PIN["image_id"]])
    assert rc == 0 and json.loads(out)[0]["Id"] == PIN["image_id"]
    rc, _out, err = run(["docker", "image", "inspect", "sha256:" + "e" * 64])
    assert rc == 1 and "sha256:" + "e" * 64 in err


def test_a_read_the_record_does_not_hold_is_refused():
    run = rg.recorded_run({"errors": {}}, NAME)
    rc, _out, err = run(["docker", "ps"])
    assert rc == 127 and "docker ps" in err


# ---- the suite's side: one rank_audit call per rank, through testinfra --------------------------
def _load_suite_conftest():
    import importlib.util

    from tests.unit.plugins.module_utils.gate.test_runtime_gate import SUITE

    spec = importlib.util.spec_from_file_location("runtime_gate_suite_conftest_record", SUITE / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _FakeRunner:
    """testinfra's AnsibleRunner as the suite uses it: one run_module call per rank."""
    made: list = []

    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def run_module(self, host, module, args, get_encoding=None, **options):
        self.calls.append((host, module, json.loads(args), get_encoding, options))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _runner(monkeypatch, answer) -> tuple[_FakeRunner, list]:
    from testinfra.utils.ansible_runner import AnsibleRunner

    runner, inventories = _FakeRunner(answer), []
    monkeypatch.setattr(AnsibleRunner, "get_runner", classmethod(lambda cls, inv: inventories.append(inv) or runner))
    return runner, inventories


def test_the_suite_reads_a_rank_with_one_rank_audit_call(monkeypatch):
    suite = _load_suite_conftest()
    cfg = config()
    runtime = record_of(FakeRank(), cfg)
    runner, inventories = _runner(monkeypatch, {"changed": False, "audit": {"runtime": runtime}})
    got = suite.read_rank("spark-b", "/tmp/inv.yml", cfg, [rg_identity.LEGACY_SELECTOR, rg_identity.MULTI_STREAM])
    assert got == runtime
    assert inventories == ["/tmp/inv.yml"] and len(runner.calls) == 1
    host, module, args, get_encoding, options = runner.calls[0]
    # become: the Docker socket and the 0600 env file are root's, and the ranks are reached as an
    # unprivileged user.
    assert host == "spark-b" and module == "gb10.dspark.rank_audit"
    assert options == {"check": False, "become": True}
    assert args == {"rank": "spark-b", "container": cfg["container"], "manifest_path": cfg["manifest_path"],
                    "runtime": {"log_tail": cfg["log_tail"], "env_prefixes": [rg_identity.LEGACY_SELECTOR, rg_identity.MULTI_STREAM]}}
    # Ansible writes the answer in UTF-8 here; testinfra must not ask the rank (a second connection) for its locale
    assert get_encoding() == "utf-8"


def test_the_suite_reaches_a_rank_over_the_plays_connection_settings_without_an_inventory(monkeypatch):
    """What the play knows goes with the one call: the rank is its own one-host inventory (no file written) and
    its connection settings are the call's extra variables."""
    suite = _load_suite_conftest()
    cfg = config()
    runner, inventories = _runner(monkeypatch, {"changed": False, "audit": {"runtime": record_of(FakeRank(), cfg)}})
    connection = {"ansible_host": "10.231.0.12", "ansible_user": "ops", "ansible_port": 2222}
    suite.read_rank("spark-b", "", cfg, [], connection)
    assert inventories == ["spark-b,"]
    assert runner.calls[0][4] == {"check": False, "become": True, "extra_vars": connection}


def test_the_answer_is_read_as_utf8_whatever_the_ranks_locale(tmp_path, monkeypatch):
    """testinfra's own runner, given a tree file holding non-ASCII text (a log tail with an ellipsis), reads it
    with the encoding the suite gives: no connection to the rank is made for it."""
    from testinfra.utils import ansible_runner

    answer = {"changed": False, "audit": {"runtime": {"log_tail": "loading … done"}}}

    def fake_run_expect(codes, cmd, *args):
        folder = args[0]
        Path(folder, args[-1]).write_text(json.dumps(answer, ensure_ascii=False), encoding="utf-8")
        return type("Out", (), {"stdout": ""})()
    monkeypatch.setattr(ansible_runner.local, "run_expect", fake_run_expect)
    suite = _load_suite_conftest()
    got = suite.read_rank("spark-b", "", config(), [], {"ansible_host": "10.0.0.2"})
    assert got == {"log_tail": "loading … done"}


def test_a_failed_rank_audit_call_is_a_record_of_the_failure(monkeypatch):
    suite = _load_suite_conftest()
    cfg = config()
    for answer in ({"failed": True, "msg": "docker socket refused"},
                   RuntimeError("docker socket refused"),
                   {"changed": False, "msg": "docker socket refused"}):
        _runner(monkeypatch, answer)
        got = suite.read_rank("spark-b", "/tmp/inv.yml", cfg, [])
        assert "docker socket refused" in got["errors"]["call"] and "spark-b" in got["errors"]["call"]
        rc, _out, err = rg.recorded_run(got, NAME)(["docker", "container", "inspect", NAME])
        assert rc == 1 and "docker socket refused" in err


def test_the_suite_reads_both_ranks_once_each(monkeypatch):
    suite = _load_suite_conftest()
    cfg = dict(config(), head="spark-a", worker="spark-b", inventory="/tmp/inv.yml")
    head, worker = FakeRank(log_fixture("head-regular")), FakeRank(log_fixture("worker-regular"))
    reads = []

    def read_rank(hostname, inventory, config_, prefixes, connection=None):
        reads.append((hostname, connection))
        return record_of(head if hostname == "spark-a" else worker, cfg)
    monkeypatch.setattr(suite, "read_rank", read_rank)
    hosts = {"spark-a": {"ansible_host": "10.0.0.1"}, "spark-b": {"ansible_host": "10.0.0.2"}}
    runners = suite.make_runners(rg, cfg, hosts)
    for rank in ("head", "worker"):
        for _attempt in range(3):
            assert runners[rank](["docker", "container", "inspect", NAME])[0] == 0
    assert sorted(reads) == [("spark-a", hosts["spark-a"]), ("spark-b", hosts["spark-b"])]
