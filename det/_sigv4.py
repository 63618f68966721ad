"""Signing the CLI's requests with AWS Signature Version 4, as API Gateway's IAM authorizer checks them.

In AWS every user route of the API requires SigV4 (`chalicelib.api.auth`, kind `iam`): API Gateway
verifies the signature and hands the caller's IAM identity to the app, which records it as the owner of
what the caller creates. The CLI signs with the user's usual AWS credentials (botocore's chain: the
environment, `AWS_PROFILE` or `~/.aws`, SSO, an instance's role).

When: the master is an API Gateway endpoint (`https://<id>.execute-api.<region>.amazonaws.com/...`,
`.amazonaws.com.cn` too), or `STRATUS_AUTH=iam` (a custom domain in front of it; the region then comes
from `AWS_REGION` or the profile). `STRATUS_AUTH=none` never signs; the local stack is never signed.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from det.errors import UsageError

SERVICE = "execute-api"
_GATEWAY_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
#: The headers signed besides the ones SigV4 adds: what no proxy on the way rewrites.
_SIGNED = ("host", "content-type", "x-stratus-user")


class SigV4(httpx.Auth):
    """An httpx auth that signs each request (its body included) for `execute-api` in `region`."""

    requires_request_body = True

    def __init__(self, credentials: Any, region: str) -> None:
        self._credentials = credentials
        self.region = region

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        headers = {k: v for k, v in request.headers.items() if k.lower() in _SIGNED}
        signed = AWSRequest(
            method=request.method, url=str(request.url), data=request.content, headers=headers
        )
        SigV4Auth(self._credentials.get_frozen_credentials(), SERVICE, self.region).add_auth(signed)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
            if name in signed.headers:
                request.headers[name] = signed.headers[name]
        yield request


def auth_for(master_url: str, environ: Mapping[str, str]) -> SigV4 | None:
    """How to sign requests to `master_url`: None where they go unsigned (the local stack)."""
    mode = (environ.get("STRATUS_AUTH") or "").strip().lower()
    if mode not in ("", "iam", "none"):
        raise UsageError(f"STRATUS_AUTH={mode!r} is not iam or none")
    host = urlsplit(master_url).hostname or ""
    gateway = _GATEWAY_HOST.match(host)
    if mode == "none" or (mode == "" and gateway is None):
        return None
    import botocore.session

    session = botocore.session.Session(profile=environ.get("AWS_PROFILE") or None)
    region = (
        gateway.group(1) if gateway else environ.get("AWS_REGION") or session.get_config_variable("region")
    )
    if not region:
        raise UsageError(f"STRATUS_AUTH=iam for {master_url}: no region to sign for; set AWS_REGION")
    credentials = session.get_credentials()
    if credentials is None:
        raise UsageError(
            f"requests to {master_url} are signed with your AWS credentials, and none were found: "
            "run `aws configure` (or `aws sso login`), or set AWS_PROFILE"
        )
    return SigV4(credentials, region)
