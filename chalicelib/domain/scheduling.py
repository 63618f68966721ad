"""The slot scheduler of a resource pool: what it schedules (requests, holdings, agents), in which order,
and how a request is placed on agents.

The queue order is Determined's: priority (lower number first), then the job's queue position (its
submission time in epoch seconds unless `det job update --ahead-of/--behind-of` moved it), then the job,
then the request's own submission time and run id. `det job list` shows jobs in this same order.

A request that fits on one agent of the pool is placed on one agent (best fit). A bigger one (Determined's
multi-node trial) takes whole idle agents of one size that divides it: `slots_per_trial: 8` on 4-slot
agents takes two of them, each a node of the trial, the first the chief.

The policies (priority with or without preemption, fair share) are `scheduling_priority` and
`scheduling_fair_share`, made by `scheduling_policies.policy_for`. `assign_fifo` is the first scheduler
(FIFO within priority, a request that does not fit blocks everything behind it), kept as the baseline of
`bench/scheduling_pass.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter


@dataclass(frozen=True)
class SlotRequest:
    """A run waiting for slots."""

    run_id: str
    slots: int
    priority: int
    queued_at: str  # ISO-8601; ties broken by run_id
    #: The run's job: its experiment id as a string (one job per experiment).
    job_id: str = ""
    #: The job's fair-share weight (the fair-share scheduler only).
    weight: float = 1.0
    #: The job's place among jobs of equal priority: its submission time in epoch seconds, or the
    #: midpoint `det job update --ahead-of/--behind-of` moved it to (see `queue_moves`).
    queue_position: float = 0.0
    #: The most slots the job's runs may hold at once (`resources.max_slots`, see `job_limits`); 0: none.
    max_slots: int = 0


@dataclass(frozen=True)
class Holding:
    """A run that holds slots (assigned, launching or running)."""

    run_id: str
    job_id: str
    slots: int
    priority: int
    #: agent id -> slots held there (one entry, or one per node of a multi-node run).
    placements: Mapping[str, int]
    weight: float = 1.0
    queue_position: float = 0.0
    #: When it was granted its slots (ISO-8601); among equal victims the most recent is preempted.
    started_at: str = ""
    #: Already told to stop (paused, preempted, killed): its slots will come free; never picked again.
    stopping: bool = False


@dataclass(frozen=True)
class AgentCapacity:
    agent_id: str
    slots: int
    used: int

    @property
    def free(self) -> int:
        return max(0, self.slots - self.used)


@dataclass(frozen=True)
class Assignment:
    run_id: str
    agent_id: str  # the chief's agent on several nodes
    #: The agents of a multi-node placement, chief first (one node each); empty on one agent.
    nodes: tuple[str, ...] = ()

    @property
    def agents(self) -> tuple[str, ...]:
        return self.nodes or (self.agent_id,)


QueueKey = tuple[int, float, str, str, str]


def submission_position(submitted_at: str) -> float:
    """A job's default queue position: its submission time (ISO-8601) in epoch seconds; 0.0 when unknown."""
    if not submitted_at:
        return 0.0
    try:
        return datetime.fromisoformat(submitted_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def queue_key(request: SlotRequest) -> QueueKey:
    """The scheduling order: priority, the job's queue position, the job, then the request itself."""
    return (request.priority, request.queue_position, request.job_id, request.queued_at, request.run_id)


_QUEUE_KEY = attrgetter("priority", "queue_position", "job_id", "queued_at", "run_id")


def queue_order(requests: Iterable[SlotRequest]) -> list[SlotRequest]:
    return sorted(requests, key=_QUEUE_KEY)  # queue_key, in C


def assign_fifo(requests: Sequence[SlotRequest], agents: Sequence[AgentCapacity]) -> list[Assignment]:
    """The first scheduler (issue 9): FIFO within priority, a request that does not fit now (or ever)
    blocks every request behind it. Kept as the benchmark's baseline; `plan_pass` replaces it."""
    free = {a.agent_id: a.free for a in agents}
    size = {a.agent_id: a.slots for a in agents}
    largest = max(size.values(), default=0)
    assignments: list[Assignment] = []
    for request in queue_order(requests):
        if request.slots <= largest:
            # Fill the fullest agent that still fits (best fit), so whole agents stay free for big trials.
            fitting = [agent for agent, n in free.items() if n >= request.slots]
            if not fitting:
                break
            chosen = min(fitting, key=lambda agent: (free[agent], agent))
            free[chosen] -= request.slots
            assignments.append(Assignment(run_id=request.run_id, agent_id=chosen))
            continue
        nodes = multi_node_placement(request.slots, {a: n for a, n in free.items() if n == size[a]}, size)
        if nodes is None:
            break
        for agent in nodes:
            free[agent] = 0
        assignments.append(Assignment(run_id=request.run_id, agent_id=nodes[0], nodes=nodes))
    return assignments


def multi_node_placement(
    slots: int, idle: Mapping[str, int], size: Mapping[str, int]
) -> tuple[str, ...] | None:
    """Whole idle agents of one size that together hold exactly ``slots``, as few as possible (the
    largest size that divides ``slots``), in agent id order; None when there are not enough."""
    by_size: dict[int, list[str]] = {}
    for agent in idle:
        if size[agent] > 0 and slots % size[agent] == 0:
            by_size.setdefault(size[agent], []).append(agent)
    for per_node in sorted(by_size, reverse=True):
        count = slots // per_node
        if len(by_size[per_node]) >= count:
            return tuple(sorted(by_size[per_node])[:count])
    return None


def queue_positions(requests: Sequence[SlotRequest]) -> dict[str, int]:
    """1-based position of each waiting request, for `det` output and the queue metrics."""
    return {r.run_id: i for i, r in enumerate(queue_order(requests), start=1)}
