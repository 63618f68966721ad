"""An EC2 agent's credential from its instance's IAM identity, on the compute side, without IO: the
instance role's keys read from the fake metadata service (`infra.local.fake_imds`), the signed call
(`stratus.harness.agent._iam.IamCredential`), and `AgentApi` fetching the credential before its first call and
again after a 401. The signer: tests/unit/harness/agent/test_sigv4.py. An agent heartbeating with it over
loopback: tests/integration/test_agent_iam.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

import app  # noqa: F401  (registers the routes of the API's document)
from chalicelib.api.openapi import document
from infra.local.fake_imds import FAKE_ROLE, FakeImds
from stratus.contract.http import InMemoryTransport, Request, Response
from stratus.harness.agent._api import RENEW_BACKOFF_S, AgentApi
from stratus.harness.agent._aws import ImdsClient, ImdsError
from stratus.harness.agent._iam import (
    IamCredential,
    agent_api,
    credential_path,
    region_from_url,
    role_credentials,
)
from stratus.harness.agent._settings import Settings
from stratus.harness.agent._sigv4 import Credentials, sign
from stratus.harness.errors import ApiCallError

API = "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/api"
INSTANCE = "i-0abc1234def567890"
NOW = datetime(2026, 11, 26, 4, 58, 7, tzinfo=UTC)


# ---- the instance role's keys -----------------------------------------------------------------------------


def _imds(fake: FakeImds, instance: str = INSTANCE) -> ImdsClient:
    return ImdsClient(f"http://imds/{instance}", transport=InMemoryTransport(fake.handle))


def test_the_instance_roles_keys_come_from_the_metadata_service() -> None:
    fake = FakeImds()
    fake.add(INSTANCE, availability_zone="eu-west-1b")
    keys = fake.keys(INSTANCE)
    assert keys["Code"] == "Success" and keys["AccessKeyId"].startswith("ASIA") and keys["Expiration"]
    client = _imds(fake)
    assert client.get("meta-data/iam/security-credentials/") == FAKE_ROLE
    assert client.get("meta-data/placement/region") == "eu-west-1"
    assert role_credentials(client) == Credentials(
        keys["AccessKeyId"], keys["SecretAccessKey"], keys["Token"]
    )
    fake.rotate_keys(INSTANCE)
    assert role_credentials(client).access_key == fake.keys(INSTANCE)["AccessKeyId"] != keys["AccessKeyId"]


def test_an_instance_without_a_profile_has_no_keys_and_says_so() -> None:
    fake = FakeImds()
    fake.add(INSTANCE, role=None)
    with pytest.raises(ImdsError, match="this instance has no IAM instance profile") as refused:
        role_credentials(_imds(fake))
    assert refused.value.status == 404


def test_the_region_of_an_api_gateway_url() -> None:
    assert region_from_url(API) == "eu-west-1"
    assert region_from_url("https://abc.execute-api.cn-north-1.amazonaws.com.cn/api") == "cn-north-1"
    assert region_from_url("http://127.0.0.1:8000/v1") is None


# ---- the signed call --------------------------------------------------------------------------------------


@dataclass
class Plane:
    """The credential route as API Gateway and the API answer it: the signature checked against the
    instance's current keys (the region and the service in its scope), then ``answer``."""

    imds: FakeImds
    answer: Callable[[Request], Response] = lambda request: Response(200, json={"credential": "agent.i.c"})
    seen: list[Request] = field(default_factory=list)

    def handle(self, request: Request) -> Response:
        if request.host == "imds":
            return self.imds.handle(request)
        self.seen.append(request)
        keys = self.imds.keys(INSTANCE)
        credentials = Credentials(keys["AccessKeyId"], keys["SecretAccessKey"], keys["Token"])
        at = datetime.strptime(request.headers["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        sent = {
            k: v
            for k, v in request.headers.items()
            if k not in ("authorization", "x-amz-date", "x-amz-security-token")
        }
        expected = sign(
            request.method,
            request.url,
            sent,
            request.content,
            credentials=credentials,
            region="us-east-1",
            service="execute-api",
            now=at,
        )
        if request.headers.get("authorization") != expected["authorization"]:
            return Response(403, json={"message": "The request signature we calculated does not match"})
        return self.answer(request)


def _credential_source(plane: Plane) -> IamCredential:
    transport = InMemoryTransport(plane.handle)
    imds = ImdsClient(f"http://imds/{INSTANCE}", transport=transport)
    return IamCredential(API, INSTANCE, imds, transport=transport, now=lambda: NOW)


def test_the_credential_is_asked_for_with_the_instance_roles_signature() -> None:
    fake = FakeImds()
    fake.add(INSTANCE)  # us-east-1a: signed for us-east-1, the instance's region, not the URL's
    plane = Plane(fake)
    assert _credential_source(plane).fetch() == "agent.i.c"
    [request] = plane.seen
    assert (request.method, request.url, request.content) == ("POST", API + credential_path(INSTANCE), b"")
    assert request.headers["x-amz-security-token"] == fake.keys(INSTANCE)["Token"]
    assert request.headers["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={fake.keys(INSTANCE)['AccessKeyId']}/20261126/us-east-1/execute-api/aws4_request, "
    )
    # The request is the route of the API's document: POST, no body, SigV4.
    operation = document()["paths"]["/agents/{agent_id}/iam-credential"]["post"]
    assert operation["security"] == [{"sigv4": []}] and "requestBody" not in operation


def test_a_refusal_is_the_apis_status_and_message() -> None:
    fake = FakeImds()
    fake.add(INSTANCE)
    message = "caller arn:aws:sts::1:assumed-role/R/i-0x is instance 'i-0x''s session; ..."
    plane = Plane(fake, answer=lambda r: Response(403, json={"error": "Forbidden", "message": message}))
    with pytest.raises(ApiCallError) as refused:
        _credential_source(plane).fetch()
    assert (refused.value.status, refused.value.code) == (403, "Forbidden")
    assert message in str(refused.value) and "iam-credential answered 403" in str(refused.value)


@pytest.mark.parametrize(
    ("answer", "status"),
    [(Response(200, json={"credential": ""}), 502), (Response(200, text="<html>"), 502)],
    ids=["empty-credential", "not-json"],
)
def test_an_answer_without_a_credential_is_an_error(answer: Response, status: int) -> None:
    fake = FakeImds()
    fake.add(INSTANCE)
    with pytest.raises(ApiCallError, match="without a credential") as refused:
        _credential_source(Plane(fake, answer=lambda r: answer)).fetch()
    assert refused.value.status == status


def test_without_role_keys_the_call_is_not_made_and_the_error_is_retryable() -> None:
    fake = FakeImds()
    fake.add(INSTANCE, role=None)
    plane = Plane(fake)
    with pytest.raises(
        ApiCallError, match="cannot sign it with the instance's role.*no IAM instance profile"
    ) as e:
        _credential_source(plane).fetch()
    assert e.value.status == 0 and plane.seen == []


# ---- AgentApi: the credential before the first call, again after a 401 ------------------------------------


class Source:
    """A `CredentialSource` handing out ``c1``, ``c2``...; ``fail`` makes the next fetches raise.
    ``asked`` counts every fetch, ``fetches`` the ones that gave a credential."""

    def __init__(self) -> None:
        self.asked = 0
        self.fetches = 0
        self.fail: ApiCallError | None = None
        self.closed = False

    def fetch(self) -> str:
        self.asked += 1
        if self.fail is not None:
            raise self.fail
        self.fetches += 1
        return f"c{self.fetches}"

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _heartbeat_api(
    accepted: set[str], on_call: Callable[[], None] | None = None
) -> tuple[InMemoryTransport, Callable[[set[str]], None]]:
    """The agent routes answering 401 to any credential not in ``accepted`` (changed with the setter)."""
    state = {"accepted": accepted}

    def handle(request: Request) -> Response:
        if on_call is not None:
            on_call()
        if request.headers.get("authorization") not in {f"Bearer {c}" for c in state["accepted"]}:
            return Response(
                401, json={"error": "Unauthorized", "message": "the agent credential is not valid"}
            )
        return Response(200, json={"launch": [], "kill": []})

    def accept(credentials: set[str]) -> None:
        state["accepted"] = credentials

    return InMemoryTransport(handle), accept


def _auths(transport: InMemoryTransport) -> list[str | None]:
    return [r.headers.get("authorization") for r in transport.requests]


def test_an_agent_without_a_token_fetches_one_before_its_first_call_and_again_after_a_401() -> None:
    source, clock = Source(), Clock()
    transport, accept = _heartbeat_api({"c1"})
    api = AgentApi(API, INSTANCE, transport=transport, credentials=source, clock=clock)
    assert api.renews_credential
    api.heartbeat("default", 1, [])
    api.started("run-1", 42)
    assert source.fetches == 1 and _auths(transport) == ["Bearer c1", "Bearer c1"]

    accept({"c2"})  # the stack's agent secret changed: c1 is refused from now on
    api.heartbeat("default", 1, [])
    assert source.fetches == 2 and _auths(transport)[2:] == ["Bearer c1", "Bearer c2"]

    accept({"c9"})  # a fresh credential refused too: one more fetch per call, never a loop
    with pytest.raises(ApiCallError) as refused:
        api.heartbeat("default", 1, [])
    assert refused.value.status == 401 and source.fetches == 3
    api.close()
    assert source.closed


def test_a_401_renews_only_the_credential_its_call_was_made_with() -> None:
    source = Source()
    api: AgentApi

    def meanwhile() -> None:  # while the heartbeat is on its way, another call renews the credential
        if len(transport.requests) == 2:
            api.started("run-1", 42)

    transport, accept = _heartbeat_api({"c1"}, on_call=meanwhile)
    api = AgentApi(API, INSTANCE, transport=transport, credentials=source, clock=Clock())
    api.exited("run-0", 0, "done")  # c1
    accept({"c2"})
    api.heartbeat("default", 1, [])
    # heartbeat (c1, 401) -> started (c1, 401; fetches c2; c2, 200) -> heartbeat again with c2, no fetch
    assert _auths(transport) == ["Bearer c1", "Bearer c1", "Bearer c1", "Bearer c2", "Bearer c2"]
    assert source.fetches == 2


def test_a_failed_fetch_fails_the_next_calls_at_once_for_a_growing_while() -> None:
    source, clock = Source(), Clock()
    transport, accept = _heartbeat_api({"c1"})
    api = AgentApi(API, INSTANCE, transport=transport, credentials=source, clock=clock)
    source.fail = ApiCallError(
        "POST .../iam-credential answered 403 (Forbidden: not you)", status=403, code="Forbidden"
    )

    def call() -> int:
        with pytest.raises(ApiCallError, match="not you") as refused:
            api.heartbeat("default", 1, [])
        assert refused.value.status == 403
        return source.asked

    assert call() == 1  # asked, refused
    assert call() == 1  # within the backoff: refused without asking
    clock.t += RENEW_BACKOFF_S
    assert call() == 2  # asked again, refused: the next wait is twice as long
    clock.t += RENEW_BACKOFF_S
    assert call() == 2
    clock.t += RENEW_BACKOFF_S
    assert call() == 3
    assert transport.requests == []  # no agent call went out without a credential
    source.fail = None
    clock.t += 4 * RENEW_BACKOFF_S
    api.heartbeat("default", 1, [])
    assert (source.asked, source.fetches, _auths(transport)) == (4, 1, ["Bearer c1"])
    # After a success the wait starts over: c1 refused, the new fetch refused, asked again a second later.
    accept(set())
    source.fail = ApiCallError("refused again", status=403)
    with pytest.raises(ApiCallError, match="refused again"):
        api.heartbeat("default", 1, [])
    clock.t += RENEW_BACKOFF_S
    with pytest.raises(ApiCallError, match="refused again"):
        api.heartbeat("default", 1, [])
    assert source.asked == 6


def test_a_given_token_is_used_as_it_is_and_a_401_is_the_callers() -> None:
    transport, _ = _heartbeat_api(set())
    api = AgentApi(API, INSTANCE, "given", transport=transport)
    with pytest.raises(ApiCallError) as refused:
        api.heartbeat("default", 1, [])
    assert refused.value.status == 401 and _auths(transport) == ["Bearer given"] and not api.renews_credential


@pytest.mark.parametrize(
    ("aws", "token", "renews"),
    [(True, "", True), (True, "from-a-file", False), (False, "", False)],
)
def test_only_an_aws_agent_without_a_credential_gets_one_from_its_identity(
    tmp_path: Path, aws: bool, token: str, renews: bool
) -> None:
    settings = Settings(
        api_url=API, agent_id=INSTANCE, pool="default", slots=1, work_dir=tmp_path, token=token, aws=aws
    )
    api = agent_api(settings)
    assert api.renews_credential is renews
    api.close()
