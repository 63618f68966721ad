"""An agent names its compute package's version in every call to the API (`stratus.contract.versions`), the
IAM-signed credential request included: the API records it with the heartbeat (`det version` shows it) and
refuses an agent too old for it."""

from __future__ import annotations

from stratus.contract.http import InMemoryTransport, Response
from stratus.contract.versions import VERSION, VERSION_HEADER
from stratus.harness.agent._api import AgentApi
from tests.unit.harness.agent.test_iam import INSTANCE, FakeImds, Plane, _credential_source

API = "https://api.test/api"


def test_every_heartbeat_and_report_names_the_agents_version() -> None:
    transport = InMemoryTransport(lambda request: Response(200, json={"launch": [], "kill": []}))
    api = AgentApi(API, "agent-1", "token", transport=transport)
    api.heartbeat("default", 1, [])
    api.started("1.1", 42)
    assert [r.headers[VERSION_HEADER.lower()] for r in transport.requests] == [VERSION, VERSION]


def test_the_signed_credential_request_names_it_too() -> None:
    fake = FakeImds()
    fake.add(INSTANCE)
    plane = Plane(fake)  # refuses a request whose signature does not cover what it sent
    assert _credential_source(plane).fetch() == "agent.i.c"
    [request] = plane.seen
    assert request.headers[VERSION_HEADER.lower()] == VERSION
    assert VERSION_HEADER.lower() in request.headers["authorization"]  # among the signed headers
