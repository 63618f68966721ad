"""Errors raised inside a trial or the agent.

HarnessError
├── ApiCallError        the control plane refused a call or could not be reached
├── CheckpointError     a checkpoint cannot be stored or restored
├── SearcherError       the searcher dialogue went wrong (an operation left incomplete, a bad answer)
├── TrialDefinitionError  a trial class or an entrypoint cannot be used as written
├── UnsafeArchiveError  a context archive member escapes its folder
└── InvalidHP           raised BY the trial: its hyperparameters cannot work (Determined's
                        `det.InvalidHP`); the harness reports it and exits with code 0
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


class SearcherError(HarnessError):
    pass


class TrialDefinitionError(HarnessError):
    pass


class UnsafeArchiveError(HarnessError):
    pass


class InvalidHP(HarnessError):
    """Raise it from trial code when the hyperparameters cannot work (a layer size that does not fit,
    a batch that does not fit in memory). Leaving `stratus.harness.init()`'s `with` block (or
    `Trainer.fit()`) with it reports `POST /trials/{id}/searcher/invalid_hp` and exits with code 0; the
    searcher then replaces the trial."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message
