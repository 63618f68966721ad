"""The agent's standard-library SigV4 signer (`stratus.harness.agent._sigv4`), held to AWS's test suite and to
botocore's own signer (the one the det CLI uses, `det/_sigv4.py`) for fixed credentials, and the shape of
header the fake control plane's credential route wants (`stratus.harness.agent.testing.FakeApi`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotocoreCredentials

from stratus.harness.agent._sigv4 import Credentials, sign
from stratus.harness.agent.testing import SIGV4_EXECUTE_API

API = "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/api"
INSTANCE = "i-0abc1234def567890"
KEYS = Credentials(
    "ASIAEXAMPLEKEY123456", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "IQoJb3JpZ2luX2VjEXAMPLE=="
)
NOW = datetime(2026, 11, 26, 4, 58, 7, tzinfo=UTC)


def test_the_signer_gives_aws_test_suites_signature() -> None:
    # "get-vanilla" of AWS's SigV4 test suite: its documented credentials, time and signature.
    suite_keys = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    headers = sign(
        "GET",
        "https://example.amazonaws.com/",
        {},
        b"",
        credentials=suite_keys,
        region="us-east-1",
        service="service",
        now=datetime(2015, 8, 30, 12, 36, tzinfo=UTC),
    )
    assert headers == {
        "x-amz-date": "20150830T123600Z",
        "authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        "SignedHeaders=host;x-amz-date, "
        "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
    }


CASES = pytest.mark.parametrize(
    ("method", "url", "headers", "body"),
    [
        ("POST", f"{API}/agents/{INSTANCE}/iam-credential", {"accept": "application/json"}, b""),
        ("POST", f"{API}/agents/agent%201/heartbeat", {"Content-Type": "application/json"}, b'{"slots": 2}'),
        (
            "GET",
            "http://127.0.0.1:8000/v1/trials/7/logs?tail=10&level=INFO&a=%2F",
            {"X-Stratus-User": " a  b "},
            b"",
        ),
        ("PUT", "https://api.example.com:443/x/~y/z", {}, b"\x00\xff"),
    ],
    ids=["credential-route", "quoted-path-and-body", "query-port-and-spaces", "default-port"],
)


@CASES
def test_the_signer_signs_as_botocore_does_at_a_fixed_time(
    method: str, url: str, headers: dict[str, str], body: bytes
) -> None:
    stamp = NOW.strftime("%Y%m%dT%H%M%SZ")
    request = AWSRequest(
        method=method,
        url=url,
        data=body,
        headers={**headers, "X-Amz-Date": stamp, "X-Amz-Security-Token": KEYS.token},
    )
    request.context["timestamp"] = stamp  # what botocore's add_auth would take from the clock
    auth = SigV4Auth(
        BotocoreCredentials(KEYS.access_key, KEYS.secret_key, KEYS.token), "execute-api", "eu-west-1"
    )
    signature = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    signed_headers = auth.signed_headers(auth.headers_to_sign(request))
    ours = sign(
        method, url, headers, body, credentials=KEYS, region="eu-west-1", service="execute-api", now=NOW
    )
    assert ours["authorization"] == (
        f"AWS4-HMAC-SHA256 Credential={KEYS.access_key}/{stamp[:8]}/eu-west-1/execute-api/aws4_request, "
        f"SignedHeaders={signed_headers}, Signature={signature}"
    )


@CASES
def test_the_signer_signs_as_botocore_does(
    method: str, url: str, headers: dict[str, str], body: bytes
) -> None:
    signed = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    botocore_keys = BotocoreCredentials(KEYS.access_key, KEYS.secret_key, KEYS.token)
    SigV4Auth(botocore_keys, "execute-api", "eu-west-1").add_auth(signed)
    # Signed at the time botocore read from the clock, with the same keys.
    at = datetime.strptime(signed.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    ours = sign(
        method, url, headers, body, credentials=KEYS, region="eu-west-1", service="execute-api", now=at
    )
    assert ours == {
        "x-amz-date": signed.headers["X-Amz-Date"],
        "x-amz-security-token": KEYS.token,
        "authorization": signed.headers["Authorization"],
    }


def test_keys_without_a_session_token_sign_no_token_header() -> None:
    headers = sign(
        "POST", API, {}, b"", credentials=Credentials("AKIA1", "s"), region="r", service="s", now=NOW
    )
    assert set(headers) == {"x-amz-date", "authorization"}
    assert "SignedHeaders=host;x-amz-date," in headers["authorization"]
    assert "s3cr3t" not in repr(Credentials("AKIA1", "s3cr3t", "t0k3n")) and "t0k3n" not in repr(KEYS)


def test_the_fake_apis_route_wants_a_sigv4_header_for_execute_api() -> None:
    # What FakeApi checks (over loopback in tests/integration/test_agent_iam.py).
    good = sign("POST", API, {}, b"", credentials=KEYS, region="eu-west-1", service="execute-api", now=NOW)
    other = sign("POST", API, {}, b"", credentials=KEYS, region="eu-west-1", service="s3", now=NOW)
    assert SIGV4_EXECUTE_API.match(good["authorization"])
    assert not SIGV4_EXECUTE_API.match(other["authorization"])
    assert not SIGV4_EXECUTE_API.match("Bearer agent.x.y")
