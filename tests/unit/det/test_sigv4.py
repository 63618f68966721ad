"""The CLI signs its requests with SigV4 for an API in AWS (API Gateway's IAM authorizer), with the
user's usual credentials; the local stack is never signed. Signatures are checked by recomputing them
with botocore from what was sent."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from det._runtime import Runtime
from det.errors import UsageError

GATEWAY = "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/api"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role lookup (no socket here)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")


def _sent(master: str, environ: dict[str, str], name: str = "x") -> httpx.Request:
    """The request `det` sends to create an experiment named `name` (validate only)."""
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"experiment": {"id": 1}, "experiments": []})

    rt = Runtime(master=master, environ={"USER": "alice", **environ}, transport=httpx.MockTransport(answer))
    with rt.client() as client:
        client.create_experiment({"name": name}, context_sha256=None, validate_only=True, activate=False)
    return requests[-1]


def _expected_signature(request: httpx.Request, region: str) -> str:
    """What botocore computes for the request as it went out, at the time it names."""
    signed = request.headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    headers = {name: request.headers[name] for name in signed}
    again = AWSRequest(method=request.method, url=str(request.url), data=request.content, headers=headers)
    again.context["timestamp"] = request.headers["x-amz-date"]
    auth = SigV4Auth(
        Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), "execute-api", region
    )
    return auth.signature(auth.string_to_sign(again, auth.canonical_request(again)), again)


def test_requests_to_api_gateway_are_signed_for_its_region(aws_env: None) -> None:
    request = _sent(GATEWAY, {})
    authorization = request.headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert "x-stratus-user" in authorization and "host" in authorization  # the owner label is signed too
    assert authorization.endswith("Signature=" + _expected_signature(request, "eu-west-1"))
    assert json.loads(request.content)["config"] == {"name": "x"}


def test_the_signature_covers_the_body(aws_env: None) -> None:
    one = _sent(GATEWAY, {})
    other = _sent(GATEWAY, {}, name="y")
    if one.headers["x-amz-date"] == other.headers["x-amz-date"]:
        assert one.headers["authorization"] != other.headers["authorization"]
    assert other.headers["authorization"].endswith("Signature=" + _expected_signature(other, "eu-west-1"))


def test_a_custom_domain_is_signed_when_asked_and_the_local_stack_never(aws_env: None) -> None:
    custom = _sent("https://ml.example.com", {"STRATUS_AUTH": "iam", "AWS_REGION": "us-west-2"})
    assert "/us-west-2/execute-api/aws4_request" in custom.headers["authorization"]
    assert "authorization" not in _sent("http://127.0.0.1:8080", {}).headers
    assert "authorization" not in _sent(GATEWAY, {"STRATUS_AUTH": "none"}).headers


def test_without_credentials_the_cli_says_how_to_get_them(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(
        UsageError, match="signed with your AWS credentials, and none were found: run `aws configure`"
    ):
        _sent(GATEWAY, {})
    with pytest.raises(UsageError, match="STRATUS_AUTH='kerberos' is not iam or none"):
        _sent(GATEWAY, {"STRATUS_AUTH": "kerberos"})
