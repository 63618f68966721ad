"""A small client for the trial-facing routes of contracts.md §1, and for presigned S3 URLs.

Connection errors and 5xx answers are retried with a short backoff (a few seconds in all): API Gateway
and Lambda have brief hiccups, and every trial-facing route is idempotent. 4xx answers are raised at
once as `ApiCallError` carrying the server's message. Presigned URLs are called without the bearer
token: S3 refuses a request that carries both an `Authorization` header and a query-string signature.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from harness.errors import ApiCallError

log = logging.getLogger("harness.api")
# httpx logs every request at INFO, presigned URLs (and their signatures) included: keep that out of
# the trial's logs unless the user asked for httpx's logs explicitly.
for _name in ("httpx", "httpcore"):
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(logging.WARNING)

DEFAULT_BACKOFF_S: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
API_TIMEOUT = httpx.Timeout(30.0, connect=5.0)  # API Gateway answers within 29 s or not at all
TRANSFER_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
CHUNK_BYTES = 1 << 20


class ApiClient:
    """Calls `base_url` with `Authorization: Bearer <token>`; `transport` lets tests answer in memory."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.BaseTransport | None = None,
        backoff_s: Sequence[float] = DEFAULT_BACKOFF_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._api = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            transport=transport,
            timeout=API_TIMEOUT,
        )
        self._s3 = httpx.Client(transport=transport, timeout=TRANSFER_TIMEOUT)
        self._backoff = tuple(backoff_s)
        self._sleep = sleep

    def get(self, path: str) -> dict[str, Any]:
        return self._json(self._send(self._api, "GET", path, lambda: {}))

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json(self._send(self._api, "POST", path, lambda: {"json": body}))

    def put_file(self, url: str, source: Path) -> None:
        """PUT `source` to a presigned URL, streamed with an explicit Content-Length (S3 needs one)."""
        size = source.stat().st_size
        headers = {"Content-Length": str(size)}
        self._send(self._s3, "PUT", url, lambda: {"content": _chunks(source), "headers": headers})

    def download_file(self, url: str, dest: Path) -> int:
        """GET a presigned URL into `dest`; returns the bytes written."""
        for attempt in range(len(self._backoff) + 1):
            try:
                with self._s3.stream("GET", url) as response:
                    if response.status_code >= 500 and attempt < len(self._backoff):
                        self._wait(attempt, "GET", _redact(url), f"HTTP {response.status_code}")
                        continue
                    if response.is_error:
                        response.read()
                        raise _error(response, "GET", _redact(url))
                    written = 0
                    with dest.open("wb") as out:
                        for chunk in response.iter_bytes(CHUNK_BYTES):
                            out.write(chunk)
                            written += len(chunk)
                    return written
            except httpx.TransportError as e:
                if attempt >= len(self._backoff):
                    raise _unreachable("GET", _redact(url), e) from e
                self._wait(attempt, "GET", _redact(url), repr(e))
        raise AssertionError("unreachable")  # the loop returns or raises

    def close(self) -> None:
        self._api.close()
        self._s3.close()

    def _send(
        self, client: httpx.Client, method: str, url: str, kwargs: Callable[[], dict[str, Any]]
    ) -> httpx.Response:
        shown = _redact(url)
        for attempt in range(len(self._backoff) + 1):
            try:
                response = client.request(method, url, **kwargs())
            except httpx.TransportError as e:
                if attempt >= len(self._backoff):
                    raise _unreachable(method, shown, e) from e
                self._wait(attempt, method, shown, repr(e))
                continue
            if response.status_code >= 500 and attempt < len(self._backoff):
                self._wait(attempt, method, shown, f"HTTP {response.status_code}")
                continue
            if response.is_error:
                raise _error(response, method, shown)
            return response
        raise AssertionError("unreachable")  # the loop returns or raises

    def _wait(self, attempt: int, method: str, url: str, why: str) -> None:
        delay = self._backoff[attempt]
        log.warning("%s %s failed (%s); retrying in %.2f s", method, url, why, delay)
        self._sleep(delay)

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        if not response.content:
            return {}
        try:
            body = response.json()
        except ValueError as e:
            raise ApiCallError(
                f"{response.request.method} {response.request.url.path} answered {response.status_code} "
                f"with a body that is not JSON; check that STRATUS_MASTER points at the Stratus API.",
                status=response.status_code,
            ) from e
        if not isinstance(body, dict):
            raise ApiCallError(
                f"{response.request.method} {response.request.url.path} answered a JSON "
                f"{type(body).__name__}, not an object; the control plane and harness disagree on the contract.",
                status=response.status_code,
            )
        return body


def _chunks(source: Path) -> Iterator[bytes]:
    with source.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            yield chunk


def _redact(url: str) -> str:
    """A URL without its query string: presigned signatures do not belong in logs."""
    return url.split("?", 1)[0]


def _error(response: httpx.Response, method: str, url: str) -> ApiCallError:
    code, message = "", response.text.strip()[:500]
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        code = str(body.get("error", ""))
        message = str(body.get("message", message))
    return ApiCallError(
        f"{message} ({method} {url} answered {response.status_code}{' ' + code if code else ''})",
        status=response.status_code,
        code=code,
    )


def _unreachable(method: str, url: str, e: Exception) -> ApiCallError:
    return ApiCallError(
        f"{method} {url} could not be completed ({e!r}); check STRATUS_MASTER and the network, "
        "then restart the trial."
    )
