"""dspark render: the text form of a render (pure helpers), its arguments, and run() with a stand-in runner."""
from __future__ import annotations

import io
import json
import os
import shlex
import sys
from pathlib import Path

import ansible_runner
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "cli"))

from dspark_cli import main as cli  # noqa: E402
from dspark_cli import render  # noqa: E402


def a_rank(host="p1-head", pair="p1", rank=0, **extra):
    doc = {
        "host": host, "pair": pair, "rank": rank, "role": "head" if rank == 0 else "worker",
        "profile": "long-1m", "profile_sha256": "ab" * 32, "experimental": False, "departures": [],
        "container": "dspark_vllm",
        "image": {"tag": "img:tag", "id": "sha256:" + "1" * 64, "containerd_id": "sha256:" + "2" * 64,
                  "note": "on a containerd image store the engine runs the manifest digest"},
        "argv": ["vllm", "serve", "/model", "--port", "8888", "--enable-prefix-caching",
                 "--compilation-config", '{"mode":0,"cudagraph_mode":"PIECEWISE"}', "--headless"],
        "env": {"ZED": "last", "ALPHA": "first", "EMPTY": "", "VLLM_API_KEY": "<set from dspark_api_key, not shown>"},
        "options": {"ipc_mode": "private", "shm_size": "64g", "ulimits": ["memlock:-1:-1"],
                    "mounts": [{"type": "bind", "source": "/srv/m", "target": "/model", "read_only": True}]},
        "labels": {"io.gb10.dspark.rank": str(rank), "io.gb10.dspark.pair": pair},
    }
    doc.update(extra)
    return doc


# ---- pure helpers -------------------------------------------------------------------------------

def test_argv_lines_keep_each_flag_with_its_value_and_read_back_as_the_argv():
    argv = a_rank()["argv"]
    lines = render.argv_lines(argv)
    assert lines[0] == "vllm serve /model \\"
    assert "  --port 8888 \\" in lines
    assert "  --enable-prefix-caching \\" in lines  # a flag without a value stays alone
    assert lines[-1] == "  --headless"  # no continuation after the last line
    assert shlex.split(" ".join(line.rstrip("\\") for line in lines)) == argv  # shell-quoted: pastes back


def test_argv_lines_quote_what_the_shell_would_split():
    lines = render.argv_lines(["a", "--x", "two words", "--y", "$HOME"])
    assert lines == ["a \\", "  --x 'two words' \\", "  --y '$HOME'"]
    assert render.argv_lines([]) == []


def test_format_rank_shows_header_argv_sorted_env_and_options():
    text = render.format_rank(a_rank(host="p1-worker", rank=1))
    lines = text.splitlines()
    assert lines[0].startswith("== ") and "pair p1" in lines[0] and "host p1-worker" in lines[0]
    assert "rank 1 (worker)" in lines[0]
    env = [line.strip() for line in lines if "=" in line and line.strip().split("=")[0] in
           ("ALPHA", "EMPTY", "VLLM_API_KEY", "ZED")]
    assert env == ["ALPHA=first", "EMPTY=", "VLLM_API_KEY=<set from dspark_api_key, not shown>", "ZED=last"]
    assert "--headless" in [line.strip() for line in lines]
    assert lines[lines.index("argv:") + 1] == "  vllm serve /model \\"
    assert any("ipc_mode" in line and "private" in line for line in lines)
    assert any("/srv/m" in line and "/model" in line and "read_only" in line for line in lines)
    assert any("io.gb10.dspark.pair=p1" in line for line in lines)
    assert "long-1m" in text and "ab" * 32 in text and "img:tag" in text and "sha256:" + "2" * 64 in text


def test_format_rank_names_departures_and_experimental():
    text = render.format_rank(a_rank(experimental=True, departures=["gpu_memory_utilization: 0.88 -> 0.9"]))
    assert "experimental: yes" in text
    assert "gpu_memory_utilization: 0.88 -> 0.9" in text
    assert "experimental: no" in render.format_rank(a_rank())


def test_format_document_one_block_per_rank_in_order():
    doc = [a_rank("p1-head", "p1", 0), a_rank("p1-worker", "p1", 1), a_rank("p2-head", "p2", 0)]
    text = render.format_document(doc)
    headers = [line for line in text.splitlines() if line.startswith("== ")]
    assert [h.split("host ")[1].split()[0] for h in headers] == ["p1-head", "p1-worker", "p2-head"]
    assert text.endswith("\n")


@pytest.mark.parametrize("content, words", [
    ("not json", "not JSON"),
    ('{"a": 1}', "list"),
    ('[1, 2]', "rank"),
    ('[{"host": "h"}]', "rank"),
])
def test_read_document_refuses_what_is_not_a_render(tmp_path, content, words):
    path = tmp_path / "render.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=words):
        render.read_document(str(path))


def test_read_document_reads_a_render(tmp_path):
    path = tmp_path / "render.json"
    path.write_text(json.dumps([a_rank()]))
    assert render.read_document(str(path)) == [a_rank()]


# ---- arguments ----------------------------------------------------------------------------------

def test_render_needs_a_profile(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(["render", "-i", "inv"])
    assert exc.value.code == cli.EX_USAGE
    assert "--profile" in capsys.readouterr().err


def test_render_options_are_parsed():
    args = cli.build_parser().parse_args(["render", "-i", "inv", "-l", "pair_lab01", "--profile", "long-1m",
                                          "--json", "-e", "a=1"])
    assert (args.inventory, args.limit, args.profile, args.json, args.extra_vars) == (
        "inv", "pair_lab01", "long-1m", True, ["a=1"])
    assert cli.playbook_for(args) == "gb10.dspark.render"
    assert cli.build_parser().parse_args(["render", "--profile", "production"]).json is False


# ---- run() with a stand-in ansible_runner.run ---------------------------------------------------

class FakeRunner:
    def __init__(self, status, rc, stats=None):
        self.status, self.rc, self.stats, self.canceled = status, rc, stats, False


def run_render(tmp_path, monkeypatch, behaviour, *argv):
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    calls = []

    def fake_run(**kwargs):
        extravars = json.loads(Path(kwargs["extravars"]).read_text()) if kwargs.get("extravars") else None
        calls.append({"kwargs": kwargs, "extravars": extravars})
        handler = kwargs["event_handler"]
        handler({"event": "playbook_on_play_start", "event_data": {"play": "Render"}})
        handler({"event": "runner_on_ok", "event_data": {"host": "p1-head", "task": "Render | a task", "res": {}}})
        return behaviour(kwargs, extravars)

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    monkeypatch.setattr(cli, "load_pair_map", lambda *a, **k: {"p1-head": "p1", "p1-worker": "p1"})
    out, err = io.StringIO(), io.StringIO()
    env = {"PATH": os.environ.get("PATH", ""), "DSPARK_INVENTORY": "hosts.yml"}
    code = cli.run(["render", "--artifacts", "runs", *argv], environ=env, cwd=str(tmp_path), out=out, err=err)
    return code, out.getvalue(), err.getvalue(), calls


def ok_stats():
    return {"processed": {"p1-head": 1, "p1-worker": 1}, "ok": {"p1-head": 3, "p1-worker": 3}, "failures": {}}


def writes_render(doc, stats=None):
    def behaviour(kw, extravars):
        Path(extravars["dspark_render_output"]).write_text(json.dumps(doc))
        return FakeRunner("successful", 0, ok_stats() if stats is None else stats)
    return behaviour


def test_render_json_stdout_is_the_document_only(tmp_path, monkeypatch):
    doc = [a_rank("p1-head", "p1", 0), a_rank("p1-worker", "p1", 1)]
    code, out, err, calls = run_render(tmp_path, monkeypatch, writes_render(doc), "--profile", "long-1m", "--json",
                                       "-e", "dspark_profile_name=production")
    assert code == 0, err
    assert json.loads(out) == doc  # nothing but the JSON on stdout
    (call,) = calls
    assert call["kwargs"]["playbook"] == "gb10.dspark.render"
    assert call["extravars"]["dspark_profile_name"] == "long-1m"  # --profile wins over -e
    (run_dir,) = sorted((tmp_path / "runs").iterdir())
    assert run_dir.name.startswith("render-")
    assert call["extravars"]["dspark_render_output"] == str(run_dir / "render.json")
    assert "[p1] p1-head ok Render | a task" in err  # progress goes to stderr
    assert str(run_dir) in err


def test_render_text_mentions_each_rank(tmp_path, monkeypatch):
    doc = [a_rank("p1-head", "p1", 0), a_rank("p1-worker", "p1", 1)]
    code, out, err, _calls = run_render(tmp_path, monkeypatch, writes_render(doc), "--profile", "long-1m")
    assert code == 0, err
    assert out == render.format_document(doc)
    assert "Render | a task" not in out


def test_render_keeps_a_given_output_path(tmp_path, monkeypatch):
    doc = [a_rank()]
    (tmp_path / "out").mkdir()
    code, out, _err, calls = run_render(tmp_path, monkeypatch, writes_render(doc), "--profile", "production",
                                        "--json", "-e", "dspark_render_output=out/r.json")
    assert calls[0]["extravars"]["dspark_render_output"] == str(tmp_path / "out" / "r.json")
    assert code == 0 and json.loads(out) == doc


def test_render_failure_exits_with_the_playbook_rc_and_prints_nothing_on_stdout(tmp_path, monkeypatch):
    def behaviour(kw, extravars):
        kw["event_handler"]({"event": "runner_on_failed", "event_data": {
            "host": "p1-head", "task": "Profile | Resolve", "res": {"msg": "profile name nosuch: not in the catalog"}}})
        return FakeRunner("failed", 2, {"failures": {"p1-head": 1}})

    code, out, err, _calls = run_render(tmp_path, monkeypatch, behaviour, "--profile", "nosuch", "--json")
    assert code == 2
    assert out == ""
    assert "nosuch: not in the catalog" in err and "failing pairs: p1" in err


def test_render_without_any_rank_fails_with_ansibles_warnings(tmp_path, monkeypatch):
    def behaviour(kw, extravars):
        Path(kw["private_data_dir"], "stdout").write_text(
            "\x1b[1;35m[WARNING]: Failed to parse inventory with 'auto' plugin: YAML parsing failed\x1b[0m\n")
        return FakeRunner("successful", 0, {})

    code, out, err, _calls = run_render(tmp_path, monkeypatch, behaviour, "--profile", "production", "--json")
    assert code != 0 and out == ""
    assert "no rank rendered" in err
    assert "[WARNING]: Failed to parse inventory with 'auto' plugin: YAML parsing failed" in err


def test_ansible_messages_are_read_without_colours(tmp_path):
    (tmp_path / "stdout").write_text(
        "\x1b[1;35m[WARNING]: Could not match supplied host pattern, ignoring: pair_x\x1b[0m\n"
        "PLAY [Render] ***\n"
        "\x1b[0;31m[ERROR]: Specified inventory, host pattern and/or --limit leaves us with no hosts to target.\x1b[0m\n"
        "ERROR! " + "long " * 100 + "\n")
    errors = cli.ansible_messages(str(tmp_path))
    assert errors[0] == "[ERROR]: Specified inventory, host pattern and/or --limit leaves us with no hosts to target."
    assert errors[1].startswith("ERROR! long") and len(errors[1]) <= 300
    assert len(errors) == 2
    both = cli.ansible_messages(str(tmp_path), cli.ERROR_PREFIXES + cli.WARNING_PREFIXES)
    assert both[0] == "[WARNING]: Could not match supplied host pattern, ignoring: pair_x" and len(both) == 3
    assert cli.ansible_messages(str(tmp_path / "nosuch")) == []


def test_render_limit_matching_nothing_shows_ansibles_error(tmp_path, monkeypatch):
    def behaviour(kw, extravars):
        Path(kw["private_data_dir"], "stdout").write_text(
            "\x1b[0;31m[ERROR]: Specified inventory, host pattern and/or --limit leaves us with no hosts to target.\n")
        return FakeRunner("failed", 1, {})

    code, out, err, _calls = run_render(tmp_path, monkeypatch, behaviour, "--profile", "production", "-l", "pair_x")
    assert code == 1 and out == ""
    assert "[ERROR]: Specified inventory, host pattern and/or --limit leaves us with no hosts to target." in err
