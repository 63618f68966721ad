"""The route registration: what it refuses at import, and the one error handler around every route
(in memory, through Chalice's test client; the route × credential table lives in tests/aws)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from chalice.app import Blueprint, Chalice
from chalice.test import Client

from chalicelib.api import agent_models, models
from chalicelib.api.auth import Anonymous, RunPrincipal, UserPrincipal
from chalicelib.api.routing import ROUTES, route
from chalicelib.errors import ConflictError


@pytest.fixture
def bp() -> Iterator[Blueprint]:
    saved = list(ROUTES)
    yield Blueprint(__name__)
    ROUTES[:] = saved  # these routes belong to this test's app only


def test_a_path_parameter_without_a_parser_is_refused(bp):
    with pytest.raises(TypeError, match="'pool_name' is not in routing.PATH_PARAMETERS"):
        route(bp, "/pools/{pool_name}", "GET", response=models.Empty, auth="iam")


def test_a_view_whose_principal_does_not_match_the_auth_kind_is_refused(bp):
    with pytest.raises(TypeError, match=r"must take \(principal: RunPrincipal, trial_id\)"):

        @route(bp, "/trials/{trial_id}/info", "GET", response=models.Empty, auth="run")
        def info(user: UserPrincipal, trial_id: int) -> models.Empty:
            return models.Empty()


def test_a_view_that_does_not_take_the_declared_body_is_refused(bp):
    with pytest.raises(TypeError, match=r"must take \(principal: RunPrincipal, body, trial_id\)"):

        @route(
            bp,
            "/trials/{trial_id}/progress",
            "POST",
            request=models.ProgressReport,
            response=models.Empty,
            auth="run",
        )
        def progress(run: RunPrincipal, trial_id: int) -> models.Empty:
            return models.Empty()


def _app(bp: Blueprint) -> Chalice:
    app = Chalice(app_name="routing-test")
    app.register_blueprint(bp)
    return app


def test_the_view_gets_the_parsed_body_and_typed_path_and_errors_become_json(bp):
    seen = []

    @route(
        bp,
        "/experiments/{experiment_id}/progress",
        "POST",
        request=models.ProgressReport,
        response=models.Empty,
        auth="none",
    )
    def progress(principal: Anonymous, body: models.ProgressReport, experiment_id: int) -> models.Empty:
        seen.append((principal, body.progress, experiment_id))
        if body.progress == 1.0:
            raise ConflictError(f"experiment {experiment_id} has ended; nothing to report")
        if body.progress == 0.5:
            raise KeyError("a bug")
        return models.Empty()

    headers = {"Content-Type": "application/json"}
    with Client(_app(bp)) as client:
        ok = client.http.post("/experiments/7/progress", body=json.dumps({"progress": 0.25}), headers=headers)
        conflict = client.http.post(
            "/experiments/7/progress", body=json.dumps({"progress": 1.0}), headers=headers
        )
        bug = client.http.post("/experiments/7/progress", body=json.dumps({"progress": 0.5}), headers=headers)
        bad_body = client.http.post("/experiments/7/progress", body=b"{", headers=headers)
        bad_id = client.http.post(
            "/experiments/x/progress", body=json.dumps({"progress": 0.25}), headers=headers
        )

    assert (ok.status_code, json.loads(ok.body)) == (200, {})
    assert seen[0] == (Anonymous(), 0.25, 7)
    assert (conflict.status_code, json.loads(conflict.body)) == (
        409,
        {"error": "Conflict", "message": "experiment 7 has ended; nothing to report"},
    )
    assert (bug.status_code, json.loads(bug.body)["error"]) == (500, "InternalError")
    assert (bad_body.status_code, json.loads(bad_body.body)["error"]) == (400, "BadRequest")
    assert json.loads(bad_id.body)["message"] == "experiment id 'x' must be an integer"
    assert len(seen) == 3  # neither a bad body nor a bad id reaches the view


def test_a_view_answering_another_model_than_declared_is_a_500(bp):
    @route(bp, "/health", "GET", response=models.Health, auth="none")
    def health(principal: Anonymous) -> models.Empty:
        return models.Empty()

    with Client(_app(bp)) as client:
        answer = client.http.get("/health")
    assert (answer.status_code, json.loads(answer.body)["error"]) == (500, "InternalError")


def test_a_log_batch_with_an_empty_run_id_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="run_id"):
        agent_models.LogBatch.model_validate({"run_id": "", "lines": []})
