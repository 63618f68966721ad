"""What API Gateway does before any function runs (`infra/aws/template_app.py`): the open answers of
`/health` and `/info` are its own (mock integrations; that they answer as the app's views do:
tests/aws/test_gateway_answers.py); every token route requires its `Authorization` header; the one open
route left to a function is the API document."""

from __future__ import annotations

import pytest

import app
from infra.aws.template_app import TOKEN_AUTH, _swagger

pytestmark = pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode")


def _operations() -> list[tuple[str, str, dict]]:
    swagger = _swagger(app.app)
    return [
        (path, method, operation)
        for path, methods in swagger["paths"].items()
        for method, operation in methods.items()
        if method != "options"  # CORS preflights, answered by the gateway already
    ]


def test_no_function_runs_for_a_request_that_shows_no_credential_but_the_api_documents():
    runs_unauthenticated = []
    for path, method, operation in _operations():
        integration = operation["x-amazon-apigateway-integration"]
        if operation.get("security") or integration["type"] == "mock":
            continue  # SigV4 checked by API Gateway, or answered by it
        header = [p for p in operation.get("parameters", []) if p["in"] == "header"]
        if header == [{"name": "Authorization", "in": "header", "required": True, "type": "string"}]:
            assert operation["x-amazon-apigateway-request-validator"] == "headers"
            continue
        runs_unauthenticated.append(f"{method.upper()} {path}")
    assert runs_unauthenticated == ["GET /openapi.json"]
    assert _swagger(app.app)["x-amazon-apigateway-request-validators"]["headers"] == {
        "validateRequestParameters": True,
        "validateRequestBody": False,
    }


def test_every_token_route_is_a_route_of_an_agent_or_a_run():
    kinds = {
        getattr(entry.view_function, "auth_kind", None)
        for methods in app.app.routes.values()
        for entry in methods.values()
    }
    assert set(TOKEN_AUTH) <= kinds and kinds <= {"iam", "none", *TOKEN_AUTH}  # every route marked
