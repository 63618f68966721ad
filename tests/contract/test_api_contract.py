"""docs/contracts.md and the API agree: every route the document promises is served, and the OpenAPI
document generated from the routes names the same set."""

from __future__ import annotations

import re
from pathlib import Path

import app  # noqa: F401  (registers the routes)
from chalicelib.api.openapi import document
from chalicelib.api.routing import ROUTES

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"


def _shape(path: str) -> str:
    return re.sub(r"{\w+}", "{}", path)


def _documented() -> set[tuple[str, str]]:
    pairs = re.findall(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`\s]*)`", CONTRACT.read_text())
    return {(method, _shape(path)) for method, path in pairs}


def test_every_documented_route_is_served_and_vice_versa():
    served = {(r.method, _shape(r.path)) for r in ROUTES}
    assert _documented() == served


def test_openapi_lists_every_route_with_its_auth():
    doc = document()
    listed = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert listed == {(r.method, r.path) for r in ROUTES}
    heartbeat = doc["paths"]["/agents/{agent_id}/heartbeat"]["post"]
    assert heartbeat["security"] == [{"agentToken": []}]
    assert "AgentHeartbeat" in doc["components"]["schemas"]


def test_error_bodies_are_documented():
    doc = document()
    for ops in doc["paths"].values():
        for op in ops.values():
            assert op["responses"]["default"]["content"]["application/json"]["schema"]["$ref"].endswith(
                "ErrorBody"
            )
