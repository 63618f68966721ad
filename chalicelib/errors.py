"""Errors of the control plane (`chalicelib`, one tree), declared as data: each class carries its wire
code and HTTP status.

    StratusError                          500  InternalError
    ├── BadRequestError                   400  a value is malformed; the message names it and the fix
    │   ├── ConfigError                        (chalicelib.config.errors) the config package's branch
    │   │   └── ConfigInvalidError        400  an experiment config with problems (listed by path)
    │   └── SearcherNotSupportedError     400  (chalicelib.domain.searchers) a searcher that cannot run yet
    ├── UnauthorizedError                 401  missing or wrong token
    ├── ForbiddenError                    403  a token used outside its trial or agent
    ├── NotFoundError                     404  an unknown experiment, trial, checkpoint or run id
    ├── ConflictError                     409  a stale update, or an operation the current state forbids
    │   └── StaleSearcherError            409  (chalicelib.services.searching) an event's consumer kept
    │                                              losing the searcher's save; the queue delivers the event
    │                                              again. Never reaches an HTTP caller: a create or activate
    │                                              hands unfinished searcher work to the queue
    ├── PayloadTooLargeError              413
    └── UpgradeRequiredError              426  a CLI or agent older than the oldest the API answers
                                                   (`stratus.contract.versions`); the message names both
                                                   versions and the upgrade

This module imports nothing of the project, so the pure packages (`domain`, `config`) raise its errors
too. The API's one error handler (`chalicelib.api.routing`) turns any of them into
`{"error": code, "message": ..., **details}` with the class's status; anything else is a 500 (such as
`stratus.contract.errors.InvalidPoolError`, a pools setting the deployment must fix; the settings refuse
it at start).
"""

from __future__ import annotations

from typing import Any, ClassVar


class StratusError(Exception):
    code: ClassVar[str] = "InternalError"
    status: ClassVar[int] = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.details}


class BadRequestError(StratusError):
    code = "BadRequest"
    status = 400


class UnauthorizedError(StratusError):
    code = "Unauthorized"
    status = 401


class ForbiddenError(StratusError):
    code = "Forbidden"
    status = 403


class NotFoundError(StratusError):
    code = "NotFound"
    status = 404


class ConflictError(StratusError):
    code = "Conflict"
    status = 409


class PayloadTooLargeError(StratusError):
    code = "PayloadTooLarge"
    status = 413


class UpgradeRequiredError(StratusError):
    code = "UpgradeRequired"
    status = 426
