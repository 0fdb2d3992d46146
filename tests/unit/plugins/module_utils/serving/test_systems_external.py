# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _systems_external: the r0b0bench client's version, argv, environment and report rows."""
from __future__ import annotations

from tests.support import standin

from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems_external as S_external


SERVED = standin.SERVED


# ---- the external client -------------------------------------------------------------------------
def test_external_env_passes_only_what_the_client_needs():
    environ = {"PATH": "/bin", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "nope", "VLLM_API_KEY": "nope",
               "LANG": "C.UTF-8"}
    env = S_external.external_env("sk-abc", environ)
    assert env == {"PATH": "/bin", "HOME": "/root", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
                   "OPENAI_API_KEY": "sk-abc"}
    assert "OPENAI_API_KEY" not in S_external.external_env(None, environ)


def test_external_rows_from_a_report():
    report = {"lanes": [{"lane_id": "bfcl_mt", "status": "PASS", "infra_errors": 0, "summary": {"score": 0.755}},
                        {"lane_id": "bfcl_ast", "status": "FAIL", "infra_errors": 0, "summary": {"score": 0.362}},
                        {"lane_id": "x_infra", "status": "PASS", "infra_errors": 2},
                        {"lane_id": "x_odd", "status": "WEIRD"},
                        {"lane_id": "x_skip", "status": "SKIP"}]}
    rows = S_external.external_rows(["bfcl_mt", "bfcl_ast", "x_infra", "x_odd", "x_skip", "x_missing"], report,
                           "/o/report.json", None)
    got = {r["level"]: r for r in rows}
    assert got["bfcl_mt"]["status"] == "PASS" and got["bfcl_mt"]["client"]["summary"] == {"score": 0.755}
    assert got["bfcl_ast"]["status"] == "FAIL"
    assert got["x_infra"]["status"] == "ERROR" and "infra_errors is 2, expected 0" in got["x_infra"]["reasons"][0]
    assert got["x_infra"]["client"]["summary"] is None
    assert got["x_odd"]["status"] == "ERROR" and 'status is "WEIRD"' in got["x_odd"]["reasons"][0]
    assert got["x_skip"]["status"] == "NOT_IMPLEMENTED"
    assert got["x_missing"]["status"] == "NOT_IMPLEMENTED"
    assert "absent from /o/report.json" in got["x_missing"]["reasons"][0]
    rows = S_external.external_rows(["bfcl_mt"], None, "/o/report.json", "report unreadable")
    assert rows[0]["status"] == "ERROR" and rows[0]["reasons"] == ["external bfcl_mt: report unreadable"]


# ---- the seed's r0b0bench run (issue 16) -------------------------------------------------------
ORDERED_VERSIONS = ["0.9.9", "1.0.0.dev1", "1.0.0a1", "1.0.0a2.post1", "1.0.0b1", "1.0.0rc1", "1.0.0rc2.dev3",
                    "1.0.0rc2", "1.0.0rc2.post1.dev1", "1.0.0rc2.post1", "1.0.0", "1.0.0.post1", "1.0.1", "1.0.10",
                    "1.1", "10.0.0"]


def test_versions_compare_with_pep440_semantics():
    keys = [S_external.version_key(v) for v in ORDERED_VERSIONS]
    assert all(k is not None for k in keys)
    assert all(a < b for a, b in zip(keys, keys[1:])), ORDERED_VERSIONS
    assert sorted(reversed(ORDERED_VERSIONS), key=S_external.version_key) == ORDERED_VERSIONS
    assert S_external.version_key("1.0") == S_external.version_key("1.0.0") == S_external.version_key("1")
    assert S_external.version_key("1.0.0RC2") == S_external.version_key("1.0.0rc2")
    for bad in ("", "v1.0.0", "1.0.0rc", "1.0.0-beta", "1.0.0+local", "latest", "1..0", "1.0.0rc2.dev1.post1", None):
        assert S_external.version_key(bad) is None, bad


def test_the_version_floor_is_1_0_0rc2():
    assert S_external.MIN_R0B0BENCH_VERSION == "1.0.0rc2"
    assert [v for v in ORDERED_VERSIONS if S_external.version_at_least(v, S_external.MIN_R0B0BENCH_VERSION)] == ORDERED_VERSIONS[7:]


def test_external_argv_is_the_seed_command():
    ext = {"python": "/opt/rb/.venv/bin/python", "tokenizer": "/models/dsv4/hf"}
    argv = S_external.external_argv(ext, "http://127.0.0.1:8888/", SERVED, "/out/r0b0bench", "systems-x")
    assert argv == ["/opt/rb/.venv/bin/python", "-m", "r0b0bench.cli", "run", "--profile", "systems",
                    "--base-url", "http://127.0.0.1:8888/v1", "--model", SERVED, "--tokenizer", "/models/dsv4/hf",
                    "--output", "/out/r0b0bench", "--only", "canary,bfcl_mt,bfcl_ast,latency,concurrency,throughput",
                    "--run-id", "systems-x"]
    assert "--tokenizer" not in S_external.external_argv({"python": "p", "lanes": ["latency"]}, "u", "m", "o", "r")


def test_external_env_carries_the_bfcl_settings_and_nothing_else():
    environ = {"PATH": "/bin", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "nope", "BFCL_NUM_THREADS": "99",
               "R0B0BENCH_AQUILA_SCRIPTS": "/elsewhere"}
    ext = {"aquila_scripts": "/srv/dsv4-bfcl/scripts", "bfcl_python": "/srv/bfcl/.venv/bin/python"}
    assert S_external.external_env("sk-abc", environ, ext) == {
        "PATH": "/bin", "HOME": "/root", "PYTHONUNBUFFERED": "1", "OPENAI_API_KEY": "sk-abc",
        "R0B0BENCH_AQUILA_SCRIPTS": "/srv/dsv4-bfcl/scripts", "R0B0BENCH_BFCL_PYTHON": "/srv/bfcl/.venv/bin/python",
        "BFCL_NUM_THREADS": "4", "BFCL_HTTP_TIMEOUT": "3600", "BFCL_MAX_TOKENS": "8192"}
    env = S_external.external_env(None, environ, {"bfcl_num_threads": 2, "bfcl_http_timeout": 60, "bfcl_max_tokens": 512})
    assert (env["BFCL_NUM_THREADS"], env["BFCL_HTTP_TIMEOUT"], env["BFCL_MAX_TOKENS"]) == ("2", "60", "512")
    assert "R0B0BENCH_AQUILA_SCRIPTS" not in env and "OPENAI_API_KEY" not in env


def test_external_rows_take_their_client_kind_from_the_report():
    report = {"backend": "vllm_bench", "lanes": [
        {"lane_id": "latency", "status": "PASS", "summary": {"backend": "openai_portable"}},
        {"lane_id": "throughput", "status": "PASS", "backend": "vllm-bench"},
        {"lane_id": "canary", "status": "PASS"},
        {"lane_id": "perf", "status": "PASS", "summary": {"backend": "sglang-bench"}},
        {"lane_id": "bfcl_mt", "status": "NOT_IMPLEMENTED"}]}
    rows = {r["level"]: r for r in S_external.external_rows(["latency", "throughput", "canary", "perf", "bfcl_mt"], report,
                                                   "/o/report.json", None)}
    assert rows["latency"]["client_kind"] == "openai_portable"
    assert rows["throughput"]["client_kind"] == "vllm-bench"
    assert rows["canary"]["client_kind"] == "vllm-bench"  # the report's own backend, normalised
    assert rows["perf"]["status"] == "ERROR" and rows["perf"]["client_kind"] is None
    assert 'backend is "sglang-bench", expected openai_portable or vllm-bench' in rows["perf"]["reasons"][0]
    assert rows["bfcl_mt"]["client_kind"] is None
    plain = S_external.external_rows(["canary"], {"lanes": [{"lane_id": "canary", "status": "PASS"}]}, "/o/r.json", None)
    assert plain[0]["client_kind"] == "openai_portable"  # r0b0bench lanes are OpenAI-API clients
