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


def test_agent_token_and_trial_scope():
    tokens.check_agent_token("abc", "Bearer abc")
    with pytest.raises(UnauthorizedError):
        tokens.check_agent_token("abc", "Bearer abd")
    tokens.require_trial(3, 3)
    with pytest.raises(ForbiddenError, match="trial 3, not trial 4"):
        tokens.require_trial(3, 4)
