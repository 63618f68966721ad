"""Unpack a context archive (``.tar.zst``) on the compute side, refusing anything that leaves its folder.

Two independent defences:

1. Before anything is written, every member is checked (`check_members`): names must be relative
   with no ``..`` (``./`` prefixes are fine), only regular files, folders, symbolic links and hard
   links are allowed (no devices, fifos or other special members), no name may appear twice, no
   member may sit below a symbolic link, a hard link or a file of the archive (nothing is written
   *through* a link), a symbolic link's target must be relative and, resolved through the other
   links of the archive, stay inside the folder, and a hard link must name an earlier regular
   file of the archive. One bad member refuses the whole archive: nothing is extracted.
2. While extracting, each member goes through `tarfile`'s ``data`` filter (Python ≥ 3.11.4) and
   our own check of where it lands on disk (``realpath`` inside the destination), which also
   covers links that already lie in a destination that was not empty.

Ownership is not restored (files belong to the extracting user), modes keep their execute bits but
lose set-uid/set-gid/sticky and group/other write bits, and files get the extraction time as their
modification time (the archive carries a fixed one).

Errors are `UnsafeArchiveError`, naming the member and why; an archive that cannot be
decompressed or read, or that unpacks to more than `max_bytes`, is refused the same way.
"""

from __future__ import annotations

import copy
import io
import os
import tarfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import zstandard

from stratus.contract.context_archive import MAX_UNPACKED_BYTES, member_kind
from stratus.harness.errors import UnsafeArchiveError

MAX_ARCHIVE_BYTES = MAX_UNPACKED_BYTES
"""The most bytes an archive may unpack to (the tar stream): a bound against decompression bombs."""

_MAX_LINK_HOPS = 40
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def _refuse(member: tarfile.TarInfo, why: str, *, partly_extracted: bool = False) -> UnsafeArchiveError:
    done = "extraction stopped before it" if partly_extracted else "nothing was extracted"
    return UnsafeArchiveError(f"refused the context archive: member {member.name!r} {why}; {done}")


def _parts(name: str) -> list[str] | None:
    """The components of a relative posix name without ``.``/empty ones; None if it has ``..``."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return None if ".." in parts else parts


def _kind(member: tarfile.TarInfo) -> str:
    kind = member_kind(member)
    if kind is not None:
        return kind
    what = {
        tarfile.CHRTYPE: "a character device",
        tarfile.BLKTYPE: "a block device",
        tarfile.FIFOTYPE: "a fifo",
    }.get(member.type, f"a special member (type {member.type!r})")
    raise _refuse(member, f"is {what}, which a context may not hold")


def _resolve(start: list[str], target: str, links: dict[str, str], member: tarfile.TarInfo) -> list[str]:
    """Resolve `target` from folder `start` through the archive's symlinks; refuse if it leaves the root."""
    stack = list(start)
    pending = target.split("/")
    hops = 0
    pending.reverse()
    while pending:
        comp = pending.pop()
        if comp in ("", "."):
            continue
        if comp == "..":
            if not stack:
                raise _refuse(member, f"is a symbolic link to {target!r}, which leads outside the folder")
            stack.pop()
            continue
        stack.append(comp)
        link = links.get("/".join(stack))
        if link is not None:
            hops += 1
            if hops > _MAX_LINK_HOPS:
                raise _refuse(member, f"is a symbolic link to {target!r}, which loops")
            if link.startswith("/"):
                raise _refuse(
                    member, f"is a symbolic link to {target!r}, which goes through an absolute link"
                )
            stack.pop()
            pending.extend(reversed(link.split("/")))
    return stack


def check_members(members: Iterable[tarfile.TarInfo]) -> list[tuple[tarfile.TarInfo, str]]:
    """Check every member (see the module docstring); return (member, normalised name) pairs.

    The root folder entry (``./``) is dropped. Raises `UnsafeArchiveError` on the first bad member.
    """
    kinds: dict[str, str] = {}
    links: dict[str, str] = {}
    checked: list[tuple[tarfile.TarInfo, str]] = []
    for member in members:
        name = member.name
        if name.startswith("/"):
            raise _refuse(member, "has an absolute path")
        if "\0" in name:
            raise _refuse(member, "has a NUL in its name")
        parts = _parts(name)
        if parts is None:
            raise _refuse(member, "has a '..' component, which leads outside the folder")
        kind = _kind(member)
        if not parts:
            if kind != "dir":
                raise _refuse(member, "has an empty name")
            continue
        norm = "/".join(parts)
        if norm in kinds:
            raise _refuse(member, "appears twice in the archive")
        if kind == "symlink":
            if not member.linkname:
                raise _refuse(member, "is a symbolic link with an empty target")
            if member.linkname.startswith("/"):
                raise _refuse(member, f"is a symbolic link to the absolute path {member.linkname!r}")
            links[norm] = member.linkname
        elif kind == "hardlink":
            target = _parts(member.linkname)
            if member.linkname.startswith("/") or target is None or not target:
                raise _refuse(member, f"is a hard link to {member.linkname!r}, outside the folder")
            if kinds.get("/".join(target)) != "file":
                raise _refuse(
                    member,
                    f"is a hard link to {member.linkname!r}, which is not an earlier file of the archive",
                )
        kinds[norm] = kind
        checked.append((member, norm))

    for member, norm in checked:
        parts = norm.split("/")
        for i in range(1, len(parts)):
            above = kinds.get("/".join(parts[:i]))
            if above not in (None, "dir"):
                raise _refuse(
                    member, f"lies below {'/'.join(parts[:i])!r}, which is a {above} in the archive"
                )
        if member.issym():
            _resolve(parts[:-1], member.linkname, links, member)
    return checked


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class _Landing:
    """Our own check of where each member lands on disk at the moment it is written.

    It sees what the archive checks cannot: links already in a destination that was not empty.
    Folders found inside the destination are remembered, so a folder is resolved once, not once
    per file in it.
    """

    def __init__(self, dest_real: str) -> None:
        self.dest = dest_real
        self.safe_folders = {dest_real}

    def check(self, member: tarfile.TarInfo) -> None:
        path = os.path.join(self.dest, member.name)
        folder = os.path.dirname(path)
        if folder not in self.safe_folders:
            real = os.path.realpath(folder)
            if not _inside(real, self.dest):
                raise self._outside(member, real)
            self.safe_folders.add(folder)
        if os.path.islink(path):  # writing there would follow the link
            real = os.path.realpath(path)
            if not _inside(real, self.dest):
                raise self._outside(member, real)
        if member.issym():
            pointee = os.path.realpath(os.path.join(folder, member.linkname))
            if not _inside(pointee, self.dest):
                raise _refuse(
                    member,
                    f"is a symbolic link that resolves to {pointee}, outside {self.dest}",
                    partly_extracted=True,
                )
        elif member.islnk():
            pointee = os.path.realpath(os.path.join(self.dest, member.linkname))
            if not _inside(pointee, self.dest):
                raise _refuse(
                    member, f"is a hard link to {pointee}, outside {self.dest}", partly_extracted=True
                )

    def _outside(self, member: tarfile.TarInfo, real: str) -> UnsafeArchiveError:
        return _refuse(member, f"would be written into {real}, outside {self.dest}", partly_extracted=True)


def _read_tar(archive: bytes | Path, max_bytes: int) -> io.BytesIO:
    source: IO[bytes]
    try:
        source = open(archive, "rb") if isinstance(archive, Path) else io.BytesIO(archive)  # noqa: SIM115
    except OSError as exc:
        raise UnsafeArchiveError(f"cannot read the context archive {archive!s}: {exc.strerror}") from exc
    with source:
        if source.read(4) != _ZSTD_MAGIC:
            raise UnsafeArchiveError(
                "refused the context archive: it is not zstd-compressed; nothing was extracted"
            )
        source.seek(0)
        out = io.BytesIO()
        dctx = zstandard.ZstdDecompressor()
        frame = dctx.decompressobj()
        in_frame = False
        try:
            # Small input steps bound what one step can unpack (a decompression bomb) before the
            # size check; a frame that never ends is a truncated upload.
            while chunk := source.read(8192):
                while chunk:
                    out.write(frame.decompress(chunk))
                    in_frame = not frame.eof
                    if frame.eof:
                        chunk = frame.unused_data
                        frame = dctx.decompressobj()
                    else:
                        chunk = b""
                if out.tell() > max_bytes:
                    raise UnsafeArchiveError(
                        f"refused the context archive: it unpacks to more than {max_bytes:,} bytes; nothing was extracted"
                    )
        except zstandard.ZstdError as exc:
            raise UnsafeArchiveError(
                f"refused the context archive: it cannot be decompressed ({exc}); nothing was extracted"
            ) from exc
        if in_frame:
            raise UnsafeArchiveError(
                "refused the context archive: it is truncated (its zstd frame does not end); nothing was extracted"
            )
    out.seek(0)
    return out


def _legacy_filter(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """What the data filter does to attributes, for a Python without it (before 3.11.4)."""
    member = copy.copy(member)
    member.uid = member.gid = -1
    member.uname = member.gname = ""
    member.mtime = int(time.time())
    if member.isreg() or member.islnk():
        mode = member.mode & 0o755
        if not mode & 0o100:
            mode &= ~0o111
        member.mode = mode | 0o600
    elif member.isdir():
        member.mode = 0o755
    return member


def extract(archive: bytes | Path, dest: Path, *, max_bytes: int = MAX_ARCHIVE_BYTES) -> list[str]:
    """Unpack `archive` (the ``.tar.zst`` bytes, or a path to it) into folder `dest` (created if missing).

    Returns the names of the files and links written, in archive order. Raises
    `UnsafeArchiveError` (having written nothing) if any member could escape `dest`.
    """
    buf = _read_tar(archive, max_bytes)
    try:
        tar = tarfile.open(fileobj=buf, mode="r:")  # noqa: SIM115 - closed by the `with` below
    except tarfile.TarError as exc:
        raise UnsafeArchiveError(
            f"refused the context archive: it is not a tar archive ({exc}); nothing was extracted"
        ) from exc
    with tar:
        tar.errorlevel = 2
        try:
            members = tar.getmembers()
        except tarfile.TarError as exc:
            raise UnsafeArchiveError(
                f"refused the context archive: it is damaged ({exc}); nothing was extracted"
            ) from exc
        checked = check_members(members)

        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        dest_real = os.path.realpath(dest)
        landing = _Landing(dest_real)
        wanted = []
        for member, norm in checked:
            # What the data filter would change anyway, done in place so that it has nothing
            # left to copy: no owners restored, and the extraction time as modification time.
            member.name = norm
            member.uid = member.gid = member.uname = member.gname = member.mtime = None  # type: ignore[assignment]
            wanted.append(member)

        def landing_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
            landing.check(member)
            return tarfile.data_filter(member, path)

        try:
            if _HAS_DATA_FILTER:
                tar.extractall(dest_real, members=wanted, filter=landing_filter, numeric_owner=True)
            else:  # pragma: no cover - Python < 3.11.4
                for member in wanted:
                    landing.check(member)
                    tar.extract(_legacy_filter(member), dest_real, numeric_owner=True)
        except tarfile.TarError as exc:  # the data filter's refusals are FilterError (a TarError)
            raise UnsafeArchiveError(
                f"refused a context archive member while extracting: {exc}; extraction stopped there"
            ) from exc
    return [m.name for m in wanted if not m.isdir()]
