"""An upgrade reaches the API, and the stack says its version: the REST API's deployment is named after a
digest of what it deploys, so a changed route makes a new deployment (which moves the `api` stage) and
an unchanged API keeps its deployment; the template's outputs name the version that rendered it."""

from __future__ import annotations

import json
from typing import Any

from chalice import Chalice

from infra.aws.template import template
from infra.aws.template_app import DEPLOYMENT_PREFIX, app_resources
from infra.boot import STAGE
from stratus.contract.versions import VERSION


def _project_app(*extra_routes: str) -> Chalice:
    """A Chalice app with the project's routes and queue handlers, plus a GET of each of `extra_routes`
    (the project's own app is left as it is)."""
    import app as project

    copy = Chalice(app_name=project.app.app_name)
    for path, methods in project.app.routes.items():
        copy.routes[path] = dict(methods)
    copy.event_sources = list(project.app.event_sources)
    for path in extra_routes:
        copy.route(path, methods=["GET"])(lambda: {})
    return copy


def _deployments(resources: dict[str, Any]) -> dict[str, Any]:
    return {k: r for k, r in resources.items() if r["Type"] == "AWS::ApiGateway::Deployment"}


def test_an_unchanged_api_renders_the_same_deployment():
    first, _ = app_resources()
    second, _ = app_resources()
    assert first == second
    (deployment,) = _deployments(first)
    assert deployment.startswith(DEPLOYMENT_PREFIX) and deployment.isalnum()  # a CloudFormation logical id
    # The project's app, copied, renders the same API: the copy below changes only the added route.
    assert app_resources(chalice_app=_project_app())[0] == first


def test_a_route_added_by_an_upgrade_makes_a_new_deployment_that_moves_the_stage():
    before, _ = app_resources(chalice_app=_project_app())
    after, _ = app_resources(chalice_app=_project_app("/upgrade-probe"))
    (old,) = _deployments(before)
    (new,) = _deployments(after)
    assert old != new and old not in after  # CloudFormation creates the new one, then deletes the old
    assert "/upgrade-probe" in after["RestApi"]["Properties"]["Body"]["paths"]
    properties = after[new]["Properties"]
    # API Gateway's CreateDeployment of the existing stage name points that stage at the new deployment.
    assert properties["RestApiId"] == {"Ref": "RestApi"} and properties["StageName"] == STAGE
    assert after[new]["Condition"] == "HasCode"
    # Nothing else names a deployment, so nothing refers to the old one once it is gone.
    others = {k: r for k, r in after.items() if k != new}
    assert DEPLOYMENT_PREFIX not in json.dumps(others)


def test_a_route_removed_by_an_upgrade_makes_a_new_deployment_too():
    """The digest covers everything the REST API's properties say, so a route an upgrade drops stops
    answering as well."""
    whole = _project_app()
    fewer = _project_app()
    del fewer.routes["/openapi.json"]
    (before,) = _deployments(app_resources(chalice_app=whole)[0])
    (after,) = _deployments(app_resources(chalice_app=fewer)[0])
    assert before != after


def test_the_template_has_one_deployment_and_records_the_version_it_was_rendered_by():
    built = template()
    assert len(_deployments(built["Resources"])) == 1
    assert built["Outputs"]["StratusVersion"]["Value"] == VERSION
