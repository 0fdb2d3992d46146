"""The image ENTRYPOINT (dspark-entrypoint.sh) and the runtime audit."""
import json
import os
import subprocess

import pytest

from dspark_engine import VERSION, audit

from .conftest import ENTRYPOINT

GOOD = {"schema_version": 3, "kv_cache_dtype": "nvfp4_ds_mla", "speculative_method": "dspark",
        "vllm_version": VERSION}
SCRIPT = ('VLLM_BIN=/usr/local/bin/vllm; [ -x "$VLLM_BIN" ] || VLLM_BIN="$FAKE_VLLM"; export CUDA_HOME=/usr/local/cuda; '
          'exec "$VLLM_BIN" serve /model --served-model-name x --kv-cache-dtype {kv} --port 8888')


@pytest.fixture
def env(tmp_path):
    """Environment with a good manifest and a fake `vllm` on PATH that prints its argv."""
    manifest = tmp_path / "runtime-manifest.json"
    manifest.write_text(json.dumps(GOOD))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "vllm"
    fake.write_text('#!/bin/sh\necho "FAKE-VLLM $*"\n')
    fake.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "HOME": str(tmp_path), "KV_CACHE_DTYPE": "nvfp4_ds_mla",
            "DSPARK_RUNTIME_MANIFEST": str(manifest), "FAKE_VLLM": str(fake)}


def run(args, env):
    return subprocess.run([ENTRYPOINT, *args], env=env, capture_output=True, text=True, timeout=30, check=False)


def test_no_arguments_is_64(env):
    out = run([], env)
    assert out.returncode == 64 and "no command given" in out.stderr


def test_audit_subcommand(env, tmp_path):
    out = run(["audit"], env)
    assert out.returncode == 0 and out.stdout.strip().endswith("DSPARK_RUNTIME_AUDIT_PASS")
    report = json.loads(out.stdout.splitlines()[0])
    assert report["status"] == "PASS" and report["vllm_version"] == VERSION and len(report["manifest_sha256"]) == 64
    missing = run(["audit"], dict(env, DSPARK_RUNTIME_MANIFEST=str(tmp_path / "absent.json")))
    assert missing.returncode == 1 and "DSPARK_RUNTIME_AUDIT_FAIL:" in missing.stderr


def test_vllm_serve_form_runs_audit_then_execs(env):
    out = run(["vllm", "serve", "/model", "--kv-cache-dtype", "nvfp4_ds_mla"], env)
    assert out.returncode == 0
    assert "DSPARK_RUNTIME_AUDIT_PASS" in out.stdout
    assert out.stdout.strip().endswith("FAKE-VLLM serve /model --kv-cache-dtype nvfp4_ds_mla")
    assert run(["vllm", "serve", "/model", "--kv-cache-dtype=nvfp4_ds_mla"], env).returncode == 0


def test_bash_lc_form(env):
    out = run(["bash", "-lc", SCRIPT.format(kv="nvfp4_ds_mla")], env)
    assert out.returncode == 0 and "FAKE-VLLM serve /model" in out.stdout
    assert run(["bash", "-lc", SCRIPT.format(kv='"$KV_CACHE_DTYPE"')], env).returncode == 0
    assert run(["bash", "-lc", SCRIPT.format(kv="fp8")], env).returncode == 64
    assert run(["bash", "-lc", SCRIPT.format(kv="nvfp4_ds_mla --kv_cache_dtype nvfp4_ds_mla")], env).returncode == 64
    assert run(["bash", "-lc", "exec vllm serve /model --kv-cache-dtype nvfp4_ds_mla"], env).returncode == 64
    assert run(["bash", "-lc", SCRIPT.format(kv="nvfp4_ds_mla"), "extra"], env).returncode == 64


@pytest.mark.parametrize("args", [
    ["python3", "-m", "vllm", "serve"], ["bash", "-c", "vllm serve"], ["vllm", "--version"], ["sh", "-lc", "x"],
])
def test_other_forms_are_refused(env, args):
    out = run(args, env)
    assert out.returncode == 64 and "usage:" in out.stderr and "FAKE-VLLM" not in out.stdout


@pytest.mark.parametrize("args,env_kv,message", [
    (["vllm", "serve", "/m"], "nvfp4_ds_mla", "found 0"),
    (["vllm", "serve", "/m", "--kv-cache-dtype", "nvfp4_ds_mla", "--kv-cache-dtype", "nvfp4_ds_mla"],
     "nvfp4_ds_mla", "found 2"),
    (["vllm", "serve", "/m", "--kv-cache-dtype", "nvfp4_ds_mla", "--kv_cache_dtype=fp8"], "nvfp4_ds_mla", "found 2"),
    (["vllm", "serve", "/m", "--kv-cache-dtype", "fp8"], "nvfp4_ds_mla", "must be nvfp4_ds_mla (got 'fp8')"),
    (["vllm", "serve", "/m", "--kv-cache-dtype", "nvfp4_ds_mla"], "fp8", "env KV_CACHE_DTYPE"),
    (["vllm", "serve", "/m", "--kv-cache-dtype", "nvfp4_ds_mla"], None, "env KV_CACHE_DTYPE"),
])
def test_kv_cache_dtype_rules(env, args, env_kv, message):
    env = dict(env)
    env.pop("KV_CACHE_DTYPE")
    if env_kv:
        env["KV_CACHE_DTYPE"] = env_kv
    out = run(args, env)
    assert out.returncode == 64 and message in out.stderr
    assert "DSPARK_RUNTIME_AUDIT" not in out.stdout + out.stderr     # refused before the audit


def test_failed_audit_propagates_and_blocks_exec(env, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(GOOD, vllm_version="0.25.0")))
    out = run(["vllm", "serve", "/m", "--kv-cache-dtype", "nvfp4_ds_mla"], dict(env, DSPARK_RUNTIME_MANIFEST=str(bad)))
    assert out.returncode == 1 and "FAKE-VLLM" not in out.stdout
    assert "DSPARK_RUNTIME_AUDIT_FAIL: vllm_version is '0.25.0'" in out.stderr


@pytest.mark.parametrize("text,problem", [
    (json.dumps(dict(GOOD, kv_cache_dtype="fp8")), "kv_cache_dtype is 'fp8'"),
    (json.dumps(dict(GOOD, speculative_method="mtp")), "speculative_method is 'mtp'"),
    ('{"kv_cache_dtype": "nvfp4_ds_mla", "kv_cache_dtype": "nvfp4_ds_mla"}', "duplicate key"),
    ('{"schema_version": NaN}', "non-finite"),
    ("[]", "expected a JSON object"),
])
def test_audit_checks(tmp_path, text, problem):
    path = tmp_path / "m.json"
    path.write_text(text)
    _unused, problems = audit.audit(str(path))
    assert any(problem in p for p in problems)
    path.write_text(json.dumps(GOOD))
    assert audit.audit(str(path))[1] == []
