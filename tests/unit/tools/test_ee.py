"""tools/ee/inputs.py: what the execution environment's build installs with pip (the wheelhouse's list), the key
that names a build of it, and collection tarballs made from installed copies."""
from __future__ import annotations

import hashlib
import os
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from tools.ee import inputs  # noqa: E402


def _definition(tmp_path: Path, **options) -> Path:
    (tmp_path / "reqs.txt").write_text("# the runtime gate\npytest>=8.3,<10\npytest-testinfra>=10.2.2,<11  # ssh\n\n")
    ee = {"version": 3, "images": {"base_image": {"name": "base:x"}},
          "dependencies": {"ansible_core": {"package_pip": "ansible-core>=2.19.4,<2.20"},
                           "ansible_runner": {"package_pip": "ansible-runner>=2.4.3,<2.5"},
                           "python": "reqs.txt"}}
    if options:
        ee["options"] = options
    path = tmp_path / "execution-environment.yml"
    path.write_text(yaml.safe_dump(ee))
    return path


def _collection(root: Path, fqcn: str, reqs: str | None) -> None:
    meta = root.joinpath(*fqcn.split("."), "meta")
    meta.mkdir(parents=True)
    if reqs is not None:
        (meta / "ee-requirements.txt").write_text(reqs)
        (meta / "execution-environment.yml").write_text(yaml.safe_dump(
            {"version": 1, "dependencies": {"python": "meta/ee-requirements.txt", "system": "meta/bindep.txt"}}))


def test_the_wheelhouse_list_holds_every_pip_install_of_the_build_once(tmp_path):
    cols = tmp_path / "ansible_collections"
    _collection(cols, "community.docker", "docker\nrequests\npyyaml\n")
    _collection(cols, "community.plain", None)  # no EE metadata: nothing of its own
    _collection(cols, "gb10.dspark", "pytest>=8.3,<10\n")  # the same line as the definition's: listed once
    reqs = inputs.wheel_requirements(_definition(tmp_path), cols)
    assert reqs == ["ansible-core>=2.19.4,<2.20", "ansible-runner>=2.4.3,<2.5", "pytest>=8.3,<10",
                    "pytest-testinfra>=10.2.2,<11", "docker", "requests", "pyyaml", "bindep", "packaging",
                    "dumb-init==1.2.5"]


def test_the_container_init_of_the_definition_replaces_dumb_init(tmp_path):
    cols = tmp_path / "ansible_collections"
    cols.mkdir()
    reqs = inputs.wheel_requirements(_definition(tmp_path, container_init={"package_pip": "tini-pip==1.0"}), cols)
    assert reqs[-1] == "tini-pip==1.0" and "dumb-init==1.2.5" not in reqs
    reqs = inputs.wheel_requirements(_definition(tmp_path, container_init={"package_pip": ""}), cols)
    assert not any(r.startswith(("dumb-init", "tini")) for r in reqs)


def test_only_a_version_3_definition_is_read(tmp_path):
    path = tmp_path / "execution-environment.yml"
    path.write_text(yaml.safe_dump({"version": 1, "dependencies": {}}))
    with pytest.raises(ValueError, match=r"expected an ansible-builder version 3 definition, got version 1"):
        inputs.wheel_requirements(path, tmp_path)


def test_this_repository_s_wheelhouse_holds_the_runtime_needs_and_no_development_tool():
    reqs = inputs.wheel_requirements(ROOT / "execution-environment.yml", ROOT / "collections" / "ansible_collections")
    names = {r.split(">")[0].split("<")[0].split("=")[0].strip().lower() for r in reqs}
    assert {"ansible-core", "ansible-runner", "pytest", "pytest-testinfra", "pytest-timeout", "docker", "requests",
            "bindep", "dumb-init"} <= names
    assert not names & {"molecule", "selenium", "ruff", "ansible-lint", "ansible-builder", "ansible-navigator"}
    assert "ansible-core>=2.19.4,<2.20" in reqs


def _tar(path: Path, members: dict[str, bytes], mtime: int, mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, mtime
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_tarball_digest_sees_the_members_not_the_archive(tmp_path):
    a = inputs.tarball_digest(_tar(tmp_path / "a.tar.gz", {"MANIFEST.json": b"{}", "roles/x": b"1"}, 1))
    # Rebuilt later, in another member order and compression: the same collection.
    assert inputs.tarball_digest(_tar(tmp_path / "b.tar", {"roles/x": b"1", "MANIFEST.json": b"{}"}, 2, "w")) == a
    assert inputs.tarball_digest(_tar(tmp_path / "c.tar.gz", {"MANIFEST.json": b"{}", "roles/x": b"2"}, 1)) != a
    assert inputs.tarball_digest(_tar(tmp_path / "d.tar.gz", {"MANIFEST.json": b"{}", "roles/y": b"1"}, 1)) != a


def test_the_inputs_key_changes_with_each_input_and_with_nothing_else():
    base = {"files": {"execution-environment.yml": b"a", "meta/ee-requirements.txt": b"b"},
            "tarballs": {"gb10-dspark.tar.gz": "1", "community-docker.tar.gz": "2"},
            "wheels": ["x-1-py3-none-any.whl", "y-2-py3-none-any.whl"], "base_image": "k1"}
    key = inputs.inputs_key(**base)
    assert len(key) == 64
    reordered = {"files": dict(reversed(list(base["files"].items()))),
                 "tarballs": dict(reversed(list(base["tarballs"].items()))),
                 "wheels": list(reversed(base["wheels"])), "base_image": "k1"}
    assert inputs.inputs_key(**reordered) == key
    for change in ({"files": {**base["files"], "meta/ee-requirements.txt": b"c"}},
                   {"tarballs": {**base["tarballs"], "gb10-dspark.tar.gz": "3"}},
                   {"wheels": ["x-1-py3-none-any.whl", "y-3-py3-none-any.whl"]},
                   {"base_image": "k2"}):
        assert inputs.inputs_key(**{**base, **change}) != key, change


def test_an_artefact_from_an_installed_copy_lists_the_files_present(tmp_path):
    src = tmp_path / "ansible_collections" / "community" / "docker"
    (src / "plugins" / "__pycache__").mkdir(parents=True)
    (src / "plugins" / "mod.py").write_text("x = 1\n")
    (src / "plugins" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (src / "MANIFEST.json").write_text(json.dumps({"collection_info": {"name": "docker"},
                                                   "file_manifest_file": {"name": "FILES.json", "chksum_sha256": "old"}}))
    (src / "FILES.json").write_text(json.dumps({"files": [{"name": "tests/gone.py"}]}))  # lists a file left out
    dest = tmp_path / "community-docker.tar.gz"
    inputs.artefact_from_installed(src, dest)
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        files_json = tar.extractfile("FILES.json").read()
        manifest = json.loads(tar.extractfile("MANIFEST.json").read())
    assert names[:2] == ["MANIFEST.json", "FILES.json"] and "plugins/mod.py" in names
    assert not any("__pycache__" in n for n in names)
    listed = {f["name"]: f["chksum_sha256"] for f in json.loads(files_json)["files"]}
    assert listed["plugins/mod.py"] == hashlib.sha256(b"x = 1\n").hexdigest() and "tests/gone.py" not in listed
    assert manifest["file_manifest_file"]["chksum_sha256"] == hashlib.sha256(files_json).hexdigest()


def test_an_artefact_needs_an_installed_copy(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no installed collection there .*run `make deps`"):
        inputs.artefact_from_installed(tmp_path / "missing", tmp_path / "out.tar.gz")


# ---- the build's steps (tools/ee/__main__.py), with the commands recorded instead of run -----------------------
import tools.ee.__main__ as ee  # noqa: E402


class Recorder:
    """Stands in for tools.ee's run() and docker(): records each argv, answers from a table of prefixes."""

    def __init__(self, answers=None, fail=()):
        self.calls, self.answers, self.fail = [], answers or {}, fail

    def __call__(self, *argv, **kwargs):
        argv = [str(a) for a in (argv[0] if len(argv) == 1 and isinstance(argv[0], list) else argv)]
        self.calls.append(argv)
        if any(argv[:len(f)] == list(f) for f in self.fail):
            if kwargs.get("check", True):
                raise ee.EEError(f"`{' '.join(argv)}` exited 1")
            return __import__("subprocess").CompletedProcess(argv, 1, "", "")
        out = next((v for k, v in self.answers.items() if argv[:len(k)] == list(k)), "")
        return __import__("subprocess").CompletedProcess(argv, 0, out, "")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(ee, "CACHE_DIR", tmp_path / "cache")
    return tmp_path / "cache"


def test_the_wheelhouse_is_made_once_per_requirement_list(cache, monkeypatch):
    rec = Recorder()

    def pip(argv, **kwargs):
        rec(argv)
        Path(argv[argv.index("--wheel-dir") + 1], "x-1-py3-none-any.whl").write_text("")
        return __import__("subprocess").CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(ee, "run", pip)
    first = ee.wheelhouse()
    assert [c[1:4] for c in rec.calls] == [["-m", "pip", "wheel"]]
    assert "ansible-core>=2.19.4,<2.20" in rec.calls[0] and "dumb-init==1.2.5" in rec.calls[0]
    assert (first / "x-1-py3-none-any.whl").is_file()
    assert ee.wheelhouse() == first and len(rec.calls) == 1  # cached: pip is not asked again


def test_a_failed_wheelhouse_leaves_nothing_to_be_taken_for_one(cache, monkeypatch):
    monkeypatch.setattr(ee, "run", Recorder(fail=[(sys.executable, "-m", "pip")]))
    with pytest.raises(ee.EEError, match="pip wheel"):
        ee.wheelhouse()
    assert list(cache.iterdir()) == []


def _build_world(tmp_path, monkeypatch, have_keyed: bool):
    monkeypatch.setattr(ee, "engine_ready", lambda: True)
    monkeypatch.setattr(ee, "base_image", lambda: "basekey")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "x-1-py3-none-any.whl").write_text("")
    monkeypatch.setattr(ee, "wheelhouse", lambda: wheels)
    monkeypatch.setattr(ee, "_fill", lambda folder, files: None)
    monkeypatch.setattr(ee, "collection_tarballs", lambda tree: {name: "d" for name in inputs.TARBALLS})
    docker = Recorder(fail=[] if have_keyed else [("image", "inspect")],
                      answers={("image", "ls"): "gb10-dspark-ee:inputs-0000000000000000\ngb10-dspark-ee:latest\n"})
    run = Recorder()
    monkeypatch.setattr(ee, "docker", docker)
    monkeypatch.setattr(ee, "run", run)
    return docker, run


def test_an_ee_with_the_same_inputs_is_not_built_again(cache, tmp_path, monkeypatch):
    docker, run = _build_world(tmp_path, monkeypatch, have_keyed=True)
    keyed = ee.build(tmp_path)
    assert keyed.startswith("gb10-dspark-ee:inputs-") and len(keyed.split("-")[-1]) == 16
    assert run.calls == []  # no ansible-builder
    assert docker.calls == [["image", "inspect", keyed], ["tag", keyed, "gb10-dspark-ee:latest"]]


def test_an_ee_of_new_inputs_is_built_offline_under_both_tags_and_the_old_one_goes(cache, tmp_path, monkeypatch):
    docker, run = _build_world(tmp_path, monkeypatch, have_keyed=False)
    keyed = ee.build(tmp_path)
    (builder,) = run.calls
    assert Path(builder[0]).name == "ansible-builder" and builder[1] == "build"
    assert builder[builder.index("--tag") + 1:builder.index("--tag") + 3] == ["gb10-dspark-ee:latest", keyed]
    assert "--extra-build-cli-args=--network=none" in builder
    assert ["image", "rm", "gb10-dspark-ee:inputs-0000000000000000"] in docker.calls
    assert ["image", "rm", keyed] not in docker.calls and ["image", "prune", "--force"] in docker.calls


def test_the_key_follows_the_inputs(cache, tmp_path, monkeypatch):
    _build_world(tmp_path, monkeypatch, have_keyed=True)
    first = ee.build(tmp_path)
    monkeypatch.setattr(ee, "collection_tarballs", lambda tree: {name: "changed" for name in inputs.TARBALLS})
    assert ee.build(tmp_path) != first


def test_no_build_without_the_control_node_engine(monkeypatch):
    monkeypatch.setattr(ee, "engine_ready", lambda: False)
    with pytest.raises(ee.EEError, match=r"no control-node engine answers at unix:///run/gb10-dspark-ee/docker.sock: "
                                         r"run `make ee-engine` first"):
        ee.build(ROOT)


def test_the_base_image_is_imported_only_when_its_key_differs(cache, monkeypatch):
    key = ee.base_key()
    docker = Recorder(answers={("image", "inspect"): json.dumps({ee.BASE_KEY_LABEL: key})})
    run = Recorder()
    monkeypatch.setattr(ee, "docker", docker)
    monkeypatch.setattr(ee, "run", run)
    assert ee.base_image() == key and run.calls == []
    docker.answers = {("image", "inspect"): json.dumps({ee.BASE_KEY_LABEL: "older"})}
    cache.mkdir()
    (cache / f"base-bookworm-{key}.tar").write_text("")  # the rootfs is cached: only the import runs
    ee.base_image()
    (imp,) = run.calls
    assert imp[:2] == ["docker", "import"] and imp[-1] == "gb10-dspark-ee-base:bookworm"
    assert f"LABEL {ee.BASE_KEY_LABEL}={key}" in imp and "ENV LANG=C.UTF-8" in imp


def test_engine_down_stops_and_reaps_an_engine_this_process_started(tmp_path, monkeypatch):
    """A test that started the engine is its parent: the stopped dockerd must be reaped, not left a zombie
    that signal 0 still finds (engine_down would then wait out its timeout and fail)."""
    import subprocess

    child = subprocess.Popen(["sleep", "60"])  # stands in for the dockerd this process started
    monkeypatch.setattr(ee, "RUN_DIR", tmp_path)
    (tmp_path / "dockerd.pid").write_text(f"{child.pid}\n")
    try:
        ee.engine_down(timeout=10)
        with pytest.raises(ProcessLookupError):
            os.kill(child.pid, 0)  # gone, and reaped
    finally:
        if child.poll() is None:
            child.kill()


def test_the_tarballs_are_those_of_ee_requirements_yml(tmp_path):
    assert inputs.TARBALLS == {
        "community-library_inventory_filtering_v1.tar.gz": "community.library_inventory_filtering_v1",
        "community-docker.tar.gz": "community.docker",
        "gb10-dspark.tar.gz": "gb10.dspark",
    }
    galaxy = tmp_path / "requirements.yml"
    galaxy.write_text(yaml.safe_dump({"collections": [{"name": "community.docker", "version": ">=4.8.0"}]}))
    with pytest.raises(ValueError, match=r"'community.docker' is not a local tarball \(type: file\)"):
        inputs.tarballs(galaxy)
    galaxy.write_text(yaml.safe_dump({"collections": [{"name": "collections/docker.tar.gz", "type": "file"}]}))
    with pytest.raises(ValueError, match=r"'docker.tar.gz' is not named <namespace>-<name>.tar.gz"):
        inputs.tarballs(galaxy)
