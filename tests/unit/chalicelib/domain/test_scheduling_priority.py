"""The priority scheduler (`plan_pass` with kind "priority"), with and without preemption: examples and
properties (no agent over-granted, never-fitting requests block nobody, a blocked head is never
starved by backfill, preemption picks the fewest and most preferable victims of strictly lower
priority, compared against brute force)."""

from __future__ import annotations

from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.domain.scheduling import AgentCapacity, Assignment, Holding, SlotRequest, queue_order
from chalicelib.domain.scheduling_policies import PassPlan, PoolPolicy, can_ever_fit, plan_pass
from stratus.contract.pools import PoolSpec

PRIORITY = PoolPolicy("priority", preemption=False)
PREEMPTIVE = PoolPolicy("priority", preemption=True)
PROPERTY = settings(
    max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def req(run_id: str, slots: int = 1, priority: int = 42, job: str = "", position: float = 0.0) -> SlotRequest:
    return SlotRequest(
        run_id=run_id,
        slots=slots,
        priority=priority,
        queued_at="2026-01-01T00:00:00Z",
        job_id=job or run_id,
        queue_position=position,
    )


def hold(
    run_id: str, placements: dict[str, int], priority: int = 42, started: str = "", stopping: bool = False
) -> Holding:
    return Holding(
        run_id=run_id,
        job_id=f"job-{run_id}",
        slots=sum(placements.values()),
        priority=priority,
        placements=placements,
        started_at=started,
        stopping=stopping,
    )


def agents_for(sizes: list[int], holdings: list[Holding]) -> list[AgentCapacity]:
    used: dict[str, int] = {}
    for h in holdings:
        for agent, n in h.placements.items():
            used[agent] = used.get(agent, 0) + n
    return [AgentCapacity(f"a{i}", slots=s, used=used.get(f"a{i}", 0)) for i, s in enumerate(sizes)]


def granted_per_agent(plan: PassPlan, requests: list[SlotRequest]) -> dict[str, int]:
    sizes = {r.run_id: r.slots for r in requests}
    granted: dict[str, int] = {}
    for a in plan.assignments:
        for agent in a.agents:
            granted[agent] = granted.get(agent, 0) + sizes[a.run_id] // len(a.agents)
    return granted


# ---- examples ----------------------------------------------------------------------------------------


def test_lower_number_first_then_queue_position_then_job():
    requests = [
        req("late", position=20.0),
        req("early", position=10.0),
        req("urgent", priority=10, position=99.0),
    ]
    plan = plan_pass(PRIORITY, requests, [], [AgentCapacity("x", slots=2, used=0)])
    assert plan.assignments == [Assignment("urgent", "x"), Assignment("early", "x")]
    assert plan.blocked["late"].startswith("needs 1 slot on one agent")


def test_a_request_that_can_never_fit_is_skipped_with_its_reason_and_blocks_nobody():
    requests = [req("huge", slots=16, position=1.0), req("small", position=2.0)]
    plan = plan_pass(PRIORITY, requests, [], [AgentCapacity("x", slots=4, used=0)])
    assert plan.assignments == [Assignment("small", "x")]
    assert plan.blocked == {"huge": "can never fit: needs 16 slots, the pool has 4"}


def test_a_pool_of_known_shape_makes_a_request_that_fits_once_grown_wait_in_place():
    policy = PoolPolicy("priority", preemption=False, slots_per_agent=4, max_agents=4)
    requests = [req("big", slots=16, position=1.0), req("small", position=2.0)]
    plan = plan_pass(policy, requests, [], [AgentCapacity("x", slots=4, used=0)])
    assert plan.assignments == []  # the big one holds its place while the pool grows
    assert "waits behind run big" in plan.blocked["small"]


def test_behind_a_blocked_head_only_agents_it_could_never_use_are_backfilled():
    agents = [AgentCapacity("big", slots=8, used=6), AgentCapacity("small", slots=2, used=0)]
    requests = [req("head", slots=4, position=1.0), req("a", slots=2, position=2.0), req("b", position=3.0)]
    plan = plan_pass(PRIORITY, requests, [], agents)
    # "a" takes the 2-slot agent the head can never use; "b" would fit on "big" but that is the head's.
    assert plan.assignments == [Assignment("a", "small")]
    assert plan.blocked["head"] == "needs 4 slots on one agent; the most free on an agent is 2"
    assert plan.blocked["b"].startswith("needs 1 slot and waits behind run head (priority 42, 4 slots)")


def test_with_preemption_lower_priority_requests_backfill_behind_a_head_that_can_take_them_back():
    agents = [AgentCapacity("x", slots=4, used=2)]
    holdings = [hold("peer", {"x": 2}, priority=10)]
    requests = [req("head", slots=4, priority=10), req("low", priority=50)]
    assert plan_pass(PRIORITY, requests, holdings, agents).assignments == []
    plan = plan_pass(PREEMPTIVE, requests, holdings, agents)
    assert plan.assignments == [Assignment("low", "x")]
    assert plan.preempt == []  # the head's peer has its own priority: ties never preempt


def test_preemption_stops_the_fewest_lowest_priority_most_recent_runs_and_reserves_their_slots():
    holdings = [
        hold("p50-old", {"a0": 1}, priority=50, started="2026-01-01T00:00:01Z"),
        hold("p50-new", {"a0": 1}, priority=50, started="2026-01-01T00:00:02Z"),
        hold("p60", {"a0": 2}, priority=60, started="2026-01-01T00:00:00Z"),
        hold("p40-pair", {"a1": 4}, priority=40),
    ]
    agents = agents_for([4, 4], holdings)
    requests = [req("urgent", slots=2, priority=10, position=1.0), req("filler", priority=10, position=2.0)]
    plan = plan_pass(PREEMPTIVE, requests, holdings, agents)
    # One victim of the lowest priority frees 2 on a0 for "urgent". "filler" may not take the slots
    # being freed for it: it preempts for itself, the most recent of the next priority.
    assert plan.preempt == ["p60", "p50-new"]
    assert plan.preempted_for == {"p60": "urgent", "p50-new": "filler"}
    assert plan.blocked["urgent"].startswith("preempting p60")
    assert plan.assignments == []


def test_runs_already_stopping_count_as_freeing_and_are_not_picked_again():
    holdings = [hold("leaving", {"a0": 2}, priority=50, stopping=True), hold("other", {"a0": 2}, priority=50)]
    agents = agents_for([4], holdings)
    plan = plan_pass(PREEMPTIVE, [req("urgent", slots=2, priority=10)], holdings, agents)
    assert plan.preempt == []
    assert plan.blocked["urgent"].startswith("waits for the runs stopping on a0")
    # A second request of the same size now needs a victim of its own.
    plan = plan_pass(
        PREEMPTIVE, [req("u1", slots=2, priority=10), req("u2", slots=2, priority=10)], holdings, agents
    )
    assert plan.preempt == ["other"]
    assert plan.preempted_for == {"other": "u2"}


def test_a_multi_node_request_preempts_whole_agents():
    holdings = [
        hold("h0", {"a0": 2}, priority=60),
        hold("h1", {"a1": 1}, priority=60),
        hold("h2", {"a2": 2}, priority=5),
    ]
    agents = agents_for([2, 2, 2], holdings)
    plan = plan_pass(PREEMPTIVE, [req("wide", slots=4, priority=10)], holdings, agents)
    assert sorted(plan.preempt) == ["h0", "h1"]  # a2's run has a higher priority than the request


def test_can_ever_fit_from_the_pool_spec_or_its_agents():
    spec = PoolSpec("gpu", slots_per_agent=4, max_agents=2)
    assert can_ever_fit(8, spec) is None
    assert can_ever_fit(16, spec) == "can never fit: needs 16 slots, the pool has 8 at most (2 agents of 4)"
    assert "4 does not divide 6" in (can_ever_fit(6, spec) or "")
    assert can_ever_fit(64, PoolSpec("unknown")) is None
    assert can_ever_fit(3, [AgentCapacity("x", 2, 0), AgentCapacity("y", 2, 0)]) is not None
    assert can_ever_fit(4, [AgentCapacity("x", 2, 2), AgentCapacity("y", 2, 0)]) is None


def test_the_policy_comes_from_the_pool_spec():
    spec = PoolSpec("a100", scheduler="fair_share", preemption=False, slots_per_agent=8, max_agents=3)
    assert PoolPolicy.of(spec) == PoolPolicy("fair_share", False, 8, 3)


# ---- properties --------------------------------------------------------------------------------------

sizes_st = st.lists(st.integers(1, 4), min_size=1, max_size=4)


@st.composite
def pools(draw: st.DrawFn, max_holdings: int = 5, stopping: bool = True) -> tuple[list[int], list[Holding]]:
    sizes = draw(sizes_st)
    free = dict(enumerate(sizes))
    holdings: list[Holding] = []
    for i in range(draw(st.integers(0, max_holdings))):
        agent = draw(st.integers(0, len(sizes) - 1))
        if free[agent] == 0:
            continue
        n = draw(st.integers(1, free[agent]))
        free[agent] -= n
        holdings.append(
            hold(
                f"h{i}",
                {f"a{agent}": n},
                priority=draw(st.sampled_from([10, 42, 60, 90])),
                started=f"2026-01-01T00:00:{i:02d}Z",
                stopping=stopping and draw(st.booleans()),
            )
        )
    return sizes, holdings


requests_st = st.lists(
    st.tuples(st.integers(1, 9), st.sampled_from([10, 42, 60, 90]), st.integers(0, 5)), max_size=10
).map(
    lambda rows: [
        req(f"r{i}", slots=s, priority=p, position=float(pos)) for i, (s, p, pos) in enumerate(rows)
    ]
)


@PROPERTY
@given(pools(), requests_st, st.booleans())
def test_no_agent_is_ever_granted_more_than_it_has_free(pool, requests, preemption):
    sizes, holdings = pool
    agents = agents_for(sizes, holdings)
    plan = plan_pass(PoolPolicy("priority", preemption), requests, holdings, agents)
    granted = granted_per_agent(plan, requests)
    for agent in agents:
        assert granted.get(agent.agent_id, 0) <= agent.free
    assigned = [a.run_id for a in plan.assignments]
    assert len(assigned) == len(set(assigned))
    assert set(assigned).isdisjoint(plan.blocked) and set(assigned) | set(plan.blocked) == {
        r.run_id for r in requests
    }


@PROPERTY
@given(pools(), requests_st)
def test_victims_are_always_of_strictly_lower_priority_and_never_already_stopping(pool, requests):
    sizes, holdings = pool
    plan = plan_pass(PREEMPTIVE, requests, holdings, agents_for(sizes, holdings))
    by_run = {h.run_id: h for h in holdings}
    priority = {r.run_id: r.priority for r in requests}
    assert len(plan.preempt) == len(set(plan.preempt))
    for victim in plan.preempt:
        assert not by_run[victim].stopping
        assert by_run[victim].priority > priority[plan.preempted_for[victim]]
    assert not plan_pass(PRIORITY, requests, holdings, agents_for(sizes, holdings)).preempt


@PROPERTY
@given(pools(stopping=False), requests_st, st.booleans())
def test_a_request_that_can_never_fit_changes_nothing_for_the_others(pool, requests, preemption):
    sizes, holdings = pool
    agents = agents_for(sizes, holdings)
    policy = PoolPolicy("priority", preemption)
    huge = req("huge", slots=sum(sizes) + 1, priority=1)
    with_it = plan_pass(policy, [huge, *requests], holdings, agents)
    without = plan_pass(policy, requests, holdings, agents)
    assert with_it.blocked.pop("huge").startswith("can never fit")
    assert (with_it.assignments, with_it.preempt, with_it.blocked) == (
        without.assignments,
        without.preempt,
        without.blocked,
    )


@PROPERTY
@given(pools(), requests_st)
def test_behind_a_blocked_head_nobody_of_its_priority_or_higher_takes_an_agent_it_could_use(pool, requests):
    sizes, holdings = pool
    agents = agents_for(sizes, holdings)
    plan = plan_pass(PRIORITY, requests, holdings, agents)
    size = {a.agent_id: a.slots for a in agents}
    largest = max(sizes)
    assigned = {a.run_id: a for a in plan.assignments}
    head = None
    for request in queue_order(requests):
        if request.run_id in assigned and head is not None:
            for agent in assigned[request.run_id].agents:
                usable = size[agent] >= head.slots if head.slots <= largest else head.slots % size[agent] == 0
                assert not usable, (request, head)
        elif request.run_id in plan.blocked and not plan.blocked[request.run_id].startswith("can never fit"):
            head = head or request


def _fits_after(request: SlotRequest, sizes: list[int], holdings: list[Holding], victims: set[str]) -> bool:
    free = {f"a{i}": s for i, s in enumerate(sizes)}
    for h in holdings:
        if h.run_id not in victims and not h.stopping:
            for agent, n in h.placements.items():
                free[agent] -= n
    largest = max(sizes)
    if request.slots <= largest:
        return any(n >= request.slots for n in free.values())
    size = {f"a{i}": s for i, s in enumerate(sizes)}
    return any(
        request.slots % d == 0
        and sum(1 for a, n in free.items() if size[a] == d and n == d) >= request.slots // d
        for d in set(sizes)
    )


@PROPERTY
@given(pools(max_holdings=6, stopping=False), st.integers(1, 8), st.sampled_from([10, 42, 60]))
def test_preemption_picks_the_fewest_and_most_preferable_victims_as_brute_force_does(pool, slots, priority):
    sizes, holdings = pool
    request = req("r", slots=slots, priority=priority)
    plan = plan_pass(PREEMPTIVE, [request], holdings, agents_for(sizes, holdings))
    eligible = [h for h in holdings if h.priority > priority]
    feasible = [
        set(combo)
        for k in range(len(eligible) + 1)
        for combo in combinations([h.run_id for h in eligible], k)
        if _fits_after(request, sizes, holdings, set(combo))
    ]
    if plan.blocked.get("r", "").startswith("can never fit"):
        assert not _fits_after(request, sizes, [], set())
        return
    if not feasible:
        assert plan.preempt == [] and "r" in plan.blocked
        return
    fewest = min(len(s) for s in feasible)
    if fewest == 0:
        assert [a.run_id for a in plan.assignments] == ["r"] and plan.preempt == []
        return
    assert len(plan.preempt) == fewest
    assert set(plan.preempt) in feasible
    if slots <= max(sizes):  # one agent: also the most preferable set (lowest priority, most recent)
        worth = sorted(eligible, key=lambda h: (h.priority, h.started_at, h.run_id), reverse=True)
        rank = {h.run_id: i for i, h in enumerate(worth)}
        best = min(sorted(rank[r] for r in s) for s in feasible if len(s) == fewest)
        assert sorted(rank[r] for r in plan.preempt) == best


@PROPERTY
@given(pools(stopping=False), requests_st)
def test_a_request_that_preempted_waits_for_its_victims_next_pass_without_preempting_more(pool, requests):
    sizes, holdings = pool
    first = plan_pass(PREEMPTIVE, requests, holdings, agents_for(sizes, holdings))
    # Next pass: the grants run, the victims are stopping (not yet exited), the rest still wait.
    by_id = {r.run_id: r for r in requests}
    granted = [
        hold(
            a.run_id, {n: by_id[a.run_id].slots // len(a.agents) for n in a.agents}, by_id[a.run_id].priority
        )
        for a in first.assignments
    ]
    stopping = {*first.preempt}
    later = [
        Holding(h.run_id, h.job_id, h.slots, h.priority, h.placements, started_at=h.started_at, stopping=True)
        if h.run_id in stopping
        else h
        for h in holdings
    ] + granted
    waiting = [r for r in requests if r.run_id in first.blocked]
    second = plan_pass(PREEMPTIVE, waiting, later, agents_for(sizes, later))
    assert set(first.preempted_for.values()).isdisjoint(second.preempted_for.values())
