"""The one table of the collection's container labels, and building and reading labels with it."""
from __future__ import annotations

import hashlib
import hmac
import os
import stat

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _labels

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


SECRET = bytes(range(32))
OTHER_SECRET = bytes(range(1, 33))


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


@pytest.mark.parametrize("key", ["secret-key-123", "sk-ünïcode", "sk-audit-7f41c2d9e8b3a6f0"])
def test_the_api_key_label_is_a_keyed_hash_never_the_key_nor_its_plain_sha256(key):
    label = _labels.api_key_label(key, SECRET)
    digest = hmac.new(SECRET, key.encode("utf-8"), hashlib.sha256).hexdigest()
    assert label == "hmac-sha256:" + digest[:32]
    plain = hashlib.sha256(key.encode("utf-8")).hexdigest()
    assert plain[:16] not in label and plain[:32] not in label and key not in label
    for salted in ("gb10.dspark:lab01:" + key, "gb10.dspark:sim01:" + key):  # the former, unkeyed fingerprint
        assert hashlib.sha256(salted.encode("utf-8")).hexdigest()[:16] not in label
    labels = _labels.engine_labels(VALUES, api_key_label=label)
    assert labels["io.gb10.dspark.api_key"] == label and key not in str(labels)


def test_the_label_tells_keys_and_secrets_apart_and_is_stable():
    assert _labels.api_key_label(None, SECRET) == _labels.api_key_label("", SECRET) == "none"
    one = _labels.api_key_label("k1", SECRET)
    assert one == _labels.api_key_label("k1", SECRET)  # a converged engine is left alone
    assert one != _labels.api_key_label("k2", SECRET)  # a rotation replaces the engine
    assert one != _labels.api_key_label("k1", OTHER_SECRET)  # another rank's (site's) secret
    assert _labels.api_key_label("k1", None) == _labels.KEY_LABEL_PENDING  # check mode, no secret yet
    assert _labels.KEY_LABEL_PENDING not in (one, "none")
    with pytest.raises(ValueError, match="at least 16 bytes"):
        _labels.api_key_label("k1", b"short")


@pytest.mark.parametrize("value", ["secret-key-123", "fp:502581210b036534", "hmac-sha256:" + "a" * 31, "<sk-1>", 3])
def test_engine_labels_refuses_a_label_that_is_not_one_without_quoting_it(value):
    with pytest.raises(ValueError, match="api_key_label must be") as refused:
        _labels.engine_labels(VALUES, api_key_label=value)
    assert str(value) not in str(refused.value)


def test_engine_labels_takes_none_a_label_or_a_placeholder():
    for value in ("none", "hmac-sha256:" + "0" * 32, _labels.KEY_LABEL_PENDING, "<set from dspark_api_key, not shown>"):
        assert _labels.engine_labels(VALUES, api_key_label=value)["io.gb10.dspark.api_key"] == value
    assert _labels.engine_labels(VALUES, api_key_label=None)["io.gb10.dspark.api_key"] == "none"


def test_the_label_secret_is_made_once_root_only_and_read_back(tmp_path):
    path = tmp_path / "state" / "engine-label.key"
    assert _labels.label_secret(str(path), create=False) == (None, False)  # check mode: nothing made
    assert not path.parent.exists()
    secret, created = _labels.label_secret(str(path), create=True)
    assert created and len(secret) == _labels.SECRET_BYTES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert _labels.label_secret(str(path), create=True) == (secret, False)
    assert _labels.label_secret(str(path), create=False) == (secret, False)
    other, _unused = _labels.label_secret(str(tmp_path / "other.key"), create=True)
    assert other != secret  # random per rank


def test_a_label_secret_that_others_could_read_or_swap_is_refused(tmp_path):
    path = tmp_path / "engine-label.key"
    path.write_text("ab" * 32 + "\n")
    os.chmod(path, 0o644)
    with pytest.raises(_labels.LabelSecretError, match="expected mode 0600 .*found 0644"):
        _labels.label_secret(str(path), create=True)
    os.chmod(path, 0o600)
    with pytest.raises(_labels.LabelSecretError, match=f"expected owner uid {os.geteuid() + 1}, found uid"):
        _labels.label_secret(str(path), create=True, owner=os.geteuid() + 1)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(_labels.LabelSecretError, match="found a symbolic link"):
        _labels.label_secret(str(link), create=True)
    folder = tmp_path / "folder.key"
    folder.mkdir(mode=0o700)
    with pytest.raises(_labels.LabelSecretError, match="expected a regular file"):
        _labels.label_secret(str(folder), create=True)
    path.write_text("not hex\n")
    with pytest.raises(_labels.LabelSecretError, match="expected 64 hex digits") as refused:
        _labels.label_secret(str(path), create=True)
    assert "not hex" not in str(refused.value)


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
    labels = _labels.engine_labels(VALUES, api_key_label=_labels.api_key_label("k", SECRET))
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
