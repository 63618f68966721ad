"""Pack a context folder into the deterministic ``.tar.zst`` that `det experiment create` uploads.

What is shipped
    Every regular file under the context folder, except:

    * ``__pycache__/`` and ``.git`` folders, ``*.pyc`` and ``*.pyo`` files (always, even when a
      ``.detignore`` line tries to re-include them; a ``.git`` *file*, as in git worktrees and
      submodules, is left out too);
    * the ``.detignore`` file at the context root itself;
    * whatever ``.detignore`` at the context root excludes. Its lines follow git's ``.gitignore``
      rules exactly (checked against ``git ls-files --others --exclude-from`` by a differential
      test): ``#`` comments, ``!`` negation, a trailing ``/`` for folders only, a ``/`` anywhere but
      at the end anchors the pattern at the root, otherwise it matches a name at any depth, ``*``,
      ``?``, ``[a-z]``, ``**/``, ``/**/``, ``/**``. As in git, a file inside an excluded folder cannot
      be re-included, and excluded folders are never walked (a large ignored ``data/`` costs nothing);
    * sockets, fifos and device nodes (skipped).

    Folders themselves are not archive entries (like git, an empty folder is not shipped).

Includes (``-i PATH``)
    A file or folder outside the context is shipped under its own name at the top of the archive:
    ``-i ../data`` ships ``data/...``. The include itself is always shipped; the always-ignored
    names and the root ``.detignore`` apply below it, matched against the archive path
    (``data/*.bin`` in ``.detignore`` drops ``.bin`` files of the included ``data``). A name that
    is already a top-level entry of the context (or of another include) is a `ContextError`.

Symbolic links (the rule: the archive never holds a link that leaves it)
    ``.detignore`` sees a link to a folder as a folder (``data/`` drops a ``data`` link to a
    dataset), any other link as a file. Then:

    * a link whose target resolves inside the tree it was found in (the context, or the included
      folder) is stored as a symlink, with a relative target; a link to a folder is not walked;
    * a link whose target resolves outside that tree is followed: the file's contents (or the
      folder's files) are shipped under the link's name, as if they were there. A link that
      leads back into a folder being walked (``up -> ..``) is a `ContextError`;
    * a dangling link (or a link loop) is skipped: it could not be used on the other side either
      (editor lock files such as ``.#notes.md`` are dangling links).

The archive
    A POSIX tar (ustar headers, with a PAX extended header before an entry whose name or link
    target is over 100 bytes or not ASCII), entries sorted by name, owner 0:0 with empty user and group names, a
    fixed modification time, mode 0o755 for files with any execute bit and 0o644 otherwise
    (symlinks 0o777), ended by two zero blocks and padded to a 10240-byte record; compressed with
    zstd level 3 in multi-threaded mode (its output does not depend on the number of workers, but
    differs from single-threaded mode, so at least one worker is always used) with a checksum.
    The same tree gives the same bytes wherever and whenever it is packed, with the same
    zstandard (libzstd) version, so the SHA-256 addresses the upload in S3.

The 95 MiB limit counts the bytes of the files shipped, and is checked before any file is read.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import zstandard

from det._ignore import IgnoreRules
from det.errors import ContextError

MAX_CONTEXT_BYTES = 99_614_720
"""95 MiB: the most file bytes a context may ship."""

DETIGNORE = ".detignore"
ZSTD_LEVEL = 3
ARCHIVE_MTIME = 1_577_836_800
"""2020-01-01T00:00:00Z: the modification time of every entry (after 1980, so zip accepts it)."""

_ALWAYS_IGNORED_DIRS = frozenset({"__pycache__", ".git"})
_ALWAYS_IGNORED_FILES = frozenset({".git"})
_ALWAYS_IGNORED_SUFFIXES = (".pyc", ".pyo")

_BLOCK = 512
_RECORD = 20 * _BLOCK
_ZEROS = bytes(_RECORD)
_BATCH_BYTES = 4 << 20
_MAX_UINT_FIELD = 8**11 - 1  # the largest size a 12-byte octal field holds
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class ContextFile:
    """One archive entry: a regular file, or a symlink when `link_target` is set."""

    name: str
    """The archive name: posix, relative, no ``..``."""
    source: str
    """The file's path on disk, where its contents are read from (for a followed link: the link,
    which `open` follows). A str, not a Path: building 20,000 Path objects costs more than the walk."""
    size: int
    """Bytes of contents; 0 for a symlink."""
    executable: bool = False
    link_target: str | None = None
    """For a symlink: its target, relative to the link's folder, staying inside the archive."""

    @property
    def is_symlink(self) -> bool:
        return self.link_target is not None


@dataclass(frozen=True, slots=True)
class PackedContext:
    data: bytes
    """The ``.tar.zst`` archive."""
    sha256: str
    """Hex SHA-256 of `data`."""
    files: list[str]
    """Archive names, sorted (files and symlinks)."""
    file_bytes: int
    """Sum of the shipped files' sizes (what the 95 MiB limit counts)."""
    num_files: int


# --------------------------------------------------------------------------------------------------
# collect


def _always_ignored(name: str, is_dir: bool) -> bool:
    if is_dir:
        return name in _ALWAYS_IGNORED_DIRS or name.endswith(_ALWAYS_IGNORED_SUFFIXES)
    return name in _ALWAYS_IGNORED_FILES or name.endswith(_ALWAYS_IGNORED_SUFFIXES)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class _Walker:
    def __init__(self, rules: IgnoreRules, out: list[ContextFile]) -> None:
        self.rules = rules
        self.out = out

    def walk(self, folder: str, prefix: str, tree: str, tree_name: str, stack: tuple[str, ...]) -> None:
        """Walk real folder `folder`, whose archive name is `prefix` (``""`` or ending in ``/``).

        `tree` is the real path of the context (or include) the folder belongs to and
        `tree_name` its archive name; `stack` the real folders being walked, for loop detection.
        """
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise ContextError(
                f"cannot list {folder}: {exc.strerror}; fix its permissions or add it to {DETIGNORE}"
            ) from exc
        rules = self.rules
        for entry in entries:
            name = entry.name
            rel = prefix + name
            if entry.is_symlink():
                self._link(entry, rel, tree, tree_name, stack)
            elif entry.is_dir(follow_symlinks=False):
                if _always_ignored(name, True) or (rules and rules.excluded(rel, True)):
                    continue
                self.walk(entry.path, rel + "/", tree, tree_name, (*stack, entry.path))
            elif entry.is_file(follow_symlinks=False):
                if _always_ignored(name, False) or (rules and rules.excluded(rel, False)):
                    continue
                st = entry.stat(follow_symlinks=False)
                self.out.append(ContextFile(rel, entry.path, st.st_size, bool(st.st_mode & 0o111)))

    def _link(
        self, entry: os.DirEntry[str], rel: str, tree: str, tree_name: str, stack: tuple[str, ...]
    ) -> None:
        try:
            real = os.path.realpath(entry.path, strict=True)
            st = os.stat(real)
        except (OSError, RuntimeError):
            return  # dangling, or a loop: skipped
        is_dir = stat.S_ISDIR(st.st_mode)
        name = entry.name
        # A link to a folder is matched as a folder ("data/" drops a "data" link to a dataset).
        if _always_ignored(name, is_dir) or (self.rules and self.rules.excluded(rel, is_dir)):
            return
        if _inside(real, tree):
            target = os.path.relpath(real, tree)
            target_name = tree_name if target == "." else posixpath.join(tree_name, *target.split(os.sep))
            link_dir = posixpath.dirname(rel)
            link_target = posixpath.relpath(target_name or ".", link_dir or ".")
            self.out.append(ContextFile(rel, entry.path, 0, False, link_target))
        elif is_dir:
            if any(_inside(folder, real) for folder in stack):
                raise ContextError(
                    f"the symbolic link {entry.path} points to {real}, which contains the folder being packed; "
                    f"remove the link or add '{rel}' to {DETIGNORE}"
                )
            self.walk(real, rel + "/", real, rel, (*stack, real))
        elif stat.S_ISREG(st.st_mode):
            self.out.append(ContextFile(rel, entry.path, st.st_size, bool(st.st_mode & 0o111)))


def _include_name(include: Path) -> str:
    name = Path(os.path.abspath(include)).name
    if not name:
        raise ContextError(
            f"cannot include {include}: it has no name to ship it under; include a folder below it"
        )
    return name


def collect(root: Path, includes: Sequence[Path] = ()) -> list[ContextFile]:
    """The files to ship from context folder `root` plus `includes`, sorted by archive name.

    See the module docstring for the rules (``.detignore``, includes, symbolic links).
    """
    root = Path(root)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise ContextError(f"the context folder {root} {what}; pass the folder that holds your model code")
    rules = IgnoreRules.from_file(root / DETIGNORE)
    out: list[ContextFile] = []
    walker = _Walker(rules, out)
    real_root = os.path.realpath(root)
    walker.walk(real_root, "", real_root, "", (real_root,))
    out[:] = [f for f in out if f.name != DETIGNORE]

    owners = {top: str(root / top) for top in {f.name.partition("/")[0] for f in out}}
    for include in includes:
        include = Path(include)
        name = _include_name(include)
        if name in owners:
            raise ContextError(
                f"-i {include} would be shipped as '{name}', which {owners[name]} already is; "
                f"rename one of them or add '/{name}' to {root / DETIGNORE}"
            )
        try:
            real = os.path.realpath(include, strict=True)
            st = os.stat(real)
        except (OSError, RuntimeError) as exc:
            raise ContextError(
                f"cannot include {include}: it does not exist or cannot be read; check the path"
            ) from exc
        owners[name] = str(include)
        if stat.S_ISDIR(st.st_mode):
            walker.walk(real, name + "/", real, name, (real,))
        elif stat.S_ISREG(st.st_mode):
            out.append(ContextFile(name, os.fspath(include), st.st_size, bool(st.st_mode & 0o111)))
        else:
            raise ContextError(f"cannot include {include}: it is neither a file nor a folder")
    out.sort(key=lambda f: f.name)
    return out


# --------------------------------------------------------------------------------------------------
# pack


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _too_large(root: Path, files: Sequence[ContextFile], total: int, limit: int) -> ContextError:
    largest = sorted(files, key=lambda f: (-f.size, f.name))[:5]
    listing = ", ".join(f"{f.name} ({_human(f.size)})" for f in largest)
    return ContextError(
        f"the context {root} holds {_human(total)} ({total:,} bytes) of files, over the limit of "
        f"{_human(limit)} ({limit:,} bytes); the largest are {listing}: add large files or folders to "
        f"{root / DETIGNORE} (or ship data another way)"
    )


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


def _read_exact(file: ContextFile) -> bytes:
    """The `file.size` bytes of a file, or a ContextError if it changed since it was listed."""
    try:
        fd = os.open(file.source, _OPEN_FLAGS)
    except OSError as exc:
        raise ContextError(
            f"cannot read {file.source}: {exc.strerror}; fix its permissions or add it to {DETIGNORE}"
        ) from exc
    try:
        data = os.read(fd, file.size + 1)
        if len(data) < file.size:  # a short read of a big file: read the rest
            parts = [data]
            got = len(data)
            while got <= file.size:
                chunk = os.read(fd, file.size + 1 - got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
            data = b"".join(parts)
    except OSError as exc:
        raise ContextError(
            f"cannot read {file.source}: {exc.strerror}; fix its permissions or add it to {DETIGNORE}"
        ) from exc
    finally:
        os.close(fd)
    if len(data) != file.size:
        raise ContextError(
            f"{file.source} changed while the context was being packed; pack again once it is written"
        )
    return data


def _threads() -> int:
    """zstd workers: at least 1, since single-threaded mode (0) writes different bytes."""
    return max(1, os.cpu_count() or 1)


def _tar_chunks(files: Sequence[ContextFile]) -> Iterator[bytes | bytearray]:
    batch = bytearray()
    for f in files:
        if f.link_target is not None:
            batch += _entry_header(f.name, 0o777, 0, b"2", f.link_target)
            continue
        if f.size > _MAX_UINT_FIELD:
            raise ContextError(f"{f.source} is too large for a tar entry; add it to {DETIGNORE}")
        batch += _entry_header(f.name, 0o755 if f.executable else 0o644, f.size, b"0")
        data = _read_exact(f)
        if len(data) >= _BATCH_BYTES:
            yield batch
            batch = bytearray()
            yield data
        else:
            batch += data
        batch += _ZEROS[: -f.size % _BLOCK]
        if len(batch) >= _BATCH_BYTES:
            yield batch
            batch = bytearray()
    yield batch


def pack(root: Path, includes: Sequence[Path] = ()) -> PackedContext:
    """Pack context folder `root` (and `includes`) into a deterministic ``.tar.zst``.

    Raises `ContextError` if the folder is missing, or ships more than `MAX_CONTEXT_BYTES` of
    files (checked before any file is read; the message names the five largest).
    """
    root = Path(root)
    files = collect(root, includes)
    total = sum(f.size for f in files)
    limit = MAX_CONTEXT_BYTES
    if total > limit:
        raise _too_large(root, files, total, limit)

    out = io.BytesIO()
    compressor = zstandard.ZstdCompressor(
        level=ZSTD_LEVEL, threads=_threads(), write_checksum=True, write_content_size=False
    )
    written = 0
    with compressor.stream_writer(out, closefd=False) as writer:
        for chunk in _tar_chunks(files):
            writer.write(chunk)
            written += len(chunk)
        end = 2 * _BLOCK
        end += -(written + end) % _RECORD
        writer.write(_ZEROS[:end] if end <= _RECORD else bytes(end))
    data = out.getvalue()
    names = [f.name for f in files]
    return PackedContext(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        files=names,
        file_bytes=total,
        num_files=len(names),
    )
