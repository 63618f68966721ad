"""A Batch or SageMaker job's agent reads its credential object once (`stratus.harness.agent._job_credential`),
without IO: the S3 requests signed as botocore signs them, the job role's keys from the container
credentials endpoint or the metadata service (fakes), the GET then DELETE against a fake S3, and
`--credential-from` once the agent's settings are parsed (a given credential wins). Against moto's S3:
tests/aws/test_agent_job_credential.py."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotocoreCredentials

from infra.local.fake_imds import FakeImds
from stratus.contract.errors import NoAnswerError
from stratus.contract.http import InMemoryTransport, Request, Response
from stratus.harness.agent._job_credential import (
    JobCredentialError,
    fetch_job_credential,
    object_url,
    parse_location,
    role_keys,
    with_job_credential,
)
from stratus.harness.agent._settings import TOKEN_ENV, parse_cli
from stratus.harness.agent._sigv4 import Credentials, sign

KEYS = Credentials(
    "ASIAEXAMPLEKEY123456", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "IQoJb3JpZ2luX2VjEXAMPLE=="
)
NOW = datetime(2026, 11, 26, 4, 58, 7, tzinfo=UTC)
LOCATION = "s3://stratus-bucket/credentials/stratus-run-7-1/"
LANE = "batch-default-0"
KEY = "credentials/stratus-run-7-1/batch-default-0"
ENV = {
    "AWS_ACCESS_KEY_ID": KEYS.access_key,
    "AWS_SECRET_ACCESS_KEY": KEYS.secret_key,
    "AWS_REGION": "eu-west-1",
}
API = "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/api"


# ---- the signature ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize(
    "url",
    [
        f"https://stratus-bucket.s3.eu-west-1.amazonaws.com/{KEY}",
        f"http://127.0.0.1:5000/stratus-bucket/{KEY}",
        "https://s3.eu-west-1.amazonaws.com/a.b/credentials/j/lane%3Dx",
    ],
    ids=["virtual-host", "path-style-endpoint", "quoted-key"],
)
def test_the_s3_requests_are_signed_as_botocore_signs_them_at_a_fixed_time(method: str, url: str) -> None:
    stamp = NOW.strftime("%Y%m%dT%H%M%SZ")
    empty = hashlib.sha256(b"").hexdigest()
    request = AWSRequest(
        method=method,
        url=url,
        data=b"",
        headers={"X-Amz-Date": stamp, "X-Amz-Security-Token": KEYS.token, "X-Amz-Content-SHA256": empty},
    )
    request.context["timestamp"] = stamp  # what botocore's add_auth would take from the clock
    auth = S3SigV4Auth(BotocoreCredentials(KEYS.access_key, KEYS.secret_key, KEYS.token), "s3", "eu-west-1")
    signature = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    signed_headers = auth.signed_headers(auth.headers_to_sign(request))
    ours = sign(method, url, {}, b"", credentials=KEYS, region="eu-west-1", service="s3", now=NOW)
    assert ours == {
        "x-amz-date": stamp,
        "x-amz-security-token": KEYS.token,
        "x-amz-content-sha256": empty,
        "authorization": f"AWS4-HMAC-SHA256 Credential={KEYS.access_key}/{stamp[:8]}/eu-west-1/s3/aws4_request, "
        f"SignedHeaders={signed_headers}, Signature={signature}",
    }
    assert signed_headers == "host;x-amz-content-sha256;x-amz-date;x-amz-security-token"


def test_botocore_sends_the_content_hash_the_signer_adds() -> None:
    url = f"https://stratus-bucket.s3.eu-west-1.amazonaws.com/{KEY}"
    request = AWSRequest(method="GET", url=url, data=b"")
    S3SigV4Auth(
        BotocoreCredentials(KEYS.access_key, KEYS.secret_key, KEYS.token), "s3", "eu-west-1"
    ).add_auth(request)
    at = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    ours = sign("GET", url, {}, b"", credentials=KEYS, region="eu-west-1", service="s3", now=at)
    assert ours["x-amz-content-sha256"] == request.headers["X-Amz-Content-SHA256"]
    assert ours["authorization"] == request.headers["Authorization"]


# ---- where the object is ----------------------------------------------------------------------------------


def test_the_location_and_the_objects_url() -> None:
    assert parse_location(LOCATION) == ("stratus-bucket", "credentials/stratus-run-7-1/")
    for bad in ("Ref::credentials", "s3:///credentials/", "https://bucket/credentials/"):
        with pytest.raises(JobCredentialError, match="is not an s3://<bucket>/<prefix> location"):
            parse_location(bad)
    assert object_url("b", KEY, "eu-west-1", {}) == f"https://b.s3.eu-west-1.amazonaws.com/{KEY}"
    assert object_url("a.b", "k", "cn-north-1", {}) == "https://s3.cn-north-1.amazonaws.com.cn/a.b/k"
    assert object_url("b", "k", "r", {"AWS_ENDPOINT_URL": "http://moto:5000/"}) == "http://moto:5000/b/k"
    both = {"AWS_ENDPOINT_URL": "http://other", "AWS_ENDPOINT_URL_S3": "http://s3only"}
    assert object_url("b", "k", "r", both) == "http://s3only/b/k"


# ---- the role's keys --------------------------------------------------------------------------------------

CONTAINER_KEYS = {
    "AccessKeyId": "ASIACONTAINER",
    "SecretAccessKey": "container-secret",
    "Token": "container-token",
    "Expiration": "2026-11-26T10:00:00Z",
    "RoleArn": "arn:aws:iam::123456789012:role/BatchJobRole",
}


def _container_endpoint(seen: list[Request]) -> InMemoryTransport:
    def handle(request: Request) -> Response:
        seen.append(request)
        if request.path != "/v2/credentials/abc":
            return Response(404, text="no such credentials")
        return Response(200, json=CONTAINER_KEYS)

    return InMemoryTransport(handle)


def test_keys_given_to_the_process_come_first() -> None:
    env = {**ENV, "AWS_SESSION_TOKEN": "t", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/abc"}
    seen: list[Request] = []
    assert role_keys(env, _container_endpoint(seen)) == Credentials(KEYS.access_key, KEYS.secret_key, "t")
    assert seen == []


def test_a_batch_jobs_keys_come_from_the_ecs_credentials_endpoint() -> None:
    seen: list[Request] = []
    env = {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/abc"}
    assert role_keys(env, _container_endpoint(seen)) == Credentials(
        "ASIACONTAINER", "container-secret", "container-token"
    )
    [request] = seen
    assert request.url == "http://169.254.170.2/v2/credentials/abc" and "authorization" not in request.headers


def test_a_full_credentials_uri_is_asked_with_its_authorization_token(tmp_path: Path) -> None:
    seen: list[Request] = []
    env = {
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:51679/v2/credentials/abc",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN": "auth-token",
    }
    assert role_keys(env, _container_endpoint(seen)).access_key == "ASIACONTAINER"
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    file_env = {
        **env,
        "AWS_CONTAINER_AUTHORIZATION_TOKEN": "",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(token_file),
    }
    role_keys(file_env, _container_endpoint(seen))
    assert [(r.url, r.headers["authorization"]) for r in seen] == [
        ("http://127.0.0.1:51679/v2/credentials/abc", "auth-token"),
        ("http://127.0.0.1:51679/v2/credentials/abc", "from-a-file"),
    ]


def test_an_endpoint_without_keys_is_one_clear_error() -> None:
    env = {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/gone"}
    with pytest.raises(JobCredentialError, match=r"no keys from the container credentials endpoint .*/gone"):
        role_keys(env, _container_endpoint([]))


def test_a_sagemaker_jobs_keys_come_from_the_metadata_service() -> None:
    fake = FakeImds()
    fake.add("algo-1")
    keys = fake.keys("algo-1")
    found = role_keys({}, InMemoryTransport(fake.handle), "http://imds/algo-1")
    assert found == Credentials(keys["AccessKeyId"], keys["SecretAccessKey"], keys["Token"])


def test_no_keys_anywhere_says_where_it_looked() -> None:
    def unreachable(request: Request) -> Response:
        raise NoAnswerError(request.what, "connection refused")

    with pytest.raises(JobCredentialError, match="no AWS_ACCESS_KEY_ID, no container credentials endpoint"):
        role_keys({}, InMemoryTransport(unreachable), "http://imds")


# ---- the read-once fetch ----------------------------------------------------------------------------------


class FakeS3:
    """A bucket's objects, answering signed path-style or virtual-host GETs and DELETEs; ``fail`` first
    answers some requests with 503."""

    def __init__(self, objects: dict[str, bytes], fail: int = 0) -> None:
        self.objects = objects
        self.fail = fail
        self.seen: list[Request] = []

    def handle(self, request: Request) -> Response:
        self.seen.append(request)
        if self.fail:
            self.fail -= 1
            return Response(503, text="<Error><Code>SlowDown</Code></Error>")
        assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
        assert "/s3/aws4_request" in request.headers["authorization"]
        assert request.headers["x-amz-content-sha256"] == hashlib.sha256(b"").hexdigest()
        key = request.path.lstrip("/").removeprefix("stratus-bucket/")
        if request.method == "DELETE":
            self.objects.pop(key, None)
            return Response(204)
        if key not in self.objects:
            return Response(404, text="<Error><Code>NoSuchKey</Code></Error>")
        return Response(200, content=self.objects[key])


def _fetch(s3: FakeS3, env: dict[str, str] | None = None) -> str:
    return fetch_job_credential(
        LOCATION,
        LANE,
        ENV if env is None else env,
        api_url=API,
        transport=InMemoryTransport(s3.handle),
        now=lambda: NOW,
        wait=lambda seconds: None,
    )


def test_the_agent_reads_its_own_object_and_deletes_it() -> None:
    s3 = FakeS3(
        {KEY: b"agent.batch-default-0.abc\n", "credentials/stratus-run-7-1/batch-default-1": b"other"}
    )
    assert _fetch(s3) == "agent.batch-default-0.abc"
    assert [(r.method, r.url) for r in s3.seen] == [
        ("GET", f"https://stratus-bucket.s3.eu-west-1.amazonaws.com/{KEY}"),
        ("DELETE", f"https://stratus-bucket.s3.eu-west-1.amazonaws.com/{KEY}"),
    ]
    assert set(s3.objects) == {"credentials/stratus-run-7-1/batch-default-1"}  # the other node's is left
    # Signed at the given time, for the region of AWS_REGION.
    assert s3.seen[0].headers["x-amz-date"] == "20261126T045807Z"
    assert "/20261126/eu-west-1/s3/aws4_request" in s3.seen[0].headers["authorization"]


def test_the_region_comes_from_the_api_url_without_aws_region() -> None:
    s3 = FakeS3({KEY: b"c"})
    env = {k: v for k, v in ENV.items() if k != "AWS_REGION"}
    assert _fetch(s3, {**env, "AWS_ENDPOINT_URL_S3": "http://moto:5000"}) == "c"
    assert s3.seen[0].url == f"http://moto:5000/stratus-bucket/{KEY}"
    assert "/eu-west-1/s3/aws4_request" in s3.seen[0].headers["authorization"]


def test_a_missing_object_is_one_error_naming_it() -> None:
    s3 = FakeS3({})
    with pytest.raises(JobCredentialError, match=f"s3://stratus-bucket/{KEY} is not there") as missing:
        _fetch(s3)
    assert missing.value.status == 404 and [r.method for r in s3.seen] == ["GET"]


def test_a_refusal_names_the_permissions_the_role_lacks() -> None:
    def refuse(request: Request) -> Response:
        return Response(403, text="<Error><Code>AccessDenied</Code></Error>")

    with pytest.raises(JobCredentialError, match=r"HTTP 403\): the job's role needs s3:GetObject") as refused:
        fetch_job_credential(LOCATION, LANE, ENV, api_url=API, transport=InMemoryTransport(refuse))
    assert refused.value.status == 403


def test_a_busy_s3_is_asked_again() -> None:
    s3 = FakeS3({KEY: b"c"}, fail=2)
    assert _fetch(s3) == "c" and [r.method for r in s3.seen] == ["GET", "GET", "GET", "DELETE"]


# ---- --credential-from after the agent's settings -----------------------------------------------------------


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--api", API, "--pool", "default", "--work-dir", str(tmp_path),
        "--only-runs", "r1,r2", "--batch-agents", "batch-default-0,batch-default-1",
        "--credential-from", LOCATION, *extra,
    ]  # fmt: skip


def test_a_job_node_without_a_credential_reads_its_lanes_object(tmp_path: Path) -> None:
    asked: list[tuple[str, str]] = []

    def fetch(location: str, agent_id: str, env: object) -> str:
        asked.append((location, agent_id))
        return "agent.batch-default-1.x"

    env = {"AWS_BATCH_JOB_NODE_INDEX": "1"}
    parsed = parse_cli(_argv(tmp_path), env)
    assert (parsed.settings.token, parsed.credential_from, asked) == ("", LOCATION, [])  # parsed without IO
    opts = with_job_credential(parsed, env, fetch=fetch)
    assert opts.settings.token == "agent.batch-default-1.x" and opts.settings.agent_id == "batch-default-1"
    assert asked == [(LOCATION, "batch-default-1")]


def test_a_given_credential_wins_and_no_object_is_read(tmp_path: Path) -> None:
    def fetch(location: str, agent_id: str, env: object) -> str:
        raise AssertionError("no S3 read when a credential is given")

    token_file = tmp_path / "credential"
    token_file.write_text("agent.batch-default-0.file\n")
    opts = with_job_credential(
        parse_cli(_argv(tmp_path, "--token-file", str(token_file)), {}), {}, fetch=fetch
    )
    assert opts.settings.token == "agent.batch-default-0.file" and not token_file.exists()
    env = {TOKEN_ENV: "agent.batch-default-0.env"}
    opts = with_job_credential(parse_cli(_argv(tmp_path), env), env, fetch=fetch)
    assert opts.settings.token == "agent.batch-default-0.env"


def test_an_unreadable_object_stops_the_agent_naming_it(tmp_path: Path) -> None:
    s3 = FakeS3({})
    transport = InMemoryTransport(s3.handle)

    def fetch(location: str, agent_id: str, env: object) -> str:
        return fetch_job_credential(location, agent_id, ENV, api_url=API, transport=transport)

    with pytest.raises(
        SystemExit, match=f"--credential-from {LOCATION}: s3://stratus-bucket/{KEY} is not there"
    ):
        with_job_credential(parse_cli(_argv(tmp_path), {}), {}, fetch=fetch)
