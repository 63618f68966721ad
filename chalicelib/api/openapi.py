"""The OpenAPI 3 document, generated from the routes registered through `routing.route`."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from chalicelib.api.models import ErrorBody
from chalicelib.api.routing import PATH_SCHEMAS, ROUTES
from stratus.contract.versions import VERSION

_SECURITY: dict[str, list[dict[str, list[str]]]] = {
    "iam": [{"sigv4": []}],
    "agent": [{"agentToken": []}],
    "run": [{"runToken": []}],
    "none": [],
}


def document() -> dict[str, Any]:
    schemas: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict[str, str]:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in schema.pop("$defs", {}).items():
            schemas[name] = definition
        schemas[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    paths: dict[str, Any] = {}
    for r in sorted(ROUTES, key=lambda r: (r.path, r.method)):
        operation: dict[str, Any] = {
            "summary": r.summary,
            "operationId": _operation_id(r.method, r.path),
            "security": _SECURITY[r.auth],
            "parameters": [
                {"name": p, "in": "path", "required": True, "schema": PATH_SCHEMAS[p]}
                for p in re.findall(r"{(\w+)}", r.path)
            ]
            + [
                {"name": name, "in": "query", "required": False, "schema": dict(schema)}
                for name, schema in r.query.items()
            ],
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": ref(r.response)}}},
                "default": {
                    "description": "Error",
                    "content": {"application/json": {"schema": ref(ErrorBody)}},
                },
            },
        }
        if r.request is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref(r.request)}},
            }
        paths.setdefault(r.path, {})[r.method.lower()] = operation
    return {
        "openapi": "3.0.3",
        "info": {"title": "Stratus API", "version": VERSION},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "sigv4": {
                    "type": "apiKey",
                    "name": "Authorization",
                    "in": "header",
                    "x-amazon-apigateway-authtype": "awsSigv4",
                },
                "agentToken": {"type": "http", "scheme": "bearer"},
                "runToken": {"type": "http", "scheme": "bearer"},
            },
        },
    }


def _operation_id(method: str, path: str) -> str:
    words = [w for w in re.split(r"[/{}]+", path) if w]
    return method.lower() + "".join(w[:1].upper() + w[1:] for w in words)
