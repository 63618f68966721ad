"""The submission folder's port in memory, over a `MemoryBlobs` bucket (what tests `put` there)."""

from __future__ import annotations

import io
from typing import IO

from chalicelib.memory._storage import MemoryBlobs


class MemorySubmissionFiles:
    def __init__(self, blobs: MemoryBlobs) -> None:
        self.blobs = blobs
        #: Every object written through `put`, in order (a rewrite of the same bytes shows twice).
        self.writes: list[str] = []

    def listing(self, prefix: str) -> dict[str, int]:
        return {k[len(prefix) :]: len(v) for k, v in self.blobs.objects.items() if k.startswith(prefix)}

    def open(self, key: str) -> IO[bytes] | None:
        data = self.blobs.objects.get(key)
        return None if data is None else io.BytesIO(data)

    def put(self, key: str, data: bytes | IO[bytes], content_type: str) -> None:
        self.blobs.put(key, data if isinstance(data, bytes) else data.read())
        self.writes.append(key)
