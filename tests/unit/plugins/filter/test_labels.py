"""The label filters: thin wrappers over _labels that name their errors, and the roles' expressions
rendered by Ansible itself, before and after the table."""
from __future__ import annotations

import json

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.filter.labels import FilterModule
from tests.unit.plugins._templar import render
from tests.unit.plugins.conftest import REPO

FILTERS = FilterModule().filters()
VALUES = {
    "pair": "lab01", "rank": 0, "profile": "long-1m", "profile_sha256": "4" * 64,
    "cudagraph_implementation": "regular", "experimental": False, "image_id": "sha256:" + "2" * 64,
    "manifest_sha256": "f" * 64, "model_revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
    "release": "v026-native-v11",
}


def test_the_filters_and_their_docs():
    assert set(FILTERS) == {"label_name", "engine_labels", "label_record"}
    for name in FILTERS:
        doc = yaml.safe_load((REPO / "plugins" / "filter" / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["DOCUMENTATION"]["short_description"] and doc["RETURN"]["_value"]["description"]
        for task in yaml.safe_load(doc["EXAMPLES"]):
            assert f"gb10.dspark.{name}" in json.dumps(task)
            assert all("." in key for key in set(task) - {"name", "register", "vars", "when"})  # modules by FQCN


def test_label_name():
    assert FILTERS["label_name"]("pair") == "io.gb10.dspark.pair"
    with pytest.raises(AnsibleFilterError, match="label_name: unknown label key 'io.gb10.dspark.pair'"):
        FILTERS["label_name"]("io.gb10.dspark.pair")


def test_engine_labels():
    label = "hmac-sha256:" + "5e" * 16
    labels = FILTERS["engine_labels"](VALUES, api_key_label=label)
    assert labels["io.gb10.dspark.rank"] == "0" and labels["io.gb10.dspark.api_key"] == label
    assert FILTERS["engine_labels"](VALUES)["io.gb10.dspark.api_key"] == "none"
    with pytest.raises(AnsibleFilterError, match=r"engine_labels: api_key_label must be .*\(not shown\)") as refused:
        FILTERS["engine_labels"](VALUES, api_key_label="secret-key-123")  # a key passed by mistake
    assert "secret-key-123" not in str(refused.value)
    with pytest.raises(AnsibleFilterError, match="engine_labels: no value for pair"):
        FILTERS["engine_labels"](dict(VALUES, pair=None))


def test_label_record():
    labels = FILTERS["engine_labels"](VALUES)
    assert FILTERS["label_record"](labels) == VALUES
    assert FILTERS["label_record"](None)["profile"] is None
    assert FILTERS["label_record"]({}, missing="unlabelled")["profile"] == "unlabelled"
    with pytest.raises(AnsibleFilterError, match="label_record: the labels must be a mapping, not list"):
        FILTERS["label_record"](["io.gb10.dspark.profile"])


# --------------------------------------------------------------------------------------------
# The roles' expressions, rendered by Ansible's templar with the collection's filters: the new
# ones (through the table) must render exactly what the former ones (label names spelled out) did.
# --------------------------------------------------------------------------------------------
FULL = {"io.gb10.dspark.profile": "long-1m", "io.gb10.dspark.profile.sha256": "4" * 64,
        "io.gb10.dspark.cudagraph.implementation": "breakable", "io.gb10.dspark.image.id": "sha256:" + "2" * 64,
        "io.gb10.dspark.rank": "0", "io.gb10.dspark.pair": "lab01"}
LABEL_SETS = [FULL, {}, {"io.gb10.dspark.profile": "production"}, {"io.gb10.dspark.image.id": ""}]

FORMER_RUN_KEY = (
    "{{ labels['io.gb10.dspark.profile'] | default('unlabelled') }}-{{"
    " ([labels['io.gb10.dspark.image.id'] | default(''), labels['io.gb10.dspark.profile.sha256'] | default(''),"
    " 327680] | to_json | hash('sha256'))[:12] }}")
NEW_RUN_KEY = (
    "{{ (labels | gb10.dspark.label_record(missing='unlabelled')).profile }}-{{"
    " ([(labels | gb10.dspark.label_record(missing='')).image_id,"
    " (labels | gb10.dspark.label_record(missing='')).profile_sha256,"
    " 327680] | to_json | hash('sha256'))[:12] }}")
FIELDS = ("profile", "profile_sha256", "cudagraph_implementation", "image_id")
FORMER_CONTEXT = {f: "{{ labels['io.gb10.dspark.%s'] | default(none) }}" % f.replace("_", ".") for f in FIELDS}
NEW_CONTEXT = {f: "{{ record.%s }}" % f for f in FIELDS}

FORMER_ENGINE_LABELS = {
    "io.gb10.dspark.pair": "{{ dspark_pair }}",
    "io.gb10.dspark.rank": "{{ dspark_rank | string }}",
    "io.gb10.dspark.profile": "{{ dspark_profile_active.name }}",
    "io.gb10.dspark.profile.sha256": "{{ dspark_profile_active.sha256 }}",
    "io.gb10.dspark.cudagraph.implementation": "{{ dspark_profile_active.gate.cudagraph_implementation }}",
    "io.gb10.dspark.profile.experimental": "{{ dspark_profile_active.experimental | bool | string | lower }}",
    "io.gb10.dspark.image.id": "{{ __dspark_engine_image }}",
    "io.gb10.dspark.manifest.sha256": "{{ dspark_pin.runtime_manifest_sha256 }}",
    "io.gb10.dspark.model.revision": "{{ dspark_pin.model_revision }}",
    "io.gb10.dspark.release": "{{ dspark_pin.release }}",
    # no longer the former unkeyed fingerprint: the label the rank made with its own secret
    "io.gb10.dspark.api_key": "{{ __dspark_engine_key_label_made.label if lookup('gb10.dspark.has_api_key') else 'none' }}",
}
MADE_LABEL = "hmac-sha256:" + "5e" * 16


ENGINE_VARS = yaml.safe_load((REPO / "roles" / "engine" / "vars" / "main.yml").read_text())


def engine_vars(experimental: object, api_key: str | None) -> dict:
    variables = {
        "dspark_pair": "lab01", "dspark_rank": 1, "__dspark_engine_image": "sha256:" + "2" * 64,
        "dspark_profile_active": {"name": "long-1m", "sha256": "4" * 64, "experimental": experimental,
                                  "gate": {"cudagraph_implementation": "regular"}},
        "dspark_pin": {"runtime_manifest_sha256": "f" * 64, "model_revision": "9" * 40, "release": "v026"},
        "__dspark_engine_key_label": ENGINE_VARS["__dspark_engine_key_label"],
        # what gb10.dspark.engine_key_label registered (skipped without a key)
        "__dspark_engine_key_label_made": {"label": MADE_LABEL} if api_key else {"skipped": True},
    }
    if api_key is not None:
        variables["dspark_api_key"] = api_key
    return variables


def test_the_roles_label_reads_render_as_before():
    engine = yaml.safe_load((REPO / "roles" / "engine" / "vars" / "main.yml").read_text())
    new_engine_labels = engine["__dspark_engine_labels"]
    jobs = []
    for labels in LABEL_SETS:
        jobs += [[{"labels": labels}, FORMER_RUN_KEY], [{"labels": labels}, NEW_RUN_KEY],
                 [{"labels": labels}, FORMER_CONTEXT],
                 [{"labels": labels, "record": "{{ labels | gb10.dspark.label_record }}"}, NEW_CONTEXT]]
    cases = [(False, None), (True, "secret-key-123"), ("yes", ""), ("false", "sk-ünïcode")]
    for experimental, api_key in cases:
        jobs += [[engine_vars(experimental, api_key), FORMER_ENGINE_LABELS],
                 [engine_vars(experimental, api_key), new_engine_labels]]
    out = render(jobs)
    for i in range(len(LABEL_SETS)):
        former_key, new_key, former_context, new_context = out[4 * i:4 * i + 4]
        assert new_key == former_key, LABEL_SETS[i]
        assert new_context == former_context, LABEL_SETS[i]
    assert out[0].startswith("long-1m-") and out[4].startswith("unlabelled-")
    engine_out = out[4 * len(LABEL_SETS):]
    for i, case in enumerate(cases):
        former, new = engine_out[2 * i:2 * i + 2]
        assert new == former, case
    assert engine_out[2]["io.gb10.dspark.api_key"] == MADE_LABEL
    assert engine_out[0]["io.gb10.dspark.api_key"] == engine_out[4]["io.gb10.dspark.api_key"] == "none"
    assert engine_out[2]["io.gb10.dspark.profile.experimental"] == "true"


def test_the_roles_read_their_label_fields_through_the_record():
    # the expressions rendered above are the ones the roles hold
    niah = (REPO / "roles" / "niah" / "tasks" / "main.yml").read_text()
    assert "(__dspark_niah_labels | gb10.dspark.label_record(missing='unlabelled')).profile" in niah
    assert "(__dspark_niah_labels | gb10.dspark.label_record(missing='')).image_id" in niah
    assert "(__dspark_niah_labels | gb10.dspark.label_record(missing='')).profile_sha256" in niah
    assert "__dspark_niah_probe.probe.container.labels | default({}) | gb10.dspark.label_record }}" in niah
    for role in ("niah", "systems", "guard"):
        text = (REPO / "roles" / role / "tasks" / "main.yml").read_text()
        for field in FIELDS:
            assert f"__dspark_{role}_labels.{field}" in text, (role, field)
