"""The agent's credential on EC2, from its instance's IAM identity (docs/architecture.md, "Compute backends on AWS").

An agent started with ``--aws`` and no credential (no ``--token-file``, no ``STRATUS_AGENT_TOKEN``) asks
the control plane for its own: ``POST /agents/<instance id>/iam-credential``, signed with SigV4 (service
``execute-api``, `stratus.harness.agent._sigv4`) with the instance role's temporary keys. API Gateway checks the
signature; the API answers ``{"credential": ...}`` only to the stack's agent role's session named after
this instance (EC2 names an instance profile's session after the instance). `AgentApi` asks before its
first call and again whenever a call answers 401; nothing shared sits on the instance.

From IMDSv2 (`stratus.harness.agent._aws.ImdsClient`):

    meta-data/iam/security-credentials/         the role's name (the instance profile's one role)
    meta-data/iam/security-credentials/<role>   {"Code": "Success", "AccessKeyId", "SecretAccessKey",
                                                 "Token", "Expiration", ...}
    meta-data/placement/region                  the region to sign for (else the API URL's)

The keys are read again for every request: EC2 rotates them before they expire, and a request is rare.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

from stratus.contract.errors import NO_ANSWER, ErrorBody, HttpCallError, NoAnswerError
from stratus.contract.http import PooledTransport, Request, Transport
from stratus.contract.versions import VERSION, VERSION_HEADER
from stratus.harness.agent._api import AgentApi
from stratus.harness.agent._aws import ImdsClient, ImdsError
from stratus.harness.agent._instance import instance_report
from stratus.harness.agent._settings import Settings
from stratus.harness.agent._sigv4 import Credentials, sign
from stratus.harness.errors import ApiCallError

SERVICE = "execute-api"
ROLES_PATH = "meta-data/iam/security-credentials/"
REGION_PATH = "meta-data/placement/region"
_GATEWAY_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


def credential_path(agent_id: str) -> str:
    """The route's path below the API's URL."""
    return f"/agents/{quote(agent_id, safe='')}/iam-credential"


def role_credentials(imds: ImdsClient) -> Credentials:
    """The instance role's current keys. Raises `ImdsError` (status 404: the instance has no role)."""
    listing = imds.get(ROLES_PATH)
    roles = (listing or "").split()
    if not roles:
        raise ImdsError(
            f"{imds.base_url}/latest/{ROLES_PATH} lists no role: this instance has no IAM instance "
            "profile (the stack's launch template gives its agents one; or start the agent with "
            "--token-file)",
            status=404,
        )
    text = imds.get(ROLES_PATH + roles[0])
    try:
        keys = json.loads(text or "")
        if keys.get("Code", "Success") != "Success":
            raise ValueError(f"Code {keys.get('Code')!r}: {keys.get('Message', '')}")
        found = Credentials(keys["AccessKeyId"], keys["SecretAccessKey"], keys.get("Token") or "")
        if not all(isinstance(v, str) and v for v in (found.access_key, found.secret_key)):
            raise ValueError("AccessKeyId and SecretAccessKey must be non-empty strings")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ImdsError(
            f"role {roles[0]!r}: no usable keys at {imds.base_url}/latest/{ROLES_PATH}: {e}"
        ) from e
    return found


def region_from_url(api_url: str) -> str | None:
    """The region of an API Gateway URL (``https://<id>.execute-api.<region>.amazonaws.com/...``)."""
    match = _GATEWAY_HOST.match(urlsplit(api_url).hostname or "")
    return match.group(1) if match else None


class IamCredential:
    """Fetches agent ``agent_id``'s credential from the API at ``api_url``, signed as the instance's role
    (the `stratus.harness.agent._api.CredentialSource` of an EC2 agent). ``now`` dates the signature."""

    def __init__(
        self,
        api_url: str,
        agent_id: str,
        imds: ImdsClient,
        *,
        transport: Transport | None = None,
        timeout_s: float = 30.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.url = api_url.rstrip("/") + credential_path(agent_id)
        self._api_url = api_url
        self._imds = imds
        self._transport = transport if transport is not None else PooledTransport()
        self._timeout_s = timeout_s
        self._now = now
        self._region: str | None = None

    def close(self) -> None:
        self._transport.close()
        self._imds.close()

    def fetch(self) -> str:
        """The credential; raises `ApiCallError` (status 0 when the instance's keys cannot be read, so
        the agent's calls keep asking; the API's status when it refuses)."""
        what = f"POST {self.url}"
        try:
            keys = role_credentials(self._imds)
            region = self._region or self._read_region()
        except ImdsError as e:
            raise ApiCallError(
                f"{what}: cannot sign it with the instance's role: {e}", status=NO_ANSWER
            ) from e
        headers = {"accept": "application/json", VERSION_HEADER.lower(): VERSION}  # signed with the rest
        signed = sign(
            "POST", self.url, headers, b"", credentials=keys, region=region, service=SERVICE, now=self._now()
        )
        request = Request("POST", self.url, {**headers, **signed}, b"")
        try:
            with self._transport.send(request, timeout_s=self._timeout_s) as response:
                status, text = response.status, response.text
        except NoAnswerError as e:
            raise ApiCallError(str(e), status=NO_ANSWER) from e
        try:
            decoded = json.loads(text) if text else None
        except ValueError:
            decoded = None
        if status >= 300:
            error = HttpCallError(request.what, status, ErrorBody.parse(status, text, decoded))
            raise ApiCallError(str(error), status=status, code=error.code)
        credential = decoded.get("credential") if isinstance(decoded, dict) else None
        if not isinstance(credential, str) or not credential:
            raise ApiCallError(f"{what} answered {status} without a credential: {text[:200]!r}", status=502)
        return credential

    def _read_region(self) -> str:
        region = (self._imds.get(REGION_PATH) or "").strip() or region_from_url(self._api_url)
        if not region:
            raise ImdsError(
                f"no region to sign for: {self._imds.base_url}/latest/{REGION_PATH} has none and "
                f"{self._api_url} is not an API Gateway URL"
            )
        self._region = region
        return region


def agent_api(settings: Settings) -> AgentApi:
    """The agent's API client: with the credential it was given, or on EC2 (``--aws``) without one, with
    the credential its instance's IAM identity gets (`IamCredential`)."""
    credentials = None
    if settings.aws and not settings.token:
        imds = ImdsClient(settings.imds_url)
        credentials = IamCredential(
            settings.api_url, settings.agent_id, imds, timeout_s=settings.request_timeout
        )
    api = AgentApi(
        settings.api_url,
        settings.agent_id,
        settings.token,
        timeout=settings.request_timeout,
        credentials=credentials,
    )
    api.instance = instance_report(settings)
    return api
