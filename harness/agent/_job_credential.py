"""A Batch or SageMaker job's agent credential: one object per node in the stack's bucket, read once.

The control plane writes each lane's credential to ``credentials/<job name>/<lane>`` before it submits the
job, and starts the job's agents with ``--credential-from s3://<bucket>/credentials/<job name>/``
(docs/contracts.md). A job's role cannot call the IAM credential route (its session name does not say
which job it is), so an agent without ``--token-file`` or ``STRATUS_AGENT_TOKEN`` reads
``<prefix><its agent id>`` with a SigV4-signed GET as the job's role, then DELETEs it. The role's keys,
in the AWS SDKs' order:

    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN   keys given to the process
    AWS_CONTAINER_CREDENTIALS_RELATIVE_URI                       ECS and Batch: http://169.254.170.2<it>
    AWS_CONTAINER_CREDENTIALS_FULL_URI                           with AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE)
    IMDSv2                                                       SageMaker training containers

The object is at ``https://<bucket>.s3.<region>.amazonaws.com/<key>`` (path style for a bucket with
dots), or path style below ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` when set (moto in tests).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from stratus.contract.errors import NO_ANSWER, NoAnswerError
from stratus.contract.http import PooledTransport, Request, RetryPolicy, Transport
from stratus.harness.agent._aws import IMDS_URL, ImdsClient, ImdsError
from stratus.harness.agent._iam import region_from_url, role_credentials
from stratus.harness.agent._settings import CliOptions
from stratus.harness.agent._sigv4 import Credentials, sign
from stratus.harness.errors import HarnessError

log = logging.getLogger("stratus.harness.agent")

ECS_CREDENTIALS_HOST = "http://169.254.170.2"
TIMEOUT_S = 10.0
#: The job may start while S3 or the credentials endpoint is briefly busy: a few tries, a few seconds.
RETRY = RetryPolicy(first_delay_s=0.5, max_attempts=5)


#: ``(location, agent id, environment) -> credential``: reads a job's credential object.
JobCredentialFetch = Callable[[str, str, Mapping[str, str]], str]


class JobCredentialError(HarnessError):
    """The job's credential object cannot be read (``status``: S3's or the keys' source's; 0: no answer)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def parse_location(location: str) -> tuple[str, str]:
    """``s3://<bucket>/<prefix>`` as (bucket, prefix); JobCredentialError for anything else."""
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    if not location.startswith("s3://") or not bucket:
        raise JobCredentialError(
            f"{location!r} is not an s3://<bucket>/<prefix> location (a job's --credential-from is "
            "the control plane's s3://<bucket>/credentials/<job name>/)"
        )
    return bucket, prefix


def object_url(bucket: str, key: str, region: str, env: Mapping[str, str]) -> str:
    path = quote(key, safe="/~")
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        return f"{endpoint.rstrip('/')}/{bucket}/{path}"
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    if "." in bucket:  # a virtual host with dots would not match S3's TLS certificate
        return f"https://s3.{region}.{domain}/{bucket}/{path}"
    return f"https://{bucket}.s3.{region}.{domain}/{path}"


def role_keys(env: Mapping[str, str], transport: Transport, imds_url: str = IMDS_URL) -> Credentials:
    """The keys this process signs with (see the module's docstring for where they come from)."""
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return Credentials(
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN", "")
        )
    relative = env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    full = env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    if relative or full:
        return _container_keys(ECS_CREDENTIALS_HOST + relative if relative else str(full), env, transport)
    imds = ImdsClient(imds_url, transport=transport)
    try:
        return role_credentials(imds)
    except ImdsError as e:
        raise JobCredentialError(
            f"no keys to sign with: no AWS_ACCESS_KEY_ID, no container credentials endpoint "
            f"(AWS_CONTAINER_CREDENTIALS_RELATIVE_URI) and none from the metadata service ({e})",
            status=e.status,
        ) from e


def _container_keys(url: str, env: Mapping[str, str], transport: Transport) -> Credentials:
    headers = {"accept": "application/json"}
    token = env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN", "")
    if not token and env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"):
        try:
            token = Path(env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"]).read_text().strip()
        except OSError as e:
            raise JobCredentialError(f"cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE: {e}") from e
    if token:
        headers["authorization"] = token
    status, text = _send(transport, Request("GET", url, headers, None))
    try:
        if status != 200:
            raise ValueError(f"HTTP {status}: {text[:200]!r}")
        keys = json.loads(text)
        return Credentials(keys["AccessKeyId"], keys["SecretAccessKey"], keys.get("Token") or "")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise JobCredentialError(
            f"no keys from the container credentials endpoint {url}: {e}", status=status
        ) from e


def fetch_job_credential(
    location: str,
    agent_id: str,
    env: Mapping[str, str],
    *,
    api_url: str,
    imds_url: str = IMDS_URL,
    transport: Transport | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    retry: RetryPolicy = RETRY,
    wait: Callable[[float], object] = time.sleep,
) -> str:
    """Agent ``agent_id``'s credential from ``<location><agent_id>``, deleted once read. Raises
    `JobCredentialError` (naming the object) when it cannot be read."""
    bucket, prefix = parse_location(location)
    key = prefix + agent_id
    where = f"s3://{bucket}/{key}"
    sender = transport if transport is not None else PooledTransport()
    try:
        keys = role_keys(env, sender, imds_url)
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or region_from_url(api_url)
        if not region:
            raise JobCredentialError(f"no region for {where}: set AWS_REGION (Batch and SageMaker set it)")
        url = object_url(bucket, key, region, env)

        def call(method: str) -> tuple[int, str]:
            signed = sign(method, url, {}, b"", credentials=keys, region=region, service="s3", now=now())
            return _send(sender, Request(method, url, signed, None))

        status, text = retry.call(lambda: call("GET"), status_of=_status, wait=wait)
        if status == 404:
            raise JobCredentialError(
                f"{where} is not there: each job node's credential is read once, by its first agent, "
                "and expires a day after the job was submitted (start the agent with --token-file instead)",
                status=404,
            )
        if status == 403:
            raise JobCredentialError(
                f"GET {where} was refused (HTTP 403): the job's role needs s3:GetObject and "
                "s3:DeleteObject on the bucket's credentials/* (the stack's BatchJobPolicy and "
                "SageMakerExecutionPolicy grant them)",
                status=403,
            )
        if status != 200 or not text.strip():
            raise JobCredentialError(f"GET {where} answered HTTP {status}: {text[:200]!r}", status=status)
        try:
            deleted, _ = retry.call(lambda: call("DELETE"), status_of=_status, wait=wait)
        except JobCredentialError as e:
            deleted = e.status
        if deleted not in (200, 204):  # the bucket's lifecycle rule removes it within a day
            log.warning("could not delete %s after reading it (HTTP %d)", where, deleted)
        return text.strip()
    finally:
        if transport is None:
            sender.close()


def with_job_credential(
    opts: CliOptions, environ: Mapping[str, str] | None = None, *, fetch: JobCredentialFetch | None = None
) -> CliOptions:
    """The agent's options with its credential read from its job's object (`--credential-from`) when it
    was given none (a given credential wins: the object is left for the bucket to expire). ``fetch``
    reads it (`fetch_job_credential` by default); one clear error, naming the object, when it cannot."""
    settings = opts.settings
    if settings.token or not opts.credential_from:
        return opts
    env = os.environ if environ is None else environ
    if fetch is None:
        fetch = functools.partial(fetch_job_credential, api_url=settings.api_url, imds_url=settings.imds_url)
    try:
        token = fetch(opts.credential_from, settings.agent_id, env)
    except HarnessError as e:
        raise SystemExit(f"stratus.harness.agent: --credential-from {opts.credential_from}: {e}") from e
    return dataclasses.replace(opts, settings=dataclasses.replace(settings, token=token))


def _send(transport: Transport, request: Request) -> tuple[int, str]:
    """(status, body); JobCredentialError for no answer or an answer worth asking again."""
    try:
        with transport.send(request, timeout_s=TIMEOUT_S) as response:
            status, text = response.status, response.text
    except NoAnswerError as e:
        raise JobCredentialError(f"{request.what}: no answer ({e.body.message})", status=NO_ANSWER) from e
    if RetryPolicy.retries(status):
        raise JobCredentialError(f"{request.what} answered HTTP {status}: {text[:200]!r}", status=status)
    return status, text


def _status(error: Exception) -> int | None:
    return error.status if isinstance(error, JobCredentialError) else None
