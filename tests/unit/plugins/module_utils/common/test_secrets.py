# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one redaction (``_secrets``): known values, secret-named env entries, variables."""
from __future__ import annotations

import json

import pytest

from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _audit
from ansible_collections.gb10.dspark.plugins.module_utils.evidence import _evidence
from ansible_collections.gb10.dspark.plugins.module_utils.gate import _runtime_gate
from ansible_collections.gb10.dspark.plugins.module_utils.common import _secrets
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems
from ansible_collections.gb10.dspark.plugins.module_utils.common._secrets import (
    REDACTED,
    json_container,
    redact,
    redact_document,
    redact_secrets_text,
    replace_each,
    secret_env_values,
    variable_leaks,
)

SECRET = "sk-test-0123456789abcdef"


# ---- known values ---------------------------------------------------------------------------
def test_redact_reaches_keys_and_nested_values():
    assert redact({f"k{SECRET}": [SECRET, ("x", f"a{SECRET}b")], "n": 1}, [SECRET, ""]) == {
        f"k{REDACTED}": [REDACTED, ["x", f"a{REDACTED}b"]], "n": 1}


def test_redact_without_a_secret_returns_the_value_itself():
    value = {"a": ("b",)}
    assert redact(value, []) is value
    assert redact(value, ["", None]) is value
    assert redact("text", [None]) == "text"


def test_redact_a_text_and_another_placeholder():
    assert redact(f"key {SECRET} twice {SECRET}", [SECRET]) == f"key {REDACTED} twice {REDACTED}"
    assert redact(f"tail {SECRET}", [SECRET], "********") == "tail ********"
    assert redact([1.5, None, True], [SECRET]) == [1.5, None, True]


def test_redact_replaces_each_secret_in_the_order_given():
    assert redact("abcdef", ["abc", "cde"]) == f"{REDACTED}def"
    assert redact("abcdef", ["cde", "abc"]) == f"ab{REDACTED}f"


def test_replace_each_has_a_placeholder_per_needle():
    doc = {"/srv/a/x": ["/srv/a/y", "/srv/b"], "n": 2}
    assert replace_each(doc, [("/srv/a", "<a>"), ("/srv/b", "<b>"), ("", "<never>")]) == {
        "<a>/x": ["<a>/y", "<b>"], "n": 2}
    assert replace_each("unchanged", []) == "unchanged"


def test_secret_env_values_are_the_values_of_secret_named_entries():
    env = ["HF_TOKEN=hf_abcdefgh", "PATH=/usr/bin", "VLLM_API_KEY=short", "DB_PASSWORD=", "NOVALUE",
           42, None, "MTP_NUM_TOKENS=123456789", "apiKey=a=b=c"]
    # "short" and "a=b=c" are shorter than the one minimum length: their variables are redacted by name only
    assert secret_env_values(env) == ["hf_abcdefgh"]
    assert secret_env_values(env + ["DB_PASSWD=hunt3r", "X_TOKEN=12345"]) == ["hf_abcdefgh", "hunt3r"]
    assert secret_env_values([]) == []


def test_one_minimum_length_for_every_value_searched_in_text():
    """MIN_SECRET_LENGTH is the one minimum: of env values (the audit's scrub), of told values (the
    evidence pack's leak scan) and of a derived spelling (a key without its whitespace)."""
    assert _secrets.MIN_SECRET_LENGTH == 6 and not hasattr(_audit, "SCRUB_MIN")
    assert _evidence.MIN_SECRET_LENGTH is _secrets.MIN_SECRET_LENGTH and not hasattr(_evidence, "SECRET_VALUE_MIN")
    six, five = "k" * 6, "k" * 5
    assert secret_env_values([f"A_TOKEN={six}", f"B_TOKEN={five}"]) == [six]
    assert _evidence.secret_values([six, five])[0] == [six] and _evidence.secret_values([six, five])[2] == 1
    assert six in _secrets.spellings(f" {six}\n") and five not in _secrets.spellings(f" {five}\n")


# ---- variables ------------------------------------------------------------------------------
def test_redact_secrets_text_redacts_secret_variables_by_name_and_told_values():
    text = "HF_TOKEN=hf_abc\nexport DB_PASSWORD=pw1\nrun --api-key K1 --port 8888\nPLAIN=1 x=told-value-1\r\n"
    assert redact_secrets_text(text, ["told-value-1"]) == (
        "HF_TOKEN=<redacted>\nexport DB_PASSWORD=<redacted>\nrun --api-key <redacted> --port 8888\n"
        "PLAIN=1 x=<redacted>\r\n")
    assert redact_secrets_text("MTP_NUM_TOKENS=2 run_key=abc") == "MTP_NUM_TOKENS=2 run_key=abc"


def test_redact_document_follows_the_variable_rule():
    doc = {"Env": ["A_TOKEN=x", "B=y"], "Args": ["--api-key", "k", "--port", "1"], "api_key": {"v": [1, "s"]},
           "departure": {"key": "env.HF_TOKEN", "actual": "a", "qualified": "q"}, "told": "'told-value-1'",
           "empty_token": ""}
    assert redact_document(doc, ["told-value-1"]) == {
        "Env": ["A_TOKEN=<redacted>", "B=y"], "Args": ["--api-key", REDACTED, "--port", "1"],
        "api_key": {"v": [REDACTED, REDACTED]},
        "departure": {"key": "env.HF_TOKEN", "actual": REDACTED, "qualified": REDACTED}, "told": REDACTED,
        "empty_token": ""}


def test_variable_leaks_finds_what_the_rule_would_redact():
    assert variable_leaks(b"HF_TOKEN=hf_abc\nPLAIN=1\n") == ["HF_TOKEN"]
    assert variable_leaks(b"HF_TOKEN=<redacted>\n") == []
    assert variable_leaks(b'{"Args": ["--api-key", "k"], "api_key": "v"}') == ["--api-key", "api_key"]
    assert variable_leaks(json.dumps(redact_document({"Args": ["--api-key", "k"], "api_key": "v"})).encode()) == []
    assert variable_leaks(b'{"told": "told-value-1"}\n', ["told-value-1"]) == []  # a told value alone is no variable
    assert variable_leaks(b'{"a": "x=told-value-1"}', ["told-value-1"]) == ["x"]


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', {"a": 1}), ("[1]", [1]), ('"s"', None), ("1", None), ("not json", None), ("", None),
])
def test_json_container(text, expected):
    assert json_container(text) == expected


# ---- one implementation -----------------------------------------------------------------------
def test_every_redacting_module_uses_the_one_implementation():
    assert _runtime_gate.redact is _secrets.redact and _audit.redact is _secrets.redact
    assert _systems.redact is _secrets.redact
    assert _runtime_gate.REDACTED == _evidence.REDACTED == REDACTED == "<redacted>"
    assert _evidence.redact_document is redact_document and _evidence.redact_secrets_text is redact_secrets_text
    assert _evidence.variable_leaks is variable_leaks and _evidence.replace_each is replace_each
    assert not hasattr(_runtime_gate, "scrub") and not hasattr(_systems, "_scrub")
    assert not hasattr(_evidence, "redact_inspect") and not hasattr(_evidence, "redact_text")


def test_the_evidence_prefix_rule_is_replace_each():
    assert not hasattr(_evidence, "redact_value")  # the pack's path placeholders are no second redactor
    prefixes = [_evidence.Prefix("/home/op/evidence", "<evidence>")]
    assert _evidence.replace_prefixes({"/home/op/evidence/x": "/home/op/evidence"}, prefixes) == {
        "<evidence>/x": "<evidence>"}
    assert _evidence.replace_prefixes("at /home/op/evidence/a", prefixes) == "at <evidence>/a"


# ---- every spelling of a known secret ---------------------------------------------------------
NEWLINE_KEY = "sk-test-0123456789abcdef\n"


@pytest.mark.parametrize("spelled", [
    NEWLINE_KEY,                                   # raw
    json.dumps(NEWLINE_KEY)[1:-1],                 # JSON-escaped
    repr(NEWLINE_KEY)[1:-1],                       # repr-escaped
    repr(f"Bearer {NEWLINE_KEY}".encode())[2:-1],  # http.client's "Invalid header value b'Bearer KEY\\n'"
    "sk-test-0123456789abcdef%0A",                 # URL-encoded
    "sk-test-0123456789abcdef",                    # what a header or a log line shows of it
])
def test_redact_covers_every_spelling_of_a_secret(spelled):
    text = f"Invalid header value b'Bearer {spelled}' in {{\"k\": \"{spelled}\"}}"
    out = redact(text, [NEWLINE_KEY])
    assert "0123456789abcdef" not in out, out
    assert REDACTED in out


def test_a_short_secret_does_not_blank_its_stripped_part():
    assert _secrets.spellings(" ab\n")[-1] != "ab" and "ab" not in _secrets.spellings(" ab\n")
    assert redact("tab and cab", [" ab\n"]) == "tab and cab"


def test_url_encoded_and_escaped_slash_spellings():
    key = "a/b+c d=e&f"
    assert redact("q=a%2Fb%2Bc%20d%3De%26f and a\\/b+c d=e&f and a%2Fb%2Bc+d%3De%26f", [key]) == (
        f"q={REDACTED} and {REDACTED} and {REDACTED}")


@pytest.mark.parametrize("key, what", [
    ("KEY-0123456789\n", "a line feed (\\n) at its end"),
    ("KEY-0123456789\r\n", "a carriage return (\\r) at its end (and 1 more such character(s))"),
    ("KEY 0123456789", "a space inside it"),
    ("KEY-01234\x0756789", "a control character (U+0007) inside it"),
    ("KEY-0123456789é", "a character outside printable ASCII at its end"),
])
def test_api_key_problem_names_the_variable_and_the_character_never_the_value(key, what):
    problem = _secrets.api_key_problem(key, "dspark_api_key")
    assert problem.startswith(f"dspark_api_key holds {what}, expected one word of printable ASCII")
    assert "0123456789" not in problem and "Nothing was changed" in problem


@pytest.mark.parametrize("key", [None, "", "sk-0123456789", "~!@#$%^&*()_+{}|:<>?"])
def test_api_key_problem_passes_printable_keys_and_no_key(key):
    assert _secrets.api_key_problem(key) is None
