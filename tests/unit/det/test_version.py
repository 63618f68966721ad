"""`det version` beyond the CLI and the API (tests/unit/det/test_show.py): the live agents' versions and
which one is behind; and the CLI's side of the version check: it names its version in every request, shows
the API's refusal of a CLI too old as it is, and says when an answer that looks like a wrong URL comes
from an API of another version."""

from __future__ import annotations

import httpx
import yaml

from stratus.contract.versions import VERSION, VERSION_HEADER
from tests.unit.det.fakes import FakeApi, api_error


def _agent(agent_id: str, version: str | None, *, alive: bool = True) -> dict:
    listed = {"id": agent_id, "resource_pool": "default", "slots": 1, "slots_used": 0, "containers": 0,
              "last_heartbeat": "2026-11-26T10:00:00Z", "alive": alive, "draining": False, "enabled": True}  # fmt: skip
    return listed if version is None else {**listed, "version": version}


def test_version_lists_the_live_agents_versions_and_says_which_are_behind(api: FakeApi):
    api.info = {
        **api.info,
        "version": VERSION,
        "oldest_client_version": VERSION,
        "oldest_agent_version": "0.0.1",
    }
    api.cluster["agents"] = [
        _agent("i-new", VERSION),
        _agent("i-old-1", "0.0.5"),
        _agent("i-old-2", "0.0.5"),
        _agent("i-gone", "0.0.1", alive=False),  # not shown: its instance is gone
    ]
    result = api.run("version")
    assert result.code == 0, result.err
    shown = yaml.safe_load(result.out)
    assert shown["client"] == {"version": VERSION} and shown["master"]["version"] == VERSION
    assert shown["agents"] == {"i-new": VERSION, "i-old-1": "0.0.5", "i-old-2": "0.0.5"}
    (line,) = result.err.splitlines()
    assert line.startswith(
        f"agent behind: the version of agents i-old-1, i-old-2 (0.0.5) is older than the API's ({VERSION})"
    )
    assert "`det deploy aws up`" in line and "`det agent disable AGENT_ID`" in line


def test_version_says_when_the_api_is_behind_the_cli_and_how_to_upgrade_the_stack(api: FakeApi):
    api.info = {**api.info, "version": "0.0.1"}  # an API of before the oldest-version fields
    api.cluster["agents"] = [_agent("i-pre", None)]  # a compute package from before versions were sent
    result = api.run("version")
    assert result.code == 0, result.err
    assert yaml.safe_load(result.out)["agents"] == {"i-pre": "unknown"}
    cli, agent = result.err.splitlines()
    assert cli.startswith(f"API behind: the API's version (0.0.1) is older than that of the CLI ({VERSION})")
    assert f"`det deploy aws up` run by a CLI of version {VERSION}" in cli
    assert agent.startswith(
        "API behind: the API's version (0.0.1) is older than that of agent i-pre (none sent"
    )


def test_version_shows_no_agents_where_the_caller_may_not_list_them(api: FakeApi):
    api.info = {**api.info, "version": VERSION}
    fallback = api.handle

    def refuse_agents(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/agents":
            return api_error(403, "AccessDenied", "not allowed")
        return fallback(request)

    api.transport = httpx.MockTransport(refuse_agents)
    result = api.run("version")
    assert result.code == 0 and "agents" not in yaml.safe_load(result.out) and result.err == ""


def test_every_request_names_the_clis_version(api: FakeApi):
    api.run("experiment", "list")
    assert api.headers[VERSION_HEADER.lower()] == VERSION


def test_the_apis_refusal_of_a_cli_too_old_is_shown_as_it_is(api: FakeApi):
    message = (
        f"the version of the CLI ({VERSION}) is older than the API's (9.0.0), and older than the oldest it "
        "answers (8.0.0), so the API refuses it: upgrade the CLI: pip install --upgrade 'stratus-dl==9.0.0'"
    )
    api.transport = httpx.MockTransport(lambda request: api_error(426, "UpgradeRequired", message))
    result = api.run("experiment", "list")
    assert result.code != 0 and message in result.err


def test_a_route_the_api_lacks_is_put_down_to_its_older_version_not_to_a_wrong_url(api: FakeApi):
    fallback = api.handle
    info = {"version": "0.0.1", "cluster_id": "lab", "region": "eu-west-1"}

    def older_api(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/info":
            return httpx.Response(200, json=info)
        if request.url.path == "/experiments":  # a route this (old) API does not have
            return httpx.Response(403, json={"message": "Missing Authentication Token"})
        return fallback(request)

    api.transport = httpx.MockTransport(older_api)
    result = api.run("experiment", "list")
    assert result.code != 0
    assert (
        "has no route GET /experiments: the API's version (0.0.1) is older than that of the CLI" in result.err
    )
    assert "not the Stratus API's URL" not in result.err
    # The same API of this CLI's version: then the URL is what is wrong.
    info["version"] = VERSION
    wrong_url = api.run("experiment", "list")
    assert "not the Stratus API's URL" in wrong_url.err


def test_a_field_the_api_does_not_know_is_put_down_to_its_older_version(api: FakeApi, project_config):
    config = project_config(
        "exp.yaml", "name: x\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"
    )
    api.info = {**api.info, "version": "0.0.1"}
    api.refuse_config = {
        "error": "BadRequest",
        "message": "invalid request body: labels: Extra inputs are not permitted",
        "problems": [{"path": "labels", "message": "Extra inputs are not permitted"}],
    }
    result = api.run("experiment", "create", str(config), str(config.parent / "ctx"))
    assert result.code != 0
    assert result.err.startswith("Error: the API's version (0.0.1) is older than that of the CLI")
    assert result.err.endswith("; invalid request body:\n  labels: Extra inputs are not permitted\n")
