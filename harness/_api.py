"""The trial's client of the trial-facing routes of contracts.md §1 and of presigned S3 URLs: a thin
wrapper over the compute side's one HTTP session (`stratus.contract.http.Session`).

No answer, 5xx, 408, 425 and 429 are retried a few times with a short backoff (a few seconds in all,
`TRIAL_RETRY`): API Gateway and Lambda have brief hiccups, and every trial-facing route is idempotent.
Any other refusal is raised at once as `ApiCallError` carrying the server's message and code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from stratus.contract.errors import NO_ANSWER, HttpCallError
from stratus.contract.http import RetryPolicy, Session, Transport
from stratus.harness.errors import ApiCallError

#: Waits of 0.25, 0.5, 1 and 2 s between five attempts.
TRIAL_RETRY = RetryPolicy(first_delay_s=0.25, growth=2.0, max_delay_s=2.0, max_attempts=5)


class ApiClient:
    """Calls `base_url` with `Authorization: Bearer <token>`; `transport` lets tests answer in memory
    (`stratus.contract.http.InMemoryTransport`), `wait` keeps their retries from sleeping."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: Transport | None = None,
        retry: RetryPolicy = TRIAL_RETRY,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        self._session = Session(base_url, token, transport=transport, retry=retry, wait=wait)

    def get(self, path: str) -> dict[str, Any]:
        try:
            return self._session.call("GET", path)
        except HttpCallError as e:
            _raise(e)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._session.call("POST", path, body)
        except HttpCallError as e:
            _raise(e)

    def put_file(self, url: str, source: Path) -> None:
        """PUT `source` to a presigned URL, streamed with an explicit Content-Length (S3 needs one)."""
        try:
            self._session.put_file(url, source)
        except HttpCallError as e:
            _raise(e)

    def download_file(self, url: str, dest: Path) -> int:
        """GET a presigned URL into `dest`, streamed; returns the bytes written."""
        try:
            return self._session.download(url, dest)
        except HttpCallError as e:
            _raise(e)

    def close(self) -> None:
        self._session.close()


def _raise(e: HttpCallError) -> NoReturn:
    if e.status == NO_ANSWER:
        raise ApiCallError(f"{e}; check STRATUS_MASTER and the network, then restart the trial.") from e
    raise ApiCallError(str(e), status=e.status, code=e.code) from e
