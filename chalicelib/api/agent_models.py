"""The agent-facing bodies: what an agent sends (its heartbeat, its runs' starts and exits, their logs) and
what its heartbeat is answered with (its instructions, its heartbeat interval and its doorbell)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from chalicelib.api.cost_models import InstanceReport
from chalicelib.api.models import Count, Int64, LogLine, _Body
from chalicelib.domain.numbers import INT64_MAX


class AgentHeartbeat(_Body):
    pool: str = Field(min_length=1, max_length=64)
    slots: int = Field(ge=0, le=1024)
    running: list[str] = []
    #: The agent is stopping (its last beat): it is granted nothing more, and the runs assigned to it that
    #: it has not started go back to the queue at once (those it runs it stops, reporting `requeue`).
    stopping: bool = False
    #: The agent's machine is about to go (a spot interruption notice): nothing more is placed on it, and
    #: its runs are preempted (they checkpoint, exit and resume elsewhere). It stays set once sent.
    draining: bool = False


class LaunchSpec(BaseModel):
    run_id: str
    trial_id: int
    experiment_id: int
    slots: int
    entrypoint: list[str]
    environment: dict[str, str]
    context_url: str | None  # null: the experiment has no context (an empty folder)
    api_url: str


class RunStarted(_Body):
    pid: Count
    instance: InstanceReport | None = None


class RunExited(_Body):
    exit_code: Int64
    reason: str = Field(default="", max_length=4000)
    failed_rank: Count | None = None  # from the launcher's report, if there is one
    #: The agent stopped the run for its own reasons (it is stopping: a scale-in, a spot reclaim): the
    #: trial goes back to the queue and resumes from its checkpoint, whatever the exit code.
    requeue: bool = False


class LogBatch(_Body):
    run_id: str = Field(min_length=1, max_length=128)  # an empty one named no log stream: a 500 before
    seq: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = (
        None  # per run, increasing; a repeated seq is a retry
    )
    lines: list[LogLine] = Field(max_length=10_000)


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
