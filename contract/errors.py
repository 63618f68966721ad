"""Errors of the contract package, and the API's error body as every client reads it.

    ContractError              a value that does not follow the contract
    ├── InvalidEnvironmentError  a trial variable is missing or malformed
    ├── InvalidLaunchSpecError   a launch spec an agent cannot run
    ├── InvalidMessageError      a queue message of an unknown type or shape
    ├── InvalidMetricGroupError  a metric group name that Determined refuses (empty, or with a '.')
    ├── InvalidHintsError        an AdaptDL hints payload that is not SCHED_HINTS + speedup (stratus.contract.adaptdl)
    ├── InvalidTagError          a user's tag AWS or Stratus refuses, or too many of them (stratus.contract.tags)
    ├── InvalidPoolError         a resource pool that cannot be used (stratus.contract.pools, .resource_pools)
    └── HttpCallError            a call over HTTP failed (stratus.contract.http): refused with a status >= 300
        └── NoAnswerError        ... or never answered (refused connection, reset, timeout): status 0

Every error message names the offending value and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ContractError(ValueError):
    """Base class of every error of the contract package."""


class InvalidEnvironmentError(ContractError):
    pass


class InvalidLaunchSpecError(ContractError):
    pass


class InvalidMessageError(ContractError):
    pass


class InvalidMetricGroupError(ContractError):
    pass


class InvalidHintsError(ContractError):
    pass


class InvalidTagError(ContractError):
    pass


class InvalidPoolError(ContractError):
    """A pools setting, pools file or pool option that cannot be used (the message names the value and
    the fix). In the control plane it is the deployment's to fix: a 500 if it ever reached a request (the
    settings refuse it first); the CLI prints it as a usage error."""


@dataclass(frozen=True)
class ErrorBody:
    """`{"error": "<Code>", "message": "...", "problems": [{"path", "message"}]}`: what the API answers
    with any 4xx or 5xx (docs/contracts.md §1)."""

    code: str
    message: str
    problems: tuple[Mapping[str, str], ...] = field(default=())

    @classmethod
    def parse(cls, status: int, text: str, body: Any = None) -> ErrorBody:
        """The error body of an answer; ``body`` is its decoded JSON if it had any. An answer that is not
        our error body (a proxy's HTML page, an empty 502) still gives a code and a readable message."""
        if isinstance(body, Mapping):
            code = body.get("error")
            message = body.get("message")
            problems = body.get("problems")
            return cls(
                code=str(code) if code else "",
                message=str(message) if message else (text.strip()[:500] or f"HTTP {status}"),
                problems=tuple(
                    {"path": str(p.get("path", "")), "message": str(p.get("message", ""))}
                    for p in problems
                    if isinstance(p, Mapping)
                )
                if isinstance(problems, list)
                else (),
            )
        return cls(code="", message=text.strip()[:500] or f"HTTP {status}")


def is_permanent(status: int) -> bool:
    """A refusal that asking again will not change (bad input, unknown id, wrong state); 408, 425 and
    429 are worth a retry, and so is every 5xx."""
    return 400 <= status < 500 and status not in (408, 425, 429)


#: The status of a call that got no answer at all.
NO_ANSWER = 0


class HttpCallError(ContractError):
    """A call over HTTP that failed: ``status`` is the answer's (``NO_ANSWER`` if none came) and ``body``
    its error body, parsed once by `ErrorBody.parse`. ``what`` is the call, as "METHOD URL" without the
    query string (presigned signatures stay out of messages and logs)."""

    def __init__(self, what: str, status: int, body: ErrorBody | None = None, *, detail: str = "") -> None:
        self.what = what
        self.status = status
        self.body = body if body is not None else ErrorBody(code="", message=detail or f"HTTP {status}")
        if status == NO_ANSWER:
            text = f"{what} got no answer ({detail or self.body.message})"
        else:
            said = f"{self.body.code}: {self.body.message}" if self.body.code else self.body.message
            text = f"{what} answered {status} ({said})"
        super().__init__(text)

    @property
    def code(self) -> str:
        return self.body.code


class NoAnswerError(HttpCallError):
    """Raised by a transport when a request got no answer; ``detail`` says why."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(what, NO_ANSWER, detail=detail)
