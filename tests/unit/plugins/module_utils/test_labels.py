"""The one table of the collection's container labels, and building and reading labels with it."""
from __future__ import annotations

import hashlib

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils import _labels

# The label names as the engine has always written them on the ranks: a container started by an
# older release must still be read, and a renamed label would replace every engine. Spelled out
# here on purpose, once, to pin the table.
NAMES = {
    "pair": "io.gb10.dspark.pair",
    "rank": "io.gb10.dspark.rank",
    "profile": "io.gb10.dspark.profile",
    "profile_sha256": "io.gb10.dspark.profile.sha256",
    "cudagraph_implementation": "io.gb10.dspark.cudagraph.implementation",
    "experimental": "io.gb10.dspark.profile.experimental",
    "image_id": "io.gb10.dspark.image.id",
    "manifest_sha256": "io.gb10.dspark.manifest.sha256",
    "model_revision": "io.gb10.dspark.model.revision",
    "release": "io.gb10.dspark.release",
    "api_key": "io.gb10.dspark.api_key",
}
VALUES = {
    "pair": "lab01", "rank": 1, "profile": "long-1m", "profile_sha256": "4" * 64,
    "cudagraph_implementation": "regular", "experimental": False, "image_id": "sha256:" + "2" * 64,
    "manifest_sha256": "f" * 64, "model_revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
    "release": "v026-native-v11",
}


def jinja_fingerprint(pair: str, key: str) -> str:
    """The fingerprint as the engine role's Jinja computed it before the table:
    ``'fp:' ~ (('gb10.dspark:' ~ pair ~ ':' ~ key) | hash('sha256'))[:16]``."""
    return "fp:" + hashlib.sha256(("gb10.dspark:" + pair + ":" + key).encode("utf-8")).hexdigest()[:16]


def test_the_table_names_every_label_once_under_the_prefix():
    assert _labels.LABELS == NAMES
    assert _labels.PREFIX == "io.gb10.dspark."
    assert len(set(_labels.LABELS.values())) == len(_labels.LABELS)
    assert all(name.startswith(_labels.PREFIX) for name in _labels.LABELS.values())
    assert set(_labels.RECORD_KEYS) == set(NAMES) - {"api_key"}


def test_label_name():
    assert _labels.label_name("pair") == "io.gb10.dspark.pair"
    assert _labels.label_name("profile_sha256") == "io.gb10.dspark.profile.sha256"
    for bad in ("profile.sha256", "nope", None, ""):
        with pytest.raises(ValueError, match="unknown label key .*; known: pair, rank, profile"):
            _labels.label_name(bad)


def test_engine_labels_are_strings_named_by_the_table():
    labels = _labels.engine_labels(VALUES)
    assert labels == {
        "io.gb10.dspark.pair": "lab01",
        "io.gb10.dspark.rank": "1",
        "io.gb10.dspark.profile": "long-1m",
        "io.gb10.dspark.profile.sha256": "4" * 64,
        "io.gb10.dspark.cudagraph.implementation": "regular",
        "io.gb10.dspark.profile.experimental": "false",
        "io.gb10.dspark.image.id": "sha256:" + "2" * 64,
        "io.gb10.dspark.manifest.sha256": "f" * 64,
        "io.gb10.dspark.model.revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
        "io.gb10.dspark.release": "v026-native-v11",
        "io.gb10.dspark.api_key": "none",
    }
    assert _labels.engine_labels(dict(VALUES, experimental=True, rank="0"))["io.gb10.dspark.profile.experimental"] == "true"
    assert _labels.engine_labels(dict(VALUES, rank="0"))["io.gb10.dspark.rank"] == "0"


@pytest.mark.parametrize("pair, key", [("lab01", "secret-key-123"), ("sim02", "sk-ünïcode"), ("p", "sk-audit-7f41c2d9e8b3a6f0")])
def test_the_api_key_fingerprint_is_the_roles_former_one_and_never_the_key(pair, key):
    labels = _labels.engine_labels(dict(VALUES, pair=pair), api_key=key)
    fingerprint = labels["io.gb10.dspark.api_key"]
    assert fingerprint == jinja_fingerprint(pair, key) == _labels.api_key_fingerprint(pair, key)
    assert len(fingerprint) == 3 + 16 and key not in str(labels)


def test_the_fingerprint_of_the_render_baseline():
    # what `dspark render -e dspark_api_key=secret-key-123` labelled lab01 with before the table
    assert _labels.api_key_fingerprint("lab01", "secret-key-123") == "fp:502581210b036534"


def test_no_key_and_a_changed_key_or_pair():
    assert _labels.api_key_fingerprint("lab01", None) == _labels.api_key_fingerprint("lab01", "") == "none"
    one = _labels.api_key_fingerprint("lab01", "k1")
    assert one != _labels.api_key_fingerprint("lab01", "k2")  # a rotation replaces the engine
    assert one != _labels.api_key_fingerprint("lab02", "k1")  # salted with the pair


@pytest.mark.parametrize("values, text", [
    ({k: v for k, v in VALUES.items() if k != "release"}, "no value for release"),
    (dict(VALUES, image_id=None), "no value for image_id"),
    (dict(VALUES, api_key="x"), r"unknown label value\(s\) api_key"),
    (dict(VALUES, colour="red"), r"unknown label value\(s\) colour"),
    (dict(VALUES, experimental="false"), "experimental must be a bool, not str"),
    (["pair"], "must be a mapping, not list"),
])
def test_engine_labels_refuses_incomplete_or_unknown_values(values, text):
    with pytest.raises(ValueError, match=text):
        _labels.engine_labels(values)


def test_label_record_reads_back_what_engine_labels_wrote():
    labels = _labels.engine_labels(VALUES, api_key="k")
    labels["org.opencontainers.image.revision"] = "3" * 40  # the image's own label: not the collection's
    assert _labels.label_record(labels) == VALUES
    assert _labels.label_record(_labels.engine_labels(dict(VALUES, experimental=True)))["experimental"] is True


def test_label_record_of_missing_and_odd_labels():
    assert _labels.label_record(None) == dict.fromkeys(_labels.RECORD_KEYS)
    assert _labels.label_record({}, missing="") == dict.fromkeys(_labels.RECORD_KEYS, "")
    record = _labels.label_record({"io.gb10.dspark.profile": "production", "io.gb10.dspark.rank": "x",
                                   "io.gb10.dspark.profile.experimental": "maybe"}, missing="unlabelled")
    assert record["profile"] == "production" and record["image_id"] == "unlabelled"
    assert record["rank"] == "x" and record["experimental"] == "maybe"  # shown as they are, never guessed
    assert _labels.label_record({"io.gb10.dspark.profile": ""}, missing="unlabelled")["profile"] == ""


def test_collection_labels_keeps_only_the_collections():
    labels = {"io.gb10.dspark.rank": "1", "io.gb10.dspark": "x", "org.opencontainers.image.revision": "3",
              "io.gb10.dsparkle.rank": "y", 7: "z"}
    assert _labels.collection_labels(labels) == {"io.gb10.dspark.rank": "1"}
    assert _labels.collection_labels(None) == {} and _labels.collection_labels(["io.gb10.dspark.rank"]) == {}
