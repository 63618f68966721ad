from __future__ import annotations

import pytest

from chalicelib.errors import ForbiddenError, UnauthorizedError
from chalicelib.services import tokens


def test_run_token_round_trip_and_tampering():
    token = tokens.run_token("s3cret", "12.1")
    assert tokens.run_id_from_token("s3cret", f"Bearer {token}") == "12.1"
    with pytest.raises(UnauthorizedError):
        tokens.run_id_from_token("other", f"Bearer {token}")
    forged = token.replace("12.1", "13.1", 1)
    with pytest.raises(UnauthorizedError):
        tokens.run_id_from_token("s3cret", f"Bearer {forged}")
    with pytest.raises(UnauthorizedError, match="Authorization"):
        tokens.run_id_from_token("s3cret", None)


def test_an_agent_credential_names_its_agent_and_cannot_be_bent_to_another():
    credential = tokens.agent_credential("s3cret", "gpu.node-1")  # ids may hold dots
    assert tokens.agent_id_from_credential("s3cret", f"Bearer {credential}") == "gpu.node-1"
    for forged in (
        credential.replace("gpu.node-1", "gpu.node-2", 1),  # another agent's id, the same digest
        tokens.agent_credential("other stack", "gpu.node-1"),
        "s3cret",  # the stack's secret itself is no credential
        tokens.run_token("s3cret", "gpu.node-1"),  # nor a run token
    ):
        with pytest.raises(UnauthorizedError, match="agent credential is not valid"):
            tokens.agent_id_from_credential("s3cret", f"Bearer {forged}")


def test_trial_scope():
    tokens.require_trial(3, 3)
    with pytest.raises(ForbiddenError, match="trial 3, not trial 4"):
        tokens.require_trial(3, 4)
