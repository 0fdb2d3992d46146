# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _runtime_gate_identity: the engine's command read into flags, a rank's inspect data, PID 1's
environment and the manifest against the pin and the profile, and the two ranks compared."""
from __future__ import annotations

import hashlib
import json
import re
import pytest
from tests.unit.plugins.module_utils.gate.test_runtime_gate import (
    FakeRank,
    LABELS,
    MANIFEST,
    PIN,
    PROD_CC,
    PROD_CC_TEXT,
    SPEC_IDENTITY_KEYS,
    config,
    container,
    containerd_rank,
    image,
    serve_argv,
    store_config,
)

from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_identity as rg_identity
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate_base as rg_base


# ================================================================================================
# the command
# ================================================================================================
def test_command_tokens_keep_a_direct_argv_intact():
    tokens = rg_identity.command_tokens("/entry.sh", serve_argv())
    assert tokens[0] == "/entry.sh" and PROD_CC_TEXT in tokens
    assert rg_identity.parse_compilation_config(tokens) == PROD_CC
    # the spec's space-joined record of the command
    assert rg_identity.command_string("/entry.sh", ["a", "b c"]) == "/entry.sh a b c"


def test_command_tokens_split_a_bash_script_shell_style():
    script = ('export CUDA_HOME=/usr/local/cuda; VLLM_BIN=/usr/local/bin/vllm; exec "$VLLM_BIN" serve /model '
              f"--compilation-config '{PROD_CC_TEXT}' --optimization-level 2 --performance-mode balanced")
    tokens = rg_identity.command_tokens("/usr/local/bin/dspark-entrypoint.sh", ["bash", "-lc", script])
    assert tokens[:3] == ["/usr/local/bin/dspark-entrypoint.sh", "bash", "-lc"]
    assert rg_identity.parse_compilation_config(tokens) == PROD_CC
    assert rg_identity.flag_check(tokens, "--optimization-level", "-O", 2) == (2, True)
    with pytest.raises(rg_base.GateError, match="cannot be tokenised"):
        rg_identity.command_tokens("/bin/sh", ["-c", "vllm serve --compilation-config '{\"mode\":0}"])


def test_bash_without_c_is_not_a_script():
    tokens = rg_identity.command_tokens("bash", ["-l", "/run.sh", "--flag"])
    assert tokens == ["bash", "-l", "/run.sh", "--flag"]


@pytest.mark.parametrize("args, message", [
    (["serve"], "no --compilation-config"),
    (["--compilation-config", PROD_CC_TEXT, "--compilation-config", PROD_CC_TEXT], "2 times"),
    (["--compilation-config", PROD_CC_TEXT, "-cc", PROD_CC_TEXT], "2 times"),
    (["--compilation_config", PROD_CC_TEXT, "--compilation-config=" + PROD_CC_TEXT], "2 times"),
    (["--compilation-config", PROD_CC_TEXT, "-cc.cudagraph_mode=FULL"], "2 times"),
    (["--compilation-config"], "has no value"),
    (["--compilation-config", "--optimization-level", "2"], "has no value"),
    (["-cc.cudagraph_mode=FULL_DECODE_ONLY"], "dotted key=value form"),
    (["--compilation-config", '{"mode":0,"mode":3}'], "duplicate key"),
    (["--compilation-config", '{"mode":NaN}'], "not a finite number"),
    (["--compilation-config", "[1]"], "not a JSON object"),
    (["--compilation-config", "{mode:0}"], "not strict JSON"),
])
def test_compilation_config_must_appear_exactly_once_as_strict_json(args, message):
    with pytest.raises(rg_base.GateError, match=re.escape(message)):
        rg_identity.parse_compilation_config(["vllm", *args])


@pytest.mark.parametrize("args", [
    ["--compilation-config", PROD_CC_TEXT], ["--compilation-config=" + PROD_CC_TEXT],
    ["--compilation_config", PROD_CC_TEXT], ["-cc", PROD_CC_TEXT], ["-cc=" + PROD_CC_TEXT],
])
def test_compilation_config_spellings(args):
    assert rg_identity.parse_compilation_config(["vllm", "serve", *args]) == PROD_CC


def test_config_covers_allows_a_superset_only():
    assert rg_identity.config_covers(PROD_CC, PROD_CC)
    assert rg_identity.config_covers(dict(PROD_CC, max_cudagraph_capture_size=112), PROD_CC)
    assert not rg_identity.config_covers({k: v for k, v in PROD_CC.items() if k != "cudagraph_strict"}, PROD_CC)
    assert not rg_identity.config_covers(dict(PROD_CC, cudagraph_mode="PIECEWISE"), PROD_CC)
    assert not rg_identity.config_covers(dict(PROD_CC, cudagraph_strict=1), PROD_CC)  # true is not 1
    assert rg_identity.config_covers(dict(PROD_CC, mode=0.0), PROD_CC)  # 0 == 0.0 as JSON numbers


@pytest.mark.parametrize("args, expected", [
    (["--optimization-level", "2"], (2, True)),
    (["--optimization-level=2"], (2, True)),
    (["--optimization_level", "2"], (2, True)),
    (["-O2"], (2, True)),
    (["-O", "2"], (2, True)),
    (["-O=2"], (2, True)),
    (["--optimization-level", "3"], (3, False)),
    (["--optimization-level", "2", "-O3"], (3, False)),
    (["--optimization-level", "23"], (23, False)),
    ([], (None, False)),
    (["--optimization-level"], (None, False)),
])
def test_optimization_level(args, expected):
    assert rg_identity.flag_check(["vllm", "serve", *args, "--x"], "--optimization-level", "-O", 2) == expected


def test_performance_mode():
    assert rg_identity.flag_check(["--performance-mode", "balanced"], "--performance-mode", None, "balanced") == ("balanced",
                                                                                                         True)
    assert rg_identity.flag_check(["--performance-mode", "throughput"], "--performance-mode", None, "balanced") == (
        "throughput", False)
    assert rg_identity.flag_check(["--performance-mode-x", "balanced"], "--performance-mode", None, "balanced") == (None,
                                                                                                           False)


def test_enforce_eager_is_the_last_word():
    assert rg_identity.enforce_eager_of(["--enforce-eager"]) is True
    assert rg_identity.enforce_eager_of(["--enforce-eager", "--no-enforce-eager"]) is False
    assert rg_identity.enforce_eager_of(["--enforce_eager"]) is True
    assert rg_identity.enforce_eager_of(["serve"]) is False


# ================================================================================================
# identity pieces
# ================================================================================================
def test_label_mismatches_against_the_pin():
    assert rg_identity.label_mismatches(LABELS, PIN) == {}
    labels = dict(LABELS, **{"io.r0b0tlab.speculative.tokens": "7"})
    del labels["io.r0b0tlab.cudagraph.selector"]
    assert rg_identity.label_mismatches(labels, PIN) == {
        "io.r0b0tlab.speculative.tokens": {"expected": "6", "actual": "7"},
        "io.r0b0tlab.cudagraph.selector": {"expected": "native-v1", "actual": None},
    }
    assert len(rg_identity.label_mismatches(None, PIN)) == 8


def test_pid1_rules():
    legacy, multi = rg_identity.pid1_env_entries(["A=1", "VLLM_DSV4_ENABLE_MULTI_STREAM=0"])
    assert (legacy, multi) == ([], ["VLLM_DSV4_ENABLE_MULTI_STREAM=0"])
    assert rg_identity.pid1_errors("head", legacy, multi) == []
    legacy, multi = rg_identity.pid1_env_entries(["VLLM_USE_BREAKABLE_CUDAGRAPH=0", "VLLM_DSV4_ENABLE_MULTI_STREAM=0"])
    assert rg_identity.pid1_errors("worker", legacy, multi) == [
        "worker PID 1 retains legacy CUDA-graph selector: VLLM_USE_BREAKABLE_CUDAGRAPH=0"]
    for entries in ([], ["VLLM_DSV4_ENABLE_MULTI_STREAM=1"], ["VLLM_DSV4_ENABLE_MULTI_STREAM="],
                    ["VLLM_DSV4_ENABLE_MULTI_STREAM=0", "VLLM_DSV4_ENABLE_MULTI_STREAM=0"]):
        errors = rg_identity.pid1_errors("head", *rg_identity.pid1_env_entries(entries))
        assert len(errors) == 1 and errors[0].startswith("head PID 1 does not pin compile-safe DSV4 streams")
    # a lookalike name is not the selector
    assert rg_identity.pid1_env_entries(["XVLLM_USE_BREAKABLE_CUDAGRAPH=1", "VLLM_USE_BREAKABLE_CUDAGRAPHX=1"])[0] == []


def test_pid1_answer_is_a_strict_list_of_strings():
    assert rg_identity.parse_pid1_answer('["A=1"]\n') == ["A=1"]
    for bad in ('{"A": 1}', "[1]", "not json"):
        with pytest.raises(rg_base.GateError):
            rg_identity.parse_pid1_answer(bad)


@pytest.mark.parametrize("mounts, ok", [
    ([{"Destination": "/m.json", "RW": False}], True),
    ([{"Destination": "/m.json", "RW": True}], False),
    ([{"Destination": "/m.json"}], False),
    ([{"Destination": "/m.json", "RW": 0}], False),
    ([{"Destination": "/m.json", "RW": False}, {"Destination": "/m.json", "RW": False}], False),
    ([{"Destination": "/other", "RW": False}], False),
    (None, False),
])
def test_manifest_mount_rule(mounts, ok):
    assert rg_identity.manifest_mount_read_only(mounts, "/m.json")[0] is ok


def test_inspect_must_answer_one_object():
    assert rg_identity.one_inspect('[{"Id": "x"}]', "inspect") == {"Id": "x"}
    for bad in ("[]", '[{"Id": 1}, {"Id": 2}]', "{}", '["x"]', "garbage"):
        with pytest.raises(rg_base.GateError):
            rg_identity.one_inspect(bad, "inspect")


def test_identity_of_a_correct_rank():
    rank = FakeRank()
    identity, errors = rg_identity.collect_identity("head", rank, config())
    assert errors == []
    assert set(identity) == SPEC_IDENTITY_KEYS
    assert identity["image_id"] == PIN["image_id"] and identity["image_architecture"] == "arm64"
    assert identity["compilation_config_present"] and identity["serialized_compilation_config"] == rg_identity.canonical_json(
        PROD_CC)
    assert identity["cudagraph_implementation"] == "regular" and identity["enforce_eager"] is False
    assert (identity["optimization_level"], identity["optimization_level_present"]) == (2, True)
    assert (identity["performance_mode"], identity["performance_mode_present"]) == ("balanced", True)
    assert identity["legacy_selector_pid1_entries"] == []
    assert identity["dsv4_multi_stream_pid1_entries"] == ["VLLM_DSV4_ENABLE_MULTI_STREAM=0"]
    assert identity["runtime_audit_manifest_sha256"] == PIN["runtime_manifest_sha256"]
    assert identity["runtime_audit_manifest_read_only"] is True and identity["label_mismatches"] == {}
    expected_command = " ".join(["/usr/local/bin/dspark-entrypoint.sh", *serve_argv()])
    assert identity["command_sha256"] == hashlib.sha256(expected_command.encode()).hexdigest()
    assert ["docker", "image", "inspect", PIN["image_id"]] in rank.calls


def test_identity_reports_every_mismatch_with_the_spec_strings():
    cc = json.dumps(dict(PROD_CC, cudagraph_mode="PIECEWISE"))
    rank = FakeRank(
        container_obj=container(Image="sha256:" + "e" * 64, State={"Running": False, "Status": "exited"},
                                Args=serve_argv(1, cc=cc, extra=("--performance-mode", "throughput", "-O3",
                                                                 "--enforce-eager")),
                                Mounts=[{"Destination": PIN["runtime_manifest_path"], "RW": True}]),
        image_obj=image(Id="sha256:" + "e" * 64, Architecture="amd64",
                        Config={"Labels": dict(LABELS, **{"io.r0b0tlab.kv-cache.dtype": "fp8"})}),
        environ=["VLLM_USE_BREAKABLE_CUDAGRAPH=1"], manifest_sha="d" * 64)
    identity, errors = rg_identity.collect_identity("worker", rank, config())
    expected = [
        "worker container dspark_vllm is not running (status exited)",
        f"worker image ID mismatch: expected {PIN['image_id']}, got sha256:{'e' * 64}",
        "worker runtime audit manifest is not mounted read-only exactly once",
        "worker command enables --enforce-eager",
        "worker compilation config mismatch: expected ",
        "worker optimization level mismatch: expected --optimization-level 2, got 3",
        "worker performance mode mismatch: expected --performance-mode balanced, got throughput",
        "worker image architecture mismatch: expected arm64, got amd64",
        "worker image label mismatch: io.r0b0tlab.kv-cache.dtype expected nvfp4_ds_mla, got fp8",
        "worker PID 1 retains legacy CUDA-graph selector",
        "worker PID 1 does not pin compile-safe DSV4 streams",
        f"worker runtime audit manifest checksum mismatch: expected {'b' * 64}, got {'d' * 64}",
    ]
    assert len(errors) == len(expected)
    for error, prefix in zip(errors, expected):
        assert error.startswith(prefix), (error, prefix)
    assert identity["label_mismatches"] == {"io.r0b0tlab.kv-cache.dtype": {"expected": "nvfp4_ds_mla", "actual": "fp8"}}
    assert identity["runtime_audit_manifest_read_only"] is False and identity["enforce_eager"] is True


def test_architecture_is_not_checked_when_switched_off():
    rank = FakeRank(image_obj=image(Architecture="amd64"))
    identity, errors = rg_identity.collect_identity("head", rank, config(check_architecture=False))
    assert errors == [] and identity["image_architecture"] == "amd64"


def test_a_failed_read_leaves_the_other_checks_running():
    rank = FakeRank(fail={"docker container": (1, "", "Error: No such container: dspark_vllm")},
                    environ=["VLLM_DSV4_ENABLE_MULTI_STREAM=1"])
    identity, errors = rg_identity.collect_identity("head", rank, config())
    assert errors[0] == "head docker container inspect failed (exit 1): Error: No such container: dspark_vllm"
    assert errors[1].startswith("head PID 1 does not pin compile-safe DSV4 streams")
    assert len(errors) == 2
    assert identity["container_id"] is None and identity["runtime_audit_manifest_sha256"] == PIN[
        "runtime_manifest_sha256"]

    rank = FakeRank(image_obj=[image(), image()], fail={"docker exec": (126, "", "OCI runtime exec failed")})
    identity, errors = rg_identity.collect_identity("worker", rank, config())
    assert errors == ["worker docker image inspect did not return exactly one object (got 2)",
                      "worker reading the PID 1 environment failed (exit 126): OCI runtime exec failed",
                      "worker hashing the runtime audit manifest failed (exit 126): OCI runtime exec failed"]
    assert identity["image_id"] == PIN["image_id"] and identity["label_mismatches"] is None


def test_cross_rank_checks():
    head, _unused = rg_identity.collect_identity("head", FakeRank(), config())
    worker, _unused = rg_identity.collect_identity("worker", FakeRank(), config())
    assert rg_identity.cross_rank_errors(head, worker) == []
    other = dict(worker, image_id="sha256:" + "f" * 64)
    assert rg_identity.cross_rank_errors(head, other) == [f"rank image IDs disagree: head {PIN['image_id']}, worker sha256:{'f' * 64}"]
    other = dict(worker, serialized_compilation_config='{"mode":0}')
    assert rg_identity.cross_rank_errors(head, other)[0].startswith("rank compilation configs disagree")
    assert rg_identity.cross_rank_errors(dict(head, image_id=None), dict(worker, image_id=None))[0].startswith(
        "rank image IDs disagree")
    assert rg_identity.cross_rank_errors(None, worker)[0].startswith("rank image IDs disagree")


def test_a_containerd_rank_passes_with_the_manifest_digest():
    rank = containerd_rank(rank=1)
    identity, errors = rg_identity.collect_identity("worker", rank, store_config())
    assert errors == []
    assert identity["image_id"] == MANIFEST
    # docker image inspect <manifest digest> on a containerd store answers with Id = that digest
    assert ["docker", "image", "inspect", MANIFEST] in rank.calls
    assert identity["label_mismatches"] == {} and identity["image_architecture"] == "arm64"
    # a containerd rank whose pin names the image the same way on both stores is the usual case
    both = store_config(head=("containerd", MANIFEST))
    assert rg_identity.collect_identity("head", containerd_rank(), both)[1] == []


def test_a_classic_rank_running_the_manifest_digest_fails():
    _identity, errors = rg_identity.collect_identity("head", containerd_rank(), store_config())
    assert errors == [f"head image ID mismatch: expected {PIN['image_id']}, got {MANIFEST}"]
    # and a containerd rank running the config digest fails the same way
    _identity, errors = rg_identity.collect_identity("worker", FakeRank(container_obj=container(Args=serve_argv(1))),
                                            store_config())
    assert errors == [f"worker image ID mismatch: expected {MANIFEST}, got {PIN['image_id']}"]


def test_cross_rank_on_different_image_stores():
    cfg = store_config()
    head, _unused = rg_identity.collect_identity("head", FakeRank(), cfg)
    worker, _unused = rg_identity.collect_identity("worker", containerd_rank(rank=1), cfg)
    expected = cfg["expected_image_ids"]
    # different IDs, but each is the pinned image as its rank's store names it
    assert rg_identity.cross_rank_errors(head, worker, expected) == []
    # each rank is held to its own store's name for the pinned image
    swapped = (dict(head, image_id=MANIFEST), dict(worker, image_id=PIN["image_id"]))
    errors = rg_identity.cross_rank_errors(*swapped, expected)
    assert errors == [f"rank image IDs disagree: head {MANIFEST}, worker {PIN['image_id']} (the ranks use different "
                      f"image stores; each must run the pinned image: head {PIN['image_id']}, worker {MANIFEST})"]
    assert rg_identity.cross_rank_errors(head, dict(worker, image_id="sha256:" + "f" * 64), expected)[0].startswith(
        f"rank image IDs disagree: head {PIN['image_id']}, worker sha256:{'f' * 64} (the ranks use different")
    assert rg_identity.cross_rank_errors(head, dict(worker, image_id=None), expected)[0].startswith("rank image IDs disagree")
    # on one store the two ranks must report the identical ID, as before
    same = {"head": MANIFEST, "worker": MANIFEST}
    assert rg_identity.cross_rank_errors(dict(head, image_id=MANIFEST), worker, same) == []
    assert rg_identity.cross_rank_errors(head, worker, same) == [
        f"rank image IDs disagree: head {PIN['image_id']}, worker {MANIFEST}"]
