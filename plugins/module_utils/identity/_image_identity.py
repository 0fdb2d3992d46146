# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make a rank's engine hold the pinned image under the pinned tag, or fail having changed nothing.

Order of work (every check before any change):

1. Which image store does the engine use? A classic store reports the config digest as the
   image ID (the pin's ``image_id``); the containerd store reports the manifest digest (the
   pin's ``manifest_digest``, required then).
2. Does the pinned tag already name another image? Then fail: retagging would silently move
   the tag away from whatever the rank serves.
3. Is the pinned ID already held? Then nothing is loaded (re-runs are cheap).
4. Otherwise the pin must hold the archive's sha256 (``image_archive_sha256``): no archive is
   loaded unverified. The archive's own ID, read from its metadata (an archive the engine could
   read differently is refused, see ``_image_archive``), must equal the pin, loading it must not
   move any tag it carries, and its sha256 must match; only then is it streamed into the engine.
   If the engine does not end up holding the pinned ID, what the load added is removed again; if
   it reports loading any other image ID or name than the archive showed, the run fails.
5. Tag, then assert that the tag resolves to the pinned ID (and architecture and labels, when
   pinned).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils.identity import _pin
from ansible_collections.gb10.dspark.plugins.module_utils.engine._docker_engine import (
    Engine,
    EngineError,
    loaded_references,
    split_tag,
)
from ansible_collections.gb10.dspark.plugins.module_utils.common._digest import sha256_file
from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import CheckError, IdentityError, Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.identity._image_archive import (
    ArchiveError,
    ArchiveIdentity,
    read_identity,
)


@dataclass
class Pin:
    tag: str
    image_id: str
    manifest_digest: str | None = None
    architecture: str | None = None
    labels: dict = field(default_factory=dict)
    archive_sha256: str | None = None

    @classmethod
    def from_pin(cls, pin: dict, labels: bool = True, architecture: bool = True) -> "Pin":
        """From a checked ``dspark_pin``; the image labels to expect come from the pin too."""
        return cls(
            tag=pin["image_tag"],
            image_id=pin["image_id"],
            manifest_digest=pin.get("image_manifest_digest"),
            architecture=pin["image_architecture"] if architecture else None,
            labels=_pin.expected_labels(pin) if labels else {},
            archive_sha256=pin.get("image_archive_sha256"),
        )


@dataclass
class Outcome:
    changed: bool = False
    loaded: bool = False
    tagged: bool = False
    image_id: str | None = None
    image_store: str | None = None
    actions: list[str] = field(default_factory=list)
    archive: dict | None = None
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    needs_archive: bool = False
    present: bool = False

    def result(self) -> dict:
        return {
            "changed": self.changed,
            "needs_archive": self.needs_archive,
            "present": self.present,
            "loaded": self.loaded,
            "tagged": self.tagged,
            "image_id": self.image_id,
            "image_store": self.image_store,
            "actions": self.actions,
            "archive": self.archive,
        }


def _short(digest: str | None) -> str | None:
    return digest if digest is None or digest.startswith("sha256:") else f"sha256:{digest}"


def expected_id(pin: Pin, store: str, rank: str) -> str:
    if store == "containerd":
        if not pin.manifest_digest:
            raise CheckError(rank, "the Docker engine keeps images in the containerd store, where an image ID is its "
                                   "manifest digest, but the pin has no image_manifest_digest; pin it or use a classic store")
        return _short(pin.manifest_digest)  # type: ignore[return-value]
    return _short(pin.image_id)  # type: ignore[return-value]


def _label_mismatches(rank: str, where: str, labels: dict, architecture: str | None, pin: Pin) -> list[Mismatch]:
    out = []
    if pin.architecture and architecture != pin.architecture:
        out.append(Mismatch(rank, f"{where} architecture", pin.architecture, architecture))
    for key, want in sorted(pin.labels.items()):
        have = labels.get(key)
        if have != str(want):
            out.append(Mismatch(rank, f"{where} label {key}", str(want), have))
    return out


def ensure(engine: Engine, rank: str, pin: Pin, archive_path: str | None, check_mode: bool) -> Outcome:
    out = Outcome()
    try:
        store = engine.image_store()
    except EngineError as exc:
        raise CheckError(rank, str(exc)) from exc
    out.image_store = store
    want = expected_id(pin, store, rank)
    out.image_id = want
    repo, tag = split_tag(pin.tag)

    by_tag = engine.inspect_image(pin.tag)
    tag_id = by_tag["Id"] if by_tag else None
    out.before = {"image_tag": pin.tag, "image_id": tag_id}
    out.after = {"image_tag": pin.tag, "image_id": want}
    if tag_id is not None and tag_id != want:
        raise IdentityError(Mismatch(rank, f"image {pin.tag}", want, tag_id))

    held = engine.inspect_image(want)
    out.present = held is not None
    out.needs_archive = held is None and not (archive_path and os.path.exists(archive_path))
    if out.needs_archive and check_mode:
        if not pin.archive_sha256:
            raise CheckError(rank, _sha256_required(archive_path))
        # A real run copies the archive to the rank first; report what it would then do.
        out.actions.append(f"load {archive_path or 'the image archive'} (not on the rank yet)")
        if tag_id is None:
            out.actions.append(f"tag {want} as {pin.tag}")
        out.changed = True
        return out
    archive = _read_archive(rank, archive_path, required=held is None)
    mismatches: list[Mismatch] = []
    if archive is not None:
        out.archive = archive.as_dict()
        mismatches += archive_mismatches(rank, archive, pin, store)
    elif archive_path:
        out.warnings.append(f"archive {archive_path} is absent on the rank; not needed, the engine holds {want}")
    if mismatches:
        raise IdentityError(mismatches)

    if held is not None:
        mismatches += _label_mismatches(rank, f"image {want}", (held.get("Config") or {}).get("Labels") or {},
                                        held.get("Architecture"), pin)
    else:
        if archive is None:  # held is None, so _read_archive(required=True) raised rather than return None
            raise AssertionError("no archive to load the image from")
        mismatches += _tag_conflicts(engine, rank, archive, want)
    if mismatches:
        raise IdentityError(mismatches)
    if held is None and not pin.archive_sha256:  # no archive is loaded unverified, in check mode neither
        raise CheckError(rank, _sha256_required(archive_path))

    if held is None:
        out.actions.append(f"load {archive.path}")  # type: ignore[union-attr]
    if tag_id is None:
        out.actions.append(f"tag {want} as {pin.tag}")
    out.changed = bool(out.actions)
    if check_mode or not out.changed:
        return out

    if held is None:
        _load(engine, rank, archive, pin, want)  # type: ignore[arg-type]
        out.loaded = True
    if engine.inspect_image(pin.tag) is None:
        try:
            engine.tag(want, repo, tag)
        except EngineError as exc:
            raise CheckError(rank, f"tagging {want} as {pin.tag} failed: {exc}") from exc
        out.tagged = True
    final = engine.inspect_image(pin.tag)
    final_id = final["Id"] if final else None
    if final_id != want:
        raise IdentityError(Mismatch(rank, f"image {pin.tag}", want, final_id, reason="after loading and tagging"))
    return out


def archive_mismatches(rank: str, archive: ArchiveIdentity, pin: Pin, store: str | None) -> list[Mismatch]:
    """How the archive differs from the pin. ``store`` None (no engine, e.g. on the control node)
    checks the config digest, and the manifest digest too when both the pin and the archive have one."""
    out = []
    where = f"archive {archive.path} image"
    if store == "containerd":
        want = expected_id(pin, store, rank)
        if archive.manifest_digest != want:
            reason = "the archive has no OCI index, so its containerd ID is unknown" if archive.manifest_digest is None else ""
            out.append(Mismatch(rank, where, want, archive.manifest_digest, reason=reason))
    else:
        if archive.image_id != _short(pin.image_id):
            out.append(Mismatch(rank, where, _short(pin.image_id), archive.image_id))
        if store is None and pin.manifest_digest and archive.manifest_digest \
                and archive.manifest_digest != _short(pin.manifest_digest):
            out.append(Mismatch(rank, f"archive {archive.path} manifest digest", _short(pin.manifest_digest),
                                archive.manifest_digest))
    if out:
        return out
    return _label_mismatches(rank, where, archive.labels, archive.architecture, pin)


def check_archive(rank: str, path: str, pin: Pin, verify_sha256: bool = True) -> ArchiveIdentity:
    """Verify an archive against the pin without any engine (the control node, before a copy)."""
    archive = _read_archive(rank, path, required=True)
    if archive is None:  # required=True raises instead of returning None
        raise AssertionError(f"no archive read from {path}")
    mismatches = archive_mismatches(rank, archive, pin, None)
    if not mismatches and verify_sha256 and pin.archive_sha256:
        actual = sha256_file(archive.path)
        if actual != pin.archive_sha256.removeprefix("sha256:"):
            mismatches.append(Mismatch(rank, f"archive {archive.path} sha256", pin.archive_sha256, actual))
    if mismatches:
        raise IdentityError(mismatches)
    return archive


def _read_archive(rank: str, path: str | None, required: bool) -> ArchiveIdentity | None:
    if not path or not os.path.exists(path):
        if required:
            where = f"archive {path} is absent" if path else "no image archive was given"
            raise CheckError(rank, f"the pinned image is not available and {where}")
        return None
    try:
        return read_identity(path)
    except ArchiveError as exc:
        raise CheckError(rank, str(exc)) from exc


def _tag_conflicts(engine: Engine, rank: str, archive: ArchiveIdentity, want: str) -> list[Mismatch]:
    """Loading an archive tags its RepoTags; none of them may already name another image."""
    out = []
    for ref in archive.repo_tags:
        other = engine.inspect_image(ref)
        if other is not None and other["Id"] != want:
            out.append(Mismatch(rank, f"image {ref}", want, other["Id"],
                                reason=f"loading {archive.path} would move this tag"))
    return out


def _sha256_required(archive_path: str | None) -> str:
    where = archive_path or "the image archive"
    return (f"the pinned image is not held and would be loaded from {where}, but the pin has no "
            f"image_archive_sha256: the pin needs image_archive_sha256 (`sha256sum {archive_path or '<archive>'}`) "
            f"before any load from an archive")


def _familiar(name: str) -> str:
    """``docker.io/library/x:t`` → ``x:t``: the form ``/images/load`` and RepoTags use."""
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _unexpected_loads(rank: str, archive: ArchiveIdentity, want: str, ids: list[str],
                      names: list[str]) -> list[Mismatch]:
    """What the engine says it loaded beyond what the archive's metadata showed (fail closed)."""
    out = []
    reason = ("the engine loaded more than the archive's metadata shows; this run tags and removes nothing "
              "more: check the rank's images")
    if any(_short(i) != want for i in ids):
        out.append(Mismatch(rank, f"image IDs loaded from {archive.path}", [want], ids, reason=reason))
    shown = {_familiar(t) for t in archive.repo_tags}
    if any(_familiar(n) not in shown for n in names):
        out.append(Mismatch(rank, f"image names loaded from {archive.path}", archive.repo_tags, names,
                            reason=reason, expected_word="the archive shows"))
    return out


def _load(engine: Engine, rank: str, archive: ArchiveIdentity, pin: Pin, want: str) -> None:
    if not pin.archive_sha256:  # ensure() refuses earlier; never load an unverified archive
        raise CheckError(rank, _sha256_required(archive.path))
    actual = sha256_file(archive.path)
    if actual != pin.archive_sha256.removeprefix("sha256:"):
        raise IdentityError(Mismatch(rank, f"archive {archive.path} sha256", pin.archive_sha256, actual))
    try:
        lines = engine.load(archive.path)
    except EngineError as exc:
        raise CheckError(rank, str(exc)) from exc
    ids, names = loaded_references(lines)
    if engine.inspect_image(want) is None:
        # The engine made something else of the archive: take back what this run added (the
        # archive's tags named nothing before the load, see _tag_conflicts).
        for image in names + ids:
            try:
                engine.remove_image(image)
            except EngineError:
                pass
        got = ", ".join(ids) or "nothing"
        raise IdentityError(Mismatch(rank, f"image loaded from {archive.path}", want, got,
                                     reason="removed again; nothing changed"))
    unexpected = _unexpected_loads(rank, archive, want, ids, names)
    if unexpected:
        raise IdentityError(unexpected)


def run_ensure(rank: str, pin: dict, archive_path: str | None, check_mode: bool, docker_host: str,
               timeout: float, labels: bool = True, architecture: bool = True) -> Outcome:
    """The module's whole job: check the pin, then :func:`ensure`; every failure names the rank."""
    try:
        checked = Pin.from_pin(_pin.check(pin), labels=labels, architecture=architecture)
        return ensure(Engine(docker_host, timeout), rank, checked, archive_path, check_mode)
    except (_pin.PinError, EngineError) as exc:
        raise CheckError(rank, str(exc)) from exc


def remove(engine: Engine, rank: str, image_id: str, check_mode: bool) -> Outcome:
    """Teardown: the engine no longer holds the image ``image_id`` under any tag (``docker rmi -f``).
    Nothing to do when it holds none; the engine refuses an image a running container uses, and so
    does this (nothing changed)."""
    out = Outcome(image_id=image_id)
    held = engine.inspect_image(image_id)
    out.present = held is not None
    out.before = {"image_id": image_id, "present": out.present}
    out.after = {"image_id": image_id, "present": False}
    if held is None:
        return out
    out.actions.append(f"remove {image_id} and its tags {', '.join(held.get('RepoTags') or []) or '(none)'}")
    out.changed = True
    if check_mode:
        return out
    try:
        engine.remove_image(image_id, force=True)
    except EngineError as exc:
        raise CheckError(rank, f"removing image {image_id} failed: {exc}") from exc
    return out


def run_remove(rank: str, pin: dict, check_mode: bool, docker_host: str, timeout: float) -> Outcome:
    """The module's ``state=absent``: check the pin, then :func:`remove` its ``image_id``."""
    try:
        checked = _pin.check(pin)
        return remove(Engine(docker_host, timeout), rank, checked["image_id"], check_mode)
    except (_pin.PinError, EngineError) as exc:
        raise CheckError(rank, str(exc)) from exc


def run_check_archive(rank: str, pin: dict, path: str, verify_sha256: bool, labels: bool = True,
                      architecture: bool = True) -> ArchiveIdentity:
    try:
        checked = Pin.from_pin(_pin.check(pin), labels=labels, architecture=architecture)
    except _pin.PinError as exc:
        raise CheckError(rank, str(exc)) from exc
    return check_archive(rank, path, checked, verify_sha256)
