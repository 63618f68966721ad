"""Fixtures of the control plane's unit tests outside the services (whose in-memory ports and workflow are
in tests/unit/chalicelib/services/conftest.py): the settings a deployed stack's Lambda environment holds
(`stack_settings`) and moto in process with them (`aws`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# ---- moto in-process, with the settings the control plane's AWS adapters read -----------------------

#: The settings `chalicelib.settings` requires (what a deployed stack's Lambda environment holds).
STACK_SETTINGS = {
    "STRATUS_BUCKET": "b",
    "STRATUS_SCHEDULER_QUEUE_URL": "q1",
    "STRATUS_LAUNCH_QUEUE_URL": "q2",
    "STRATUS_EVENTS_QUEUE_URL": "q3",
    "STRATUS_STATE_MACHINE_ARN": "arn",
    "STRATUS_TOKEN_SECRET": "s",
    "STRATUS_AGENT_TOKEN": "a",
}
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-west-2",
    **STACK_SETTINGS,
    "STRATUS_BUCKET": "prices-bucket",
}


@pytest.fixture
def stack_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The required settings in the environment (`STACK_SETTINGS`); the monkeypatch, for more."""
    for name, value in STACK_SETTINGS.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's `mock_aws` around the test, the stack's settings in us-west-2, the clients made afresh."""
    from moto import mock_aws

    from chalicelib import wiring

    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_REGION", "AWS_ENDPOINT_URL", "STRATUS_PRICES"):
        monkeypatch.delenv(name, raising=False)
    wiring.reset()
    with mock_aws():
        yield
    wiring.reset()
