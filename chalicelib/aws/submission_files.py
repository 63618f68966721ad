"""S3 for S3-triggered submissions (`chalicelib.services.submission_ports.SubmissionFiles`): a folder's
objects with their sizes, an object's bytes as a stream, and writing one."""

from __future__ import annotations

from typing import IO, Any

from botocore.exceptions import ClientError

from chalicelib.aws import clients
from chalicelib.settings import get_settings


class S3SubmissionFiles:
    def __init__(self) -> None:
        self._s3 = clients.client("s3")
        self._bucket = get_settings().bucket

    def listing(self, prefix: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix):
            found.update(
                {str(item["Key"])[len(prefix) :]: int(item["Size"]) for item in page.get("Contents", [])}
            )
        return found

    def open(self, key: str) -> IO[bytes] | None:
        try:
            body: Any = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return body  # type: ignore[no-any-return]

    def put(self, key: str, data: bytes | IO[bytes], content_type: str) -> None:
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=data, ContentType=content_type)
