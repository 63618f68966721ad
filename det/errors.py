"""Errors raised by the CLI. Each message is one sentence that names the value and says what to do.

DetError
├── UsageError            bad arguments or a bad file on the user's side
│   ├── ConfigFileError   the config file cannot be read or parsed
│   └── ContextError      the context folder cannot be packed (too large, missing)
├── ApiError              the API answered with an error (carries status, code, problems)
│   └── NotFoundError     an unknown experiment or trial id
├── ConnectionFailedError the API cannot be reached (is the stack up? is DET_MASTER right?)
└── StackError            the embedded local stack cannot be started or stopped
"""

from __future__ import annotations


class DetError(Exception):
    """Base of every error the CLI reports as one line and a non-zero exit."""

    exit_code = 1


class UsageError(DetError):
    exit_code = 2


class ConfigFileError(UsageError):
    pass


class ContextError(UsageError):
    pass


class ApiError(DetError):
    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str = "",
        problems: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.problems = problems or []


class NotFoundError(ApiError):
    pass


class ConnectionFailedError(DetError):
    pass


class StackError(DetError):
    pass
