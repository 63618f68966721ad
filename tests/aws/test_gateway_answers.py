"""API Gateway's own answers to `GET /health` and `GET /info` (mock integrations in the template: no function
runs for them on AWS) are what the app's views answer, which the local stack serves: the views' answers
here come from the real app on moto, with the stack's name and region as a deployed function has them."""

from __future__ import annotations

import json
import os

import pytest
from chalice.test import Client

from infra.aws.template_app import GATEWAY_ANSWERS, _swagger

pytestmark = [
    pytest.mark.aws,
    pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode"),
]


def test_the_gateways_own_answers_are_what_the_views_answer(stack) -> None:
    import app

    paths = _swagger(app.app)["paths"]
    assert set(GATEWAY_ANSWERS) == {"/health", "/info"}
    region = os.environ.get("AWS_REGION") or os.environ["AWS_DEFAULT_REGION"]
    with Client(app.app) as client:
        for path in GATEWAY_ANSWERS:
            integration = paths[path]["get"]["x-amazon-apigateway-integration"]
            assert integration["type"] == "mock"
            template = integration["responses"]["default"]["responseTemplates"]["application/json"]
            template = template["Fn::Sub"] if isinstance(template, dict) else template
            by_gateway = json.loads(
                template.replace("${AWS::StackName}", stack.names.stack).replace("${AWS::Region}", region)
            )
            by_view = client.http.get(path)
            assert by_view.status_code == 200, by_view.body
            assert json.loads(by_view.body) == by_gateway, path
    assert by_gateway["cluster_id"] == stack.names.stack
