"""What runs cost, as the API shows it (`chalicelib.services.costs`), and what an agent says of its
instance when it starts a run."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class InstanceReport(BaseModel):
    """The instance an agent runs on: its type (`local` for a local agent), spot or on-demand, its GPUs
    and the slots it offers (a run is charged its slots' share of the instance)."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1, max_length=64)
    spot: bool = False
    gpus: int = Field(default=0, ge=0, le=1024)
    slots: int = Field(default=1, ge=1, le=1024)


class Waste(BaseModel):
    """Instance-seconds not spent training: before the process started, work lost since the last
    checkpoint at an exit that was not clean, and after the last checkpoint of a clean exit."""

    startup_s: float
    lost_s: float
    idle_s: float


class CostLine(BaseModel):
    """Usage of one instance type and lifecycle (`instance_type` "total": of every run)."""

    instance_type: str
    #: "spot" or "on-demand"; null on the total.
    lifecycle: str | None
    gpus: int
    runs: int
    #: Instance-seconds: the runs' time on their instances times their share (slots / instance slots).
    instance_s: float
    training_s: float
    waste: Waste
    usd: float
    #: False when an instance type had no price: its time counts, its cost is counted 0.
    priced: bool


class Cost(BaseModel):
    total: CostLine
    by_instance: list[CostLine]
