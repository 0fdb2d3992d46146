"""The pin format: the sample v026 pin and the pin the simulator writes are both well formed."""
from __future__ import annotations

import copy
import hashlib
import json
import sys

import pytest
import yaml

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin
from tests.unit.plugins.conftest import REPO

sys.path.insert(0, str(REPO / "sim"))
from dspark_sim import checkpoint, inventory  # noqa: E402

SAMPLE = REPO / "inventories" / "sample" / "group_vars" / "all" / "pin.yml"


def sample_pin() -> dict:
    return yaml.safe_load(SAMPLE.read_text())["dspark_pin"]


def sim_pin() -> dict:
    meta = {"release": "sim-v026", "image_tag": "dspark-r0b0tlab:production-v026-sim", "image_id": "sha256:" + "1" * 64,
            "image_architecture": "amd64", "image_archive_sha256": "2" * 64,
            "labels": {"io.r0b0tlab.vllm.package.version": "0.26.0+dspark.sm121.3",
                       "io.r0b0tlab.vllm.integrated.commit": "fbad93432ebf60c8345397b3032fe03bf5d239cc",
                       "org.opencontainers.image.revision": "3" * 40,
                       "io.r0b0tlab.cudagraph.selector": "native-v1",
                       "io.r0b0tlab.kv-cache.dtype": "nvfp4_ds_mla",
                       "io.r0b0tlab.speculative.method": "dspark",
                       "io.r0b0tlab.speculative.tokens": "6"}}
    return inventory.pin(meta)["dspark_pin"]


def test_sample_pin_is_well_formed_and_names_the_v026_identity():
    pin = sample_pin()
    assert _pin.problems(pin) == []
    assert pin["image_architecture"] == "arm64"
    assert pin["gpu_compute_capability"] == "12.1"


def test_sim_pin_is_well_formed_and_matches_its_checkpoint(tmp_path):
    pin = sim_pin()
    assert _pin.problems(pin) == []
    model = checkpoint.write(tmp_path)
    index = json.loads((model / "model.safetensors.index.json").read_text())
    assert pin["model_total_size"] == index["metadata"]["total_size"]
    assert len(set(index["weight_map"].values())) == pin["model_shard_count"]
    config = json.loads((model / "config.json").read_text())
    assert all(config[k] == v for k, v in pin["model_config"].items())
    manifest = inventory.MANIFEST_SRC.read_bytes()
    assert pin["runtime_manifest_sha256"] == hashlib.sha256(manifest).hexdigest()


def test_every_label_maps_to_a_pin_key():
    pin = sample_pin()
    labels = _pin.expected_labels(pin)
    assert labels["io.r0b0tlab.speculative.tokens"] == "6"
    assert labels["org.opencontainers.image.revision"] == pin["source_revision"]
    assert set(_pin.LABELS.values()) <= set(_pin.FIELDS)


@pytest.mark.parametrize("key,value,needle", [
    ("image_id", "2dfe24a3", "does not match"),
    ("model_revision", "9e165c30", "does not match"),
    ("kv_cache_dtype", "fp8", "does not match"),
    ("speculative_tokens", "6", "must be an integer"),
    ("speculative_tokens", True, "must be an integer"),
    ("model_config", [], "must be a dict"),
    ("runtime_manifest_sha256", None, "is missing"),
])
def test_malformed_pins_are_refused(key, value, needle):
    pin = copy.deepcopy(sample_pin())
    pin[key] = value
    errs = _pin.problems(pin)
    assert len(errs) == 1 and key in errs[0] and needle in errs[0]
    with pytest.raises(_pin.PinError):
        _pin.check(pin)


def test_unknown_keys_are_refused():
    pin = dict(sample_pin(), imageid="typo")
    assert _pin.problems(pin) == ["dspark_pin has unknown keys: imageid"]
