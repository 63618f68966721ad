"""Errors raised by the CLI. Each message is one sentence that names the value and says what to do.

DetError
├── UsageError            bad arguments or a bad file on the user's side
│   ├── ConfigFileError   the config file cannot be read or parsed
│   └── ContextError      the context folder cannot be packed (too large, missing)
├── ApiError              the API answered with an error (carries status, code, problems)
│   └── NotFoundError     an unknown experiment or trial id
├── ConnectionFailedError the API cannot be reached (is the stack up? is DET_MASTER right?)
├── StackError            the embedded local stack cannot be started or stopped
├── NotOnThisStackError   the command needs AWS itself, and the API is the local stack (moto)
└── StepInterruptedError  Ctrl-C, SIGTERM or SIGHUP stopped a step of a command (`det._signals.step`)
"""

from __future__ import annotations


class DetError(Exception):
    """Base of every error the CLI reports as one line and a non-zero exit."""

    exit_code = 1
    #: What the line starts with (`Error: ...`).
    label = "Error"


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


class NotOnThisStackError(DetError):
    pass


class StepInterruptedError(DetError):
    """`Interrupted: uploading the context ... (Ctrl-C); no experiment was created`, with Ctrl-C's exit
    code 130 (128+N for signal N)."""

    label = "Interrupted"

    def __init__(self, message: str, *, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
