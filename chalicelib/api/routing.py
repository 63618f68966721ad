"""Routes declared once: the registration authenticates the caller, parses the path's ids and the body,
calls the view with the principal and the parsed body, answers with the declared response model, and
turns every error into a JSON body. It also records each route, so `GET /openapi.json` is generated from
the same declarations as the code.

A view is `view(principal, body, **path)` (no `body` when the route declares no request model), where
`principal` is the `chalicelib.api.auth` type of the route's auth kind and the path parameters are
already typed (ids as positive ints). Order of the checks, so a caller without a valid credential never
learns about the body: credential (401) → the caller's version (426, `chalicelib.api.caller_versions`) →
path ids (400) → the credential's scope (403) → body (400).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from chalice.app import Blueprint, IAMAuthorizer, Request, Response
from pydantic import BaseModel, ValidationError

from chalicelib.api.auth import PRINCIPALS, AuthKind, scope, verify
from chalicelib.api.caller_versions import check_caller
from chalicelib.domain.numbers import INT64_MAX
from chalicelib.errors import BadRequestError, StratusError

M = TypeVar("M", bound=BaseModel)
View = TypeVar("View", bound=Callable[..., Any])

IAM = IAMAuthorizer()
log = logging.getLogger("stratus.api")


@dataclass(frozen=True)
class RouteDoc:
    method: str
    path: str
    summary: str
    request: type[BaseModel] | None
    response: type[BaseModel]
    auth: AuthKind
    #: The query parameters the view reads, each with its JSON schema (for the API document).
    query: Mapping[str, Mapping[str, Any]]


ROUTES: list[RouteDoc] = []


#: The JSON schema of each path parameter, for the API document (what `PATH_PARAMETERS` accepts).
ID_SCHEMA = {"type": "integer", "minimum": 1, "maximum": INT64_MAX, "example": 1}
PATH_SCHEMAS: dict[str, dict[str, Any]] = {
    "experiment_id": ID_SCHEMA,
    "trial_id": ID_SCHEMA,
    "agent_id": {"type": "string", "minLength": 1, "maxLength": 128, "example": "local-0"},
    "run_id": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+$", "maxLength": 128, "example": "1.1"},
    "uuid": {"type": "string", "format": "uuid"},
    "job_id": {"type": "string", "pattern": "^[0-9]{1,19}$", "example": "1"},
}


def int_query(minimum: int, maximum: int, description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "description": description}


def str_query(description: str, **schema: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **schema}


def path_id(value: str, what: str) -> int:
    try:
        number = int(value)
    except ValueError as error:
        raise BadRequestError(f"{what} id {value!r} must be an integer") from error
    if not 1 <= number <= INT64_MAX:
        raise BadRequestError(f"{what} id {value!r} must be a positive integer of at most {INT64_MAX}")
    return number


#: Every path parameter a route may name, with how its text becomes the value the view receives.
PATH_PARAMETERS: dict[str, Callable[[str], Any]] = {
    "experiment_id": lambda value: path_id(value, "experiment"),
    "trial_id": lambda value: path_id(value, "trial"),
    "agent_id": str,
    "run_id": str,
    "uuid": str,
    "job_id": str,  # an experiment's id; the service answers 404 for one that is not
}


def route(
    bp: Blueprint,
    path: str,
    method: str,
    *,
    response: type[BaseModel],
    request: type[BaseModel] | None = None,
    auth: AuthKind,
    query: Mapping[str, Mapping[str, Any]] | None = None,
) -> Callable[[View], View]:
    names = re.findall(r"{(\w+)}", path)
    unknown = [name for name in names if name not in PATH_PARAMETERS]
    if unknown:
        raise TypeError(f"{method} {path}: path parameter {unknown[0]!r} is not in routing.PATH_PARAMETERS")

    def register(view: View) -> View:
        _check_view_signature(view, method, path, request, auth, names)
        summary = (view.__doc__ or "").strip().split("\n")[0]
        ROUTES.append(RouteDoc(method, path, summary, request, response, auth, dict(query or {})))

        @functools.wraps(view)
        def call(**raw_path: str) -> Response:
            current = bp.current_request
            credential = verify(auth, current)
            check_caller(auth, path, current.headers, name=raw_path.get("agent_id", ""))
            values = {name: PATH_PARAMETERS[name](raw_path[name]) for name in names}
            principal = scope(auth, credential, values)
            if request is None:
                result = view(principal, **values)
            else:
                result = view(principal, parse_body(current, request), **values)
            if isinstance(result, Response):
                return result
            if not isinstance(result, response):
                raise TypeError(f"{view.__name__} answered {type(result).__name__}, not {response.__name__}")
            return _answer(result)

        options: dict[str, Any] = {"methods": [method]}
        if auth == "iam":
            options["authorizer"] = IAM
        registered = _errors_as_json(call)
        # Read by the template (infra/aws/template_app.py), which sees the app's routes alone: a token
        # route requires its Authorization header at the gateway.
        registered.auth_kind = auth  # type: ignore[attr-defined]
        bp.route(path, **options)(registered)
        return view

    return register


def _check_view_signature(
    view: Callable[..., Any],
    method: str,
    path: str,
    request: type[BaseModel] | None,
    auth: AuthKind,
    names: list[str],
) -> None:
    """A view that cannot take what the registration passes fails at import, not on its first call."""
    signature = inspect.signature(view)
    parameters = list(signature.parameters)
    fixed = 1 if request is None else 2  # the principal, then the body
    principal = signature.parameters[parameters[0]].annotation if parameters else None
    fits = (
        _annotation_name(principal) == PRINCIPALS[auth].__name__
        and len(parameters) == fixed + len(names)
        and (request is None or parameters[1] == "body")
        and sorted(parameters[fixed:]) == sorted(names)
    )
    if not fits:
        wanted = ", ".join(
            [f"principal: {PRINCIPALS[auth].__name__}", *(["body"] if request is not None else []), *names]
        )
        raise TypeError(f"{method} {path}: view {view.__name__}{signature} must take ({wanted})")


def _annotation_name(annotation: Any) -> str:
    # Modules with `from __future__ import annotations` hold annotations as strings.
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")


def _errors_as_json(call: Callable[..., Response]) -> Callable[..., Response]:
    """The API's one error handler: any `StratusError` becomes `{"error", "message", ...}` with its
    status; anything else is logged and answered with a 500 of the same shape.

    It is applied here, once per route by the registration, rather than as Chalice `http` middleware:
    Chalice's REST handler answers any exception a view raises with its own 500 (`{"Code": ...,
    "Message": ...}`) before middleware sees it; only `ChaliceUnhandledError` passes through, and our
    errors are raised by the pure packages, which must not depend on Chalice."""

    @functools.wraps(call)
    def handled(**raw_path: str) -> Response:
        try:
            return call(**raw_path)
        except StratusError as error:
            return Response(
                body=error.body(), status_code=error.status, headers={"Content-Type": "application/json"}
            )
        except Exception:
            log.exception("unhandled error in %s", call.__name__)
            body = {"error": "InternalError", "message": "internal error; the API's log has the details"}
            return Response(body=body, status_code=500, headers={"Content-Type": "application/json"})

    return handled


def parse_body(request: Request, model: type[M]) -> M:
    try:
        raw = json.loads(request.raw_body or b"{}")
    except ValueError as error:
        raise BadRequestError(f"the request body is not valid JSON ({error}); send a JSON object") from error
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        problems = [_problem(e) for e in error.errors()]
        first = problems[0]
        raise BadRequestError(
            f"invalid request body: {first['path']}: {first['message']}", problems=problems
        ) from error


def _problem(error: Any) -> dict[str, str]:
    """One problem of a body as `{"path", "message"}`. A check of the whole body (a number DynamoDB
    cannot store, anywhere in it) names its own path at the start of its message."""
    path = ".".join(str(p) for p in error["loc"])
    message = str(error["msg"])
    if not path and error.get("type") == "value_error":
        message = message.removeprefix("Value error, ")
        named, sep, rest = message.partition(": ")
        if sep:
            return {"path": named, "message": rest}
    return {"path": path or "(body)", "message": message}


def _answer(model: BaseModel, status: int = 200) -> Response:
    return Response(
        body=_finite(model.model_dump(mode="json")),
        status_code=status,
        headers={"Content-Type": "application/json"},
    )


def query_str(bp: Blueprint, name: str) -> str | None:
    params: Any = bp.current_request.query_params or {}
    value = params.get(name)
    return None if value is None else str(value)


def query_int(
    bp: Blueprint, name: str, default: int | None, minimum: int = 0, maximum: int = 10_000
) -> int | None:
    params: Any = bp.current_request.query_params or {}
    if name not in params:
        return default
    try:
        value = int(params[name])
    except ValueError as error:
        raise BadRequestError(f"query parameter {name}={params[name]!r} must be an integer") from error
    if not minimum <= value <= maximum:
        raise BadRequestError(f"query parameter {name}={value} must be between {minimum} and {maximum}")
    return value


def _finite(value: Any) -> Any:
    # JSON has no NaN or infinity: a diverged loss is reported as null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
