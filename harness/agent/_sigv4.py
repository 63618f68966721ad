"""AWS Signature Version 4 for the agent's signed calls (`stratus.harness.agent._iam`, `stratus.harness.agent._job_credential`),
in the standard library only, so the compute side needs no botocore. It signs as botocore's ``SigV4Auth``
does for API Gateway's IAM authorizer (service ``execute-api``) and as its ``S3SigV4Auth`` does for S3;
tests/unit/harness/agent/test_sigv4.py holds it to botocore's signatures.

    canonical request  METHOD \\n path \\n query \\n headers \\n signed header names \\n sha256(body)
    string to sign     AWS4-HMAC-SHA256 \\n amz date \\n date/region/service/aws4_request \\n sha256(above)
    signing key        HMAC chain of "AWS4" + secret over date, region, service, "aws4_request"

The path is encoded once more as sent (AWS encodes every path segment twice, except for S3, which also
wants the body's hash in a signed ``x-amz-content-sha256`` header); header values are trimmed and their
inner runs of spaces folded; ``host`` is signed as the HTTP client sends it (the port only when it is not
the scheme's default).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Credentials:
    """An IAM identity's signing keys: an instance role's are temporary and carry a session ``token``."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str = field(default="", repr=False)


def sign(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    credentials: Credentials,
    region: str,
    service: str,
    now: datetime,
) -> dict[str, str]:
    """The headers that sign this request at ``now``: ``x-amz-date``, ``x-amz-security-token`` (with a
    session token), ``x-amz-content-sha256`` (for S3) and ``authorization``. ``headers`` are the ones the request sends besides them (each
    is signed); send them unchanged, with the returned ones."""
    amz_date = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    parts = urlsplit(url)
    signed = {name.lower(): " ".join(str(value).split()) for name, value in headers.items()}
    signed["host"] = _host(parts.scheme, parts.hostname or "", parts.port)
    payload = hashlib.sha256(body).hexdigest()
    added = {"x-amz-date": amz_date}
    if credentials.token:
        added["x-amz-security-token"] = credentials.token
    if service == "s3":
        added["x-amz-content-sha256"] = payload
    signed.update(added)
    names = sorted(signed)
    canonical = "\n".join(
        [
            method.upper(),
            (parts.path or "/") if service == "s3" else quote(parts.path or "/", safe="/~"),
            _query(parts.query),
            "".join(f"{name}:{signed[name]}\n" for name in names),
            ";".join(names),
            payload,
        ]
    )
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{credentials.secret_key}".encode()
    for part in (amz_date[:8], region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    added["authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return added


def _host(scheme: str, hostname: str, port: int | None) -> str:
    return hostname if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{hostname}:{port}"


def _query(query: str) -> str:
    """The query's pairs sorted, as sent (the agent's call has none; presigned URLs are not signed here)."""
    pairs = sorted(tuple(pair.partition("=")[::2]) for pair in query.split("&") if pair)
    return "&".join(f"{key}={value}" for key, value in pairs)
