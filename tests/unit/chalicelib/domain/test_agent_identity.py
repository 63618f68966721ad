"""An EC2 agent's credential from its instance's IAM identity, on the control plane: who the caller is
(`chalicelib.domain.agent_identity`, on request contexts in the shapes API Gateway documents for its
Lambda proxy integration), and `POST /agents/{agent_id}/iam-credential` through the whole app with a
crafted context (moto has no IAM authorizer, docs/architecture.md, "The local stack plays AWS with moto"), in Chalice's local mode,
and in the REST API the template generates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from chalice.test import Client

import app
from chalicelib.domain.agent_identity import RoleSession, agent_session, role_session
from chalicelib.errors import ForbiddenError
from chalicelib.services import tokens
from chalicelib.settings import get_settings, reset_settings
from infra.aws.template_app import app_resources

pytestmark = pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode")

ACCOUNT = "123456789012"
ROLE = "lab-AgentRole-1A2B3C4D5E6F"
INSTANCE = "i-0abc1234def567890"
ROLE_ID = "AROAEXAMPLEROLEID1234"
AGENT_SECRET = "stack-agent-secret"


def role_arn(
    session: str = INSTANCE, role: str = ROLE, account: str = ACCOUNT, partition: str = "aws"
) -> str:
    return f"arn:{partition}:sts::{account}:assumed-role/{role}/{session}"


def request_context(
    user_arn: str | None = None, *, caller: str | None = None, api_account: str = ACCOUNT
) -> dict[str, Any]:
    """``requestContext`` of a REST API proxy event (AWS's documented sample), signed by ``user_arn``."""
    arn = role_arn() if user_arn is None else user_arn
    caller = caller if caller is not None else f"{ROLE_ID}:{arn.rsplit('/', 1)[-1]}"
    return {
        "accountId": api_account,
        "apiId": "a1b2c3d4e5",
        "domainName": "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
        "httpMethod": "POST",
        "identity": {
            "accessKey": "ASIAEXAMPLEKEY123456",
            "accountId": arn.split(":")[4],
            "caller": caller,
            "cognitoAuthenticationProvider": None,
            "cognitoAuthenticationType": None,
            "cognitoIdentityId": None,
            "cognitoIdentityPoolId": None,
            "principalOrgId": None,
            "sourceIp": "10.0.1.23",
            "user": caller,
            "userAgent": "stratus-agent",
            "userArn": arn,
        },
        "path": f"/api/agents/{INSTANCE}/iam-credential",
        "protocol": "HTTP/1.1",
        "requestId": "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
        "resourceId": "abc123",
        "resourcePath": "/agents/{agent_id}/iam-credential",
        "stage": "api",
    }


# ---- who the caller is ---------------------------------------------------------------------------------


def test_the_agent_roles_session_named_after_the_instance_is_that_agent() -> None:
    session = agent_session(request_context(), role_name=ROLE, agent_id=INSTANCE)
    assert session == RoleSession("aws", ACCOUNT, ROLE, INSTANCE)
    assert session.arn == role_arn()


@pytest.mark.parametrize("partition", ["aws", "aws-cn", "aws-us-gov", "aws-iso-b"])
def test_a_stack_in_any_partition_knows_its_agents(partition: str) -> None:
    arn = role_arn(partition=partition)
    assert role_session(arn) == RoleSession(partition, ACCOUNT, ROLE, INSTANCE)
    assert agent_session(request_context(arn), role_name=ROLE, agent_id=INSTANCE).partition == partition


@pytest.mark.parametrize(
    "arn",
    [
        f"arn:aws:iam::{ACCOUNT}:user/alice",
        f"arn:aws:iam::{ACCOUNT}:user/team/alice",
        f"arn:aws:iam::{ACCOUNT}:role/{ROLE}",  # the role itself, not a session of it
        f"arn:aws:sts::{ACCOUNT}:federated-user/alice",
        f"arn:aws:iam::{ACCOUNT}:root",
        f"arn:aws:sts::12345:assumed-role/{ROLE}/{INSTANCE}",  # not an account id
        f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/{INSTANCE}/extra",
        f"arn:gcp:sts::{ACCOUNT}:assumed-role/{ROLE}/{INSTANCE}",
        f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/x",  # a session name is 2 to 64 characters
    ],
)
def test_what_is_not_a_role_session_is_refused_naming_the_identity(arn: str) -> None:
    assert role_session(arn) is None
    with pytest.raises(ForbiddenError, match="is not a role session") as refused:
        agent_session(request_context(arn), role_name=ROLE, agent_id=INSTANCE)
    assert arn in refused.value.message and ROLE in refused.value.message


@pytest.mark.parametrize(
    "context",
    [
        None,
        {},
        {"identity": None},
        {"identity": {"sourceIp": "127.0.0.1"}},  # Chalice's local mode
        {"accountId": ACCOUNT, "identity": {"userArn": None, "caller": None}},
        {"accountId": ACCOUNT, "identity": "arn"},
    ],
    ids=["none", "empty", "identity-null", "chalice-local", "unsigned", "not-a-mapping"],
)
def test_a_request_without_an_iam_identity_is_refused(context: dict[str, Any] | None) -> None:
    with pytest.raises(ForbiddenError, match="carries no IAM identity") as refused:
        agent_session(context, role_name=ROLE, agent_id=INSTANCE)
    assert "--token-file" in refused.value.message and INSTANCE in refused.value.message


def test_a_session_of_another_role_is_refused() -> None:
    arn = role_arn(role="SomeoneElsesRole")
    with pytest.raises(ForbiddenError) as refused:
        agent_session(request_context(arn), role_name=ROLE, agent_id=INSTANCE)
    assert refused.value.message == (
        f"caller {arn} is a session of role 'SomeoneElsesRole'; only a session of the agent role "
        f"'{ROLE}' named after the instance (its id, '{INSTANCE}') may"
    )


def test_an_instance_gets_its_own_agents_credential_only() -> None:
    with pytest.raises(ForbiddenError) as refused:
        agent_session(request_context(role_arn("i-0other")), role_name=ROLE, agent_id=INSTANCE)
    assert refused.value.message == (
        f"caller {role_arn('i-0other')} is instance 'i-0other''s session; it gets the credential of agent "
        f"'i-0other', not of agent '{INSTANCE}'"
    )


def test_the_agent_role_of_another_account_is_refused() -> None:
    arn = role_arn(account="210987654321")
    with pytest.raises(ForbiddenError, match="is of account 210987654321, not of this API's account"):
        agent_session(request_context(arn), role_name=ROLE, agent_id=INSTANCE)
    context = request_context()
    del context["accountId"]
    with pytest.raises(ForbiddenError, match="the request context names none"):
        agent_session(context, role_name=ROLE, agent_id=INSTANCE)


def test_a_caller_that_disagrees_with_its_arn_is_refused() -> None:
    context = request_context(caller=f"{ROLE_ID}:i-0other")
    with pytest.raises(ForbiddenError, match="caller 'AROAEXAMPLEROLEID1234:i-0other' does not name"):
        agent_session(context, role_name=ROLE, agent_id=INSTANCE)


def test_a_stack_without_an_agent_role_refuses_everyone() -> None:
    with pytest.raises(ForbiddenError, match="STRATUS_AGENT_ROLE_NAME is unset"):
        agent_session(request_context(), role_name="", agent_id=INSTANCE)


# ---- the route, through the app -------------------------------------------------------------------------


@pytest.fixture
def stack_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {
        "STRATUS_BUCKET": "b",
        "STRATUS_SCHEDULER_QUEUE_URL": "q1",
        "STRATUS_LAUNCH_QUEUE_URL": "q2",
        "STRATUS_EVENTS_QUEUE_URL": "q3",
        "STRATUS_STATE_MACHINE_ARN": "arn",
        "STRATUS_TOKEN_SECRET": "run-secret",
        "STRATUS_AGENT_TOKEN": AGENT_SECRET,
        "STRATUS_AGENT_ROLE_NAME": ROLE,
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("STRATUS_TOKEN_SECRET_ARN", "STRATUS_AGENT_TOKEN_ARN"):
        monkeypatch.delenv(name, raising=False)
    reset_settings()
    yield
    reset_settings()


def invoke(agent_id: str, context: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The app's answer to the Lambda proxy event API Gateway sends for this route."""
    event = {
        "resource": "/agents/{agent_id}/iam-credential",
        "path": f"/agents/{agent_id}/iam-credential",
        "httpMethod": "POST",
        "headers": {"Host": "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com"},
        "multiValueHeaders": {"Host": ["a1b2c3d4e5.execute-api.us-east-1.amazonaws.com"]},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": {"agent_id": agent_id},
        "stageVariables": None,
        "requestContext": context,
        "body": None,
        "isBase64Encoded": False,
    }
    answer = app.app(event, None)
    return answer["statusCode"], json.loads(answer["body"])


def test_the_route_answers_the_instances_own_agent_credential(stack_env: None) -> None:
    status, body = invoke(INSTANCE, request_context())
    assert (status, body) == (200, {"credential": tokens.agent_credential(AGENT_SECRET, INSTANCE)})
    # ... which the agent routes take as that agent's, and no other's.
    bearer = f"Bearer {body['credential']}"
    assert tokens.agent_id_from_credential(get_settings().agent_token, bearer) == INSTANCE


def test_the_route_refuses_another_instance_with_one_clear_message(stack_env: None) -> None:
    status, body = invoke("i-0victim", request_context())
    assert status == 403 and body["error"] == "Forbidden"
    assert body["message"] == (
        f"caller {role_arn()} is instance '{INSTANCE}''s session; it gets the credential of agent "
        f"'{INSTANCE}', not of agent 'i-0victim'"
    )
    status, body = invoke(INSTANCE, request_context(f"arn:aws:iam::{ACCOUNT}:user/alice"))
    assert status == 403 and "is not a role session" in body["message"]


def test_in_chalices_local_mode_there_is_no_identity_so_the_route_answers_403(stack_env: None) -> None:
    with Client(app.app) as client:
        answer = client.http.post(f"/agents/{INSTANCE}/iam-credential")
    body = json.loads(answer.body)
    assert answer.status_code == 403 and "carries no IAM identity" in body["message"]
    assert "credential" not in body


def test_the_stack_tells_the_api_its_agent_role_and_api_gateway_checks_sigv4(stack_env: None) -> None:
    assert get_settings().agent_role_name == ROLE
    resources, _ = app_resources()
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    assert functions and all(
        f["Properties"]["Environment"]["Variables"]["STRATUS_AGENT_ROLE_NAME"] == {"Ref": "AgentRole"}
        for f in functions
    )
    swagger = resources["RestApi"]["Properties"]["Body"]
    operation = swagger["paths"]["/agents/{agent_id}/iam-credential"]["post"]
    assert operation["security"] == [{"sigv4": []}]
    assert swagger["securityDefinitions"]["sigv4"]["x-amazon-apigateway-authtype"] == "awsSigv4"


def test_without_the_setting_the_role_name_is_empty(stack_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATUS_AGENT_ROLE_NAME")
    reset_settings()
    assert get_settings().agent_role_name == ""
    status, body = invoke(INSTANCE, request_context())
    assert status == 403 and "STRATUS_AGENT_ROLE_NAME is unset" in body["message"]
