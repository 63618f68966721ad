"""The tokens come from Secrets Manager where `*_ARN` names a secret (in AWS), never from a plain
variable there; a missing or unreadable secret stops the settings with its name."""

from __future__ import annotations

import boto3
import pytest

from chalicelib import settings
from chalicelib.aws.secrets import read_secret

_NEEDED = ("STRATUS_BUCKET", "STRATUS_SCHEDULER_QUEUE_URL", "STRATUS_LAUNCH_QUEUE_URL",
           "STRATUS_EVENTS_QUEUE_URL", "STRATUS_STATE_MACHINE_ARN")  # fmt: skip


@pytest.fixture
def environment(moto_url: str, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    for name in _NEEDED:
        monkeypatch.setenv(name, "x")
    for name in ("STRATUS_TOKEN_SECRET", "STRATUS_AGENT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    settings.read_secrets_with(read_secret)
    yield boto3.client("secretsmanager", endpoint_url=moto_url)
    settings.reset_settings()


def test_the_tokens_are_read_from_their_secrets(environment, monkeypatch: pytest.MonkeyPatch) -> None:
    key = environment.create_secret(Name="test-token-key", SecretString="k" * 48)["ARN"]
    agents = environment.create_secret(Name="test-agent-token", SecretString="a" * 48)["ARN"]
    monkeypatch.setenv("STRATUS_TOKEN_SECRET_ARN", key)
    monkeypatch.setenv("STRATUS_AGENT_TOKEN_ARN", agents)
    settings.reset_settings()
    built = settings.get_settings()
    assert built.token_secret == "k" * 48 and built.agent_token == "a" * 48


def test_a_missing_secret_is_named(environment, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "STRATUS_TOKEN_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:gone"
    )
    monkeypatch.setenv("STRATUS_AGENT_TOKEN", "plain-for-this-test")
    settings.reset_settings()
    with pytest.raises(
        RuntimeError, match="secret arn:aws:secretsmanager:.*:gone: ResourceNotFoundException"
    ):
        settings.get_settings()


def test_without_either_the_settings_say_what_to_set(environment) -> None:
    settings.reset_settings()
    with pytest.raises(
        RuntimeError, match="neither STRATUS_TOKEN_SECRET_ARN .* nor STRATUS_TOKEN_SECRET is set"
    ):
        settings.get_settings()
