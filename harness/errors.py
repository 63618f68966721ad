"""Errors raised inside a trial or the agent.

HarnessError
├── ApiCallError        the control plane refused a call or could not be reached
├── CheckpointError     a checkpoint cannot be stored or restored
└── UnsafeArchiveError  a context archive member escapes its folder
"""

from __future__ import annotations


class HarnessError(Exception):
    pass


class ApiCallError(HarnessError):
    def __init__(self, message: str, *, status: int = 0, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class CheckpointError(HarnessError):
    pass


class UnsafeArchiveError(HarnessError):
    pass
