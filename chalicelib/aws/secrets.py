"""Secrets Manager: the run tokens' HMAC key and the agents' token, read when the settings are built (once
per Lambda container), so neither sits in a function's environment in plain text."""

from __future__ import annotations

import boto3
from botocore.exceptions import ClientError


def read_secret(secret_id: str, *, region: str, endpoint_url: str | None) -> str:
    """The secret's string. Its own client: the shared ones (`clients`) are built from the settings that
    this read is part of."""
    client = boto3.session.Session(region_name=region).client("secretsmanager", endpoint_url=endpoint_url)
    try:
        value = client.get_secret_value(SecretId=secret_id).get("SecretString")
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "error")
        raise RuntimeError(
            f"secret {secret_id}: {code}; the function's role needs secretsmanager:GetSecretValue on it "
            "(the stack's template grants it)"
        ) from e
    if not value:
        raise RuntimeError(f"secret {secret_id} has no string value; the stack generates one at creation")
    return str(value)
