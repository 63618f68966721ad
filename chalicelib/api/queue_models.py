"""Request and response bodies of the job-queue and cluster routes (`chalicelib.api.job_routes`):
`det job update | update-batch`, `det experiment set | label`, `det checkpoint delete`, `det resource-pool list`, `det agent list`, `det slot list`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from chalicelib.api.models import Int64, _Body
from stratus.contract.pools import SchedulerKind


class JobChange(_Body):
    """One change to a job (Determined's QueueControl): exactly one field."""

    priority: Int64 | None = None
    weight: float | None = None
    resource_pool: str | None = None
    ahead_of: str | None = None
    behind_of: str | None = None


class ExperimentChange(_Body):
    """What `PATCH /experiments/{id}` changes (`chalicelib.services.experiment_edits`): at least one."""

    name: str | None = Field(default=None, min_length=1, max_length=128)
    description: str | None = Field(default=None, max_length=4000)
    add_labels: list[str] = Field(default_factory=list, max_length=100)
    remove_labels: list[str] = Field(default_factory=list, max_length=100)
    #: The most slots its trials may hold at once; 0 clears the limit.
    max_slots: Int64 | None = Field(default=None, ge=0)


class CheckpointDeletionRequest(_Body):
    """`det checkpoint delete`: the uuids, all checked before any is deleted."""

    uuids: list[str] = Field(min_length=1, max_length=100)


class CheckpointDeletion(BaseModel):
    deleted: list[str]
    already_deleted: list[str]


class JobBatchItem(JobChange):
    job_id: str


class JobBatchRequest(_Body):
    updates: list[JobBatchItem] = Field(min_length=1)


class QueuedJob(BaseModel):
    """A job's place in its pool's queue, as an update left it."""

    id: str
    name: str
    state: str
    resource_pool: str
    priority: int
    weight: float
    queue_position: float | None


class JobUpdateResponse(BaseModel):
    jobs: list[QueuedJob]
    #: What the updates did beyond what was asked (a job that took another's priority to move next to it).
    notes: list[str]


class ResourcePool(BaseModel):
    name: str
    description: str
    #: Determined's pool types: agents that are there (`static`), or machines the control plane starts.
    type: Literal["static", "aws"]
    scheduler_type: SchedulerKind
    preemption: bool
    default_priority: int
    num_agents: int
    max_agents: int | None
    slots_per_agent: int | None
    slots_available: int
    slots_used: int
    queued_jobs: int
    scheduled_jobs: int


class ResourcePoolList(BaseModel):
    resource_pools: list[ResourcePool]


class Agent(BaseModel):
    id: str
    resource_pool: str
    slots: int
    slots_used: int
    containers: int
    last_heartbeat: str
    alive: bool
    #: Its machine is about to go (a spot interruption, a scale-in), or it was disabled with runs still on
    #: it: nothing more is placed on it.
    draining: bool = False
    #: False once `det agent disable` took it out of placement (`det agent enable` puts it back).
    enabled: bool = True
    #: The version of the compute package it runs, as its heartbeat names it ("": it names none).
    version: str = ""


class AgentDisable(BaseModel):
    #: Let the runs on it finish there (Determined's `--drain`); else they checkpoint and move.
    drain: bool = False


class AgentChange(BaseModel):
    agent: Agent
    #: Runs told to checkpoint and go back to the queue (they resume on other agents).
    moved: list[str]
    #: Runs still on it (draining: they finish there).
    remaining: list[str]


class AgentList(BaseModel):
    agents: list[Agent]


class Slot(BaseModel):
    agent_id: str
    resource_pool: str
    slot_id: int
    enabled: bool
    run_id: str | None
    trial_id: int | None
    experiment_id: int | None


class SlotList(BaseModel):
    slots: list[Slot]


class AgentCredential(BaseModel):
    """A credential minted for one agent id (`det agent credential ID`): the agent presents it as
    `Authorization: Bearer <credential>` (`STRATUS_AGENT_TOKEN`, or `--token-file`)."""

    agent_id: str
    credential: str
