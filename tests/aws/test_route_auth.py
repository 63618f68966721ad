"""Every route × every kind of credential, over real HTTP to the Chalice app (its local server) on a moto
stack holding real records: two experiments, each with a trial whose run is live, and a checkpoint.

The table names, for each route, the status each credential must get. A route added without a row fails
`test_every_route_has_a_row`; a route whose registration declares the wrong auth kind (or a check that
goes missing) fails `test_each_credential_gets_the_status_its_row_names`.

Every request of a route is the same but for its `Authorization` header. Routes with a request body get
one no model accepts (`not json`): a credential that passes answers 400 for the body, which proves the
credential is checked before the body is read and that nothing past the check changed any record.
"""

from __future__ import annotations

import time

import pytest
from chalice.app import IAMAuthorizer

from chalicelib.api.routing import ROUTES

pytestmark = [
    pytest.mark.aws,
    pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode"),
]

CREDENTIALS = ("none", "wrong", "user", "agent", "run", "other_run", "other_agent")
# route → the status for each credential, in the order of CREDENTIALS:
#   none       no Authorization header
#   wrong      `Bearer not-a-token`
#   user       a SigV4-signed request, what a user's CLI sends in AWS (the local stack lets users in
#              unsigned too; in AWS, API Gateway's IAM authorizer refuses `none` and `wrong` on the
#              user routes with 403 before the app runs: `test_user_routes_carry_the_iam_authorizer`)
#   agent        the credential minted for the agent the path names (local-0, which holds the runs)
#   run          the run token of the trial the path names (its run is live)
#   other_run    the live run token of a trial of another experiment
#   other_agent  the credential of another agent (local-1): it cannot act as local-0
OPEN = (200, 200, 200, 200, 200, 200, 200)
USER_READ = (200, 200, 200, 200, 200, 200, 200)
USER_BODY = (400, 400, 400, 400, 400, 400, 400)
USER_CONFLICT = (409, 409, 409, 409, 409, 409, 409)
AGENT_BODY = (401, 401, 401, 400, 401, 401, 403)
# No agent in the path: any agent's credential passes to the body (the run it names must be its own).
AGENT_LOGS = (401, 401, 401, 400, 401, 401, 400)
RUN_READ = (401, 401, 401, 401, 200, 403, 401)
RUN_BODY = (401, 401, 401, 401, 400, 403, 401)
TABLE: dict[tuple[str, str], tuple[int, ...]] = {
    ("GET", "/health"): OPEN,
    ("GET", "/info"): OPEN,
    ("GET", "/openapi.json"): OPEN,
    ("POST", "/contexts"): USER_BODY,
    ("POST", "/experiments"): USER_BODY,
    ("GET", "/experiments"): USER_READ,
    ("GET", "/jobs"): USER_READ,
    ("PATCH", "/jobs/{job_id}"): USER_BODY,
    ("POST", "/job-queue"): USER_BODY,
    ("GET", "/resource-pools"): USER_READ,
    ("GET", "/agents"): USER_READ,
    ("POST", "/agents/{agent_id}/credential"): USER_READ,  # no body
    ("POST", "/agents/{agent_id}/enable"): USER_READ,  # no body; the agent is enabled: a no-op
    ("POST", "/agents/{agent_id}/disable"): USER_BODY,
    # Only an EC2 agent role's session, which the local stack has none of: refused to every caller.
    ("POST", "/agents/{agent_id}/iam-credential"): (403, 403, 403, 403, 403, 403, 403),
    ("GET", "/slots"): USER_READ,
    ("GET", "/experiments/{experiment_id}"): USER_READ,
    (
        "POST",
        "/experiments/{experiment_id}/activate",
    ): USER_READ,  # no body; activating an active one is a no-op
    # On an experiment of their own (`Api.concrete`); no body; a repeat is a no-op.
    ("POST", "/experiments/{experiment_id}/pause"): USER_READ,
    ("POST", "/experiments/{experiment_id}/cancel"): USER_READ,
    ("POST", "/experiments/{experiment_id}/kill"): USER_READ,
    ("POST", "/trials/{trial_id}/kill"): USER_READ,
    # No body; the experiment is active, and only one that has ended can be (un)archived (409).
    ("POST", "/experiments/{experiment_id}/archive"): USER_CONFLICT,
    ("POST", "/experiments/{experiment_id}/unarchive"): USER_CONFLICT,
    ("GET", "/experiments/{experiment_id}/trials"): USER_READ,
    ("POST", "/experiments/{experiment_id}/dashboard"): USER_READ,  # no body; a repeat updates it
    ("GET", "/experiments/{experiment_id}/checkpoints"): USER_READ,
    # The experiment is active: only one that has ended can be deleted (409).
    ("DELETE", "/experiments/{experiment_id}"): USER_CONFLICT,
    ("PATCH", "/experiments/{experiment_id}"): USER_BODY,
    ("POST", "/checkpoint-deletions"): USER_BODY,
    ("GET", "/checkpoints/{uuid}"): USER_READ,
    ("GET", "/checkpoints/{uuid}/files"): USER_READ,
    ("GET", "/trials/{trial_id}"): USER_READ,
    ("GET", "/trials/{trial_id}/metrics"): USER_READ,
    ("GET", "/trials/{trial_id}/metric-groups"): USER_READ,
    ("GET", "/trials/{trial_id}/logs"): USER_READ,
    ("POST", "/agents/{agent_id}/heartbeat"): AGENT_BODY,
    ("POST", "/agents/{agent_id}/runs/{run_id}/started"): AGENT_BODY,
    ("POST", "/agents/{agent_id}/runs/{run_id}/exit"): AGENT_BODY,
    ("POST", "/trials/{trial_id}/logs"): AGENT_LOGS,
    ("GET", "/trials/{trial_id}/info"): RUN_READ,
    ("POST", "/trials/{trial_id}/metrics"): RUN_BODY,
    ("POST", "/trials/{trial_id}/progress"): RUN_BODY,
    ("POST", "/trials/{trial_id}/reports"): RUN_BODY,
    ("POST", "/trials/{trial_id}/heartbeat"): RUN_BODY,
    ("POST", "/trials/{trial_id}/checkpoints/uploads"): RUN_BODY,
    ("POST", "/trials/{trial_id}/checkpoints"): RUN_BODY,
    # Own experiment only: the other run's experiment does not hold the checkpoint.
    ("GET", "/checkpoints/{uuid}/downloads"): RUN_READ,
    ("GET", "/trials/{trial_id}/searcher"): RUN_READ,
    ("POST", "/trials/{trial_id}/searcher/completed"): RUN_BODY,
    ("POST", "/trials/{trial_id}/searcher/invalid_hp"): RUN_BODY,
    ("POST", "/trials/{trial_id}/rendezvous"): RUN_BODY,
    ("PUT", "/trials/{trial_id}/adaptdl/hints"): RUN_BODY,
    # The credential passes; the run is on one node, so it has no rendezvous to read (400).
    ("GET", "/trials/{trial_id}/rendezvous"): (401, 401, 401, 401, 400, 403, 401),
}
REFUSALS = {401: "Unauthorized", 403: "Forbidden"}


def test_every_route_has_a_row():
    import app  # noqa: F401  (registers the routes)

    assert {(r.method, r.path) for r in ROUTES} == set(TABLE)


def test_user_routes_carry_the_iam_authorizer():
    """In AWS, API Gateway refuses an unsigned call to a user route before the app runs."""
    import app

    for r in ROUTES:
        entry = app.app.routes[r.path][r.method]
        assert isinstance(entry.authorizer, IAMAuthorizer) == (r.auth == "iam"), (r.method, r.path)


@pytest.mark.parametrize(("method", "path"), sorted(TABLE), ids=lambda v: str(v))
def test_each_credential_gets_the_status_its_row_names(api, method: str, path: str):
    declared = next(r for r in ROUTES if (r.method, r.path) == (method, path))
    body = b"not json" if declared.request is not None else None
    got = {}
    for credential in CREDENTIALS:
        answer = api.call(method, api.concrete(path), credential, body)
        code = (
            answer.json().get("error")
            if answer.headers.get("content-type", "").startswith("application/json")
            and answer.status_code >= 400
            else None
        )
        got[credential] = (answer.status_code, code)
    expected = dict(zip(CREDENTIALS, TABLE[(method, path)], strict=True))
    assert {c: status for c, (status, _) in got.items()} == expected
    for credential, (status, code) in got.items():
        if status in REFUSALS:
            assert code == REFUSALS[status], (credential, code)
        elif status == 400:
            assert code == "BadRequest", (credential, code)  # the body (or the one-node rendezvous), not auth


def test_a_run_token_dies_with_its_run(api):
    trial_id, token = api.dead_run
    answer = api.http.get(f"/trials/{trial_id}/info", headers={"Authorization": token})
    assert answer.status_code == 403
    assert "has exited" in answer.json()["message"]


def test_the_credential_is_checked_before_the_path_and_the_body(api):
    answer = api.http.post("/trials/not-a-number/metrics", content=b"not json")
    assert (answer.status_code, answer.json()["error"]) == (401, "Unauthorized")
    answer = api.call("POST", "/trials/not-a-number/metrics", "run", b"not json")
    assert answer.status_code == 400
    assert "trial id 'not-a-number' must be an integer" in answer.json()["message"]


def test_an_agent_ships_logs_only_of_the_runs_it_holds(api):
    now = int(time.time() * 1000)
    body = {"run_id": api.run_id, "lines": [{"timestamp": now, "message": "not mine", "rank": None}]}
    stolen = api.http.post(
        f"/trials/{api.trial_id}/logs", json=body, headers={"Authorization": api.tokens["other_agent"]}
    )
    assert stolen.status_code == 403
    assert (
        stolen.json()["message"]
        == f"run {api.run_id} is not assigned to agent local-1; it cannot ship its logs"
    )
    own = api.http.post(
        f"/trials/{api.trial_id}/logs", json=body, headers={"Authorization": api.tokens["agent"]}
    )
    assert own.status_code == 200


def test_an_agent_cannot_act_as_another(api):
    """Issue 11: with one shared token, any agent could beat as another, see its launch specs (run
    tokens in them) and forge its exits."""
    for path in ("/agents/local-0/heartbeat", f"/agents/local-0/runs/{api.run_id}/exit"):
        answer = api.call("POST", path, "other_agent", b'{"pool": "default", "slots": 1, "exit_code": 0}')
        assert answer.status_code == 403
        assert (
            answer.json()["message"]
            == "this credential is agent 'local-1''s; it cannot act as agent 'local-0'"
        )


def test_a_minted_credential_acts_as_its_agent_and_no_other(api):
    minted = api.http.post("/agents/remote-7/credential")
    assert minted.status_code == 200 and minted.json()["agent_id"] == "remote-7"
    bearer = {"Authorization": f"Bearer {minted.json()['credential']}"}
    beat = {"pool": "default", "slots": 0, "running": []}
    assert api.http.post("/agents/remote-7/heartbeat", json=beat, headers=bearer).status_code == 200
    assert api.http.post("/agents/local-0/heartbeat", json=beat, headers=bearer).status_code == 403
    assert api.http.post(f"/agents/{'x' * 129}/credential").status_code == 400


def test_an_agent_id_over_128_characters_is_refused(api):
    answer = api.call("POST", f"/agents/{'a' * 129}/heartbeat", "agent", b"not json")
    assert (answer.status_code, answer.json()["error"]) == (403, "Forbidden")


def test_the_owner_is_the_user_the_cli_names_a_label_not_a_credential(api):
    named = api.http.post(
        "/experiments",
        json={"config": {**api.config, "name": "owned"}, "activate": False},
        headers={"X-Stratus-User": "carol"},
    )
    unnamed = api.http.post("/experiments", json={"config": api.config, "activate": False, "archived": True})
    assert named.status_code == unnamed.status_code == 200, (named.text, unnamed.text)
    assert named.json()["experiment"]["owner"] == "carol"
    assert (unnamed.json()["experiment"]["owner"], unnamed.json()["experiment"]["archived"]) == ("user", True)
    listed = {
        e["id"] for e in api.http.get("/experiments", params={"archived": "false"}).json()["experiments"]
    }
    assert named.json()["experiment"]["id"] in listed
    assert unnamed.json()["experiment"]["id"] not in listed
    paused = named.json()["experiment"]["id"]
    refused = api.http.post(f"/experiments/{paused}/archive")
    assert refused.status_code == 409
    assert refused.json()["message"].startswith(f"experiment {paused} is PAUSED; only an experiment that has")
    assert api.http.get("/experiments", params={"archived": "maybe"}).status_code == 400


def test_a_log_level_keeps_the_lines_of_that_level_or_higher(api):
    agent = {"Authorization": api.tokens["agent"]}
    messages = ["INFO: [1] root: loading", "plain print", "WARNING:root:slow", "[rank=1] ERROR: [1] x: bad"]
    now = int(time.time() * 1000)  # CloudWatch drops events older than 14 days
    lines = [{"timestamp": now + i, "message": m, "rank": None} for i, m in enumerate(messages)]
    answer = api.http.post(
        f"/trials/{api.trial_id}/logs", json={"run_id": api.run_id, "lines": lines}, headers=agent
    )
    assert answer.status_code == 200, answer.text

    def read(level: str) -> list[str]:
        page = api.http.get(f"/trials/{api.trial_id}/logs", params={"level": level, "limit": 1000}).json()
        return [line["message"] for line in page["logs"] if line["message"] in messages]

    assert read("WARNING") == ["WARNING:root:slow", "[rank=1] ERROR: [1] x: bad"]
    assert read("info") == messages  # a line without a level is INFO, as in Determined
    errors = api.http.get(f"/trials/{api.trial_id}/logs", params={"level": "CRITICAL"}).json()
    assert errors["logs"] == [] and errors["lines_read"] >= len(messages)  # read, then filtered
    assert api.http.get(f"/trials/{api.trial_id}/logs", params={"level": "LOUD"}).status_code == 400
