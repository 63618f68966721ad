"""What S3-triggered submissions need from the bucket beyond `Blobs` (`chalicelib.services.ports`): the
objects of a submission folder with their sizes, their bytes as a stream, and a way to write an object
(the packed context, `status.json`). `chalicelib.aws.submission_files` implements it over S3,
`chalicelib.memory.MemorySubmissionFiles` in memory."""

from __future__ import annotations

from typing import IO, Protocol


class SubmissionFiles(Protocol):
    def listing(self, prefix: str) -> dict[str, int]:
        """Every object under `prefix`: its key relative to `prefix`, and its size."""
        ...

    def open(self, key: str) -> IO[bytes] | None:
        """The object's bytes as a stream (read them once); None when it is not there."""
        ...

    def put(self, key: str, data: bytes | IO[bytes], content_type: str) -> None: ...
