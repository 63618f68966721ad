"""Reading the head of a pool's queue instead of the whole of it: the index's sort key keeps the
scheduling order, and a pass over the head decides every request it read exactly as a pass over the whole
queue would, while reading a bounded part of it."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.domain.queue_head import PAGE_FIRST, QueueSummary, Room, queue_sort_key, unread_sizes
from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling import AgentCapacity, Holding, SlotRequest, queue_order
from chalicelib.domain.scheduling_policies import PoolPolicy, plan_pass, policy_for
from chalicelib.domain.states import RunState
from chalicelib.memory import MemoryClock
from chalicelib.memory._runs import MemoryRuns
from chalicelib.services.queue_reading import HeadPlan, plan_head, slot_request

_requests = st.builds(
    SlotRequest,
    run_id=st.text("abc.-0123456789", min_size=1, max_size=6),
    slots=st.just(1),
    priority=st.integers(1, 99),
    queued_at=st.sampled_from(["", "2026-11-25T10:00:00Z", "2026-11-25T10:00:00.5Z", "2026-11-25T09:59:59Z"]),
    job_id=st.sampled_from(["1", "9", "10", "100", "2"]),
    queue_position=st.one_of(
        st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -0.0, 1.5, 1.25])
    ),
)


@given(st.lists(_requests, max_size=30, unique_by=lambda r: r.run_id))
def test_the_sort_key_orders_requests_as_the_scheduler_does(requests):
    def key(r: SlotRequest) -> str:
        return queue_sort_key(r.priority, r.queue_position, r.job_id, r.queued_at, r.run_id)

    by_key = sorted(requests, key=key)
    assert [r.run_id for r in by_key] == [r.run_id for r in queue_order(requests)]


def test_room_says_what_an_unread_request_could_still_use():
    full = Room(most_free=0, idle={}, largest=8)
    assert not full.could_place(1, 42)
    assert Room(most_free=2, largest=8).could_place(2, 42) and not Room(most_free=2, largest=8).could_place(
        4, 42
    )
    assert Room(largest=8, idle={8: 2}).could_place(16, 42) and not Room(largest=8, idle={8: 1}).could_place(
        16, 42
    )
    assert Room(largest=8, freeing=1).could_place(8, 42)  # a stopping run's slots
    assert Room(largest=8, preemptible=60).could_place(8, 42)  # a lower-priority run could be preempted
    assert not Room(largest=8, preemptible=42).could_place(8, 42)  # ties never preempt
    assert unread_sizes(QueueSummary(3, 6, {1: 1, 4: 2}, {}), {4: 2}) == [1]


def _pool(seed: int, requests: int, agents: int) -> tuple[MemoryRuns, list[Holding], list[AgentCapacity]]:
    rng = random.Random(seed)
    store = MemoryRuns(MemoryClock())
    for i in range(requests):
        job = rng.randrange(12)
        store.put_request(
            Run(
                run_id=f"{job}.{i}",
                trial_id=i,
                experiment_id=job,
                pool="default",
                slots=rng.choices([1, 2, 4, 8, 16], weights=[60, 15, 10, 10, 5])[0],
                state=RunState.PENDING,
                priority=rng.choice([10, 42, 42, 60]),
                weight=1.0 + job % 3,
                queue_position=1_795_000_000.0 + job,
                queued_at=f"2026-11-25T10:{i // 60 % 60:02d}:{i % 60:02d}Z",
            )
        )
    used = [0] * agents
    holdings = []
    for n in range(rng.randrange(agents * 8)):
        agent = rng.randrange(agents)
        size = rng.choice([1, 2, 4])
        if used[agent] + size > 8:
            continue
        used[agent] += size
        job = rng.randrange(12)
        holdings.append(
            Holding(
                run_id=f"held-{n}",
                job_id=str(job),
                slots=size,
                priority=rng.choice([42, 60, 90]),
                placements={f"agent-{agent}": size},
                weight=1.0 + job % 3,
                queue_position=1_795_000_000.0 + job,
                started_at=f"2026-11-25T09:00:{n % 60:02d}Z",
                stopping=rng.random() < 0.05,
            )
        )
    capacities = [AgentCapacity(f"agent-{i}", 8, used[i]) for i in range(agents)]
    return store, holdings, capacities


def _head(
    store: MemoryRuns,
    policy: PoolPolicy,
    summary: QueueSummary,
    holdings: list[Holding],
    agents: list[AgentCapacity],
) -> HeadPlan:
    """A pass over the head of the pool's queue, under the pool's policy as the scheduler makes it."""
    return plan_head(SimpleNamespace(runs=store), "default", policy_for(policy), summary, holdings, agents)


POLICIES = [
    PoolPolicy(kind, preemption) for kind in ("priority", "fair_share") for preemption in (False, True)
]


@pytest.mark.parametrize(
    "policy", POLICIES, ids=lambda p: f"{p.kind}-{'preempting' if p.preemption else 'plain'}"
)
@pytest.mark.parametrize("seed", range(12))
def test_a_pass_over_the_head_decides_as_a_pass_over_the_whole_queue(policy, seed):
    store, holdings, agents = _pool(seed, requests=300 + 40 * seed, agents=1 + seed % 6)
    summary = store.queue_summary("default")
    everything = [slot_request(run) for run in store.pending("default")]
    whole = plan_pass(policy, everything, holdings, agents)

    head = _head(store, policy, summary, holdings, agents)

    assert head.plan.assignments == whole.assignments
    assert head.plan.preempt == whole.preempt
    read = {run.run_id for run in head.read}
    assert {r: why for r, why in whole.blocked.items() if r in read} == head.plan.blocked
    if policy.kind == "fair_share":
        assert head.plan.shares == pytest.approx(whole.shares)  # each job's whole demand, from the summary


def test_a_full_pool_reads_one_page_of_a_long_queue():
    store, _, _ = _pool(7, requests=3000, agents=4)
    agents = [AgentCapacity(f"agent-{i}", 8, 8) for i in range(4)]
    holdings = [
        Holding(f"held-{i}", "1", 8, 42, {f"agent-{i}": 8}, started_at="2026-11-25T09:00:00Z")
        for i in range(4)
    ]
    summary = store.queue_summary("default")
    assert summary.requests == 3000

    plain = _head(store, PoolPolicy("priority", False), summary, holdings, agents)
    assert plain.plan.assignments == [] and plain.pages == 1 and len(plain.read) == PAGE_FIRST

    # Preempting: the priority-10 requests preempt the four priority-42 runs; one victim frees more than
    # its preemptor needs, and those slots go to the first request allowed past the blocked heads (of a
    # lower priority than theirs): the reader seeks past the heads' priorities to find it.
    preempting = _head(store, PoolPolicy("priority", True), summary, holdings, agents)
    assert len(preempting.plan.preempt) == 4
    assert preempting.pages == 3 and len(preempting.read) < summary.requests / 2
    fair = _head(store, PoolPolicy("fair_share", False), summary, holdings, agents)
    assert fair.pages == len(summary.jobs) and len(fair.read) <= len(summary.jobs) * PAGE_FIRST
