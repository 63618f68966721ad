"""The fair-share scheduler: weighted max-min shares (water filling), assignment up to the shares then
work conserving, no job starved, and preemption only of jobs over their share."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.domain.scheduling import AgentCapacity, Holding, SlotRequest
from chalicelib.domain.scheduling_fair_share import water_fill
from chalicelib.domain.scheduling_policies import PoolPolicy, plan_pass

FAIR = PoolPolicy("fair_share", preemption=False)
FAIR_PREEMPTIVE = PoolPolicy("fair_share", preemption=True)
PROPERTY = settings(
    max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def req(run_id: str, job: str, slots: int = 1, weight: float = 1.0, position: float = 0.0) -> SlotRequest:
    return SlotRequest(
        run_id=run_id,
        slots=slots,
        priority=42,
        queued_at="2026-01-01T00:00:00Z",
        job_id=job,
        weight=weight,
        queue_position=position,
    )


def hold(run_id: str, job: str, agent: str, slots: int = 1, started: str = "") -> Holding:
    return Holding(
        run_id=run_id, job_id=job, slots=slots, priority=42, placements={agent: slots}, started_at=started
    )


def per_job(plan_assignments: list, requests: list[SlotRequest]) -> dict[str, int]:
    job = {r.run_id: r.job_id for r in requests}
    counts: dict[str, int] = {}
    for a in plan_assignments:
        counts[job[a.run_id]] = counts.get(job[a.run_id], 0) + 1
    return counts


def test_slots_are_divided_by_weight():
    requests = [req(f"a{i}", "A", weight=2.0, position=1.0) for i in range(10)]
    requests += [req(f"b{i}", "B", weight=1.0, position=2.0) for i in range(10)]
    agents = [AgentCapacity(f"x{i}", slots=2, used=0) for i in range(3)]
    plan = plan_pass(FAIR, requests, [], agents)
    assert per_job(plan.assignments, requests) == {"A": 4, "B": 2}
    assert plan.shares == {"A": 4.0, "B": 2.0}
    assert plan.blocked["a4"].startswith("job A has 4 slots, its fair share is 4")


def test_what_a_job_does_not_need_goes_to_the_others():
    requests = [req("a0", "A"), *(req(f"b{i}", "B", position=1.0) for i in range(10))]
    plan = plan_pass(FAIR, requests, [], [AgentCapacity("x", slots=4, used=0)])
    assert per_job(plan.assignments, requests) == {"A": 1, "B": 3}
    assert plan.shares == {"A": 1.0, "B": 3.0}


def test_leftover_slots_go_to_anyone_work_conserving():
    # A job whose requests are 2 slots cannot use an odd slot; the other job gets it.
    requests = [
        req("a0", "A", slots=2),
        req("a1", "A", slots=2),
        *(req(f"b{i}", "B", position=1.0) for i in range(4)),
    ]
    plan = plan_pass(FAIR, requests, [hold("h", "A", "x", 2)], [AgentCapacity("x", slots=5, used=2)])
    assert per_job(plan.assignments, requests) == {"B": 3}


def test_a_job_under_its_share_preempts_the_most_recent_run_of_a_job_over_its_share():
    holdings = [hold(f"h{i}", "A", "x", started=f"2026-01-01T00:00:0{i}Z") for i in range(4)]
    agents = [AgentCapacity("x", slots=4, used=4)]
    plan = plan_pass(FAIR_PREEMPTIVE, [req("b0", "B")], holdings, agents)
    assert plan.preempt == ["h3"]
    assert plan.preempted_for == {"h3": "b0"}
    assert plan_pass(FAIR, [req("b0", "B")], holdings, agents).preempt == []


def test_a_run_is_never_preempted_if_that_leaves_its_job_below_its_share():
    holdings = [hold("only", "A", "x", slots=4)]
    plan = plan_pass(FAIR_PREEMPTIVE, [req("b0", "B")], holdings, [AgentCapacity("x", slots=4, used=4)])
    assert plan.preempt == []
    assert "b0" in plan.blocked


def test_a_big_request_of_a_job_holding_nothing_is_not_starved_by_small_ones():
    # B asks for a whole agent; A's runs end one by one and A may not refill the agent B waits for.
    holdings = [hold("h0", "A", "x", 1)]
    requests = [req("b0", "B", slots=4, position=1.0), *(req(f"a{i}", "A", position=2.0) for i in range(5))]
    plan = plan_pass(FAIR, requests, holdings, [AgentCapacity("x", slots=4, used=1)])
    assert plan.assignments == []
    assert plan.blocked["b0"].startswith("needs 4 slots on one agent")


@PROPERTY
@given(
    st.integers(0, 40),
    st.dictionaries(
        st.sampled_from("ABCDEF"),
        st.tuples(st.integers(0, 15), st.sampled_from([0.5, 1.0, 2.0, 3.0])),
        min_size=1,
    ),
)
def test_water_filling_is_weighted_max_min_fair(capacity, jobs):
    demand = {j: d for j, (d, _) in jobs.items()}
    weight = {j: w for j, (_, w) in jobs.items()}
    shares = water_fill(capacity, demand, weight)
    assert sum(shares.values()) <= capacity + 1e-6
    assert all(-1e-9 <= shares[j] <= demand[j] + 1e-9 for j in jobs)
    if sum(shares.values()) < capacity - 1e-6:
        assert all(abs(shares[j] - demand[j]) < 1e-6 for j in jobs)
    for j in jobs:
        if shares[j] < demand[j] - 1e-6:  # capped by the level: nobody is above it
            assert all(shares[k] / weight[k] <= shares[j] / weight[j] + 1e-6 for k in jobs)


@st.composite
def fair_pools(draw: st.DrawFn) -> tuple[list[AgentCapacity], list[Holding], list[SlotRequest]]:
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    free = {f"x{i}": s for i, s in enumerate(sizes)}
    holdings = []
    for i in range(draw(st.integers(0, 6))):
        agent = draw(st.sampled_from(sorted(free)))
        if free[agent]:
            n = draw(st.integers(1, free[agent]))
            free[agent] -= n
            holdings.append(hold(f"h{i}", draw(st.sampled_from("ABC")), agent, n, started=f"{i:02d}"))
    agents = [AgentCapacity(f"x{i}", slots=s, used=s - free[f"x{i}"]) for i, s in enumerate(sizes)]
    rows = draw(st.lists(st.tuples(st.sampled_from("ABCD"), st.integers(1, 5)), max_size=12))
    requests = [req(f"r{i}", job, slots=n, position=float(ord(job))) for i, (job, n) in enumerate(rows)]
    return agents, holdings, requests


@PROPERTY
@given(fair_pools(), st.booleans())
def test_no_agent_is_over_granted_and_victims_stay_at_their_share(pool, preemption):
    agents, holdings, requests = pool
    plan = plan_pass(PoolPolicy("fair_share", preemption), requests, holdings, agents)
    sizes = {r.run_id: r.slots for r in requests}
    granted: dict[str, int] = {}
    for a in plan.assignments:
        for agent in a.agents:
            granted[agent] = granted.get(agent, 0) + sizes[a.run_id] // len(a.agents)
    assert all(granted.get(a.agent_id, 0) <= a.free for a in agents)
    assert {a.run_id for a in plan.assignments} | set(plan.blocked) == set(sizes)
    by_run = {h.run_id: h for h in holdings}
    left = {}
    for h in holdings:
        left[h.job_id] = left.get(h.job_id, 0) + h.slots
    for victim in plan.preempt:
        left[by_run[victim].job_id] -= by_run[victim].slots
        assert by_run[victim].job_id != next(
            r.job_id for r in requests if r.run_id == plan.preempted_for[victim]
        )
    for victim in plan.preempt:
        job = by_run[victim].job_id
        assert left[job] >= plan.shares[job] - 1e-6


@PROPERTY
@given(
    st.integers(1, 4),
    st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=4), min_size=1, max_size=5),
    st.integers(0, 3),
    st.booleans(),
)
def test_no_job_with_demand_is_starved_when_the_pool_has_room_for_one_request_each(
    size, jobs, spare, preemption
):
    agents = [AgentCapacity(f"x{i}", slots=size, used=0) for i in range(len(jobs) + spare)]
    requests = [
        req(f"{j}-{i}", f"job{j}", slots=min(n, size), position=float(j))
        for j, sizes in enumerate(jobs)
        for i, n in enumerate(sizes)
    ]
    plan = plan_pass(PoolPolicy("fair_share", preemption), requests, [], agents)
    assert set(per_job(plan.assignments, requests)) == {f"job{j}" for j in range(len(jobs))}


@PROPERTY
@given(fair_pools())
def test_a_request_that_preempted_waits_for_its_victims_next_pass_without_preempting_more(pool):
    agents, holdings, requests = pool
    first = plan_pass(FAIR_PREEMPTIVE, requests, holdings, agents)
    by_id = {r.run_id: r for r in requests}
    stopping = set(first.preempt)
    later = [
        Holding(h.run_id, h.job_id, h.slots, h.priority, h.placements, started_at=h.started_at, stopping=True)
        if h.run_id in stopping
        else h
        for h in holdings
    ]
    used = {a.agent_id: a.used for a in agents}
    for a in first.assignments:  # the grants run
        request = by_id[a.run_id]
        placements = {n: request.slots // len(a.agents) for n in a.agents}
        later.append(Holding(a.run_id, request.job_id, request.slots, 42, placements))
        for n, k in placements.items():
            used[n] += k
    next_agents = [AgentCapacity(a.agent_id, a.slots, used[a.agent_id]) for a in agents]
    waiting = [r for r in requests if r.run_id in first.blocked]
    second = plan_pass(FAIR_PREEMPTIVE, waiting, later, next_agents)
    assert set(first.preempted_for.values()).isdisjoint(second.preempted_for.values())
