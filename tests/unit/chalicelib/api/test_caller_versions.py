"""The API's check of its callers' versions (`chalicelib.api.caller_versions`): which routes check which
side, a caller too old refused with one sentence before the view runs, the open routes answering every
version (the answers of the real app on moto: tests/aws/test_versions_api.py)."""

from __future__ import annotations

import json

import pytest
from chalice.app import Blueprint, Chalice
from chalice.test import Client

from chalicelib.api import models
from chalicelib.api.auth import Anonymous, UserPrincipal
from chalicelib.api.caller_versions import caller_version, check_caller
from chalicelib.api.routing import ROUTES, route
from chalicelib.errors import UpgradeRequiredError
from stratus.contract.versions import OLDEST_CLIENT, VERSION, VERSION_HEADER, Side, Standing

pytestmark = pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode")


def test_the_header_is_read_whatever_its_case_and_a_missing_one_is_none():
    assert caller_version({"x-stratus-version": " 0.2.0 "}) == "0.2.0"
    assert caller_version({VERSION_HEADER: "0.2.0"}) == "0.2.0"
    assert caller_version({"Accept": "application/json"}) is None


def test_users_routes_check_the_cli_agents_routes_the_agent_and_the_others_nobody():
    current = {VERSION_HEADER: VERSION}
    cli = check_caller("iam", "/experiments", current)
    agent = check_caller("agent", "/agents/{agent_id}/heartbeat", current, name="i-0abc")
    assert cli is not None and (cli.side, cli.standing) == (Side.CLI, Standing.SAME)
    assert agent is not None and (agent.side, agent.standing) == (Side.AGENT, Standing.SAME)
    # The credential route is IAM-signed by an agent's instance role: the agent's version is checked.
    signed = check_caller("iam", "/agents/{agent_id}/iam-credential", current)
    assert signed is not None and signed.side is Side.AGENT
    old = {VERSION_HEADER: "0.0.1"}
    assert (
        check_caller("none", "/info", old) is None
        and check_caller("run", "/trials/{trial_id}/info", old) is None
    )


def test_a_caller_older_than_the_oldest_answered_is_refused_naming_both_versions():
    with pytest.raises(UpgradeRequiredError) as refused:
        check_caller("agent", "/agents/{agent_id}/heartbeat", {VERSION_HEADER: "0.0.1"}, name="i-0abc")
    assert refused.value.status == 426
    assert refused.value.message.startswith(
        f"the version of agent i-0abc (0.0.1) is older than the API's ({VERSION})"
    )
    # A caller from before versions were sent is the oldest that sent none, which the API still answers.
    unnamed = check_caller("iam", "/experiments", {})
    assert unnamed is not None and unnamed.version == OLDEST_CLIENT and not unnamed.reported


def test_the_registration_refuses_a_cli_too_old_before_its_view_runs_and_the_open_routes_answer_it():
    saved = list(ROUTES)
    bp = Blueprint(__name__)
    ran: list[str] = []

    @route(bp, "/experiments-probe", "GET", response=models.Empty, auth="iam")
    def probe(user: UserPrincipal) -> models.Empty:
        ran.append("iam")
        return models.Empty()

    @route(bp, "/info-probe", "GET", response=models.Empty, auth="none")
    def info_probe(principal: Anonymous) -> models.Empty:
        ran.append("none")
        return models.Empty()

    app = Chalice(app_name="versions-test")
    app.register_blueprint(bp)
    try:
        with Client(app) as client:
            old = client.http.get("/experiments-probe", headers={VERSION_HEADER: "0.0.1"})
            current = client.http.get("/experiments-probe", headers={VERSION_HEADER: VERSION})
            opened = client.http.get("/info-probe", headers={VERSION_HEADER: "0.0.1"})
    finally:
        ROUTES[:] = saved
    assert old.status_code == 426 and json.loads(old.body)["error"] == "UpgradeRequired"
    assert "pip install --upgrade 'stratus-dl" in json.loads(old.body)["message"]
    assert (current.status_code, opened.status_code) == (200, 200)
    assert ran == ["iam", "none"]  # the refused request never reached its view
