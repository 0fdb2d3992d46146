"""The simulated ranks' bytecode cache for Ansible's module payloads (the simulator's, never the collection's).

Ansible runs every module as a zip of Python sources (its AnsiballZ payload) that the rank's ``python3`` imports
through ``zipimport``, which compiles each source it imports on every run and keeps nothing: ``import
ansible.module_utils.basic`` alone compiles some 40 files, 0.07 s of CPU of the 0.15 s that a module run as small as
``ping`` costs on the simulator's machine. On a GB10's 20 cores that is nothing; on 2 cores, where the test suite
makes some 4,000 module runs on the ranks (a quarter of its CPU), it is worth keeping. The simulator
(sim/dspark_sim/rank.py) puts this file and a ``.pth`` line that imports it into each rank's own user site folder
(its root's and its operator's homes are the rank's own), so only the ranks' Python loads it.

It keys each compiled source by the SHA-256 of the interpreter's bytecode magic and the source's bytes, so what
runs is exactly what the payload holds, compiled as ``zipimport`` would compile it (the same ``compile`` call, the
file name set to the payload's as ``_imp._fix_co_filename`` does for ``.pyc`` files). Only the payloads' sources are
cached (a path with ``_payload.zip`` in it). The cache is a folder of the user's own, mode 0700; a folder that is
not, an unreadable entry or any error falls back to compiling, as without the cache.
"""
import _imp
import hashlib
import importlib.util
import marshal
import os
import zipimport

_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "dspark-sim-pyc")
_compile = zipimport._compile_source
_checked = []  # the folder, or None when it may not be used: checked once per process, at the first payload source


def _cache_dir():
    if not _checked:
        try:
            os.makedirs(_CACHE, mode=0o700, exist_ok=True)
            st = os.stat(_CACHE)
            usable = st.st_uid == os.geteuid() and not st.st_mode & 0o077
        except OSError:
            usable = False
        _checked.append(_CACHE if usable else None)
    return _checked[0]


def _cached_compile(pathname, source):
    folder = _cache_dir() if "_payload.zip" in pathname else None
    if folder is None:
        return _compile(pathname, source)
    entry = os.path.join(folder, hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest())
    try:
        with open(entry, "rb") as f:
            code = marshal.loads(f.read())
        _imp._fix_co_filename(code, pathname)
        return code
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile(pathname, source)
    temp = f"{entry}.{os.getpid()}"
    try:
        with open(temp, "wb") as f:
            f.write(marshal.dumps(code))
        os.replace(temp, entry)
    except OSError:
        pass
    return code


zipimport._compile_source = _cached_compile
