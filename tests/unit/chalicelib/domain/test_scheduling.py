from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chalicelib.domain.scheduling import AgentCapacity, Assignment, SlotRequest, assign_fifo, queue_positions


def req(run_id: str, slots: int = 1, priority: int = 42, at: str = "2026-01-01T00:00:00Z") -> SlotRequest:
    return SlotRequest(run_id=run_id, slots=slots, priority=priority, queued_at=at)


def test_fifo_within_priority_and_lower_number_first():
    requests = [
        req("a", at="2026-01-01T00:00:02Z"),
        req("b", at="2026-01-01T00:00:01Z"),
        req("c", priority=10, at="2026-01-01T00:00:09Z"),
    ]
    agents = [AgentCapacity("x", slots=2, used=0)]
    assert assign_fifo(requests, agents) == [Assignment("c", "x"), Assignment("b", "x")]
    assert queue_positions(requests) == {"c": 1, "b": 2, "a": 3}


def test_a_request_that_does_not_fit_blocks_the_ones_behind_it():
    requests = [req("big", slots=4, at="1"), req("small", slots=1, at="2")]
    assert assign_fifo(requests, [AgentCapacity("x", slots=4, used=1)]) == []


def test_requests_must_fit_on_one_agent_and_best_fit_is_chosen():
    agents = [AgentCapacity("roomy", slots=8, used=0), AgentCapacity("tight", slots=2, used=1)]
    assert assign_fifo([req("r1")], agents) == [Assignment("r1", "tight")]
    assert assign_fifo([req("r2", slots=3)], agents) == [Assignment("r2", "roomy")]
    assert assign_fifo([req("r3", slots=9)], agents) == []


@given(
    st.lists(st.integers(min_value=1, max_value=4), max_size=12),
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), max_size=4),
)
def test_never_more_slots_than_an_agent_has(slot_counts, agent_shapes):
    requests = [req(f"r{i}", slots=n, at=f"{i:04d}") for i, n in enumerate(slot_counts)]
    agents = [AgentCapacity(f"a{i}", slots=s, used=min(u, s)) for i, (s, u) in enumerate(agent_shapes)]
    assignments = assign_fifo(requests, agents)
    sizes = {r.run_id: r.slots for r in requests}
    for agent in agents:
        granted = sum(sizes[a.run_id] // len(a.agents) for a in assignments if agent.agent_id in a.agents)
        assert granted <= agent.free
    for a in assignments:  # nodes split a trial evenly over whole agents of one size
        assert len(set(a.agents)) == len(a.agents)
        assert all(sizes[a.run_id] % len(a.agents) == 0 for _ in a.agents)
    # FIFO: what is granted is a prefix of the queue.
    granted_ids = [a.run_id for a in assignments]
    assert granted_ids == [r.run_id for r in requests][: len(granted_ids)]


def test_a_trial_bigger_than_any_agent_takes_whole_idle_agents_as_nodes():
    agents = [
        AgentCapacity("a", slots=2, used=0),
        AgentCapacity("b", slots=2, used=1),
        AgentCapacity("c", slots=2, used=0),
    ]
    (placed,) = assign_fifo([req("big", slots=4)], agents)
    assert placed == Assignment("big", "a", nodes=("a", "c"))
    assert placed.agents == ("a", "c")
    # Not enough idle agents: it waits, and the small request behind it waits too (FIFO).
    busy = [AgentCapacity("a", slots=2, used=1), *agents[1:]]
    assert assign_fifo([req("big", slots=4, at="1"), req("small", at="2")], busy) == []


def test_multi_node_uses_the_fewest_nodes_of_a_size_that_divides_the_trial():
    agents = [AgentCapacity(f"s{i}", slots=2, used=0) for i in range(4)] + [
        AgentCapacity(f"l{i}", slots=4, used=0) for i in range(2)
    ]
    assert assign_fifo([req("r", slots=8)], agents) == [Assignment("r", "l0", nodes=("l0", "l1"))]
    # 6 slots: 4 does not divide it, so three 2-slot agents.
    assert assign_fifo([req("r", slots=6)], agents) == [Assignment("r", "s0", nodes=("s0", "s1", "s2"))]
    # 5 slots: no size divides it; it waits for the pool to change.
    assert assign_fifo([req("r", slots=5)], agents) == []


def test_one_agent_is_preferred_whenever_the_trial_fits_on_one():
    agents = [
        AgentCapacity("a", slots=1, used=0),
        AgentCapacity("b", slots=1, used=0),
        AgentCapacity("big", 2, 1),
    ]
    # 2 slots fit on "big" once it is free: the trial waits for it instead of spreading over a and b.
    assert assign_fifo([req("r", slots=2)], agents) == []
