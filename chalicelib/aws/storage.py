"""S3: existence checks and presigned URLs. Bytes never pass through the API (API Gateway caps bodies
at 10 MB): the CLI, the agent and the harness move them straight to and from S3."""

from __future__ import annotations

import base64
import hashlib

from botocore.exceptions import ClientError

from chalicelib.aws import clients
from chalicelib.settings import get_settings


class S3Blobs:
    def __init__(self) -> None:
        self._s3 = clients.client("s3")
        self._settings = get_settings()

    def exists(self, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=self._settings.bucket, Key=key)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def put(self, key: str, data: bytes) -> None:
        """Write a small object (a job's credential) from the control plane itself."""
        self._s3.put_object(Bucket=self._settings.bucket, Key=key, Body=data)

    def presign_put(self, key: str) -> str:
        return self._presign("put_object", key)

    def presign_get(self, key: str) -> str:
        return self._presign("get_object", key)

    def presign_put_checked(self, key: str, sha256: str) -> tuple[str, dict[str, str]]:
        checksum = base64.b64encode(bytes.fromhex(sha256)).decode()
        params = {"Bucket": self._settings.bucket, "Key": key, "ChecksumSHA256": checksum}
        expiry = self._settings.presign_expiry_s
        url = str(self._s3.generate_presigned_url("put_object", Params=params, ExpiresIn=expiry))
        return url, {"x-amz-checksum-sha256": checksum}

    def keys_under(self, prefix: str) -> list[str]:
        found: list[str] = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self._settings.bucket, Prefix=prefix
        ):
            found += [str(item["Key"]) for item in page.get("Contents", [])]
        return found

    def sha256_of(self, key: str) -> tuple[str, int] | None:
        try:
            body = self._s3.get_object(Bucket=self._settings.bucket, Key=key)["Body"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        digest, size = hashlib.sha256(), 0
        for chunk in iter(lambda: body.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
        return digest.hexdigest(), size

    def copy(self, source: str, target: str) -> None:
        bucket = self._settings.bucket
        self._s3.copy_object(Bucket=bucket, Key=target, CopySource={"Bucket": bucket, "Key": source})

    def delete(self, key: str) -> None:
        self._s3.delete_object(Bucket=self._settings.bucket, Key=key)

    def _presign(self, operation: str, key: str) -> str:
        params = {"Bucket": self._settings.bucket, "Key": key}
        expiry = self._settings.presign_expiry_s
        return str(self._s3.generate_presigned_url(operation, Params=params, ExpiresIn=expiry))

    def uri(self, key: str) -> str:
        return f"s3://{self._settings.bucket}/{key}"

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under `prefix`; nothing there is not an error. Returns how many went."""
        deleted = 0
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self._settings.bucket, Prefix=prefix):
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                self._s3.delete_objects(Bucket=self._settings.bucket, Delete={"Objects": keys, "Quiet": True})
                deleted += len(keys)
        return deleted
