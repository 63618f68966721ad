"""The compute side's bearer tokens: each agent's credential, and run tokens that let one trial process
call the trial-facing API for its own trial while its run lives.

An agent credential is `agent.<agent_id>.<hmac>`, minted from the stack's agent secret
(`STRATUS_AGENT_TOKEN`, which no agent holds) for one agent id: the API acts for that agent only (its
heartbeat, its runs' launches, starts, exits and logs). The embedded stack mints one for each agent it
starts (`agent_credential`); in AWS the same credential would be handed to an instance bound to its
instance identity (issue 13).

A run token is `<run_id>.<hmac>`; it is derived, not stored, so the API checks it without a table read
and a leaked table never leaks tokens. What the token may reach is checked against the run's record
(`live_run`): the run must exist, belong to the trial the path names, and not have exited.
"""

from __future__ import annotations

import hashlib
import hmac

from chalicelib.domain.run_records import Run
from chalicelib.domain.states import RunState
from chalicelib.errors import ForbiddenError, UnauthorizedError
from chalicelib.services.ports import Ports


def run_token(secret: str, run_id: str) -> str:
    digest = hmac.new(secret.encode(), f"run:{run_id}".encode(), hashlib.sha256).hexdigest()
    return f"{run_id}.{digest}"


def run_id_from_token(secret: str, header: str | None) -> str:
    token = _bearer(header)
    run_id, _, _ = token.rpartition(".")
    if not run_id or not hmac.compare_digest(run_token(secret, run_id), token):
        raise UnauthorizedError(
            "the run token is not valid; trial calls must use the token the agent passed in STRATUS_RUN_TOKEN"
        )
    return run_id


def agent_credential(secret: str, agent_id: str) -> str:
    digest = hmac.new(secret.encode(), f"agent:{agent_id}".encode(), hashlib.sha256).hexdigest()
    return f"agent.{agent_id}.{digest}"


def agent_id_from_credential(secret: str, header: str | None) -> str:
    """The agent a credential was minted for (401 when it was not minted by this stack)."""
    token = _bearer(header)
    body, _, _ = token.rpartition(".")
    agent_id = body.removeprefix("agent.") if body.startswith("agent.") else ""
    if not agent_id or not hmac.compare_digest(agent_credential(secret, agent_id), token):
        raise UnauthorizedError(
            "the agent credential is not valid; start the agent with the credential minted for its id "
            "(the local stack passes it in the agent's token file)"
        )
    return agent_id


def _bearer(header: str | None) -> str:
    if not header or not header.startswith("Bearer "):
        raise UnauthorizedError("missing 'Authorization: Bearer <token>' header")
    return header[len("Bearer ") :].strip()


def require_trial(run_trial_id: int, path_trial_id: int) -> None:
    if run_trial_id != path_trial_id:
        raise ForbiddenError(f"this run token belongs to trial {run_trial_id}, not trial {path_trial_id}")


def live_run(ports: Ports, run_id: str, trial_id: int | None) -> Run:
    """The record of a run whose token was verified, if the token may still act: the run exists, is
    `trial_id`'s when a trial is named, and has not exited (a token dies with its run)."""
    run = ports.runs.get(run_id)
    if run is None:
        raise ForbiddenError(f"run {run_id} does not exist")
    if trial_id is not None:
        require_trial(run.trial_id, trial_id)
    if run.state == RunState.EXITED:
        raise ForbiddenError(f"run {run_id} has exited; its token is no longer valid")
    return run
