"""Pack a context folder into the deterministic ``.tar.zst`` that `det experiment create` uploads.

What is shipped (``.detignore``, ``-i`` includes, symbolic links) is `det._collect`; how the archive
is written (ustar + PAX, sorted, fixed owner and time, zstd) is `det._archive`.

The 95 MiB limit counts the bytes of the files shipped, and is checked before any file is read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from det._archive import write_archive
from det._collect import DETIGNORE, ContextFile, collect
from det.errors import ContextError

__all__ = ["MAX_CONTEXT_BYTES", "ContextFile", "PackedContext", "collect", "pack"]

MAX_CONTEXT_BYTES = 99_614_720
"""95 MiB: the most file bytes a context may ship."""


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
    data = write_archive(files)
    names = [f.name for f in files]
    return PackedContext(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        files=names,
        file_bytes=total,
        num_files=len(names),
    )


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
