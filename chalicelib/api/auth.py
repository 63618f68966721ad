"""Who may call a route: each route declares one kind of credential, and the registration turns the
request's credential into a typed principal before its view runs.

    kind    credential                                   principal                 refused with
    none    nothing                                      Anonymous                 -
    iam     SigV4 (API Gateway's IAM authorizer in AWS;  UserPrincipal             403 from API Gateway
            open on the local stack)
    agent   Bearer <the agent's own credential>          AgentPrincipal            401 missing or wrong token,
                                                                                   403 another agent's id in
                                                                                   the path, a malformed id
    run     Bearer <a run token>                         RunPrincipal              401 missing or wrong token,
                                                                                   403 another trial's token,
                                                                                   or a run gone or exited

Checking happens in two steps so that a caller without a valid credential learns nothing about the
request: `verify` (the token itself, 401) before the path and the body are read, `scope` (what the
token may reach, 403) once the path's ids are parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from chalice.app import Request

from chalicelib.domain.run_records import Run
from chalicelib.errors import ForbiddenError
from chalicelib.services import tokens
from chalicelib.settings import get_settings
from chalicelib.wiring import ports
from stratus.contract.owner import USER_HEADER, clean_user_name

AuthKind = Literal["none", "iam", "agent", "run"]

MAX_AGENT_ID = 128
DEFAULT_OWNER = "user"


@dataclass(frozen=True)
class Anonymous:
    """The caller of an open route (health, the API document)."""


@dataclass(frozen=True)
class UserPrincipal:
    """A user. `arn` is the IAM identity API Gateway verified (None on the local stack, which is open);
    `claimed_name` the user name the CLI sent (`stratus.contract.owner.USER_HEADER`), a label only."""

    arn: str | None
    claimed_name: str | None = None

    @property
    def owner(self) -> str:
        """The experiment owner to record: the verified identity's name when there is one (the header is
        then ignored), else the name the CLI claims, else "user"."""
        if self.arn:
            return owner_from_arn(self.arn)
        return self.claimed_name or DEFAULT_OWNER


@dataclass(frozen=True)
class AgentPrincipal:
    """An agent of this stack, by the id its credential was minted for (`tokens.agent_credential`); a
    path naming another agent is refused before the view runs."""

    agent_id: str


@dataclass(frozen=True)
class RunPrincipal:
    """A trial process, by the live run its token belongs to (its own trial's, when the path names one)."""

    run: Run

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def trial_id(self) -> int:
        return self.run.trial_id

    @property
    def experiment_id(self) -> int:
        return self.run.experiment_id


Principal = Anonymous | UserPrincipal | AgentPrincipal | RunPrincipal

#: The principal a view of each auth kind receives (the registration checks the view's annotation).
PRINCIPALS: dict[AuthKind, type[Principal]] = {
    "none": Anonymous,
    "iam": UserPrincipal,
    "agent": AgentPrincipal,
    "run": RunPrincipal,
}


def verify(kind: AuthKind, request: Request) -> str | UserPrincipal | None:
    """Check the request's credential itself (401 when missing or wrong). Returns what `scope` needs:
    the run id of a run token, the user (the caller's ARN and claimed name), else None."""
    if kind == "agent":
        return tokens.agent_id_from_credential(get_settings().agent_token, _authorization(request))
    if kind == "run":
        return tokens.run_id_from_token(get_settings().token_secret, _authorization(request))
    if kind == "iam":
        # API Gateway's IAM authorizer verified the signature before the Lambda ran (in AWS); the local
        # stack has no authorizer and lets every user in, as Chalice's local server does.
        identity: Any = (request.context or {}).get("identity") or {}
        arn = identity.get("userArn")
        return UserPrincipal(str(arn) if arn else None, clean_user_name(request.headers.get(USER_HEADER)))
    return None


def owner_from_arn(arn: str) -> str:
    """The name an IAM identity goes by: `alice` for ``arn:aws:iam::1:user/team/alice``, the session
    (``alice@example.com``) for ``arn:aws:sts::1:assumed-role/Admin/alice@example.com``, ``root`` for the
    account's root; the ARN itself when it has no such part."""
    resource = arn.split(":", 5)[-1]
    kind, _, path = resource.partition("/")
    if kind == "root" or not path:
        return kind or arn
    return path.rsplit("/", 1)[-1] if kind in ("user", "assumed-role", "federated-user") else arn


def scope(kind: AuthKind, credential: str | UserPrincipal | None, path: Mapping[str, Any]) -> Principal:
    """The principal of a verified credential, once the path's ids are parsed (403 when the credential
    may not reach what the path names)."""
    if kind == "agent":
        assert isinstance(credential, str)  # verify returned the credential's agent id
        agent_id = path.get("agent_id")
        if agent_id is not None and not 0 < len(agent_id) <= MAX_AGENT_ID:
            raise ForbiddenError(f"agent id {agent_id!r} must be 1 to {MAX_AGENT_ID} characters")
        if agent_id is not None and agent_id != credential:
            raise ForbiddenError(
                f"this credential is agent {credential!r}'s; it cannot act as agent {agent_id!r}"
            )
        return AgentPrincipal(credential)
    if kind == "run":
        assert isinstance(credential, str)  # verify returned the token's run id
        trial_id = path.get("trial_id")
        return RunPrincipal(tokens.live_run(ports(), credential, trial_id))
    if kind == "iam":
        assert isinstance(credential, UserPrincipal)  # verify read the user
        return credential
    return Anonymous()


def _authorization(request: Request) -> str | None:
    value = request.headers.get("authorization")
    return str(value) if value is not None else None
