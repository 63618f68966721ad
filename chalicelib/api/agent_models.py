"""What an agent's heartbeat is answered with: its instructions, its heartbeat interval and its doorbell."""

from __future__ import annotations

from pydantic import BaseModel

from chalicelib.api.models import LaunchSpec


class Bell(BaseModel):
    """Where the agent long-polls for rings (a presigned SQS ReceiveMessage URL), until when."""

    url: str
    expires_at: int
    wait_s: int


class AgentInstructions(BaseModel):
    launch: list[LaunchSpec]
    kill: list[str]
    #: Runs asked to stop (a pause, a preemption): the agent passes it on through the run's stop file.
    preempt: list[str] = []
    #: How often the control plane expects this agent's heartbeat (its liveness).
    heartbeat_interval_s: float | None = None
    #: Its doorbell: a ring means "heartbeat now" (null: none; heartbeat on the interval).
    bell: Bell | None = None
