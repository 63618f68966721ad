"""The scheduling policies' registry (`scheduling_policies.policy_for`): every scheduler kind a pool may be
configured with has a policy, made from the pool's configuration, that both the scheduling pass and the
queue reader use."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.queue_head import QueueSummary
from chalicelib.domain.scheduling import AgentCapacity, SlotRequest, queue_order
from chalicelib.domain.scheduling_policies import POLICIES, PoolPolicy, plan_pass, policy_for
from stratus.contract.errors import InvalidPoolError
from stratus.contract.pools import SCHEDULER_KINDS, PoolSpec


@pytest.mark.parametrize("kind", SCHEDULER_KINDS)
def test_every_scheduler_kind_has_a_policy(kind):
    assert kind in POLICIES, f"scheduler kind {kind!r} has no entry in scheduling_policies.POLICIES"
    spec = PoolSpec("gpu", scheduler=kind, preemption=False, slots_per_agent=4, max_agents=2)
    policy = policy_for(spec)
    assert policy.config == PoolPolicy(kind, False, 4, 2)
    assert policy.ranks_jobs_by in ("priority", "weight")


def test_no_policy_is_registered_for_a_kind_a_pool_cannot_have():
    assert set(POLICIES) == set(SCHEDULER_KINDS)


@pytest.mark.parametrize("kind", SCHEDULER_KINDS)
def test_each_policy_plans_a_pass_and_a_pass_over_the_head_alike(kind):
    policy = policy_for(PoolPolicy(kind, preemption=False))
    requests = [
        SlotRequest(f"r{i}", slots=2, priority=42, queued_at=f"t{i}", job_id=str(i % 2)) for i in range(3)
    ]
    agents = [AgentCapacity("x", slots=4, used=0)]
    whole = policy.plan(requests, [], agents)
    summary = QueueSummary(3, 6, {2: 3}, {"0": (2, 4), "1": (1, 2)})
    head = policy.head_pass(summary, [], agents)
    # Each stream's requests, in the order its index keeps them.
    pages = [[r for r in queue_order(requests) if stream.job in (None, r.job_id)] for stream in head.streams]
    step = head.feed([r for page in pages for r in page])
    assert sorted(a.run_id for a in step.plan.assignments) == sorted(a.run_id for a in whole.assignments)
    assert len(whole.assignments) == 2 and set(whole.blocked) == {r.run_id for r in requests} - {
        a.run_id for a in whole.assignments
    }


def test_the_pass_follows_the_pools_kind():
    # Job 0 holds nothing and asks first for the whole pool; job 1 asks for one slot. In queue order
    # (priority) job 0 takes everything; by fair share each job gets its share.
    requests = [
        SlotRequest("a0", 1, 42, "t0", job_id="0"),
        SlotRequest("a1", 1, 42, "t1", job_id="0"),
        SlotRequest("b0", 1, 42, "t2", job_id="1", queue_position=1.0),
    ]
    agents = [AgentCapacity("x", slots=2, used=0)]
    priority = plan_pass(PoolPolicy("priority"), requests, [], agents)
    fair = plan_pass(PoolPolicy("fair_share"), requests, [], agents)
    assert sorted(a.run_id for a in priority.assignments) == ["a0", "a1"]
    assert sorted(a.run_id for a in fair.assignments) == ["a0", "b0"]


def test_a_kind_without_a_policy_is_one_clear_error():
    unknown = replace(PoolPolicy(), kind="round_robin")  # type: ignore[arg-type]
    with pytest.raises(
        InvalidPoolError, match="scheduler 'round_robin' has no scheduling policy; use one of"
    ):
        policy_for(unknown)
