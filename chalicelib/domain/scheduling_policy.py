"""What a pool's scheduling policy is to its callers (Determined's `Scheduler` interface), so that
neither asks which kind it holds.

Two callers use a policy: the scheduling pass plans over the requests it is given (`plan`), and the
queue reader (`services.queue_reading`) reads only the head of the queue, asking the policy's
`HeadPass` which parts of the queue to read first (`streams`), feeding it each page as it comes (`feed`)
and asking it whether a stream is worth another page (`wants_more`). `det job update` asks which job
setting ranks jobs under it (`ranks_jobs_by`: priority or weight).

One module per policy (`scheduling_priority`, `scheduling_fair_share`); `scheduling_policies` makes
the pool's from its configuration (`policy_for`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from chalicelib.domain.queue_head import QueueStream, QueueSummary
from chalicelib.domain.scheduling import AgentCapacity, Holding, SlotRequest
from chalicelib.domain.scheduling_pass import PassPlan, PoolShape
from stratus.contract.pools import PoolSpec, SchedulerKind

#: The job setting users rank their jobs by under a policy: `det job update --priority` (and
#: `--ahead-of`/`--behind-of`, which move a job among jobs of its priority) or `--weight`.
JobRanking = Literal["priority", "weight"]


@dataclass(frozen=True)
class PoolPolicy:
    """How a pool schedules: its scheduler kind, whether it preempts, and its shape where known."""

    kind: SchedulerKind = "priority"
    preemption: bool = False
    slots_per_agent: int | None = None
    max_agents: int | None = None

    @classmethod
    def of(cls, spec: PoolSpec) -> PoolPolicy:
        return cls(
            kind=spec.scheduler,
            preemption=spec.preemption,
            slots_per_agent=spec.slots_per_agent,
            max_agents=spec.max_agents,
        )

    @property
    def shape(self) -> PoolShape:
        return PoolShape(self.slots_per_agent, self.max_agents)


@dataclass
class HeadStep:
    """The plan after the pages fed so far, and run id -> why each request read that its job's slot
    limit held back waits (`job_limits`: not in the plan's `blocked`)."""

    plan: PassPlan
    held_back: dict[str, str] = field(default_factory=dict)


class HeadPass(Protocol):
    """A pass over the head of a pool's queue, fed the requests read page after page (see
    `services.queue_reading`): every decision on a request depends only on those ahead of it, so the
    plan of the requests read is the plan a pass over the whole queue would make of them."""

    #: The indexes to read, the first page of each sized (`QueueStream.limit`); the reader updates them.
    streams: list[QueueStream]

    def feed(self, fresh: Sequence[SlotRequest]) -> HeadStep:
        """Plan with ``fresh``, the requests of the pages just read (in the order read)."""
        ...

    def wants_more(self, stream: QueueStream, plan: PassPlan, unread_sizes: list[int]) -> bool:
        """Whether to read the next page of ``stream`` (not done yet), given the plan so far and the
        sizes of the requests not read. May move the stream past requests that could use nothing."""
        ...


class SchedulingPolicy(Protocol):
    """A pool's scheduling policy (see the module docstring)."""

    @property
    def config(self) -> PoolPolicy: ...

    @property
    def ranks_jobs_by(self) -> JobRanking: ...

    def plan(
        self,
        requests: Sequence[SlotRequest],
        holdings: Sequence[Holding],
        agents: Sequence[AgentCapacity],
        waiting_slots: Mapping[str, int] | None = None,
    ) -> PassPlan:
        """One scheduling pass (`scheduling_policies.plan_pass`): ``agents``' ``used`` counts every
        holding's slots; ``holdings`` are the runs holding them (the candidates for preemption).
        ``requests`` may be only the head of the queue; ``waiting_slots`` (job id -> slots it waits for
        in all) then gives a policy that needs it each job's whole demand."""
        ...

    def head_pass(
        self, summary: QueueSummary, holdings: Sequence[Holding], agents: Sequence[AgentCapacity]
    ) -> HeadPass:
        """A pass over the head of the queue that ``summary`` counts."""
        ...


def free_room(config: PoolPolicy, holdings: Sequence[Holding], agents: Sequence[AgentCapacity]) -> int:
    """The slots a pass could hand out now: the free ones, and those stopping runs will free where the
    pool preempts. Sizes a head pass's first page (each request takes one slot at least)."""
    room = sum(a.free for a in agents)
    if config.preemption:
        room += sum(h.slots for h in holdings if h.stopping)
    return room
