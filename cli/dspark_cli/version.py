"""`dspark --version`: the command, the gb10.dspark collection its runs use and that collection's pin.

A control node upgrades the collection and the command together (README.md, "Real pairs"); this is how an
operator sees that they match, and which release pin the collection was cut with. The collection is the one
ansible-playbook would load: the first ``gb10/dspark`` on Ansible's collection search path, as dspark's
runs see it from the current folder (its ``ansible.cfg``). A run checks the pin of its own inventory; the
pin shown here is the one the collection ships (``inventories/sample/group_vars/all/pin.yml``).
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Iterator, TextIO

import yaml

from . import __version__

COLLECTION = ("gb10", "dspark")
PIN_FILE = ("inventories", "sample", "group_vars", "all", "pin.yml")
# The pin's fields that name a release: what `--version` prints, in this order.
PIN_FIELDS = ("image_id", "runtime_manifest_sha256", "model_id", "model_revision", "vllm_version")


def collection_dirs(paths: Iterable[str]) -> Iterator[str]:
    """Where gb10.dspark would be under each of ``paths`` (collection roots or their ``ansible_collections``
    folders), in the search path's order; whether it is there is the caller's to check."""
    for base in paths:
        root = base if os.path.basename(base.rstrip(os.sep)) == "ansible_collections" else \
            os.path.join(base, "ansible_collections")
        yield os.path.join(root, *COLLECTION)


def find_collection(paths: Iterable[str]) -> str | None:
    """The first gb10.dspark under ``paths`` that says its version (MANIFEST.json or galaxy.yml)."""
    for path in collection_dirs(paths):
        if os.path.isfile(os.path.join(path, "MANIFEST.json")) or os.path.isfile(os.path.join(path, "galaxy.yml")):
            return os.path.realpath(path)
    return None


def collection_version(path: str) -> tuple[str, str]:
    """(version, kind): an installed collection's MANIFEST.json, else a checkout's galaxy.yml."""
    manifest = os.path.join(path, "MANIFEST.json")
    if os.path.isfile(manifest):
        with open(manifest, encoding="utf-8") as handle:
            return str(json.load(handle)["collection_info"]["version"]), "installed"
    with open(os.path.join(path, "galaxy.yml"), encoding="utf-8") as handle:
        return str(yaml.safe_load(handle)["version"]), "checkout"


def pin_text(path: str) -> str:
    """One line naming the collection's release pin, or why there is none."""
    pin_file = os.path.join(path, *PIN_FILE)
    try:
        with open(pin_file, encoding="utf-8") as handle:
            pin = (yaml.safe_load(handle) or {}).get("dspark_pin") or {}
    except (OSError, yaml.YAMLError) as exc:
        return f"pin: unreadable ({pin_file}: {exc})"
    if not pin:
        return f"pin: none in {pin_file}"
    fields = ", ".join(f"{key} {pin.get(key)}" for key in PIN_FIELDS)
    return f"pin {pin.get('release')}: {fields}"


def report(paths: Iterable[str], out: TextIO, err: TextIO) -> bool:
    """Print the three lines; False when Ansible would find no gb10.dspark from here (dspark exits 69)."""
    paths = list(paths)
    print(f"dspark {__version__} ({os.path.dirname(os.path.abspath(__file__))})", file=out)
    path = find_collection(paths)
    if path is None:
        print("dspark: Ansible finds no gb10.dspark collection from here; it looked in "
              f"{os.pathsep.join(paths) or '(nothing)'}. Run dspark from the folder whose ansible.cfg names the "
              "collections path (README.md, \"Real pairs\"), or set ANSIBLE_COLLECTIONS_PATH", file=err)
        return False
    try:
        version, kind = collection_version(path)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        print(f"dspark: the gb10.dspark collection at {path} does not say its version: {exc}", file=err)
        return False
    print(f"gb10.dspark {version} ({kind}: {path})", file=out)
    print(pin_text(path), file=out)
    return True
