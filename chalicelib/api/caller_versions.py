"""The callers' versions as the API sees them: the CLI and the compute side name theirs in
`stratus.contract.versions.VERSION_HEADER`; a CLI (on the users' routes) or an agent (on the agents')
older than the oldest this API answers is refused (426, `UpgradeRequiredError`) with one sentence naming
both versions and the upgrade, before the route does anything, so it never gets an answer it would
misread. The open routes (`/info`, `/health`, `/openapi.json`) answer every version: `det version` of
any CLI can read them. The trials' routes are not checked: a trial runs the compute package its agent
installed, and that agent is checked."""

from __future__ import annotations

from collections.abc import Mapping

from chalicelib.errors import UpgradeRequiredError
from stratus.contract.versions import (
    OLDEST_AGENT,
    OLDEST_CLIENT,
    VERSION,
    VERSION_HEADER,
    Comparison,
    Side,
    Standing,
    compare,
)

#: The side of each checked kind of route, with the oldest version of it the API answers.
CHECKED: dict[str, tuple[Side, str]] = {"iam": (Side.CLI, OLDEST_CLIENT), "agent": (Side.AGENT, OLDEST_AGENT)}
#: The IAM-signed routes an agent calls (signed by its instance's role), not a CLI.
AGENT_SIGNED = frozenset({"/agents/{agent_id}/iam-credential"})


def caller_version(headers: Mapping[str, str]) -> str | None:
    """The version the caller named (None: it named none). Chalice's headers are case-insensitive; a plain
    mapping is searched without regard to case."""
    wanted = VERSION_HEADER.lower()
    found = headers.get(VERSION_HEADER)
    if found is None:
        found = next((value for key, value in headers.items() if key.lower() == wanted), None)
    return found.strip()[:64] if isinstance(found, str) else None


def check_caller(auth: str, path: str, headers: Mapping[str, str], *, name: str = "") -> Comparison | None:
    """How the caller of route ``path``, of kind ``auth``, stands (None for the kinds not checked);
    raises `UpgradeRequiredError` for one too old. ``name``: the agent's id, for the message."""
    checked = CHECKED.get("agent" if path in AGENT_SIGNED else auth)
    if checked is None:
        return None
    side, oldest = checked
    label = f"agent {name}" if name and side is Side.AGENT else ""
    comparison = compare(side, caller_version(headers), api_version=VERSION, oldest=oldest, name=label)
    if comparison.standing is Standing.TOO_OLD:
        raise UpgradeRequiredError(comparison.message)
    return comparison
