"""The actions of the modules that work on the control node (runtime_manifest, wrapper_tree, pair_identity,
evidence_pack): on the control node they return what the module returns, from this process, with no module
shipped; on a rank, with become or async they ship the module instead, so it reads the host the task names."""
from __future__ import annotations

import json
from unittest import mock

import pytest
from ansible.module_utils.common import warnings as ansible_warnings

from ansible_collections.gb10.dspark.plugins.action import evidence_pack as evidence_pack_action
from ansible_collections.gb10.dspark.plugins.action import pair_identity as pair_identity_action
from ansible_collections.gb10.dspark.plugins.action import runtime_manifest as runtime_manifest_action
from ansible_collections.gb10.dspark.plugins.action import wrapper_tree as wrapper_tree_action
from ansible_collections.gb10.dspark.plugins.modules import evidence_pack, pair_identity, runtime_manifest, wrapper_tree
from tests.unit.plugins.action._plugin import make_plugin
from tests.unit.plugins.modules.conftest import run_module
from tests.unit.plugins.modules.test_evidence_pack import API_KEY, _run_dir  # noqa: F401  pylint: disable=unused-import
from tests.unit.plugins.modules.test_evidence_pack import args as evidence_args
from tests.unit.plugins.modules.test_runtime_manifest import _sim, _tamper  # noqa: F401  pylint: disable=unused-import
from tests.unit.plugins.modules.test_wrapper_tree import _isolated_git, _repo, git, make_repo  # noqa: F401  pylint: disable=unused-import

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
SHIPPED = {"changed": False, "shipped": True}


def run_action(action, name: str, args: dict, *, transport: str = "local", become=None, async_val: int = 0,
               check_mode: bool = False, diff: bool = False) -> tuple[dict, mock.MagicMock]:
    plugin = make_plugin(action.ActionModule, f"gb10.dspark.{name}", args, check_mode)
    plugin._task.diff = diff
    plugin._connection.transport = transport
    plugin._connection.become = become
    plugin._task.async_val = async_val
    plugin._execute_module = mock.MagicMock(return_value=dict(SHIPPED))
    plugin._remove_tmp_path = mock.MagicMock()
    return plugin.run(task_vars={"inventory_hostname": "sim01-head"}), plugin._execute_module


def same(result: dict) -> dict:
    """The result as a task sees it: no invocation, a missing ``failed`` false; warnings compared apart."""
    out = {k: v for k, v in result.items() if k not in ("invocation", "_ansible_no_log", "warnings")}
    out.setdefault("failed", False)
    return out


def hosts(worker_id: str) -> list[dict]:
    return [{"name": "h", "pair": "p", "rank": 0, "image_id": A, "image_store": "classic"},
            {"name": "w", "pair": "p", "rank": 1, "image_id": worker_id, "image_store": "classic"}]


def cases(sim, repo) -> list[tuple]:
    """(action, module, name, args) for a pass and a failure of each check."""
    tampered = dict(sim["args"], expected_sha256="sha256:" + "0" * 64)
    return [
        (runtime_manifest_action, runtime_manifest, "runtime_manifest", sim["args"]),
        (runtime_manifest_action, runtime_manifest, "runtime_manifest", tampered),
        (runtime_manifest_action, runtime_manifest, "runtime_manifest", dict(sim["args"], path=str(repo / "none"))),
        (runtime_manifest_action, runtime_manifest, "runtime_manifest", dict(sim["args"], profile_section=None)),
        (wrapper_tree_action, wrapper_tree, "wrapper_tree", {"path": str(repo), "expected_revision": "v0.1.0"}),
        (wrapper_tree_action, wrapper_tree, "wrapper_tree", {"path": str(repo), "expected_revision": "v9"}),
        (wrapper_tree_action, wrapper_tree, "wrapper_tree", {"path": str(repo / "none")}),
        (pair_identity_action, pair_identity, "pair_identity", {"hosts": hosts(A), "expected_image_id": A}),
        (pair_identity_action, pair_identity, "pair_identity", {"hosts": hosts(B), "expected_image_id": A}),
    ]


@pytest.mark.parametrize("check_mode", [False, True])
def test_on_the_control_node_the_action_returns_what_the_module_returns(sim, repo, check_mode):
    (repo / "untracked.txt").write_text("x\n")  # the tree is dirty: the checks fail on it as the module does
    outcomes = set()
    for action, module, name, args in cases(sim, repo):
        got, shipped = run_action(action, name, args, check_mode=check_mode)
        want = run_module(module, args, check_mode=check_mode)
        shipped.assert_not_called()
        assert same(got) == same(want), name
        assert got["changed"] is False
        outcomes.add(same(got)["failed"])
    assert outcomes == {True, False}


def test_a_dirty_tree_allowed_warns_from_the_action_as_from_the_module(repo):
    (repo / "plugins" / "x.py").write_text("X = 2\n")
    args = {"path": str(repo), "allow_dirty": True}
    got, _shipped = run_action(wrapper_tree_action, "wrapper_tree", args)
    want = run_module(wrapper_tree, args)
    assert same(got)["failed"] is False and same(got) == same(want)
    assert got["warnings"] == list(ansible_warnings.get_warning_messages())
    assert len(got["warnings"]) == 1 and "not valid for publication" in got["warnings"][0]


def test_git_redirections_in_the_controllers_environment_do_not_redirect_the_action(repo, tmp_path, monkeypatch):
    other = make_repo(tmp_path / "other")
    (other / "plugins" / "x.py").write_text("dirty elsewhere\n")
    revision = git(repo, "rev-parse", "HEAD")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    got, _shipped = run_action(wrapper_tree_action, "wrapper_tree", {"path": str(repo), "expected_revision": "v0.1.0"})
    assert not got.get("failed"), got.get("msg")
    assert got["tree"]["revision"] == revision


@pytest.mark.parametrize("where", [{"transport": "ssh"}, {"become": object()}, {"async_val": 30}])
def test_anywhere_else_the_module_is_shipped(sim, repo, where):
    for action, _module, name, args in cases(sim, repo):
        got, shipped = run_action(action, name, args, **where)
        shipped.assert_called_once()
        assert got["shipped"] is True and "mismatches" not in got, name


def test_an_unknown_option_is_refused_before_anything_runs(sim):
    from ansible.errors import AnsibleActionFail

    with pytest.raises(AnsibleActionFail):
        run_action(runtime_manifest_action, "runtime_manifest", dict(sim["args"], colour="blue"))


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_evidence_pack_action_writes_what_the_module_writes(tmp_path, run_dir, check_mode):
    a = evidence_args(tmp_path, run_dir, dest=str(tmp_path / "by-module"))
    a["facts"]["tree"] = {"dirty": True, "allow_dirty": True, "commit": "4d9a358"}  # invalid: a warning
    want = run_module(evidence_pack, a, check_mode=check_mode, diff=True)
    module_warnings = list(ansible_warnings.get_warning_messages())
    b = dict(a, dest=str(tmp_path / "by-action"))
    got, shipped = run_action(evidence_pack_action, "evidence_pack", b, check_mode=check_mode, diff=True)
    shipped.assert_not_called()
    assert same(got)["failed"] is False and got["changed"] is True
    assert got["dest"] == b["dest"] and got["diff"]["after"]["path"] == b["dest"]
    for key in ("invalid_for_publish", "reasons", "artifacts", "files"):
        assert got[key] == want[key], key
    assert [w.replace("by-action", "by-module") for w in got["warnings"]] == module_warnings
    assert len(module_warnings) == 1 and "not valid for publication" in module_warnings[0]
    if check_mode:
        assert not (tmp_path / "by-action").exists() and not (tmp_path / "by-module").exists()
    else:
        for name in got["files"]:
            if name not in ("index.json", "index.md", "SHA256SUMS"):  # these name their own folder
                assert (tmp_path / "by-action" / name).read_bytes() == (tmp_path / "by-module" / name).read_bytes()


def test_the_evidence_pack_action_shows_no_secret_and_fails_as_the_module_does(tmp_path, run_dir):
    a = evidence_args(tmp_path, run_dir)
    a["artifacts"].append({"name": "notes.txt", "content": f"curl -H 'Authorization: Bearer {API_KEY}'\n"})
    want = run_module(evidence_pack, a)
    got, _shipped = run_action(evidence_pack_action, "evidence_pack", a)
    assert got["failed"] is True and got["msg"] == want["msg"] and got["changed"] is False
    assert API_KEY not in json.dumps(got)
    assert not (run_dir / "runs").exists()


def test_no_value_of_a_secret_option_is_in_the_actions_result(tmp_path, run_dir):
    """As AnsibleModule masks them: here the key is also in the pack's folder name, which the result names."""
    a = evidence_args(tmp_path, run_dir, dest=str(tmp_path / f"pack-{API_KEY}"))
    got, _shipped = run_action(evidence_pack_action, "evidence_pack", a)
    assert not got.get("failed"), got.get("msg")
    assert API_KEY not in json.dumps(got)
    assert got["dest"].startswith(str(tmp_path / "pack-")) and got["dest"] != a["dest"]  # masked, as a module's is
    assert (tmp_path / f"pack-{API_KEY}" / "index.json").is_file()
