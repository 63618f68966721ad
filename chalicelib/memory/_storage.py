"""S3 and CloudWatch Logs in memory: objects by key, and a log stream per trial kept in time order."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from chalicelib.domain.records import LogLine

# As in chalicelib.aws.logs: CloudWatch returns at most 10,000 events a call; an event holds ~256 KiB.
_MAX_EVENTS = 10_000
_MAX_EVENT_BYTES = 200_000


class MemoryBlobs:
    """A bucket. Bytes reach it as they reach S3, around the API: tests `put` them where a client would
    PUT to a presigned URL."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes = b"") -> None:
        self.objects[key] = data

    def exists(self, key: str) -> bool:
        return key in self.objects

    def presign_put(self, key: str) -> str:
        return f"memory://{self.bucket}/{key}?method=PUT"

    def presign_get(self, key: str) -> str:
        return f"memory://{self.bucket}/{key}?method=GET"

    def presign_put_checked(self, key: str, sha256: str) -> tuple[str, dict[str, str]]:
        return f"memory://{self.bucket}/{key}?method=PUT", {"x-amz-checksum-sha256": sha256}

    def keys_under(self, prefix: str) -> list[str]:
        return sorted(key for key in self.objects if key.startswith(prefix))

    def sha256_of(self, key: str) -> tuple[str, int] | None:
        data = self.objects.get(key)
        return None if data is None else (hashlib.sha256(data).hexdigest(), len(data))

    def copy(self, source: str, target: str) -> None:
        self.objects[target] = self.objects[source]

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under `prefix`; nothing there is not an error. Returns how many went."""
        gone = [key for key in self.objects if key.startswith(prefix)]
        for key in gone:
            del self.objects[key]
        return len(gone)


class MemoryLogs:
    """A stream of lines per trial, ordered by timestamp; a page token is the position after a page."""

    def __init__(self) -> None:
        self.streams: dict[int, list[LogLine]] = {}

    def put(self, trial_id: int, lines: Sequence[LogLine]) -> None:
        stream = self.streams.setdefault(trial_id, [])
        stream.extend(dataclasses.replace(line, message=line.message[:_MAX_EVENT_BYTES]) for line in lines)
        stream.sort(key=lambda line: line.timestamp)

    def get(
        self, trial_id: int, limit: int, next_token: str | None, tail: int | None
    ) -> tuple[list[LogLine], str | None]:
        stream = self.streams.get(trial_id)
        if stream is None:
            return [], next_token  # no line yet
        count = min(tail or limit, _MAX_EVENTS)
        if next_token:
            start = int(next_token.removeprefix("f/"))
        elif tail is not None:
            start = max(0, len(stream) - count)
        else:
            start = 0
        page = stream[start : start + count]
        return page, f"f/{start + len(page)}"

    def delete(self, trial_id: int) -> None:
        self.streams.pop(trial_id, None)
