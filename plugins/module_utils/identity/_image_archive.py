# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read an image archive's own identity without loading it, in bounded memory.

An archive written by ``docker save`` (or by the simulator) holds ``manifest.json``, whose
``Config`` entry names the image config blob; the sha256 of that blob is the image ID a classic
engine (overlay2) will report. Archives written by Docker 25 and later are also OCI image
layouts: ``index.json`` names the manifest (or index) whose digest is the ID a containerd-store
engine (Docker 29's default) reports.

Plain tar archives are read by seeking from header to header, so a 30 GB archive costs a few
hundred small reads. Compressed archives (gzip, bzip2, xz) are decompressed once, as a stream.
Only small members (metadata, at most ``MAX_METADATA_BYTES`` each) are ever held in memory.

The engine must load exactly the archive this reader sees. Docker reads member names as Go's
``path.Clean`` leaves them and unpacks the whole archive before reading its metadata, so an
archive is refused (never skipped over) when two members clean to one name, a name escapes the
root or lies under a link, a metadata member is a link, a device or bigger than the cap, or a
header could be read differently by Go's ``archive/tar`` (repeated or mixed long-name headers,
global PAX headers, sparse files, name prefixes outside ustar) or declares an absurd size.
"""
from __future__ import annotations

import hashlib
import os
import tarfile
from dataclasses import dataclass, field

from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_json import loads as strict_loads

MAX_METADATA_BYTES = 16 << 20  # manifest.json, index.json, image configs and OCI manifests
MAX_METADATA_TOTAL = 64 << 20
MAX_EXTENDED_HEADER = 1 << 20  # one PAX or GNU long-name header (Go's archive/tar allows no more either)
MAX_MEMBERS = 1 << 16  # a docker-save archive holds a few entries per layer, and at most 127 layers
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ROOT_METADATA = ("manifest.json", "index.json", "repositories", "oci-layout")
_EXTENSION_HEADERS = {tarfile.XHDTYPE: "PAX extended", tarfile.XGLTYPE: "PAX global",
                      tarfile.SOLARIS_XHDTYPE: "Solaris extended", tarfile.GNUTYPE_LONGNAME: "GNU long name",
                      tarfile.GNUTYPE_LONGLINK: "GNU long link"}
_POSIX_MAGIC = b"ustar\x0000"


class ArchiveError(Exception):
    """The archive is unreadable, malformed, or not a single image."""


@dataclass
class ArchiveIdentity:
    path: str
    size: int
    compression: str
    image_id: str  # sha256:<config digest>
    manifest_digest: str | None  # sha256:<OCI manifest or index digest>, when the archive is an OCI layout
    repo_tags: list[str] = field(default_factory=list)
    architecture: str | None = None
    labels: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "size": self.size,
            "compression": self.compression,
            "image_id": self.image_id,
            "manifest_digest": self.manifest_digest,
            "repo_tags": list(self.repo_tags),
            "architecture": self.architecture,
        }


def compression_of(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(6)
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(_ZSTD_MAGIC):
        return "zstd"
    return "none"


def clean_name(name: str) -> str:
    """A member name as Docker resolves it: Go's ``path.Clean``, then relative to the archive root.

    Repeated slashes collapse, ``.`` segments go, ``..`` removes the segment before it (and at the
    root of a rooted name, nothing), a leading ``/`` and trailing slashes go. ``.`` is the root
    itself; a result of ``..`` or starting with ``../`` escapes the archive.
    """
    rooted = name.startswith("/")
    parts: list[str] = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part != "..":
            parts.append(part)
        elif parts and parts[-1] != "..":
            parts.pop()
        elif not rooted:
            parts.append("..")
    return "/".join(parts) or "."


class _BadHeader(Exception):
    """A tar header this reader and Go's archive/tar could read differently, or an absurd one."""


class _StrictHeader(tarfile.TarInfo):
    """Refuses, while tarfile parses them, the headers whose reading could differ from Docker's.

    ``seen`` collects the header types read since the last member; each reading makes a subclass
    of its own (:func:`_header_class`), so readings never share it.
    """

    seen: list = []

    @classmethod
    def frombuf(cls, buf, encoding, errors):
        try:
            obj = super().frombuf(buf, encoding, errors)
        except (tarfile.EOFHeaderError, tarfile.EmptyHeaderError):
            raise  # the end of the archive
        except tarfile.HeaderError as exc:  # tarfile would stop here silently; Go's reader fails
            raise _BadHeader(f"an invalid tar header ({exc})") from exc
        kind = _EXTENSION_HEADERS.get(obj.type)
        if kind and obj.size > MAX_EXTENDED_HEADER:
            raise _BadHeader(f"a {kind} header declares {obj.size} bytes (at most {MAX_EXTENDED_HEADER} bytes)")
        if obj.type == tarfile.GNUTYPE_SPARSE:
            raise _BadHeader(f"member {obj.name!r} is a GNU sparse file")
        if buf[345] and (buf[257:265] != _POSIX_MAGIC or buf[508:512] == b"tar\0"):
            # tarfile prefixes the name with this field whatever the format; Go only for ustar/PAX.
            raise _BadHeader(f"member {obj.name!r} has a name prefix outside a ustar header")
        cls.seen.append(obj.type)
        return obj

    def _proc_gnusparse_10(self, *_unused):  # tarfile's hook for a GNU 1.0 sparse map (unbounded read)
        raise _BadHeader(f"member {self.name!r} is a GNU sparse file")


def _header_class() -> type:
    class _Header(_StrictHeader):
        seen: list = []

    return _Header


def _check_headers(member: tarfile.TarInfo, seen: list, global_headers: dict) -> None:
    """One member's extension headers must mean the same to tarfile and to Go's archive/tar."""
    for kind in (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
        if seen.count(kind) > 1:  # tarfile keeps the first, Go the last
            raise _BadHeader(f"member {member.name!r} has {seen.count(kind)} {_EXTENSION_HEADERS[kind]} headers")
    if tarfile.GNUTYPE_LONGNAME in seen and "path" in member.pax_headers:
        raise _BadHeader(f"member {member.name!r} has both a GNU long name and a PAX path")
    if tarfile.GNUTYPE_LONGLINK in seen and "linkpath" in member.pax_headers:
        raise _BadHeader(f"member {member.name!r} has both a GNU long link and a PAX linkpath")
    if any(key.startswith("GNU.sparse.") for key in member.pax_headers):
        raise _BadHeader(f"member {member.name!r} is a GNU sparse file")
    applied = sorted(set(global_headers) - {"comment"})
    if applied:  # tarfile applies a global header to every later member, Go (and Docker) to none
        raise _BadHeader(f"a PAX global header sets {', '.join(applied)} for the members after it")


@dataclass
class _Entry:
    """One member, by its cleaned name: what it is, and its bytes when it is small metadata."""

    raw: str  # the name as written in the archive
    kind: str
    size: int
    data: bytes | None = None


def _kind(member: tarfile.TarInfo) -> str:
    if member.type in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
        return "regular file"
    if member.isdir():
        return "directory"
    if member.issym():
        return "symbolic link"
    if member.islnk():
        return "hard link"
    if member.ischr() or member.isblk():
        return "device"
    if member.isfifo():
        return "fifo"
    return f"member of tar type {member.type!r}"


def _scan(path: str, compression: str) -> dict[str, _Entry]:
    """Every member by cleaned name; the bytes of small metadata members. Refuses any archive the
    engine could read differently: escaping or repeated names, members under a link, odd headers."""
    mode = "r:" if compression == "none" else "r|*"
    limit = os.path.getsize(path) if compression == "none" else None
    header = _header_class()
    entries: dict[str, _Entry] = {}
    total = 0
    try:
        with tarfile.open(path, mode=mode, tarinfo=header) as tar:
            for member in tar:
                seen, header.seen = header.seen, []
                _check_headers(member, seen, tar.pax_headers)
                if len(entries) >= MAX_MEMBERS:
                    raise ArchiveError(f"{path} holds more than {MAX_MEMBERS} members; not an image archive")
                if limit is not None and member.size and member.offset_data + member.size > limit:
                    raise ArchiveError(f"{path} is not a readable image archive: member {member.name!r} declares "
                                       f"{member.size} bytes, more than the archive holds (truncated?)")
                if member.name.startswith("/"):
                    # Docker's loader drops a leading "/", containerd's importer keeps it: the two
                    # engines would read two different names, so neither reading is trusted
                    raise ArchiveError(f"{path}: member {member.name!r} starts with '/' (an absolute name); refused")
                name = clean_name(member.name)
                if name == ".." or name.startswith("../"):
                    raise ArchiveError(f"{path}: member {member.name!r} escapes the archive root; refused")
                if name == ".":
                    if member.isdir():
                        continue  # the root directory itself ("./")
                    raise ArchiveError(f"{path}: member {member.name!r} names the archive root; refused")
                if name in entries:
                    raise ArchiveError(f"{path}: member name {name!r} appears more than once (as "
                                       f"{entries[name].raw!r} and {member.name!r}); the engine would load "
                                       f"the last one, so the archive is refused")
                entry = entries[name] = _Entry(member.name, _kind(member), member.size)
                if entry.kind != "regular file" or member.size > MAX_METADATA_BYTES or not _is_metadata_name(name):
                    continue
                f = tar.extractfile(member)
                if f is None:
                    continue
                first = f.read(1)
                if name.startswith("blobs/") and first != b"{":
                    continue  # a small layer, not a JSON manifest or config
                total += member.size
                if total > MAX_METADATA_TOTAL:
                    raise ArchiveError(f"{path}: more than {MAX_METADATA_TOTAL >> 20} MiB of image metadata")
                entry.data = first + f.read(member.size)
            if tar.fileobj.tell() not in (tar.offset, tar.offset + tarfile.BLOCKSIZE):
                # tarfile stops silently at a header it cannot parse; Go's archive/tar would not
                raise ArchiveError(f"{path}: unreadable tar header at byte {tar.offset}; refused")
    except _BadHeader as exc:
        raise ArchiveError(f"{path}: {exc}; refused") from exc
    except (tarfile.TarError, EOFError, OSError, ValueError, OverflowError, MemoryError) as exc:
        raise ArchiveError(f"{path} is not a readable image archive: {exc.__class__.__name__}: {exc}") from exc
    _check_link_parents(path, entries)
    return entries


def _check_link_parents(path: str, entries: dict[str, _Entry]) -> None:
    """No member may lie under another member that is not a directory (a symlink, typically):
    extracting it would write through the link, to a name this reader does not see."""
    for name, entry in entries.items():
        parts = name.split("/")
        for depth in range(1, len(parts)):
            parent = entries.get("/".join(parts[:depth]))
            if parent is not None and parent.kind != "directory":
                raise ArchiveError(f"{path}: member {entry.raw!r} lies under {parent.raw!r}, which is a "
                                   f"{parent.kind}; refused")


def _metadata(entries: dict[str, _Entry], name: str, path: str) -> bytes | None:
    """The bytes of a metadata member the reader relies on; None when there is no such member.
    It must be a regular file within the size cap: a link, a device or an oversized file is refused."""
    entry = entries.get(name)
    if entry is None:
        return None
    if entry.kind != "regular file":
        raise ArchiveError(f"{path}: {name} (member {entry.raw!r}) is a {entry.kind}, not a regular file; "
                           f"image metadata must be a plain file")
    if entry.size > MAX_METADATA_BYTES:
        raise ArchiveError(f"{path}: {name} (member {entry.raw!r}) is {entry.size} bytes, more than the "
                           f"{MAX_METADATA_BYTES} bytes allowed for image metadata")
    if entry.data is None:
        raise ArchiveError(f"{path}: {name} (member {entry.raw!r}) is not where image metadata is kept, "
                           f"or not a JSON document")
    return entry.data


def _is_metadata_name(name: str) -> bool:
    # docker save: manifest.json, <hex>.json, repositories; OCI layout: index.json, oci-layout,
    # blobs/sha256/<hex> (configs and manifests are small; layers are skipped by size or name).
    if name in ("manifest.json", "index.json", "repositories", "oci-layout"):
        return True
    if name.endswith(".json") and "/" not in name:
        return True
    return name.startswith("blobs/sha256/")


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _loads(name: str, data: bytes, path: str) -> object:
    try:
        return strict_loads(data)
    except ValueError as exc:
        raise ArchiveError(f"{path}: {name} is not valid JSON: {exc}") from exc


def _blob_name(digest: str) -> str:
    algo, _sep, hexpart = digest.partition(":")
    return clean_name(f"blobs/{algo}/{hexpart}")


def read_identity(path: str) -> ArchiveIdentity:
    """The identity the archive itself declares, verified against its own blob digests.

    Refuses (:class:`ArchiveError`, naming the archive and the member) any archive the engine could
    read differently from this reader; see :func:`_scan` and :func:`_metadata`.
    """
    if not os.path.isfile(path):
        raise ArchiveError(f"{path} is not a file")
    compression = compression_of(path)
    if compression == "zstd":
        raise ArchiveError(f"{path} is zstd-compressed, which this reader cannot stream; decompress it first")
    members = _scan(path, compression)
    for name in _ROOT_METADATA:  # what Docker or containerd may read besides what is read here
        _metadata(members, name, path)
    manifest_bytes = _metadata(members, "manifest.json", path)
    if manifest_bytes is None:
        raise ArchiveError(f"{path} has no manifest.json: not a docker-archive image")
    manifest = _loads("manifest.json", manifest_bytes, path)
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        count = len(manifest) if isinstance(manifest, list) else "?"
        raise ArchiveError(f"{path} holds {count} images; an identity archive must hold exactly one")
    entry = manifest[0]
    config_name = clean_name(str(entry.get("Config", "")))
    config_bytes = _metadata(members, config_name, path)
    if config_bytes is None:
        raise ArchiveError(f"{path}: the config {config_name!r} named by manifest.json is missing")
    image_id = _digest(config_bytes)
    declared = config_name.rsplit("/", 1)[-1].removesuffix(".json")
    if declared != image_id.split(":", 1)[1]:
        raise ArchiveError(f"{path}: config {config_name} hashes to {image_id}; the archive is corrupt")
    config = _loads(config_name, config_bytes, path)
    if not isinstance(config, dict):
        raise ArchiveError(f"{path}: {config_name} is not an image config")
    run_config = config.get("config") or {}
    labels = (run_config.get("Labels") or {}) if isinstance(run_config, dict) else None
    if not isinstance(labels, dict):
        raise ArchiveError(f"{path}: {config_name} is not an image config (its labels are not a mapping)")
    tags = entry.get("RepoTags") or []
    if not isinstance(tags, list):
        raise ArchiveError(f"{path}: RepoTags in manifest.json is not a list")
    return ArchiveIdentity(
        path=path,
        size=os.path.getsize(path),
        compression=compression,
        image_id=image_id,
        manifest_digest=_oci_digest(members, path, image_id),
        repo_tags=[str(t) for t in tags],
        architecture=config.get("architecture"),
        labels={str(k): str(v) for k, v in labels.items()},
    )


def _oci_digest(members: dict[str, _Entry], path: str, image_id: str) -> str | None:
    """The digest a containerd-store engine will report, from index.json (None without one)."""
    index_bytes = _metadata(members, "index.json", path)
    if index_bytes is None:
        return None
    index = _loads("index.json", index_bytes, path)
    descriptors = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(descriptors, list) or len(descriptors) != 1 or not isinstance(descriptors[0], dict):
        count = len(descriptors) if isinstance(descriptors, list) else 0
        raise ArchiveError(f"{path}: index.json must name exactly one image, names {count}")
    digest = str(descriptors[0].get("digest", ""))
    blob = _metadata(members, _blob_name(digest), path)
    if blob is None:
        raise ArchiveError(f"{path}: the manifest {digest} named by index.json is missing")
    if _digest(blob) != digest:
        raise ArchiveError(f"{path}: blob {digest} hashes to {_digest(blob)}; the archive is corrupt")
    if _config_of(members, blob, path) not in (image_id, None):
        raise ArchiveError(f"{path}: index.json and manifest.json describe different images")
    return digest


def _config_of(members: dict[str, _Entry], manifest_bytes: bytes, path: str) -> str | None:
    """The config digest an OCI manifest points at; for an index, that of its only manifest."""
    doc = _loads("manifest", manifest_bytes, path)
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("config"), dict):
        return str(doc["config"].get("digest"))
    inner = doc.get("manifests")
    if isinstance(inner, list) and len(inner) == 1 and isinstance(inner[0], dict):
        blob = _metadata(members, _blob_name(str(inner[0].get("digest", ""))), path)
        return _config_of(members, blob, path) if blob else None
    return None
