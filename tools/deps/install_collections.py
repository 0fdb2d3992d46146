"""Install the collections of requirements.yml into ./collections, and link this checkout as gb10.dspark.

Order of sources, first that works wins, and the one taken is printed:
  1. already installed with a version that satisfies requirements.yml: nothing to do;
  2. collection tarballs in $DSPARK_COLLECTIONS_OFFLINE_DIR (air-gapped labs): `ansible-galaxy --offline`;
  3. Ansible Galaxy, with a short timeout;
  4. the `ansible` community package from the Python package index: the wheel is downloaded
     (not installed) and only the required collections are unpacked from it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements

ROOT = Path(__file__).resolve().parents[2]
DEST = ROOT / "collections"
AC = DEST / "ansible_collections"
# The community package release that carries the collection versions we test with.
ANSIBLE_PACKAGE = os.environ.get("DSPARK_ANSIBLE_PACKAGE", "ansible==12.3.0")


def say(msg: str) -> None:
    print(f"[deps] collections: {msg}", flush=True)


def wanted() -> list[tuple[str, str]]:
    req = yaml.safe_load((ROOT / "requirements.yml").read_text())
    return [(c["name"], str(c.get("version", "*"))) for c in req["collections"]]


def collection_info(name: str) -> dict | None:
    """``collection_info`` of an installed collection's MANIFEST.json, None when not installed."""
    try:
        return json.loads((AC.joinpath(*name.split(".")) / "MANIFEST.json").read_text())["collection_info"]
    except (OSError, ValueError, KeyError):
        return None


def installed_version(name: str) -> str | None:
    info = collection_info(name)
    return info.get("version") if info else None


def dependencies(name: str) -> dict[str, str]:
    info = collection_info(name)
    return (info.get("dependencies") if info else None) or {}


def missing() -> list[tuple[str, str]]:
    """Required collections absent or at a version outside their range, then absent dependencies."""
    out = []
    for name, spec in wanted():
        v = installed_version(name)
        if v is None or not meets_requirements(v, spec):
            out.append((name, spec))
            continue
        for dep, dep_spec in dependencies(name).items():
            dv = installed_version(dep)
            if dv is None or not meets_requirements(dv, dep_spec):
                out.append((dep, dep_spec))
    return out


def link_self() -> None:
    link = AC / "gb10" / "dspark"
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(ROOT, link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target, target_is_directory=True)


def galaxy(extra: list[str], timeout: int) -> bool:
    cmd = [str(Path(sys.executable).with_name("ansible-galaxy")), "collection", "install",
           "-r", str(ROOT / "requirements.yml"), "-p", str(DEST), "--force", *extra]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return False
    return res.returncode == 0 and not missing()


def from_offline_dir(path: Path) -> bool:
    tarballs = sorted(path.glob("*.tar.gz"))
    if not tarballs:
        return False
    cmd = [str(Path(sys.executable).with_name("ansible-galaxy")), "collection", "install", "--offline",
           "-p", str(DEST), "--force", *map(str, tarballs)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False).returncode == 0 and not missing()


def from_community_package(names: list[str]) -> list[str]:
    """Unpack the named collections and, recursively, the collections they depend on.
    Returns every collection unpacked."""
    done: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "-d", tmp, ANSIBLE_PACKAGE], check=True)
        wheel = next(Path(tmp).glob("ansible-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            queue = list(names)
            while queue:
                name = queue.pop(0)
                if name in done:
                    continue
                ns, coll = name.split(".")
                prefix = f"ansible_collections/{ns}/{coll}/"
                members = [m for m in z.namelist() if m.startswith(prefix)]
                if not members:
                    raise SystemExit(f"{ANSIBLE_PACKAGE} does not carry {name}")
                target = AC / ns / coll
                if target.exists():
                    subprocess.run(["rm", "-rf", str(target)], check=True)
                z.extractall(DEST, members)
                done.append(name)
                queue.extend(d for d in dependencies(name) if installed_version(d) is None)
    return done


def main() -> int:
    AC.mkdir(parents=True, exist_ok=True)
    link_self()
    todo = missing()
    if not todo:
        say("already installed: " + ", ".join(f"{n} {installed_version(n)}" for n, _unused in wanted()))
        return 0
    offline = os.environ.get("DSPARK_COLLECTIONS_OFFLINE_DIR")
    if offline and from_offline_dir(Path(offline)):
        say(f"installed from offline tarballs in {offline}")
    elif os.environ.get("DSPARK_SKIP_GALAXY") != "1" and galaxy(["--timeout", "15"], timeout=45):
        say("installed from Ansible Galaxy")
    else:
        say(f"Galaxy unreachable; taking {', '.join(n for n, _unused in todo)} from the community package {ANSIBLE_PACKAGE}")
        unpacked = from_community_package([n for n, _unused in todo])
        say("unpacked " + ", ".join(f"{n} {installed_version(n)}" for n in unpacked))
        still = missing()
        if still:
            say(f"versions do not satisfy requirements.yml: {still}")
            return 1
    say("now: " + ", ".join(f"{n} {installed_version(n)}" for n, _unused in wanted()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
