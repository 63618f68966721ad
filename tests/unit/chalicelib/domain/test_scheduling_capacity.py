"""The pass's index of free slots against the obvious scans it replaces, and the priority pass against
the issue-9 FIFO pass where they must agree."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.scheduling import AgentCapacity, SlotRequest, assign_fifo, multi_node_placement
from chalicelib.domain.scheduling_capacity import PassCapacity
from chalicelib.domain.scheduling_policies import PoolPolicy, can_ever_fit, plan_pass

agents_st = st.lists(st.tuples(st.integers(1, 8), st.integers(0, 8)), min_size=1, max_size=8).map(
    lambda rows: [AgentCapacity(f"a{i}", slots=s, used=min(u, s)) for i, (s, u) in enumerate(rows)]
)


@settings(max_examples=300, deadline=None, database=None)
@given(agents_st, st.lists(st.tuples(st.integers(0, 7), st.integers(1, 8)), max_size=12), st.integers(1, 16))
def test_best_fit_and_idle_nodes_match_a_scan_of_every_agent(agents, takes, slots):
    capacity = PassCapacity(agents)
    free = {a.agent_id: a.free for a in agents}
    size = {a.agent_id: a.slots for a in agents}
    for index, n in takes:  # free counts only fall within a pass
        agent = agents[index % len(agents)].agent_id
        capacity.take(agent, n)
        free[agent] -= min(n, free[agent])
    assert capacity.free == free
    assert capacity.total_free == sum(free.values())
    fitting = [a for a, n in free.items() if n >= slots]
    expected = min(fitting, key=lambda a: (free[a], a)) if fitting else None
    assert capacity.best_fit(slots) == expected
    idle = {a: n for a, n in free.items() if n == size[a]}
    assert capacity.idle_nodes(slots) == multi_node_placement(slots, idle, size)
    assert capacity.most_free() == max(free.values())


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.integers(1, 8),
    st.lists(st.integers(0, 8), min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(1, 16), st.sampled_from([10, 42, 60])), max_size=12),
)
def test_on_agents_of_one_size_the_priority_pass_without_preemption_is_the_fifo_pass(size, used, rows):
    agents = [AgentCapacity(f"a{i}", slots=size, used=min(u, size)) for i, u in enumerate(used)]
    requests = [
        SlotRequest(run_id=f"r{i:02d}", slots=n, priority=p, queued_at=f"{i:04d}", job_id=f"{i:02d}")
        for i, (n, p) in enumerate(rows)
    ]
    # Requests that can never fit are skipped by the new pass and block the FIFO one: compare without them.
    fits_ever = [r for r in requests if can_ever_fit(r.slots, agents) is None]
    plan = plan_pass(PoolPolicy("priority", preemption=False), fits_ever, [], agents)
    assert plan.assignments == assign_fifo(fits_ever, agents)
