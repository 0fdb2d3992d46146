"""Run ``ansible-test sanity`` on the files the built gb10.dspark collection would contain.

ansible-test wants the collection at ``.../ansible_collections/<namespace>/<name>``, and it
tests every file it finds there. The checkout is neither laid out that way nor free of
files that never ship (the virtualenv, ``collections/``, artifacts), so this script:

1. lists the files git tracks (``git ls-files``: untracked and ignored files stay out; the
   working-tree content of each tracked file is what gets tested, edits included), drops
   those the ``build_ignore`` of ``galaxy.yml`` and ansible-galaxy's own default patterns
   exclude from a build (``galaxy.yml`` itself is kept: ansible-test reads the version in it);
2. copies them to ``<tmp>/ansible_collections/gb10/dspark`` (modes and symlinks kept);
3. links the ``community`` namespace of the checkout's ``collections/`` folder next to it, so
   ``community.docker`` resolves the way it does for the playbooks;
4. runs ``git init`` in the copy: ansible-test looks for ``.git`` in the collection root and then
   in every parent directory; with none it falls back to listing the directory, but a temporary
   directory that happens to sit inside some other checkout would make it take that checkout's
   file list. Its own (empty) repository pins the choice: untracked files are listed, and
   ``.gitignore`` (copied too) keeps out what git would keep out;
5. runs ``ansible-test sanity --python 3.11 --venv --color no`` there and returns its exit code.

``--venv`` builds one virtual environment per sanity test under ``~/.ansible/test/venv`` from the
pinned requirements that ship with ansible-test (the Python package index must be reachable the
first time; later runs reuse them). ``--local`` runs the tests with the Python of this script's
virtualenv instead, and skips the tests whose requirements are missing there.

Usage (from anywhere; the virtualenv is the one ``make deps`` builds):

    .venv/bin/python tools/sanity/run_sanity.py                  # every sanity test
    .venv/bin/python tools/sanity/run_sanity.py --test pylint --test pep8
    .venv/bin/python tools/sanity/run_sanity.py --keep -- --verbose   # after --: to ansible-test

Standard library only (plus the checkout's virtualenv, through subprocess, to read galaxy.yml).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Patterns ansible-galaxy always leaves out of a build (galaxy/collection/__init__.py), less
# galaxy.yml: ansible-test takes the collection's version from it.
DEFAULT_IGNORE_PATTERNS = (
    "MANIFEST.json",
    "FILES.json",
    ".git",
    "*.pyc",
    "*.retry",
    "tests/output",
)
DEFAULT_IGNORE_DIRS = frozenset({"CVS", ".bzr", ".hg", ".git", ".svn", "__pycache__", ".tox"})

# Environment a developer's shell may carry that would point ansible-test at other content.
SCRUBBED_ENV = (
    "ANSIBLE_CONFIG",
    "ANSIBLE_COLLECTIONS_PATH",
    "ANSIBLE_COLLECTIONS_PATHS",
    "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH",
    "PYTHONPATH",
)


def say(msg: str) -> None:
    print(f"[sanity] {msg}", flush=True)


def find_tool(name: str, explicit: str | None) -> str:
    """``name`` from the virtualenv of this Python, else the checkout's .venv, else PATH."""
    if explicit:
        return explicit
    candidates = [Path(sys.executable).parent / name, ROOT / ".venv" / "bin" / name]
    for cand in candidates:
        if os.access(cand, os.X_OK):
            return str(cand)
    found = shutil.which(name)
    if found:
        return found
    raise SystemExit(f"[sanity] {name} not found next to {sys.executable}, in {ROOT / '.venv'} or on PATH; run `make deps`")


def galaxy_meta(python: str) -> dict:
    """galaxy.yml, read by the virtualenv's Python (PyYAML comes with ansible-core)."""
    code = "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1], encoding='utf-8'))))"
    out = subprocess.run([python, "-c", code, str(ROOT / "galaxy.yml")], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached"], check=True, capture_output=True)
    return sorted({p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p})


def ignored(rel: str, patterns: list[str]) -> bool:
    """True when ansible-galaxy would skip ``rel`` or one of its parent directories in a build."""
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if i < len(parts) and parts[i - 1] in DEFAULT_IGNORE_DIRS:
            return True
        if any(fnmatch.fnmatch(prefix, pat) for pat in patterns):
            return True
    return False


def copy_tree(files: list[str], dest: Path) -> int:
    copied = 0
    for rel in files:
        src = ROOT / rel
        if not os.path.lexists(src):  # deleted in the working tree, not yet committed
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)
        copied += 1
    return copied


def link_collections(ac_root: Path, own_namespace: str) -> None:
    """Link the other namespaces of the checkout's collections/ next to the copy."""
    installed = ROOT / "collections" / "ansible_collections"
    if not installed.is_dir():
        say(f"warning: {installed} is missing (run `make deps`); community.docker will not resolve")
        return
    for ns in sorted(installed.iterdir()):
        if ns.name == own_namespace or not ns.is_dir():
            continue
        os.symlink(ns.resolve(), ac_root / ns.name)
        say(f"linked {ns.name} -> {ns.resolve()}")


def ensure_pip_bootstrap(python: str, target_version: str) -> None:
    """Make sure ansible-test finds its pip bootstrap script in its cache (``--venv`` needs it).

    ansible-test downloads that script from its own file server; when the server does not answer,
    tools/sanity/pip_bootstrap.py (ensurepip, then pip from the package index) is cached in its place.
    """
    code = ("from types import SimpleNamespace as N; "
            "from ansible_test._internal.python_requirements import get_venv_packages as g; "
            "print(g(N(version=__import__('sys').argv[1]))['pip'])")
    res = subprocess.run([python, "-c", code, target_version], capture_output=True, text=True, check=False)
    version = res.stdout.strip()
    if res.returncode or not version:
        say("warning: could not tell which pip ansible-test bootstraps; leaving its cache alone")
        return
    cache = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{version.replace('.', '_')}.py"
    if cache.is_file():
        return
    cache.parent.mkdir(parents=True, exist_ok=True)
    url = f"https://ci-files.testing.ansible.com/ansible-test/get-pip-{version}.py"
    try:
        with urllib.request.urlopen(url, timeout=15) as resp:
            data = resp.read()
        say(f"cached ansible-test's pip {version} bootstrap script")
    except OSError as exc:
        data = (Path(__file__).with_name("pip_bootstrap.py")).read_bytes()
        say(f"pip bootstrap script not downloadable ({exc}); caching tools/sanity/pip_bootstrap.py at {cache}")
    tmp = cache.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(cache)


def git_init(path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(path)], check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--test", action="append", default=[], metavar="NAME", help="run only this sanity test (repeatable)")
    ap.add_argument("--skip-test", action="append", default=[], metavar="NAME", help="skip this sanity test (repeatable)")
    ap.add_argument("--python", default="3.11", help="Python version ansible-test targets (default 3.11)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--venv", dest="mode", action="store_const", const="--venv", help="per-test virtualenvs (default)")
    mode.add_argument("--local", dest="mode", action="store_const", const="--local",
                      help="use this virtualenv; tests whose requirements are missing are skipped")
    ap.add_argument("--ansible-test", help="ansible-test executable (default: next to this Python, else .venv/bin)")
    ap.add_argument("--tmpdir", help="parent of the temporary tree (default: the system's temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary tree and print its path")
    ap.add_argument("--list", action="store_true", help="print the files that would be copied and exit")
    ap.add_argument("extra", nargs="*", help="after --: more arguments for ansible-test sanity")
    args = ap.parse_args(argv)

    ansible_test = find_tool("ansible-test", args.ansible_test)
    python = str(Path(ansible_test).parent / "python")
    if not os.access(python, os.X_OK):
        python = sys.executable
    meta = galaxy_meta(python)
    namespace, name = meta["namespace"], meta["name"]
    patterns = list(DEFAULT_IGNORE_PATTERNS) + [f"{namespace}-{name}-*.tar.gz"] + list(meta.get("build_ignore") or [])
    files = [f for f in tracked_files() if not ignored(f, patterns)]
    if args.list:
        print("\n".join(files))
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="dspark-sanity-", dir=args.tmpdir))
    try:
        ac_root = tmp / "ansible_collections"
        coll = ac_root / namespace / name
        coll.mkdir(parents=True)
        n = copy_tree(files, coll)
        say(f"copied {n} files of {namespace}.{name} to {coll}")
        link_collections(ac_root, namespace)
        git_init(coll)
        if (args.mode or "--venv") == "--venv":
            ensure_pip_bootstrap(python, args.python)

        cmd = [ansible_test, "sanity", "--python", args.python, args.mode or "--venv", "--color", "no"]
        for t in args.test:
            cmd += ["--test", t]
        for t in args.skip_test:
            cmd += ["--skip-test", t]
        cmd += args.extra
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
        say("running: " + " ".join(cmd))
        started = time.monotonic()
        rc = subprocess.run(cmd, cwd=coll, env=env, check=False).returncode
        say(f"ansible-test exited {rc} after {time.monotonic() - started:.0f}s")
        return rc
    finally:
        if args.keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
