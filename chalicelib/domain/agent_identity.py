"""Which agent an IAM caller is: the identity check of `POST /agents/{agent_id}/iam-credential` (pure: it
reads the request context API Gateway hands the Lambda, and nothing else).

API Gateway's IAM authorizer verifies the SigV4 signature before the Lambda runs and puts the caller in
``requestContext.identity``; for a role session (an EC2 instance profile's credentials):

    userArn   arn:aws:sts::123456789012:assumed-role/<RoleName>/<session>
    caller    AROAEXAMPLEROLEID:<session>          (``user`` is the same)

and the API's own account in ``requestContext.accountId``. EC2 names an instance profile's session after
the instance (the IAM condition key ``aws:userid`` is ``role-id:ec2-instance-id``), and the stack's agent
role trusts ``ec2.amazonaws.com`` alone, so nobody can choose that session name: a caller that is the
agent role's session ``i-0abc`` is instance ``i-0abc``, whose agent id is its instance id. Any other caller
is refused with a `ForbiddenError` that names the identity and what is expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.errors import ForbiddenError

#: ``arn:<partition>:sts::<account>:assumed-role/<role name>/<session name>``; the partition is ``aws``,
#: ``aws-cn``, ``aws-us-gov``, ``aws-iso``...; role names are 1 to 64 and session names 2 to 64 of
#: ``[\w+=,.@-]``. An assumed role's ARN never carries the role's path.
_ASSUMED_ROLE = re.compile(
    r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]{1,64})/([\w+=,.@-]{2,64})$", re.ASCII
)


@dataclass(frozen=True)
class RoleSession:
    """A caller that is a session of an IAM role."""

    partition: str
    account: str
    role_name: str
    session: str

    @property
    def arn(self) -> str:
        return f"arn:{self.partition}:sts::{self.account}:assumed-role/{self.role_name}/{self.session}"


def role_session(arn: str) -> RoleSession | None:
    """The role session an ARN names, or None when it names something else (an IAM user, a federated
    user, an account's root, a role itself)."""
    match = _ASSUMED_ROLE.match(arn)
    return RoleSession(*match.groups()) if match else None


def agent_session(request_context: Mapping[str, Any] | None, *, role_name: str, agent_id: str) -> RoleSession:
    """The caller of the request, when it may have agent `agent_id`'s credential: a session of the agent
    role `role_name` in the API's own account, named `agent_id` (the instance's id). Raises
    `ForbiddenError` otherwise, and when there is no identity at all (Chalice's local mode, the local
    stack: they have no IAM authorizer)."""
    context: Mapping[str, Any] = request_context or {}
    found = context.get("identity")
    identity: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    arn = identity.get("userArn")
    if not isinstance(arn, str) or not arn:
        raise ForbiddenError(
            f"the request carries no IAM identity, so it cannot get agent {agent_id!r}'s credential: "
            "this route answers only a request signed with SigV4 by the instance's role through API "
            "Gateway (the local stack has no IAM identity: its agents get their credential from --token-file)"
        )
    wanted = f"a session of the agent role {role_name!r} named after the instance (its id, {agent_id!r})"
    if not role_name:
        raise ForbiddenError(
            f"caller {arn} cannot get an agent credential: this stack names no agent role "
            "(STRATUS_AGENT_ROLE_NAME is unset; the stack's template sets it to its AgentRole)"
        )
    session = role_session(arn)
    if session is None:
        raise ForbiddenError(f"caller {arn} is not a role session; only {wanted} gets this credential")
    if session.role_name != role_name:
        raise ForbiddenError(f"caller {arn} is a session of role {session.role_name!r}; only {wanted} may")
    if session.session != agent_id:
        raise ForbiddenError(
            f"caller {arn} is instance {session.session!r}'s session; it gets the credential of agent "
            f"{session.session!r}, not of agent {agent_id!r}"
        )
    api_account = context.get("accountId")
    if session.account != api_account:
        raise ForbiddenError(
            f"caller {arn} is of account {session.account}, not of this API's account "
            f"({api_account or 'the request context names none'}); only {wanted} in the API's account may"
        )
    for name in ("caller", "user"):
        value = identity.get(name)
        if value is not None and str(value).partition(":")[2] != session.session:
            raise ForbiddenError(
                f"the identity's {name} {value!r} does not name the session of its ARN {arn}; refused"
            )
    return session
