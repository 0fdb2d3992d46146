# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's container labels: their names, in one table, and the few ways they are used.

The engine role labels both ranks' containers (:func:`engine_labels`); the audit, the probe and
the roles that report what served a run read them back (:func:`label_record`,
:func:`collection_labels`); the orphans sweep lists containers by the pair label
(:func:`label_name`). This file is the only place that spells a label name: everything else
takes it from :data:`LABELS` (Python) or from the ``gb10.dspark.label_name``,
``gb10.dspark.engine_labels`` and ``gb10.dspark.label_record`` filters (roles).

The API-key label (:func:`api_key_label`) is an HMAC-SHA256 of the key under a random secret that
each rank keeps for itself (:func:`label_secret`, root-only, never sent to the control node): it changes
when the key is added, rotated or removed, so that the engine is replaced, and it cannot be checked
against guessed keys by anyone who sees the label (``docker ps``, an audit) but not the rank's secret.

Standard library only; it runs on the ranks too.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Mapping

PREFIX = "io.gb10.dspark."

# key (a plain name, usable as a Python identifier and a Jinja attribute) -> label name
LABELS: dict[str, str] = {
    "pair": PREFIX + "pair",
    "rank": PREFIX + "rank",
    "profile": PREFIX + "profile",
    "profile_sha256": PREFIX + "profile.sha256",
    "cudagraph_implementation": PREFIX + "cudagraph.implementation",
    "experimental": PREFIX + "profile.experimental",
    "image_id": PREFIX + "image.id",
    "manifest_sha256": PREFIX + "manifest.sha256",
    "model_revision": PREFIX + "model.revision",
    "release": PREFIX + "release",
    "api_key": PREFIX + "api_key",
}

# The fields of a record read back from labels: every key but api_key (a keyed hash of the key,
# which says whether the engine was started with one, not what served a run).
RECORD_KEYS = tuple(k for k in LABELS if k != "api_key")
# The values engine_labels takes; api_key is derived from the key and the pair.
VALUE_KEYS = RECORD_KEYS

NO_API_KEY = "none"
KEY_LABEL_PREFIX = "hmac-sha256:"
# The label in check mode on a rank that has no label secret yet: it matches no engine's label, so the
# plan says "would change" (the secret, and with it the label, is made by the real run).
KEY_LABEL_PENDING = KEY_LABEL_PREFIX + "pending"
_KEY_LABEL = re.compile(r"(none|hmac-sha256:([0-9a-f]{32}|pending)|<[^<>]* not shown>)")
SECRET_BYTES = 32
_SECRET_TEXT = re.compile(r"[0-9a-f]{64}")


def label_name(key: str) -> str:
    """The label name of ``key`` (``"pair"``, ``"profile_sha256"``, ...); ValueError for an unknown key."""
    try:
        return LABELS[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown label key {key!r}; known: {', '.join(LABELS)}") from None


def api_key_label(api_key: object, secret: bytes | None) -> str:
    """The API-key label: ``none`` without a key (None or empty); else ``hmac-sha256:`` and the first 32
    hex digits of HMAC-SHA256(``secret``, key). ``secret`` is the rank's label secret; None (in check
    mode, before the rank has one) gives :data:`KEY_LABEL_PENDING`. It tells keys apart (adding,
    rotating or removing the key changes it) and, without the secret, says nothing about the key."""
    if api_key is None or api_key == "":
        return NO_API_KEY
    if secret is None:
        return KEY_LABEL_PENDING
    if not isinstance(secret, bytes) or len(secret) < 16:
        raise ValueError("the label secret must be at least 16 bytes")
    digest = hmac.new(secret, str(api_key).encode("utf-8"), hashlib.sha256).hexdigest()
    return KEY_LABEL_PREFIX + digest[:32]


class LabelSecretError(Exception):
    """The rank's label secret cannot be trusted or made; the message names the path, never the secret."""


def _check_secret_stat(path: str, st: os.stat_result, owner: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise LabelSecretError(f"{path}: expected a regular file, found {stat.filemode(st.st_mode)}")
    if st.st_uid != owner:
        raise LabelSecretError(f"{path}: expected owner uid {owner}, found uid {st.st_uid}")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise LabelSecretError(f"{path}: expected mode 0600 (no access for group or others), "
                               f"found {stat.S_IMODE(st.st_mode):04o}")


def _read_secret(path: str, owner: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LabelSecretError(f"{path}: expected a regular file, found a symbolic link") from None
        raise
    try:
        _check_secret_stat(path, os.fstat(fd), owner)
        text = os.read(fd, 4 * SECRET_BYTES).strip()
    finally:
        os.close(fd)
    if not _SECRET_TEXT.fullmatch(text.decode("ascii", "replace")):
        raise LabelSecretError(f"{path}: expected {2 * SECRET_BYTES} hex digits, found something else "
                               "(remove the file: a new secret replaces the engine once)")
    return bytes.fromhex(text.decode("ascii"))


def label_secret(path: str, create: bool, owner: int | None = None) -> tuple[bytes | None, bool]:
    """The rank's label secret at ``path``: (secret, created). A missing file is made (``create``) with
    :data:`SECRET_BYTES` random bytes as hex, mode 0600, in a folder made 0700 if absent; without
    ``create`` (check mode) a missing file gives (None, False). The file must be a regular file (not a
    link) owned by ``owner`` (default: this process's user, root on a rank) and readable by it alone;
    anything else raises :class:`LabelSecretError`, naming the path, the expected and the found value."""
    owner = os.geteuid() if owner is None else owner
    try:
        return _read_secret(path, owner), False
    except FileNotFoundError:
        pass
    if not create:
        return None, False
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # made meanwhile by another run: read that one
        return _read_secret(path, owner), False
    except OSError as exc:
        raise LabelSecretError(f"{path}: cannot create the label secret ({exc.strerror})") from None
    secret = secrets.token_bytes(SECRET_BYTES)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(secret.hex() + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return secret, True


def check_api_key_label(value: object) -> str:
    """``value`` as the API-key label, or ValueError: ``none``, a label of :func:`api_key_label`, or a
    render's placeholder (``<... not shown>``). Anything else - a key passed by mistake - is refused,
    without being quoted."""
    if value is None:
        return NO_API_KEY
    if isinstance(value, str) and _KEY_LABEL.fullmatch(value):
        return value
    raise ValueError("api_key_label must be 'none', a label of gb10.dspark.engine_key_label or a "
                     "'<... not shown>' placeholder; the value given is none of these (not shown)")


def engine_labels(values: Mapping, api_key_label: object = None) -> dict[str, str]:
    """The engine container's labels, from ``values`` holding every key of :data:`VALUE_KEYS`.

    Every value becomes a string (the rank ``0`` becomes ``"0"``); ``experimental`` must be a
    bool and becomes ``"true"`` or ``"false"``. ``api_key_label`` is the rank's API-key label
    (:func:`api_key_label`, made on the rank by ``gb10.dspark.engine_key_label``; None: no key), checked
    by :func:`check_api_key_label`: never the key. ValueError when a value is missing, None or unknown,
    or ``experimental`` is not a bool.
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"the label values must be a mapping, not {type(values).__name__}")
    unknown = sorted(str(k) for k in values if k not in VALUE_KEYS)
    if unknown:
        raise ValueError(f"unknown label value(s) {', '.join(unknown)}; known: {', '.join(VALUE_KEYS)}")
    missing = [k for k in VALUE_KEYS if values.get(k) is None]
    if missing:
        raise ValueError(f"no value for {', '.join(missing)}")
    if not isinstance(values["experimental"], bool):
        raise ValueError(f"experimental must be a bool, not {type(values['experimental']).__name__}")
    out = {}
    for key in VALUE_KEYS:
        value = values[key]
        out[LABELS[key]] = ("true" if value else "false") if key == "experimental" else str(value)
    out[LABELS["api_key"]] = check_api_key_label(api_key_label)
    return out


def collection_labels(labels: object) -> dict:
    """Only the collection's labels of ``labels`` (an image brings its own); {} for no mapping."""
    if not isinstance(labels, Mapping):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and k.startswith(PREFIX)}


def _plain(key: str, value: object) -> object:
    if key == "rank" and isinstance(value, str) and value.isdigit():
        return int(value)
    if key == "experimental" and value in ("true", "false"):
        return value == "true"
    return value


def label_record(labels: object, missing: object = None) -> dict:
    """A container's labels (or None) read back into a plain record with every key of
    :data:`RECORD_KEYS`: ``rank`` as an int and ``experimental`` as a bool where the label reads
    as one (else the label's text, so that nothing is hidden), every other field the label's text;
    ``missing`` for a label the container does not carry."""
    labels = labels if isinstance(labels, Mapping) else {}
    return {key: _plain(key, labels[LABELS[key]]) if LABELS[key] in labels else missing for key in RECORD_KEYS}
