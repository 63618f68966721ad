"""The deterministic ``.tar.zst`` a context is packed into (`write_archive`).

The archive
    A POSIX tar (ustar headers, with a PAX extended header before an entry whose name or link
    target is over 100 bytes or not ASCII), entries sorted by name, owner 0:0 with empty user and group names, a
    fixed modification time, mode 0o755 for files with any execute bit and 0o644 otherwise
    (symlinks 0o777), ended by two zero blocks and padded to a 10240-byte record; compressed with
    zstd level 3 in multi-threaded mode with jobs of 2 MiB (its output does not depend on the number of
    workers, but differs from single-threaded mode, so at least one worker is always used; the job size
    is fixed, since it changes the output, and small, since each worker holds a few jobs: the packer's
    peak memory is about 60 MiB on any tree, `bench/results/pack_throughput.md`) with a checksum.
    The same tree gives the same bytes wherever and whenever it is packed, with the same
    zstandard (libzstd) version, so the SHA-256 addresses the upload in S3.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from typing import IO, Protocol, cast

import zstandard

from det._collect import DETIGNORE, ContextFile
from det.errors import ContextError
from stratus.contract.context_archive import ARCHIVE_MTIME


class Writable(Protocol):
    """Where the archive goes: a binary file, or anything that takes bytes the same way."""

    def write(self, data: bytes, /) -> int: ...


ZSTD_LEVEL = 3
ZSTD_JOB_SIZE = 2 << 20
MAX_WORKERS = 4

_BLOCK = 512
_RECORD = 20 * _BLOCK
_ZEROS = bytes(_RECORD)
_BATCH_BYTES = 4 << 20
_PIECE = 1 << 20  # a file is read at most this much at a time
_MAX_UINT_FIELD = 8**11 - 1  # the largest size a 12-byte octal field holds
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


def write_archive(files: Sequence[ContextFile], out: Writable) -> None:
    """Write the ``.tar.zst`` of `files` (sorted by name) to `out`, each file read once, a piece at a
    time, and checked against its size: memory stays flat whatever the files' sizes."""
    params = zstandard.ZstdCompressionParameters.from_level(
        ZSTD_LEVEL, threads=_threads(), job_size=ZSTD_JOB_SIZE, write_checksum=True, write_content_size=False
    )
    compressor = zstandard.ZstdCompressor(compression_params=params)
    written = 0
    with compressor.stream_writer(cast(IO[bytes], out), closefd=False) as writer:
        for chunk in _tar_chunks(files):
            writer.write(chunk)
            written += len(chunk)
        end = 2 * _BLOCK
        end += -(written + end) % _RECORD
        writer.write(_ZEROS[:end] if end <= _RECORD else bytes(end))


def archive_bytes(files: Sequence[ContextFile]) -> bytes:
    """The archive in memory (small contexts and tests; `det._context.pack` writes a file)."""
    out = io.BytesIO()
    write_archive(files, out)
    return out.getvalue()


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, value)


_IDS = _octal(0, 8) * 2  # uid, gid
_MAGIC = b"ustar\x0000"
_TAIL = _MAGIC + bytes(_BLOCK - 265)  # magic, then empty uname, gname, devmajor, devminor, prefix
_FIXED_SUM = sum(_IDS) + sum(b" " * 8) + sum(_MAGIC)  # the checksum counts its own field as spaces


def _header(
    name: bytes, mode: int, size: int, typeflag: bytes, linkname: bytes = b"", mtime: int = ARCHIVE_MTIME
) -> bytes:
    """A ustar header block (the layout `tarfile` writes for these fields); names of at most 100 bytes."""
    mode_f, size_f, mtime_f = _octal(mode, 8), _octal(size, 12), _octal(mtime, 12)
    checksum = _FIXED_SUM + sum(name) + sum(mode_f) + sum(size_f) + sum(mtime_f) + typeflag[0] + sum(linkname)
    return b"".join(
        (
            name,
            bytes(100 - len(name)),
            mode_f,
            _IDS,
            size_f,
            mtime_f,
            b"%06o\0 " % checksum,
            typeflag,
            linkname,
            bytes(100 - len(linkname)),
            _TAIL,
        )
    )


def _pax_record(key: str, value: bytes) -> bytes:
    body = b" " + key.encode("ascii") + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode("ascii") + body


def _entry_header(name: str, mode: int, size: int, typeflag: bytes, linkname: str = "") -> bytes:
    """The header block(s) of one entry: a PAX extended header first when a name needs one."""
    try:
        bname = name.encode("utf-8")
        blink = linkname.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ContextError(
            f"the file name {name!r} is not valid UTF-8; rename it or add it to {DETIGNORE}"
        ) from exc
    records = b""
    if len(bname) > 100 or not name.isascii():
        records += _pax_record("path", bname)
        bname = bname[:100]
    if len(blink) > 100 or not linkname.isascii():
        records += _pax_record("linkpath", blink)
        blink = blink[:100]
    if not records:
        return _header(bname, mode, size, typeflag, blink)
    pax = _header(b"././@PaxHeader", 0, len(records), b"x", mtime=0)
    return pax + records + bytes(-len(records) % _BLOCK) + _header(bname, mode, size, typeflag, blink)


def _file_pieces(file: ContextFile) -> Iterator[bytes]:
    """The `file.size` bytes of a file in pieces of at most `_PIECE` bytes, or a ContextError if it
    changed since it was listed (shorter, or longer: one byte past its size is asked for at the end)."""
    try:
        fd = os.open(file.source, _OPEN_FLAGS)
    except OSError as exc:
        raise ContextError(
            f"cannot read {file.source}: {exc.strerror}; fix its permissions or add it to {DETIGNORE}"
        ) from exc
    try:
        left = file.size
        while True:
            try:
                piece = os.read(fd, min(left, _PIECE) + (left <= _PIECE))
            except OSError as exc:
                raise ContextError(
                    f"cannot read {file.source}: {exc.strerror}; fix its permissions or add it to {DETIGNORE}"
                ) from exc
            if len(piece) > left:
                raise _changed(file)
            if not piece:
                if left:
                    raise _changed(file)
                return
            left -= len(piece)
            yield piece
    finally:
        os.close(fd)


def _changed(file: ContextFile) -> ContextError:
    return ContextError(
        f"{file.source} changed while the context was being packed; pack again once it is written"
    )


def _threads() -> int:
    """zstd workers: at least 1, since single-threaded mode (0) writes different bytes; at most
    `MAX_WORKERS`, since each holds its jobs in memory."""
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


def _tar_chunks(files: Sequence[ContextFile]) -> Iterator[bytes | bytearray]:
    batch = bytearray()
    for f in files:
        if f.link_target is not None:
            batch += _entry_header(f.name, 0o777, 0, b"2", f.link_target)
            continue
        if f.size > _MAX_UINT_FIELD:
            raise ContextError(f"{f.source} is too large for a tar entry; add it to {DETIGNORE}")
        batch += _entry_header(f.name, 0o755 if f.executable else 0o644, f.size, b"0")
        for piece in _file_pieces(f):
            if len(piece) >= _BATCH_BYTES:
                yield batch
                batch = bytearray()
                yield piece
            else:
                batch += piece
                if len(batch) >= _BATCH_BYTES:
                    yield batch
                    batch = bytearray()
        batch += _ZEROS[: -f.size % _BLOCK]
        if len(batch) >= _BATCH_BYTES:
            yield batch
            batch = bytearray()
    yield batch
