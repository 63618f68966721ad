"""What the API shows of an elastic trial (`Trial.elastic`, and the answer of
`PUT /trials/{id}/adaptdl/hints`): its latest AdaptDL hints, each run's replicas and a rescale the
allocator decided (`chalicelib.services.elastic_scheduling`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ReplicaRun(BaseModel):  # one run of an elastic trial, as it was granted its slots
    at: str
    replicas: int
    reason: str = Field(description="start, the rescale that sized it (grow/shrink: why), or a restart")


class Rescale(BaseModel):  # the allocator's last rescale of the trial
    run: str = Field(description="the run stopped for it")
    replicas: int | None = Field(default=None, description="the replicas that run had")
    target: int = Field(description="the replicas of the trial's next run")
    reason: str
    at: str | None = None


class TrialElastic(BaseModel):
    hints: dict[str, Any] = Field(default_factory=dict, description="the latest AdaptDL hints; {}: none yet")
    hints_at: str | None = None
    runs: dict[str, ReplicaRun] = Field(default_factory=dict, description="by run id")
    rescale: Rescale | None = None
