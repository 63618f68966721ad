"""The slot scheduler of a resource pool, as a pure function.

For now the policy is FIFO within priority (Determined's priority scheduler without preemption):
requests are served in order of priority (lower number first, as in Determined), then submission time;
a request that does not fit blocks those behind it, so a big trial is never starved by small ones.
A request that fits on one agent of the pool is placed on one agent (best fit). A bigger one (Determined's
multi-node trial) takes whole idle agents of one size that divides it: `slots_per_trial: 8` on 4-slot
agents takes two of them, each a node of the trial, the first the chief. It waits (and blocks the queue
behind it, as any request) until that many agents are idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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
    agent_id: str  # the chief's agent on several nodes
    #: The agents of a multi-node placement, chief first (one node each); empty on one agent.
    nodes: tuple[str, ...] = ()

    @property
    def agents(self) -> tuple[str, ...]:
        return self.nodes or (self.agent_id,)


def queue_order(requests: Iterable[SlotRequest]) -> list[SlotRequest]:
    return sorted(requests, key=lambda r: (r.priority, r.queued_at, r.run_id))


def assign_fifo(requests: Sequence[SlotRequest], agents: Sequence[AgentCapacity]) -> list[Assignment]:
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
