"""The engine stand-in held to the real server: the same requests to both (tools/vllm_lane/contract.py), and
every difference either accepted with its reason in tools/vllm_lane/accepted.py or a failure."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.vllm_lane import accepted, contract

ROOT = Path(__file__).resolve().parents[2]
COLLECTION_CODE = ("plugins", "roles")


@pytest.fixture(scope="module")
def observed(real, standin, lane):
    probes = contract.probes(real.model, real.window)
    real_obs = contract.observe(real.url, probes, real.window)
    standin_obs = contract.observe(standin.url, probes, real.window)
    diffs = contract.compare(real_obs, standin_obs)
    taken, unlisted = accepted.split(diffs)
    lane.accepted = [(entry, [d for d, e in taken if e is entry]) for entry in accepted.ACCEPTED]
    lane.unlisted = [d.line() for d in unlisted]
    return {"real": real_obs, "standin": standin_obs, "diffs": diffs, "unlisted": unlisted}


def test_standin_answers_like_the_real_server(observed, note):
    """Statuses, content types, JSON paths and types, SSE framing, usage arithmetic, metric families, samples,
    label names and TYPE declarations: no difference that accepted.py does not list."""
    unlisted = observed["unlisted"]
    assert not unlisted, "differences no entry of tools/vllm_lane/accepted.py accepts:\n" + "\n".join(
        d.line() for d in unlisted)
    note(f"{len(observed['diffs'])} differences, all accepted; {len(observed['real'].statuses)} requests")


def test_every_accepted_difference_still_occurs(observed):
    """An entry of accepted.py that accepted nothing in this run is stale and must be removed."""
    stale = accepted.unused(observed["diffs"])
    assert not stale, "entries that accept no difference any more:\n" + "\n".join(
        f"{e.probes} {e.kind} {e.paths}: {e.reason}" for e in stale)


def _collection_text() -> str:
    parts = []
    for top in COLLECTION_CODE:
        parts += [p.read_text(errors="replace") for p in sorted((ROOT / top).rglob("*.py"))]
    return "\n".join(parts)


def test_what_the_accepted_reasons_call_unread_is_not_read_by_the_collection():
    """The words an entry calls unread (response fields, metric names) appear nowhere in plugins/ or roles/."""
    text = _collection_text()
    found = {word for entry in accepted.ACCEPTED for word in entry.unread
             if re.search(r"(?<![A-Za-z0-9_])" + re.escape(word), text)}
    assert not found, f"the collection's code mentions {sorted(found)}, which accepted.py calls unread"


def test_kv_size_label_on_both(observed):
    """The one label of vllm:cache_config_info the collection reads is on both servers."""
    for side in ("real", "standin"):
        assert "kv_cache_size_tokens" in observed[side].metrics["samples"]["vllm:cache_config_info"], side


STREAMED = ("completion_stream", "chat_stream", "chat_tools_named_stream")


@pytest.mark.parametrize("probe", STREAMED)
def test_real_streams_keep_the_framing(observed, probe):
    """On the real server: data: lines only, one finish chunk, one usage chunk (choices []) right before a single
    final [DONE], usage that adds up; chat streams open with a role-only chunk."""
    facts = observed["real"].facts[probe]
    assert observed["real"].statuses[probe] == 200
    assert observed["real"].content_types[probe] == "text/event-stream"
    assert facts["every event is one data: line"] and facts["ends with a blank line"]
    assert facts["[DONE] exactly once, last"]
    assert facts["chunks with a finish_reason"] == 1 and facts["usage chunks (choices [])"] == 1
    assert facts["usage chunk is the last before [DONE]"] and facts["usage adds up"]
    assert facts["chunks carry usage without include_usage"] is False
    if probe.startswith("chat"):
        assert facts["first chunk is role-only"]
    else:
        assert facts["completion_tokens == max_tokens"] and facts["prompt_tokens == /tokenize count"]


def test_real_stream_without_include_usage_has_no_usage(observed):
    """On the real server, a stream without stream_options carries no usage at all, and still one finish chunk."""
    facts = observed["real"].facts["completion_stream_no_usage"]
    assert facts["usage chunks (choices [])"] == 0 and facts["chunks carry usage without include_usage"] is False
    assert facts["chunks with a finish_reason"] == 1 and facts["[DONE] exactly once, last"]


REAL_STATUSES = {
    "bad_empty_prompt": 400, "bad_unknown_model": 404, "bad_unknown_model_chat": 404,
    "bad_max_tokens_over_window": 400, "bad_prompt_plus_max_tokens_over_window": 200, "bad_prompt_over_window": 400,
    "bad_type_max_tokens": 400, "bad_type_temperature": 400, "bad_type_messages": 400,
    "bad_stream_options_without_stream": 400,
}


def test_real_answers_to_bad_requests(observed, note):
    """vLLM 0.32's answers to bad input, as the collection's clients must take them: 400 for an empty prompt, a
    bad type, max_tokens over the window or a prompt over it (with context-length wording), 404 for an unknown
    model, and 200 with max_tokens capped to the room left when only prompt + max_tokens is over the window."""
    real = observed["real"]
    assert {name: real.statuses[name] for name in REAL_STATUSES} == REAL_STATUSES
    assert real.facts["bad_prompt_plus_max_tokens_over_window"]["total_tokens == the window"] is True
    assert real.facts["bad_prompt_over_window"][f"error message matches /{contract.WINDOW_RE.pattern}/"] is True
    for name, status in REAL_STATUSES.items():
        if status >= 400:
            error = real.bodies[name]["error"]
            assert isinstance(error["message"], str) and error["code"] == status, (name, error)
    note(", ".join(f"{n.removeprefix('bad_')} {s}" for n, s in REAL_STATUSES.items()))
