"""An EC2 agent's credential from its instance's IAM identity (docs/architecture.md, "Compute backends on AWS"): the answer of
`POST /agents/{agent_id}/iam-credential` (registered in `chalicelib.api.compute_routes`).

The route is SigV4-only (auth kind ``iam``: API Gateway's IAM authorizer in AWS). Who the caller is, is
the pure check of `chalicelib.domain.agent_identity`; the credential is the one the local stack hands its
agents in a file (`chalicelib.services.tokens.agent_credential`), so every other agent route is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from chalicelib.domain.agent_identity import agent_session
from chalicelib.services import tokens
from chalicelib.settings import get_settings


class AgentIamCredential(BaseModel):
    """The calling instance's agent credential: the agent presents it as `Authorization: Bearer
    <credential>` on the agent routes, and asks again when one answers 401."""

    credential: str


def credential_for_caller(request_context: Mapping[str, Any] | None, agent_id: str) -> AgentIamCredential:
    """Agent `agent_id`'s credential, if the caller is the agent role's session of that instance
    (`ForbiddenError` otherwise)."""
    settings = get_settings()
    agent_session(request_context, role_name=settings.agent_role_name, agent_id=agent_id)
    return AgentIamCredential(credential=tokens.agent_credential(settings.agent_token, agent_id))
