"""A thin layer over Chalice routes: parse the body into a pydantic model, answer with a model, and record
each route's models so `GET /openapi.json` is generated from the same source as the code."""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from chalice.app import Blueprint, IAMAuthorizer, Response
from pydantic import BaseModel, ValidationError

from chalicelib.errors import BadRequestError, StratusError

M = TypeVar("M", bound=BaseModel)

IAM = IAMAuthorizer()
log = logging.getLogger("stratus.api")


@dataclass(frozen=True)
class RouteDoc:
    method: str
    path: str
    summary: str
    request: type[BaseModel] | None
    response: type[BaseModel]
    auth: str  # "iam", "agent", "run" or "none"


ROUTES: list[RouteDoc] = []


def route(
    bp: Blueprint,
    path: str,
    method: str,
    *,
    response: type[BaseModel],
    request: type[BaseModel] | None = None,
    auth: str,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(view: Callable[..., Any]) -> Callable[..., Any]:
        ROUTES.append(
            RouteDoc(method, path, (view.__doc__ or "").strip().split("\n")[0], request, response, auth)
        )
        options: dict[str, Any] = {"methods": [method]}
        if auth == "iam":
            options["authorizer"] = IAM
        bp.route(path, **options)(_errors_as_json(view))
        return view

    return register


def _errors_as_json(view: Callable[..., Any]) -> Callable[..., Any]:
    """Chalice turns any exception inside a view into its own 500 before middleware sees it, so the
    conversion of our errors into `{"error", "message"}` bodies happens here, around every view."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return view(*args, **kwargs)
        except StratusError as error:
            return Response(
                body=error.body(), status_code=error.status, headers={"Content-Type": "application/json"}
            )
        except Exception:
            log.exception("unhandled error in %s", view.__name__)
            body = {"error": "InternalError", "message": "internal error; the API's log has the details"}
            return Response(body=body, status_code=500, headers={"Content-Type": "application/json"})

    return wrapper


def parse(bp: Blueprint, model: type[M]) -> M:
    request = bp.current_request
    try:
        raw = json.loads(request.raw_body or b"{}")
    except ValueError as error:
        raise BadRequestError(f"the request body is not valid JSON ({error}); send a JSON object") from error
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        problems = [
            {"path": ".".join(str(p) for p in e["loc"]) or "(body)", "message": e["msg"]}
            for e in error.errors()
        ]
        first = problems[0]
        raise BadRequestError(
            f"invalid request body: {first['path']}: {first['message']}", problems=problems
        ) from error


def answer(model: BaseModel, status: int = 200) -> Response:
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


def path_id(value: str, what: str) -> int:
    try:
        number = int(value)
    except ValueError as error:
        raise BadRequestError(f"{what} id {value!r} must be an integer") from error
    if number < 1:
        raise BadRequestError(f"{what} id {value!r} must be a positive integer")
    return number


def _finite(value: Any) -> Any:
    # JSON has no NaN or infinity: a diverged loss is reported as null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
