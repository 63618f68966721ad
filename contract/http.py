"""One HTTP session with the Stratus API, for the compute side (the trial's core API, the agent, the
launchers' rendezvous): JSON calls under a bearer token, presigned S3 transfers without it, one retry
policy and one error parser. Standard library only: a trial's image need not have httpx.

- A failed call raises `HttpCallError` (`stratus.contract.errors`): ``status`` is the answer's (``NO_ANSWER``, 0,
  if none came) and ``body`` the API's error body, parsed by `ErrorBody.parse` whatever answered.
- `RetryPolicy` says which failures are worth asking again (no answer, 5xx, 408, 425, 429: the
  control plane is busy or restarting; every other refusal is permanent, see `is_permanent`), how long
  to wait between attempts (growing), and when to stop (a number of attempts, a deadline, or the
  caller's own ``stop()`` / ``wait()``). The wait and the clock are injected, so tests never sleep.
- Presigned URLs are called without the bearer token (S3 refuses a request with both an
  ``Authorization`` header and a query-string signature), stream files in chunks (a PUT gives its
  ``Content-Length``: S3 refuses chunked uploads), and appear in messages and logs without their query
  string.
- ``transport`` reaches the network (`PooledTransport`, connections kept between calls, by default;
  `UrllibTransport`) or answers in memory (`InMemoryTransport`).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from stratus.contract.errors import NO_ANSWER, ErrorBody, HttpCallError, NoAnswerError, is_permanent
from stratus.contract.transport import (
    CHUNK_BYTES,
    InMemoryTransport,
    PooledTransport,
    Request,
    Response,
    Transport,
    UrllibTransport,
    redact,
)
from stratus.contract.versions import VERSION, VERSION_HEADER

__all__ = [
    "InMemoryTransport",
    "PooledTransport",
    "Request",
    "Response",
    "RetryPolicy",
    "Session",
    "Transport",
    "UrllibTransport",
    "redact",
]

log = logging.getLogger("stratus.contract.http")

T = TypeVar("T")

API_TIMEOUT_S = 30.0  # API Gateway answers within 29 s or not at all
TRANSFER_TIMEOUT_S = 120.0  # between two chunks of a presigned transfer, not for the whole of it
#: How much of an error answer is read: enough for any error body, not a whole object someone PUT.
ERROR_BODY_BYTES = 64 * 1024


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def http_status(error: Exception) -> int | None:
    """The status of an `HttpCallError` (``NO_ANSWER`` if none came); None for any other exception."""
    return error.status if isinstance(error, HttpCallError) else None


@dataclass(frozen=True)
class RetryPolicy:
    """Ask again after a transient failure, waiting ``first_delay_s``, then ``growth`` times longer each
    time up to ``max_delay_s``; stop after ``max_attempts`` (None: no limit) or once ``deadline_s`` has
    passed since the first attempt (None: no deadline)."""

    first_delay_s: float = 0.25
    growth: float = 2.0
    max_delay_s: float = 2.0
    max_attempts: int | None = 5
    deadline_s: float | None = None

    @staticmethod
    def retries(status: int) -> bool:
        """Whether a failure with this status is worth asking again: no answer, 5xx, 408, 425, 429."""
        return status == NO_ANSWER or status >= 500 or (400 <= status < 500 and not is_permanent(status))

    def delays(self) -> Iterator[float]:
        """The waits between attempts: growing, then steady at ``max_delay_s``."""
        delay = self.first_delay_s
        while True:
            yield min(delay, self.max_delay_s)
            delay *= self.growth

    def once(self) -> RetryPolicy:
        """This policy without retries: one attempt."""
        return replace(self, max_attempts=1)

    def call(
        self,
        attempt: Callable[[], T],
        *,
        status_of: Callable[[Exception], int | None] = http_status,
        wait: Callable[[float], object] = _sleep,
        clock: Callable[[], float] = time.monotonic,
        stop: Callable[[], bool] | None = None,
        on_retry: Callable[[int, Exception, float], None] | None = None,
    ) -> T:
        """``attempt()`` until it returns; a failure is raised as is when ``status_of`` gives it no status
        (not an HTTP failure), when its status is not retried, when the attempts or the deadline are
        spent, when ``stop()`` says so, or when ``wait(delay)`` returns true (woken to give up).
        ``on_retry(attempt_number, error, delay)`` hears of each retry before its wait."""
        started = clock()
        delays = self.delays()
        for number in itertools.count(1):
            try:
                return attempt()
            except Exception as error:
                status = status_of(error)
                if status is None or not self.retries(status):
                    raise
                if self.max_attempts is not None and number >= self.max_attempts:
                    raise
                if stop is not None and stop():
                    raise
                delay = next(delays)
                if self.deadline_s is not None:
                    left = self.deadline_s - (clock() - started)
                    if left <= 0:
                        raise
                    delay = min(delay, left)
                if on_retry is not None:
                    on_retry(number, error, delay)
                if wait(delay):
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises


class Session:
    """Calls ``base_url`` with ``Authorization: Bearer <token>`` (none if ``token`` is empty), retrying
    under ``retry``; ``wait`` (by default a sleep) and ``clock`` pace the retries. Thread-safe."""

    def __init__(
        self,
        base_url: str,
        token: str = "",
        *,
        transport: Transport | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = API_TIMEOUT_S,
        transfer_timeout_s: float = TRANSFER_TIMEOUT_S,
        wait: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry if retry is not None else RetryPolicy()
        self._token = token
        self._transport = transport if transport is not None else PooledTransport()
        self._timeout_s = timeout_s
        self._transfer_timeout_s = transfer_timeout_s
        self._wait = wait if wait is not None else _sleep
        self._clock = clock
        self._closed = threading.Event()

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """``method path`` (below ``base_url``) with ``body`` as JSON; the answer's JSON object ({} for an
        empty answer). Raises `HttpCallError`."""
        # The caller's version: the API refuses a compute package too old for it (`stratus.contract.versions`).
        headers = {"accept": "application/json", VERSION_HEADER.lower(): VERSION}
        if self._token:
            headers["authorization"] = f"Bearer {self._token}"
        data = None
        if body is not None:
            data = json.dumps(body, allow_nan=False).encode()
            headers["content-type"] = "application/json"
        request = Request(method, self.base_url + path, headers, data)
        timeout = self._timeout_s if timeout_s is None else timeout_s

        def attempt() -> dict[str, Any]:
            with self._send(request, timeout) as response:
                return _json_object(response, request.what)

        return self._retrying(retry, attempt)

    def put_file(self, url: str, source: Path, *, headers: Mapping[str, str] | None = None) -> None:
        """PUT ``source`` to a presigned URL, streamed in chunks with its Content-Length."""
        size = source.stat().st_size
        sent = {
            "content-type": "application/octet-stream",
            **{k.lower(): v for k, v in (headers or {}).items()},
            "content-length": str(size),
        }

        def attempt() -> None:
            self._send(Request("PUT", url, dict(sent), _chunks(source)), self._transfer_timeout_s).close()

        self._retrying(None, attempt)

    def download(
        self,
        url: str,
        dest: Path,
        *,
        retry: RetryPolicy | None = None,
        wait: Callable[[float], object] | None = None,
        on_chunk: Callable[[int], None] | None = None,
        on_retry: Callable[[int, Exception, float], None] | None = None,
    ) -> int:
        """GET a presigned URL into ``dest``, streamed; returns the bytes written. ``on_chunk(n)`` hears
        of each chunk written (and may raise to stop); ``wait`` and ``on_retry`` override the session's."""
        request = Request("GET", url)

        def attempt() -> int:
            written = 0
            with self._send(request, self._transfer_timeout_s) as response, dest.open("wb") as out:
                for chunk in response.iter_bytes(CHUNK_BYTES):
                    out.write(chunk)
                    written += len(chunk)
                    if on_chunk is not None:
                        on_chunk(len(chunk))
            return written

        return self._retrying(retry, attempt, wait=wait, on_retry=on_retry)

    def close(self) -> None:
        """Refuse further calls (each then gets no answer); idempotent."""
        self._closed.set()
        self._transport.close()

    def _send(self, request: Request, timeout_s: float) -> Response:
        """One attempt: the response if its status is below 300, else `HttpCallError` with its body."""
        if self._closed.is_set():
            raise NoAnswerError(request.what, "the session is closed")
        response = self._transport.send(request, timeout_s=timeout_s)
        if response.status < 300:
            return response
        with response:
            raw = b"".join(itertools.islice(response.iter_bytes(ERROR_BODY_BYTES), 1))
        text = raw.decode("utf-8", errors="replace")
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = None
        raise HttpCallError(request.what, response.status, ErrorBody.parse(response.status, text, decoded))

    def _retrying(
        self,
        retry: RetryPolicy | None,
        attempt: Callable[[], T],
        *,
        wait: Callable[[float], object] | None = None,
        on_retry: Callable[[int, Exception, float], None] | None = None,
    ) -> T:
        def say(number: int, error: Exception, delay: float) -> None:
            log.warning("%s; retrying in %.2f s (attempt %d)", error, delay, number)

        return (retry if retry is not None else self.retry).call(
            attempt,
            wait=wait if wait is not None else self._wait,
            clock=self._clock,
            on_retry=on_retry if on_retry is not None else say,
        )


def _json_object(response: Response, what: str) -> dict[str, Any]:
    content = response.content
    if not content:
        return {}
    try:
        body = json.loads(content)
    except ValueError:
        raise HttpCallError(
            what,
            response.status,
            detail=f"a body that is not JSON: {content[:200]!r}; is this URL the Stratus API?",
        ) from None
    if not isinstance(body, dict):
        raise HttpCallError(
            what,
            response.status,
            detail=f"a JSON {type(body).__name__}, not an object; the API and this client disagree on "
            "the contract",
        )
    return body


def _chunks(source: Path) -> Iterator[bytes]:
    with source.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            yield chunk
