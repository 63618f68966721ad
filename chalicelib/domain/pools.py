"""Resource pools as configured (Determined's `resource_pools` in the master config): a name, a scheduler
and, where the pool's machines are known, its shape.

The scheduler kinds are Determined's: `priority` (lower number first, default 42; with `preemption`
on, a job that cannot fit stops lower-priority running trials through the pause path) and `fair_share`
(the pool's slots divided among active jobs by weight). A pool whose shape is known (its agents' slots
and how many agents it can have) refuses at submission a request that could never fit in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SchedulerKind = Literal["priority", "fair_share"]
SCHEDULER_KINDS: tuple[SchedulerKind, ...] = ("priority", "fair_share")

#: Determined's default job priority (1-99, lower runs first).
DEFAULT_PRIORITY = 42
DEFAULT_POOL = "default"


@dataclass(frozen=True)
class PoolSpec:
    name: str
    scheduler: SchedulerKind = "priority"
    #: Priority scheduler only: a higher-priority job that cannot fit preempts lower-priority trials.
    preemption: bool = True
    default_priority: int = DEFAULT_PRIORITY
    description: str = ""
    #: Slots of each agent, where known (the local stack's `--slots`, an instance type's GPUs).
    slots_per_agent: int | None = None
    #: The most agents the pool can have, where known (the local stack's count, an ASG's maximum).
    max_agents: int | None = None

    @property
    def max_slots(self) -> int | None:
        """The most slots the pool can ever offer, or None where its shape is unknown."""
        if self.slots_per_agent is None or self.max_agents is None:
            return None
        return self.slots_per_agent * self.max_agents
