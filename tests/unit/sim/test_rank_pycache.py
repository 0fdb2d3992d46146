"""The simulated ranks' bytecode cache of Ansible's module payloads (sim/rank/dspark_sim_pycache.py), and how the
simulator puts it into a rank's homes (sim/dspark_sim/rank.py). Each import runs in a fresh interpreter, as a
module run on a rank does, with HOME set to a folder of the test's."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import pwd
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dspark_sim import rank as sim_rank

HOOK = sim_rank.PYCACHE
# What the payload's module answers: its value and the file its code says it came from (a traceback's file name).
PROBE = ("import sys; sys.path.insert(0, sys.argv[1]); import {hook}; import payload_mod; "
         "print(payload_mod.VALUE, payload_mod.where())")


def source(value: str) -> bytes:
    return f"VALUE = {value!r}\n\ndef where():\n    return where.__code__.co_filename\n".encode()


def payload(folder: Path, value: str, name: str = "ansible_x_payload.zip") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("payload_mod.py", source(value))
    return path


def run(home: Path, zip_path: Path, hook: bool = True) -> list[str]:
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(HOOK.parent), PYTHONDONTWRITEBYTECODE="1")
    code = PROBE.format(hook=HOOK.stem if hook else "sys")
    res = subprocess.run([sys.executable, "-c", code, str(zip_path)], env=env, capture_output=True, text=True,
                         check=True, timeout=60)
    return res.stdout.split()


def entries(home: Path) -> list[Path]:
    folder = home / ".cache" / "dspark-sim-pyc"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_a_payload_source_is_compiled_once_and_its_code_names_the_payload_it_runs_from(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    first = payload(tmp_path / "run1", "one")
    assert run(home, first) == ["one", f"{first}/payload_mod.py"]
    cached = entries(home)
    assert len(cached) == 1 and len(cached[0].name) == 64, cached
    assert (cached[0].parent.stat().st_mode & 0o777) == 0o700
    stamp = cached[0].stat().st_mtime_ns
    # The next run's payload: the same source in another temporary folder. The entry is read, not written again,
    # and the code names this run's payload, not the one it was first compiled from.
    second = payload(tmp_path / "run2", "one")
    assert run(home, second) == ["one", f"{second}/payload_mod.py"]
    assert entries(home) == cached and cached[0].stat().st_mtime_ns == stamp


def test_another_source_is_another_entry_never_the_old_code(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    run(home, payload(tmp_path / "run1", "one"))
    assert run(home, payload(tmp_path / "run2", "two"))[0] == "two"
    assert len(entries(home)) == 2


def test_a_broken_entry_is_compiled_again_and_replaced(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    run(home, payload(tmp_path / "run1", "one"))
    (entry,) = entries(home)
    entry.write_bytes(b"not marshalled code")
    assert run(home, payload(tmp_path / "run2", "one"))[0] == "one"
    assert entry.read_bytes() != b"not marshalled code"


@pytest.mark.parametrize("mode, runs", [(0o700, "planted"), (0o777, "fresh"), (0o720, "fresh"), (0o702, "fresh")])
def test_a_cache_folder_others_may_write_is_neither_read_nor_written(tmp_path, mode, runs):
    """An entry under the key of the source "fresh" that holds the code of "planted": the hook runs it from its
    own folder (0700, the control case), never from a folder that others may write into."""
    other = tmp_path / "other-home"
    other.mkdir()
    run(other, payload(tmp_path / "run0", "planted"))
    (planted,) = entries(other)
    home = tmp_path / "home"
    folder = home / ".cache" / "dspark-sim-pyc"
    folder.mkdir(parents=True)
    folder.chmod(mode)
    key = hashlib.sha256(importlib.util.MAGIC_NUMBER + source("fresh")).hexdigest()
    (folder / key).write_bytes(planted.read_bytes())
    assert run(home, payload(tmp_path / "run1", "fresh"))[0] == runs
    assert [p.name for p in entries(home)] == [key]


def test_only_a_payloads_sources_are_cached(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert run(home, payload(tmp_path / "run1", "one", name="library.zip"))[0] == "one"
    assert entries(home) == []


def test_without_the_hook_nothing_is_cached(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert run(home, payload(tmp_path / "run1", "one"), hook=False)[0] == "one"
    assert entries(home) == []


class FakeRank:
    def __init__(self, root: Path):
        self.root = root

    def sub(self, name: str) -> Path:
        return self.root / name


def test_the_simulator_puts_the_hook_into_both_homes_of_a_rank_for_the_ranks_python(tmp_path):
    me = pwd.getpwuid(os.getuid())
    rank = FakeRank(tmp_path)
    for home in ("home", "operator-home"):
        rank.sub(home).mkdir()
    sim_rank._install_pycache(rank, me)
    version = subprocess.run(["/usr/bin/python3", "-c", "import site; print(site.USER_SITE)"], text=True,
                             capture_output=True, check=True, env=dict(os.environ, HOME="/HOME")).stdout.strip()
    relative = Path(version).relative_to("/HOME")
    for home in ("home", "operator-home"):
        site = rank.sub(home) / relative
        assert (site / HOOK.name).read_bytes() == HOOK.read_bytes()
        assert (site / "dspark-sim-pycache.pth").read_text() == f"import {HOOK.stem}\n"
        assert site.stat().st_uid == me.pw_uid
    # the rank's python3, with that home, loads it at start-up
    home = rank.sub("home")
    loaded = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('dspark_sim_pycache' in sys.modules)"],
                            text=True, capture_output=True, check=True, env=dict(os.environ, HOME=str(home)))
    assert loaded.stdout.strip() == "True"
