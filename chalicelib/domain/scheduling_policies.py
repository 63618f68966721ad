"""The scheduling policies of resource pools, by scheduler kind (Determined's scheduler factory):
`policy_for(pool)` makes a pool's `SchedulingPolicy` from its configuration, for the scheduling pass
and the queue reader alike, so neither asks which kind a pool has.

- `priority` (`scheduling_priority`): requests in queue order; with preemption, a request that cannot
  fit stops runs of strictly lower priority.
- `fair_share` (`scheduling_fair_share`): the pool's slots divided among the active jobs by weight.

A new policy is its module (a class with `SchedulingPolicy`'s members, made from a `PoolPolicy`) and
one line in `POLICIES`; tests/unit/chalicelib/domain/test_scheduling_policies.py fails while a kind in
`pools.SCHEDULER_KINDS` has none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from chalicelib.domain.scheduling import AgentCapacity, Holding, SlotRequest
from chalicelib.domain.scheduling_fair_share import FairSharePolicy
from chalicelib.domain.scheduling_pass import PassPlan, PassState, PoolShape, shape_refusal
from chalicelib.domain.scheduling_policy import PoolPolicy, SchedulingPolicy
from chalicelib.domain.scheduling_priority import PriorityPolicy
from stratus.contract.errors import InvalidPoolError
from stratus.contract.pools import PoolSpec, SchedulerKind

__all__ = [
    "POLICIES",
    "PassPlan",
    "PoolPolicy",
    "SchedulingPolicy",
    "can_ever_fit",
    "plan_pass",
    "policy_for",
]

#: The policy of each scheduler kind, made from the pool's `PoolPolicy`.
POLICIES: Mapping[SchedulerKind, Callable[[PoolPolicy], SchedulingPolicy]] = {
    "priority": PriorityPolicy,
    "fair_share": FairSharePolicy,
}


def policy_for(pool: PoolSpec | PoolPolicy) -> SchedulingPolicy:
    """The scheduling policy of ``pool`` (a configured pool, or how it schedules)."""
    config = pool if isinstance(pool, PoolPolicy) else PoolPolicy.of(pool)
    make = POLICIES.get(config.kind)
    if make is None:
        raise InvalidPoolError(
            f"scheduler {config.kind!r} has no scheduling policy; use one of {', '.join(POLICIES)}"
        )
    return make(config)


def plan_pass(
    policy: PoolPolicy,
    requests: Sequence[SlotRequest],
    holdings: Sequence[Holding],
    agents: Sequence[AgentCapacity],
    waiting_slots: Mapping[str, int] | None = None,
) -> PassPlan:
    """One scheduling pass of a pool scheduling as ``policy`` (`SchedulingPolicy.plan`)."""
    return policy_for(policy).plan(requests, holdings, agents, waiting_slots)


def can_ever_fit(slots: int, pool: PoolSpec | Sequence[AgentCapacity]) -> str | None:
    """Why a request of ``slots`` can never fit ``pool`` (its configured shape, or its agents as they
    are), as a user-facing sentence; None when it can or when the shape is not known."""
    if isinstance(pool, PoolSpec):
        return shape_refusal(slots, PoolShape(pool.slots_per_agent, pool.max_agents))
    return PassState(pool, (), PoolShape()).never_fits(slots)
