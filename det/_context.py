"""Pack a context folder into the deterministic ``.tar.zst`` that `det experiment create` uploads.

What is shipped (``.detignore``, ``-i`` includes, symbolic links) is `det._collect`; how the archive
is written (ustar + PAX, sorted, fixed owner and time, zstd) is `det._archive`.

The 95 MiB limit counts the bytes of the files shipped, and is checked before any file is read.

The archive streams to a temporary file, hashed as it is written, and is uploaded from there: memory
stays flat whatever the context's size. A context packed before is not packed again to learn its hash:
the manifest cache (`ManifestCache`, in the user's cache folder) keeps, per context folder, the
manifest of what was shipped (each file's name, size, mode, link target, modification and change times
and inode) and the archive's hash and size. When the manifest of the folder as it is now is the same,
`pack` answers the hash without reading a file; the upload packs for real only if the store does not
have that archive. A manifest holding a file modified in the last two seconds is not cached (its
content could still change within the clock's resolution, git's "racily clean" rule).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import zstandard

from det._archive import ZSTD_JOB_SIZE, ZSTD_LEVEL, write_archive
from det._collect import DETIGNORE, ContextFile, collect
from det.errors import ContextError

__all__ = ["MAX_CONTEXT_BYTES", "ContextFile", "ManifestCache", "PackedContext", "collect", "pack"]

MAX_CONTEXT_BYTES = 99_614_720
"""95 MiB: the most file bytes a context may ship."""

#: Changes whenever the archive's bytes for the same files could change (format, compression).
ARCHIVE_FORMAT = f"tar-v1+zstd-{ZSTD_LEVEL}-job{ZSTD_JOB_SIZE}+libzstd-{zstandard.ZSTD_VERSION}"
RACY_S = 2.0
_PIECE = 1 << 20


@dataclass(slots=True, weakref_slot=True)
class PackedContext:
    sha256: str
    """Hex SHA-256 of the archive."""
    size: int
    """Bytes of the archive."""
    files: list[str]
    """Archive names, sorted (files and symlinks)."""
    file_bytes: int
    """Sum of the shipped files' sizes (what the 95 MiB limit counts)."""
    num_files: int
    path: Path | None = None
    """The temporary file holding the archive; None when the manifest cache answered (not packed)."""
    reused: bool = False
    """The manifest cache answered: the folder is as it was when this hash was packed."""
    _cleanup: weakref.finalize | None = field(default=None, repr=False)  # type: ignore[type-arg]

    @property
    def data(self) -> bytes:
        """The whole archive in memory (tests and benchmarks; the CLI streams from `path`)."""
        if self.path is None:
            raise ContextError("the context was not packed (the manifest cache answered); pack it again")
        return self.path.read_bytes()

    def pieces(self) -> Iterator[bytes]:
        """The archive, a piece at a time."""
        if self.path is None:
            raise ContextError("the context was not packed (the manifest cache answered); pack it again")
        with open(self.path, "rb") as file:
            while piece := file.read(_PIECE):
                yield piece

    def own(self) -> PackedContext:
        """Remove the temporary archive when this object is discarded or garbage-collected."""
        if self.path is not None:
            self._cleanup = weakref.finalize(self, _remove, self.path)
        return self

    def discard(self) -> None:
        """Remove the temporary archive."""
        if self._cleanup is not None:
            self._cleanup()
        self.path = None

    def __enter__(self) -> PackedContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


class ManifestCache:
    """Per context folder: the manifest last packed, and its archive's hash and size (a JSON file each,
    named by the hash of the folder's path and its includes)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _entry(self, root: Path, includes: Sequence[Path]) -> Path:
        where = [os.path.realpath(root), *(os.path.realpath(i) for i in includes)]
        return self.folder / (hashlib.sha256("\0".join(where).encode()).hexdigest()[:32] + ".json")

    def lookup(self, root: Path, includes: Sequence[Path], manifest: str) -> tuple[str, int] | None:
        try:
            entry = json.loads(self._entry(root, includes).read_text())
            if entry["manifest"] == manifest and entry["format"] == ARCHIVE_FORMAT:
                return str(entry["sha256"]), int(entry["size"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def store(self, root: Path, includes: Sequence[Path], manifest: str, sha256: str, size: int) -> None:
        entry = {"manifest": manifest, "format": ARCHIVE_FORMAT, "sha256": sha256, "size": size}
        path = self._entry(root, includes)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(entry))
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):  # a cache that cannot be written costs a repack next time
                tmp.unlink(missing_ok=True)
        except BaseException:  # Ctrl-C, SIGTERM (`det._signals`): no half-written entry is left
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise


def cache_folder(environ: Mapping[str, str]) -> Path:
    """Where the manifest cache lives: ``$STRATUS_HOME/cache/contexts``, else
    ``$XDG_CACHE_HOME/stratus/contexts``, else ``~/.cache/stratus/contexts``."""
    if environ.get("STRATUS_HOME"):
        return Path(environ["STRATUS_HOME"]).expanduser() / "cache" / "contexts"
    base = environ.get("XDG_CACHE_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".cache"
    )
    return Path(base) / "stratus" / "contexts"


def manifest_of(files: Sequence[ContextFile]) -> str:
    """A digest of what would be shipped, as the files are now (names, sizes, modes, link targets,
    modification and change times, inodes)."""
    digest = hashlib.sha256()
    for f in files:
        digest.update(
            f"{f.name}\0{f.size}\0{int(f.executable)}\0{f.link_target or ''}\0{f.stamp}\n".encode(
                "utf-8", "surrogateescape"
            )
        )
    return digest.hexdigest()


def pack(root: Path, includes: Sequence[Path] = (), cache: ManifestCache | None = None) -> PackedContext:
    """Pack context folder `root` (and `includes`) into a deterministic ``.tar.zst`` in a temporary file
    (`PackedContext.discard` removes it), or, with a `cache` that knows the folder as it is now, answer
    its hash without packing (`PackedContext.reused`).

    Raises `ContextError` if the folder is missing, or ships more than `MAX_CONTEXT_BYTES` of
    files (checked before any file is read; the message names the five largest).
    """
    root = Path(root)
    started = time.time()
    files = collect(root, includes)
    total = sum(f.size for f in files)
    limit = MAX_CONTEXT_BYTES
    if total > limit:
        raise _too_large(root, files, total, limit)
    names = [f.name for f in files]
    manifest = manifest_of(files) if cache is not None else ""
    if cache is not None:
        known = cache.lookup(root, includes, manifest)
        if known is not None:
            return PackedContext(known[0], known[1], names, total, len(names), reused=True)
    fd, name = tempfile.mkstemp(prefix="stratus-context-", suffix=".tar.zst")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as raw:
            out = _Hashing(raw)
            write_archive(files, out)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    packed = PackedContext(out.sha256.hexdigest(), out.size, names, total, len(names), path).own()
    racy = any(f.stamp[0] / 1e9 >= started - RACY_S for f in files if f.link_target is None)
    if cache is not None and not racy:
        cache.store(root, includes, manifest, packed.sha256, packed.size)
    return packed


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class _Hashing:
    """A binary file that hashes and counts what is written through it."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self._raw.write(data)

    def flush(self) -> None:
        self._raw.flush()


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
