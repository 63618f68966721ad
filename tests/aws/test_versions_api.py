"""The versions as the API keeps and answers them, on moto and on the in-memory twin: an agent's heartbeat
records the version its compute package names, `GET /info` answers the API's own with the oldest CLI and
agent it answers, `GET /agents` lists each agent's, and a CLI or agent older than the oldest answered is
refused (426) with both versions and the fix, before the route does anything."""

from __future__ import annotations

import json

import pytest
from chalice.test import Client

from chalicelib.services.ports import Ports
from chalicelib.services.tokens import agent_credential
from stratus.contract.versions import OLDEST_AGENT, OLDEST_CLIENT, VERSION, VERSION_HEADER

pytestmark = [
    pytest.mark.aws,
    pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode"),
]


def test_an_agents_record_keeps_the_version_its_heartbeats_name(ports: Ports) -> None:
    ports.agents.heartbeat("agent-1", "default", 1, version="0.1.0")
    ports.agents.heartbeat("agent-2", "default", 1)  # from before versions were sent: none
    ports.agents.heartbeat("agent-1", "default", 1, busy=True)  # a beat that names none keeps the last
    assert [(a.agent_id, a.version) for a in ports.agents.every()] == [("agent-1", "0.1.0"), ("agent-2", "")]
    ports.agents.heartbeat("agent-1", "default", 1, version="0.2.0")  # upgraded in place (started again)
    assert ports.agents.get("agent-1").version == "0.2.0"  # type: ignore[union-attr]


def test_the_api_answers_its_version_and_each_agents_and_refuses_a_caller_too_old(stack) -> None:
    import app

    agent = {
        "Authorization": f"Bearer {agent_credential('agent-secret', 'agent-1')}",
        "Content-Type": "application/json",
    }
    beat = json.dumps({"pool": "default", "slots": 1, "running": []})
    with Client(app.app) as client:
        info = client.http.get("/info", headers={VERSION_HEADER: "0.0.1"})  # open to every version
        sent = client.http.post(
            "/agents/agent-1/heartbeat", body=beat, headers={**agent, VERSION_HEADER: VERSION}
        )
        listed = client.http.get("/agents", headers={VERSION_HEADER: VERSION})
        old_cli = client.http.get("/agents", headers={VERSION_HEADER: "0.0.1"})
        old_agent = client.http.post(
            "/agents/agent-1/heartbeat", body=beat, headers={**agent, VERSION_HEADER: "0.0.1"}
        )

    assert info.status_code == 200
    assert info.json_body["version"] == VERSION
    assert (info.json_body["oldest_client_version"], info.json_body["oldest_agent_version"]) == (
        OLDEST_CLIENT,
        OLDEST_AGENT,
    )
    assert sent.status_code == 200, sent.body
    assert [(a["id"], a["version"]) for a in listed.json_body["agents"]] == [("agent-1", VERSION)]
    assert old_cli.status_code == 426 and old_cli.json_body["error"] == "UpgradeRequired"
    assert old_cli.json_body["message"] == (
        f"the version of the CLI (0.0.1) is older than the API's ({VERSION}), and older than the oldest it "
        f"answers ({OLDEST_CLIENT}), so the API refuses it: upgrade the CLI: "
        f"pip install --upgrade 'stratus-dl=={VERSION}'"
    )
    assert old_agent.status_code == 426
    assert old_agent.json_body["message"].startswith("the version of agent agent-1 (0.0.1) is older")
    # The refused beat changed nothing: the agent's record still names the version it last named.
    assert stack.ports.agents.get("agent-1").version == VERSION
