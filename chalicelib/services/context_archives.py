"""Context archives on the control plane: check one a user dropped into the bucket, or pack plain files
into one, without writing anything to disk but a spooled temporary file.

`check_archive` reads a ``.tar.zst`` once, as a stream: it hashes the compressed bytes (the context's
content address) and refuses, before any of it is used, an archive whose members could leave their
folder, by the rules the harness applies again when it extracts (`harness/_archive.py`): names relative
with no ``..``, only files, folders, symbolic and hard links, no name twice, nothing below a link, a
symbolic link's target relative and inside the folder, a hard link naming an earlier file; and one that
is over `MAX_CONTEXT_BYTES` compressed or `MAX_TAR_BYTES` unpacked (a decompression bomb).

`pack_files` writes the format `det` writes (det/_archive.py): a ustar/PAX tar, entries sorted by name,
owner 0:0 without names, one fixed modification time, zstd level 3 with a checksum. The same files give
the same bytes, so a re-upload of a plain-file submission has the same content address.
"""

from __future__ import annotations

import hashlib
import posixpath
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

import zstandard

from chalicelib.errors import BadRequestError
from chalicelib.services.contexts import MAX_CONTEXT_BYTES
from stratus.contract.context_archive import ARCHIVE_MTIME, MAX_UNPACKED_BYTES, member_kind

#: The most bytes an archive may unpack to (as the harness bounds it).
MAX_TAR_BYTES = MAX_UNPACKED_BYTES
ZSTD_LEVEL = 3
_CHUNK = 1 << 20
_SPOOL_BYTES = 16 << 20


class UnsafeContextError(BadRequestError):
    """A context archive refused (the message names the member and why)."""


@dataclass(frozen=True)
class CheckedArchive:
    sha256: str
    size: int
    members: int


class _Counting:
    """Reads a stream through, hashing and counting what it hands out; refuses past `limit` bytes."""

    def __init__(self, source: IO[bytes], limit: int, what: str) -> None:
        self._source, self._limit, self._what = source, limit, what
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._source.read(_CHUNK if n is None or n < 0 else n)
        self.size += len(data)
        if self.size > self._limit:
            raise UnsafeContextError(f"{self._what} is over the limit of {self._limit:,} bytes")
        self.digest.update(data)
        return data

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


def check_archive(stream: IO[bytes]) -> CheckedArchive:
    """The archive's SHA-256 and size, once every member is known safe; UnsafeContextError otherwise."""
    raw = _Counting(stream, MAX_CONTEXT_BYTES, "the context archive")
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_size=_CHUNK)  # type: ignore[arg-type]
        tar_stream = _Counting(reader, MAX_TAR_BYTES, "the unpacked context")
        count = 0
        with tarfile.open(fileobj=tar_stream, mode="r|") as tar:  # type: ignore[call-overload]
            rules = _MemberRules()
            for member in tar:
                rules.check(member)
                count += 1
        tar_stream.drain()
        raw.drain()
    except zstandard.ZstdError as e:
        raise UnsafeContextError(f"the context archive is not zstd-compressed or is damaged ({e})") from e
    except tarfile.TarError as e:
        raise UnsafeContextError(f"the context archive does not hold a readable tar ({e})") from e
    return CheckedArchive(sha256=raw.digest.hexdigest(), size=raw.size, members=count)


class _MemberRules:
    def __init__(self) -> None:
        self.kinds: dict[str, str] = {}

    def check(self, member: tarfile.TarInfo) -> None:
        name = member.name
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if name.startswith("/") or "\0" in name or ".." in parts:
            raise _refused(name, "escapes its folder (an absolute name, a NUL or a '..')")
        if not parts:
            return  # the root folder's own entry
        normal = "/".join(parts)
        kind = _kind(member)
        if normal in self.kinds:
            raise _refused(name, "appears twice")
        for depth in range(1, len(parts)):
            above = self.kinds.get("/".join(parts[:depth]))
            if above is not None and above != "dir":
                raise _refused(name, f"lies below a {above} of the archive")
        if kind == "symlink":
            target = member.linkname
            landed = posixpath.normpath(posixpath.join(posixpath.dirname(normal), target))
            if target.startswith("/") or landed == ".." or landed.startswith("../"):
                raise _refused(name, f"is a symbolic link to {target!r}, outside its folder")
        if kind == "hardlink" and self.kinds.get(posixpath.normpath(member.linkname)) != "file":
            raise _refused(name, f"is a hard link to {member.linkname!r}, not an earlier file of the archive")
        self.kinds[normal] = kind


def _kind(member: tarfile.TarInfo) -> str:
    kind = member_kind(member)
    if kind is None:
        raise _refused(member.name, "is a device, fifo or other special member, which a context may not hold")
    return kind


def _refused(name: str, why: str) -> UnsafeContextError:
    return UnsafeContextError(f"member {name!r} {why}; the archive is refused")


@dataclass(frozen=True)
class PlainFile:
    """A file of a plain-file context: its name in the archive, its size, and how to read it."""

    name: str
    size: int
    open: Callable[[], IO[bytes] | None]


def pack_files(files: Sequence[PlainFile]) -> tuple[IO[bytes], CheckedArchive]:
    """The ``.tar.zst`` of `files` (a spooled temporary file, at its start) and its SHA-256 and size.
    The caller checks the names (`keys`-safe, relative) and the total size first."""
    out = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115 - returned to the caller
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
    with (
        compressor.stream_writer(out, closefd=False) as writer,
        tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for file in sorted(files, key=lambda f: f.name):
            info = tarfile.TarInfo(file.name)
            info.size, info.mtime, info.mode = file.size, ARCHIVE_MTIME, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            body = file.open()
            if body is None:
                raise FileNotFoundError(f"{file.name} went away while the context was packed")
            tar.addfile(info, body)
    out.seek(0)
    digest, size = hashlib.sha256(), 0
    for chunk in iter(lambda: out.read(_CHUNK), b""):
        digest.update(chunk)
        size += len(chunk)
    out.seek(0)
    return out, CheckedArchive(sha256=digest.hexdigest(), size=size, members=len(files))
