"""The context upload of `det experiment create` (a part of `det._client.ApiClient`): ask the API for a
presigned PUT (`POST /contexts`), then stream the packed context to S3 with it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import httpx

from det.errors import ApiError, ConnectionFailedError

# The context goes straight to S3 and may be up to ~95 MiB: allow slow links.
UPLOAD_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
UPLOAD_CHUNK = 256 * 1024

Json = dict[str, Any]


class _Requests(Protocol):
    def _request(self, method: str, path: str, *, json: Any = ...) -> Json: ...


class ContextUploads:
    """Needs `ApiClient`'s transport and request."""

    _transport: httpx.BaseTransport | None

    def request_context_upload(self: _Requests, sha256: str, size: int) -> Json:
        return self._request("POST", "/contexts", json={"sha256": sha256, "size": size})

    def upload(
        self,
        upload: Mapping[str, Any],
        data: bytes | Iterable[bytes],
        size: int | None = None,
        on_chunk: Callable[[int], None] | None = None,
    ) -> None:
        """Send `data` (bytes, or pieces of `size` bytes in all, read as they are sent) to the presigned
        URL of `POST /contexts`, streamed in chunks."""
        url = str(upload["url"])
        headers = {str(k): str(v) for k, v in (upload.get("headers") or {}).items()}
        if isinstance(data, bytes | bytearray):
            whole = bytes(data)
            size = len(whole)
            pieces: Iterable[bytes] = (whole[i : i + UPLOAD_CHUNK] for i in range(0, size, UPLOAD_CHUNK))
        elif size is None:
            raise ValueError("upload: the size of streamed data must be given")
        else:
            pieces = data
        # S3 refuses chunked transfer encoding on a presigned PUT: give the length up front.
        headers["Content-Length"] = str(size)

        def chunks() -> Iterator[bytes]:
            for piece in pieces:
                for start in range(0, len(piece), UPLOAD_CHUNK):
                    chunk = piece[start : start + UPLOAD_CHUNK]
                    yield chunk
                    if on_chunk is not None:
                        on_chunk(len(chunk))

        # A separate client: the URL points at S3, not at the API, and must carry none of its headers.
        with httpx.Client(transport=self._transport, timeout=UPLOAD_TIMEOUT) as s3:
            try:
                response = s3.request(
                    str(upload.get("method") or "PUT"), url, content=chunks(), headers=headers
                )
            except httpx.TransportError as e:
                raise ConnectionFailedError(
                    f"cannot upload the context to {_origin(url)}: {e or type(e).__name__}; "
                    "check your network and retry"
                ) from e
        if response.status_code >= 300:
            raise ApiError(
                f"uploading the context to {_origin(url)} failed with HTTP {response.status_code}"
                f"{_s3_reason(response.text)}; retry, or check the storage configuration of the stack",
                status=response.status_code,
                code="UploadFailed",
            )


def _origin(url: str) -> str:
    parsed = httpx.URL(url)
    return f"{parsed.scheme}://{parsed.netloc.decode()}"


def _s3_reason(body: str) -> str:
    """S3 answers errors in XML: keep its code and message, drop the rest."""
    code = re.search(r"<Code>([^<]*)</Code>", body)
    message = re.search(r"<Message>([^<]*)</Message>", body)
    parts = [m.group(1).strip() for m in (code, message) if m]
    return f" ({': '.join(parts)})" if parts else ""
