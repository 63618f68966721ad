"""The slot scheduler of a resource pool, as a pure function.

For now the policy is FIFO within priority (Determined's priority scheduler without preemption):
requests are served in order of priority (lower number first, as in Determined), then submission time;
a request that does not fit blocks those behind it, so a big trial is never starved by small ones.
A request must fit on one agent (multi-node placement comes with the launchers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SlotRequest:
    run_id: str
    slots: int
    priority: int
    queued_at: str  # ISO-8601; ties broken by run_id


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
    agent_id: str


def queue_order(requests: Iterable[SlotRequest]) -> list[SlotRequest]:
    return sorted(requests, key=lambda r: (r.priority, r.queued_at, r.run_id))


def assign_fifo(requests: Sequence[SlotRequest], agents: Sequence[AgentCapacity]) -> list[Assignment]:
    free = {a.agent_id: a.free for a in agents}
    # Fill the fullest agent that still fits (best fit), so whole agents stay free for big trials.
    assignments: list[Assignment] = []
    for request in queue_order(requests):
        fitting = [agent for agent, n in free.items() if n >= request.slots]
        if not fitting:
            break
        chosen = min(fitting, key=lambda agent: (free[agent], agent))
        free[chosen] -= request.slots
        assignments.append(Assignment(run_id=request.run_id, agent_id=chosen))
    return assignments


def queue_positions(requests: Sequence[SlotRequest]) -> dict[str, int]:
    """1-based position of each waiting request, for `det` output and the queue metrics."""
    return {r.run_id: i for i, r in enumerate(queue_order(requests), start=1)}
