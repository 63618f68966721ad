"""Hand-made context archives for tests: members of any name or kind (a member escaping its folder, a
link), compressed the way `det` packs a context."""

from __future__ import annotations

import io
import tarfile

import zstandard


def tar_zst(*members: tuple[str, bytes] | tarfile.TarInfo) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    return zstandard.ZstdCompressor().compress(raw.getvalue())


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info
