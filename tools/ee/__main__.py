"""Build the execution environment (EE) here, with no container registry and no Galaxy server, and give the
control node a Docker engine to build and run it on (docs/operator-guide.md §6.1).

    python -m tools.ee engine-up      # the control node's own dockerd (make ee-engine); idempotent
    python -m tools.ee engine-down    # stop it (make ee-engine-down)
    python -m tools.ee build          # the EE image, skipped when one with the same inputs exists (make ee)

The control node's engine is a dockerd of its own (data root /var/lib/gb10-dspark-ee, socket
unix:///run/gb10-dspark-ee/docker.sock), with no bridge and no iptables rules: it never touches the host's
firewall (the simulator's bridge stays open) and its containers use the host's network (`--network=host`),
which is how the EE reaches the ranks' management addresses. Builds run with `--network=none`: everything they
install comes from the build context.

The build, each step cached by its inputs:
1. the base image: a Debian bookworm rootfs from mmdebstrap (the machine's own apt sources) with Python 3.11,
   pip, git and the ssh client, imported with `docker import` as gb10-dspark-ee-base:bookworm;
2. a wheelhouse made on the host (`pip wheel`) of every Python requirement of the build (tools/ee/inputs.py),
   copied into ee/wheels/; the Containerfile's pip runs with --no-index from it;
3. the three collection tarballs of ee/requirements.yml in ee/collections/: gb10.dspark built from the tree
   (`--tree`, by default this checkout), community.docker and its dependency from collections/;
4. `ansible-builder build` tagged gb10-dspark-ee:latest and gb10-dspark-ee:inputs-<key>; skipped (the tagged
   image re-tagged as latest) when an image with the key of these inputs exists. After a build, the images of
   other keys and the dangling stage images are removed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tools.ee import inputs

REPO = Path(__file__).resolve().parents[2]
DEFINITION = REPO / "execution-environment.yml"
COLLECTIONS = REPO / "collections" / "ansible_collections"
ENGINE_DIR = Path(os.environ.get("DSPARK_EE_ENGINE_DIR", "/var/lib/gb10-dspark-ee"))
RUN_DIR = Path(os.environ.get("DSPARK_EE_RUN_DIR", "/run/gb10-dspark-ee"))
CACHE_DIR = Path(os.environ.get("DSPARK_EE_CACHE", "/var/cache/gb10-dspark-ee"))
SOCKET = RUN_DIR / "docker.sock"
DOCKER_HOST = f"unix://{SOCKET}"
IMAGE = "gb10-dspark-ee:latest"
KEYED = "gb10-dspark-ee:inputs-{key}"
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "openssh-client", "git", "ca-certificates")
BASE_ARGS = ("--variant=apt", f"--include={','.join(BASE_PACKAGES)}", "--mode=root")
BASE_KEY_LABEL = "io.gb10.dspark.ee-base.key"
# The files of the definition that are not inside a collection tarball.
DEFINITION_FILES = ("execution-environment.yml", "ee/requirements.yml", "meta/ee-requirements.txt",
                    "meta/ee-bindep.txt")


class EEError(RuntimeError):
    """A step of the EE build failed; the message says which and why."""


def say(msg: str) -> None:
    print(f"[ee] {msg}", file=sys.stderr, flush=True)


def run(argv: list, *, env: dict | None = None, timeout: float = 1800, capture: bool = True,
        cwd: Path = REPO) -> subprocess.CompletedProcess:
    argv = [str(a) for a in argv]
    try:
        res = subprocess.run(argv, env=env, cwd=cwd, text=True, timeout=timeout, check=False,
                             stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)
    except FileNotFoundError as exc:
        raise EEError(f"command not found: {argv[0]} (run `make deps`)") from exc
    except subprocess.TimeoutExpired as exc:
        raise EEError(f"timed out after {timeout} s: {' '.join(argv)}") from exc
    if res.returncode != 0:
        tail = (res.stdout or "")[-4000:]
        raise EEError(f"`{' '.join(argv)}` exited {res.returncode}{': ' + tail if tail else ''}")
    return res


def docker_env() -> dict:
    return dict(os.environ, DOCKER_HOST=DOCKER_HOST)


def docker(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    argv = ["docker", *args]
    res = subprocess.run(argv, env=docker_env(), text=True, capture_output=True, timeout=timeout, check=False)
    if check and res.returncode != 0:
        raise EEError(f"`{' '.join(argv)}` on {DOCKER_HOST} exited {res.returncode}: {res.stderr.strip()}")
    return res


# ---- the control node's engine -----------------------------------------------------------------------------
def _engine_pid() -> int | None:
    try:
        pid = int((RUN_DIR / "dockerd.pid").read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def engine_ready() -> bool:
    return SOCKET.exists() and docker("version", "--format", "{{.Server.Version}}", check=False, timeout=20).returncode == 0


def engine_up(timeout: float = 60) -> None:
    if _engine_pid() and engine_ready():
        say(f"control-node engine up at {DOCKER_HOST}")
        return
    ENGINE_DIR.mkdir(parents=True, exist_ok=True)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    config = {
        "data-root": str(ENGINE_DIR / "docker"),
        "exec-root": str(RUN_DIR / "exec"),
        "pidfile": str(RUN_DIR / "dockerd.pid"),
        "hosts": [DOCKER_HOST],
        # No bridge and no iptables: the host's firewall is left as it is, and containers take the host's
        # network (the EE reaches the ranks' management addresses); builds run with --network=none.
        "bridge": "none",
        "iptables": False,
        "ip-masq": False,
        "cgroup-parent": "gb10-dspark-ee",
        "log-driver": "json-file",
    }
    cfg = ENGINE_DIR / "daemon.json"
    cfg.write_text(json.dumps(config, indent=2) + "\n")
    log = (ENGINE_DIR / "dockerd.log").open("ab")
    say(f"starting the control-node engine at {DOCKER_HOST} (log {ENGINE_DIR / 'dockerd.log'})")
    proc = subprocess.Popen(["dockerd", "--config-file", str(cfg)], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EEError(f"dockerd exited {proc.returncode} at start; see {ENGINE_DIR / 'dockerd.log'}")
        if engine_ready():
            say(f"control-node engine up at {DOCKER_HOST}")
            return
        time.sleep(0.5)
    raise EEError(f"dockerd did not answer at {DOCKER_HOST} within {timeout} s; see {ENGINE_DIR / 'dockerd.log'}")


def engine_down(timeout: float = 60) -> None:
    pid = _engine_pid()
    if pid is None:
        say("control-node engine not running")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _exited(pid):
            say("control-node engine stopped")
            return
        time.sleep(0.5)
    raise EEError(f"dockerd (pid {pid}) still running {timeout} s after SIGTERM")


def _exited(pid: int) -> bool:
    """The process has exited. A dockerd that :func:`engine_up` started in this process (a test) is its child:
    it is reaped here, else it would stay a zombie, which signal 0 still finds."""
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return True
    except ChildProcessError:
        pass  # not our child (started by `make ee-engine`): init reaps it
    try:
        os.kill(pid, 0)
    except OSError:
        return True
    return False


# ---- the build ---------------------------------------------------------------------------------------------
def _arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def base_key() -> str:
    return hashlib.sha256(json.dumps([BASE_SUITE, BASE_ARGS, _arch()]).encode()).hexdigest()[:16]


def base_image_name() -> str:
    return yaml.safe_load(DEFINITION.read_text())["images"]["base_image"]["name"]


def base_image() -> str:
    """The EE's base image, imported from a mmdebstrap rootfs; returns its key."""
    key, name = base_key(), base_image_name()
    have = docker("image", "inspect", "--format", "{{json .Config.Labels}}", name, check=False)
    if have.returncode == 0 and (json.loads(have.stdout) or {}).get(BASE_KEY_LABEL) == key:
        return key
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    rootfs = CACHE_DIR / f"base-{BASE_SUITE}-{key}.tar"
    if not rootfs.exists():
        say(f"building the base rootfs (Debian {BASE_SUITE}, mmdebstrap, about a minute)")
        tmp = rootfs.with_suffix(".tmp.tar")
        run(["mmdebstrap", *BASE_ARGS, BASE_SUITE, tmp], timeout=1800)
        tmp.rename(rootfs)
    say(f"importing {rootfs.name} as {name}")
    run(["docker", "import",
         "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
         "--change", "ENV LANG=C.UTF-8",  # ansible-core refuses a locale that is not UTF-8
         "--change", f"LABEL {BASE_KEY_LABEL}={key}",
         "--change", 'CMD ["bash"]',
         rootfs, name], env=docker_env())
    return key


def wheelhouse() -> Path:
    """A folder of wheels for every requirement of the build, made on the host once per requirement list."""
    reqs = inputs.wheel_requirements(DEFINITION, COLLECTIONS)
    key = hashlib.sha256(json.dumps([reqs, sys.version_info[:2], _arch()]).encode()).hexdigest()[:16]
    out = CACHE_DIR / f"wheels-{key}"
    if out.is_dir():
        return out
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="wheels-", dir=CACHE_DIR))
    say(f"making the wheelhouse ({len(reqs)} requirements and their dependencies)")
    try:
        run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--wheel-dir", tmp,
             *reqs], timeout=1800)
    except EEError:
        shutil.rmtree(tmp, ignore_errors=True)  # no half wheelhouse is ever taken for a whole one
        raise
    tmp.rename(out)
    return out


def _fill(folder: Path, files: list[Path], keep: tuple[str, ...] = ("README.md",)) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.name not in keep:
            old.unlink()
    for f in files:
        shutil.copy2(f, folder / f.name)


def collection_tarballs(tree: Path) -> dict[str, str]:
    """The three tarballs of ee/requirements.yml in ee/collections/; returns name -> content digest."""
    dest = REPO / "ee" / "collections"
    with tempfile.TemporaryDirectory() as tmp:
        run([Path(sys.executable).with_name("ansible-galaxy"), "collection", "build", "--output-path", tmp, "--force",
             tree])
        built = sorted(Path(tmp).glob("gb10-dspark-*.tar.gz"))
        if len(built) != 1:
            raise EEError(f"ansible-galaxy collection build of {tree}: expected one gb10-dspark tarball, got {built}")
        shutil.copyfile(built[0], dest / "gb10-dspark.tar.gz")
    for file, name in inputs.TARBALLS.items():
        if name != "gb10.dspark":
            inputs.artefact_from_installed(COLLECTIONS.joinpath(*name.split(".")), dest / file)
    return {file: inputs.tarball_digest(dest / file) for file in inputs.TARBALLS}


def build(tree: Path = REPO) -> str:
    """Build the EE (or find it built); returns the keyed tag."""
    if not engine_ready():
        raise EEError(f"no control-node engine answers at {DOCKER_HOST}: run `make ee-engine` first")
    key_base = base_image()
    wheels = wheelhouse()
    wheel_files = sorted(wheels.glob("*.whl"))
    _fill(REPO / "ee" / "wheels", wheel_files)
    tarballs = collection_tarballs(tree)
    key = inputs.inputs_key(files={f: (REPO / f).read_bytes() for f in DEFINITION_FILES}, tarballs=tarballs,
                            wheels=[w.name for w in wheel_files], base_image=key_base)[:16]
    keyed = KEYED.format(key=key)
    if docker("image", "inspect", keyed, check=False).returncode == 0:
        docker("tag", keyed, IMAGE)
        say(f"{IMAGE} is {keyed}: same inputs, nothing to build")
        return keyed
    context = CACHE_DIR / "context"
    say(f"ansible-builder build: {IMAGE} ({keyed})")
    started = time.monotonic()
    run([Path(sys.executable).with_name("ansible-builder"), "build", "--file", DEFINITION, "--context", context,
         "--container-runtime", "docker", "--tag", IMAGE, keyed, "--extra-build-cli-args=--network=none",
         "--verbosity", "2"], env=dict(docker_env(), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"),
        timeout=3600, capture=False)
    say(f"built {keyed} in {time.monotonic() - started:.0f} s")
    prune(keep=keyed)
    return keyed


def prune(keep: str) -> None:
    """Remove the EE images of other inputs and the build's dangling stage images: the engine's disk holds one
    EE (the base stage's layers, shared with it, stay as the next build's cache)."""
    tags = docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", IMAGE.split(":")[0]).stdout.split()
    for tag in tags:
        if tag.startswith(KEYED.format(key="")) and tag != keep:
            docker("image", "rm", tag)
    docker("image", "prune", "--force")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.ee", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("engine-up")
    sub.add_parser("engine-down")
    b = sub.add_parser("build")
    b.add_argument("--tree", type=Path, default=REPO, help="the gb10.dspark tree to build the collection from")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "engine-up":
            engine_up()
        elif args.cmd == "engine-down":
            engine_down()
        else:
            print(build(args.tree.resolve()))
    except EEError as exc:
        print(f"[ee] FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
