"""The elastic allocator's decisions (pure): shrink for waiting requests, grow into idle slots, never
sooner than the interval, the speedup table's threshold, whole agents for a run alone on its agents."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.domain.elastic_allocation import (
    ElasticRun,
    Rescale,
    Waiting,
    grow_into,
    plan_rescales,
    shrink_for,
)
from chalicelib.domain.scheduling import AgentCapacity


def run(
    run_id: str = "1.1",
    replicas: int = 1,
    agent: str = "a",
    *,
    lo: int = 1,
    hi: int = 8,
    per: int = 1,
    age: float = 600.0,
    priority: int = 42,
    speedup: dict[int, float] | None = None,
    placements: dict[str, int] | None = None,
) -> ElasticRun:
    return ElasticRun(
        run_id=run_id,
        replicas=replicas,
        min_replicas=lo,
        max_replicas=hi,
        slots_per_replica=per,
        priority=priority,
        placements=placements or {agent: replicas * per},
        age_s=age,
        speedup=speedup or {},
    )


def agent(agent_id: str, slots: int, used: int) -> AgentCapacity:
    return AgentCapacity(agent_id=agent_id, slots=slots, used=used)


def test_speed_interpolates_the_table_and_stays_flat_beyond_it() -> None:
    r = run(speedup={1: 1.0, 2: 1.6, 4: 2.2})
    assert r.speed(3) == pytest.approx(1.9)
    assert r.speed(6) == 2.2
    assert r.speed(0) == 0.0
    assert run().speed(5) == 5.0  # no table: linear


def test_grows_into_the_idle_slots_of_its_agent_when_nothing_waits() -> None:
    (rescale,) = grow_into([run(replicas=1)], [agent("a", 2, 1)])
    assert (rescale.run_id, rescale.replicas, rescale.target) == ("1.1", 1, 2)
    assert rescale.reason == "grow: 1 slot idle and nothing queued; speedup 1.00 -> 2.00"


def test_no_growth_beyond_max_replicas_or_when_the_gain_is_under_the_threshold() -> None:
    assert grow_into([run(replicas=2, hi=2)], [agent("a", 4, 2)]) == []
    flat = run(speedup={1: 1.0, 2: 1.03, 3: 1.04})
    assert grow_into([flat], [agent("a", 4, 1)]) == []


def test_a_young_run_or_one_told_to_stop_is_left_alone() -> None:
    assert grow_into([run(age=10.0)], [agent("a", 2, 1)]) == []
    stopping = ElasticRun(**{**run().__dict__, "stopping": True})
    assert grow_into([stopping], [agent("a", 2, 1)]) == []


def test_idle_slots_go_to_the_run_that_gains_most_per_slot() -> None:
    steep = run("1.1", speedup={1: 1.0, 2: 1.9, 3: 2.7})
    flat = run("2.1", agent="a", speedup={1: 1.0, 2: 1.2, 3: 1.3})
    rescales = grow_into([steep, flat], [agent("a", 4, 2)])
    assert [(r.run_id, r.target) for r in rescales] == [("1.1", 3)]


def test_a_run_alone_on_its_agent_grows_by_whole_idle_agents() -> None:
    whole = run(replicas=4, placements={"a": 4})
    rescales = grow_into([whole], [agent("a", 4, 4), agent("b", 4, 0), agent("c", 4, 1)])
    assert [(r.target) for r in rescales] == [8]


def test_a_rescale_says_where_its_slots_are_promised() -> None:
    (grown,) = grow_into([run(replicas=4, placements={"a": 4})], [agent("a", 4, 4), agent("b", 4, 0)])
    assert grown.placements == {"a": 4, "b": 4}
    (shrunk,) = shrink_for([run(replicas=2)], [agent("a", 2, 2)], [Waiting("9.1", 1, 42)])
    assert shrunk.placements == {"a": 1}


def test_slots_per_replica_count_in_slots() -> None:
    two = run(replicas=1, per=2)
    assert [r.target for r in grow_into([two], [agent("a", 4, 2)])] == [2]
    assert grow_into([two], [agent("a", 3, 2)]) == []  # one free slot is not a replica


def test_shrinks_for_a_waiting_request_of_the_same_priority() -> None:
    big = run(replicas=2, hi=2)
    rescales = shrink_for([big], [agent("a", 2, 2)], [Waiting("9.1", 1, 42)])
    assert [(r.run_id, r.replicas, r.target) for r in rescales] == [("1.1", 2, 1)]
    assert rescales[0].reason == ("shrink: run 9.1 (priority 42) waits for 1 slot; speedup 2.00 -> 1.00")


def test_no_shrink_below_min_or_for_a_more_important_run_or_too_soon() -> None:
    waiting = [Waiting("9.1", 1, 42)]
    assert shrink_for([run(replicas=2, lo=2)], [agent("a", 2, 2)], waiting) == []
    assert shrink_for([run(replicas=2, priority=10)], [agent("a", 2, 2)], waiting) == []
    assert shrink_for([run(replicas=2, age=5.0)], [agent("a", 2, 2)], waiting) == []


def test_shrinks_the_run_that_loses_least_and_only_as_much_as_needed() -> None:
    steep = run("1.1", replicas=3, agent="a", speedup={1: 1.0, 2: 1.9, 3: 2.8})
    flat = run("2.1", replicas=3, agent="b", speedup={1: 1.0, 2: 1.1, 3: 1.15})
    rescales = shrink_for([steep, flat], [agent("a", 3, 3), agent("b", 3, 3)], [Waiting("9.1", 2, 42)])
    assert [(r.run_id, r.target) for r in rescales] == [("2.1", 1)]


def test_a_request_that_fits_or_needs_several_agents_shrinks_nothing() -> None:
    big = run(replicas=2)
    assert shrink_for([big], [agent("a", 2, 2), agent("b", 2, 0)], [Waiting("9.1", 2, 42)]) == []
    assert shrink_for([big], [agent("a", 2, 2), agent("b", 2, 2)], [Waiting("9.1", 4, 42)]) == []


def test_plan_grows_only_when_nothing_waits() -> None:
    small = run(replicas=1)
    assert plan_rescales([small], [agent("a", 2, 1)], [Waiting("9.1", 2, 42)]) == []
    assert [r.target for r in plan_rescales([small], [agent("a", 2, 1)], [])] == [2]


@given(
    replicas=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    sizes=st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=4),
    wants=st.lists(st.integers(1, 8), max_size=3),
)
def test_rescales_never_overcommit_an_agent(replicas: list[int], sizes: list[int], wants: list[int]) -> None:
    """Whatever the mix, the slots the plan gives every run and request fit the agents."""
    agents = []
    runs = []
    for i, size in enumerate(sizes):
        r = min(replicas[i % len(replicas)], size)
        runs.append(run(f"{i}.1", replicas=r, agent=f"a{i}", hi=8))
        agents.append(agent(f"a{i}", size, r))
    waiting = [Waiting(f"w{i}.1", w, 42) for i, w in enumerate(wants)]
    rescales = plan_rescales(runs, agents, waiting)
    assert all(isinstance(r, Rescale) and r.target != r.replicas for r in rescales)
    size = {a.agent_id: a.slots for a in agents}
    after = {a.agent_id: a.used for a in agents}
    total = sum(a.used for a in agents)
    for rescale in rescales:
        r = next(x for x in runs if x.run_id == rescale.run_id)
        (where,) = r.placements
        assert r.min_replicas <= rescale.target <= r.max_replicas
        total += rescale.target - rescale.replicas
        if rescale.target <= size[where]:
            after[where] += rescale.target - rescale.replicas
        else:  # by whole agents: its own and idle ones
            assert rescale.target % size[where] == 0
            after[where] = size[where]
    assert total <= sum(size.values())
    assert all(0 <= after[a] <= size[a] for a in after)


def test_a_request_already_made_room_for_shrinks_nothing_more() -> None:
    """x (2) was told to shrink to 1 for the waiting request: y (2) is not shrunk for it too."""
    y = run("2.1", replicas=2)
    in_flight = {"a": -1}  # x will hold one slot fewer once it restarts
    assert shrink_for([y], [agent("a", 4, 4)], [Waiting("9.1", 1, 42)], in_flight) == []
    assert [r.run_id for r in shrink_for([y], [agent("a", 4, 4)], [Waiting("9.1", 1, 42)])] == ["2.1"]


def test_nothing_grows_while_a_rescale_is_in_flight() -> None:
    """x was told to grow 1 -> 3 on a 4-slot agent: the two slots it will take back look idle until it
    restarts; z must not be promised them too."""
    z = run("2.1", replicas=1)
    agents = [agent("a", 4, 2)]
    assert plan_rescales([z], agents, [], {"a": 2}) == []
    assert [r.target for r in plan_rescales([z], agents, [])] == [3]
    # A run stopping for good (a paused fixed trial) holds no growth back.
    assert [r.target for r in plan_rescales([z], agents, [], {"a": -1})] == [3]


def test_a_grow_must_pay_for_its_restart_over_the_time_the_run_has_run() -> None:
    """2 replicas at speedup 1.5 for a 120 s restart: not after 5 minutes (1.5 x 180 s < 1.05 x 300 s),
    worth it after an hour (1.5 x 3480 s > 1.05 x 3600 s)."""
    table = {1: 1.0, 2: 1.5}
    young = ElasticRun(**{**run(age=300.0, speedup=table).__dict__, "restart_s": 120.0})
    old = ElasticRun(**{**young.__dict__, "age_s": 3600.0})
    assert grow_into([young], [agent("a", 2, 1)]) == []
    assert [r.target for r in grow_into([old], [agent("a", 2, 1)])] == [2]


def test_a_run_whose_grow_does_not_pay_leaves_the_idle_slots_to_another() -> None:
    """x's restart costs more than its interval: its share of the 2 idle slots goes to z."""
    x = ElasticRun(**{**run("1.1", age=60.0).__dict__, "min_interval_s": 60.0, "restart_s": 65.0})
    z = ElasticRun(**{**run("2.1", age=60.0).__dict__, "min_interval_s": 60.0})
    agents = [agent("a", 4, 2)]
    assert [(r.run_id, r.target) for r in grow_into([x, z], agents)] == [("2.1", 3)]


def test_a_run_that_could_never_pay_is_left_out_before_one_that_pays_with_more_slots() -> None:
    """2 idle slots: split, neither x (a restart as long as its age) nor y (3 replicas: 2.53 x 139 s <
    1.05 x 1.88 x 180 s) pays; y with both (4: 3.09 x 139 s) does."""
    x = ElasticRun(
        **{**run("1.1", 2, age=200.0, speedup={2: 1.0, 3: 2.0, 4: 2.5}).__dict__, "restart_s": 200.0}
    )
    y = ElasticRun(
        **{**run("2.1", 2, age=180.0, speedup={2: 1.88, 3: 2.53, 4: 3.09}).__dict__, "restart_s": 41.0}
    )
    both = [ElasticRun(**{**r.__dict__, "min_interval_s": 60.0}) for r in (x, y)]
    assert [(r.run_id, r.target) for r in grow_into(both, [agent("a", 6, 4)])] == [("2.1", 4)]


# -- runs on several agents give up whole agents --------------------------------------------------------


def wide(
    run_id: str = "1.1", *, lo: int = 1, priority: int = 42, speedup: dict[int, float] | None = None
) -> ElasticRun:
    """A run grown onto two whole agents of 2 slots: 4 replicas, 2 on each."""
    return run(run_id, replicas=4, lo=lo, priority=priority, speedup=speedup, placements={"a": 2, "b": 2})


def test_a_run_on_several_agents_gives_up_a_whole_agent_for_a_waiting_request() -> None:
    full = [agent("a", 2, 2), agent("b", 2, 2)]
    rescales = shrink_for([wide()], full, [Waiting("9.1", 2, 42)])
    assert [(r.run_id, r.replicas, r.target, dict(r.placements)) for r in rescales] == [
        ("1.1", 4, 2, {"b": 2})
    ]
    assert rescales[0].for_run == "9.1"
    assert rescales[0].reason.startswith(
        "shrink: run 9.1 (priority 42) waits for 2 slots; speedup 4.00 -> 2.00"
    )
    # a whole agent or nothing (the same number of replicas on every node), and only where the queue, in
    # order, takes all of it: one 1-slot request leaves the run be, two take the agent
    assert shrink_for([wide()], full, [Waiting("9.1", 1, 42)]) == []
    two = [Waiting("9.1", 1, 42), Waiting("10.1", 1, 42)]
    assert [(r.target, r.for_run) for r in shrink_for([wide()], full, two)] == [(2, "9.1")]
    assert shrink_for([wide()], full, [Waiting("9.1", 1, 42), Waiting("10.1", 2, 42)]) == []


def test_a_run_on_several_agents_keeps_its_min_its_priority_and_its_interval() -> None:
    full = [agent("a", 2, 2), agent("b", 2, 2)]
    waiting = [Waiting("9.1", 2, 42)]
    assert shrink_for([wide(lo=3)], full, waiting) == []
    assert shrink_for([wide(priority=10)], full, waiting) == []
    young = run("1.1", replicas=4, age=5.0, placements={"a": 2, "b": 2})
    assert shrink_for([young], full, waiting) == []
    assert shrink_for([wide()], full, [Waiting("9.1", 3, 42)]) == []  # needs several agents


def test_giving_up_an_agent_competes_with_cutting_a_run_on_one_agent_by_speedup_lost() -> None:
    agents = [agent("a", 2, 2), agent("b", 2, 2), agent("c", 2, 2)]
    queue = [Waiting("9.1", 1, 42), Waiting("10.1", 1, 42)]  # together they take a whole agent
    flat_wide = wide("1.1", speedup={1: 1.0, 2: 1.5, 3: 1.6, 4: 1.7})  # loses 0.2 going to 2 replicas
    steep_alone = run("2.1", replicas=2, agent="c", speedup={1: 1.0, 2: 1.9})  # loses 0.9 going to 1
    assert [r.run_id for r in shrink_for([flat_wide, steep_alone], agents, queue)] == ["1.1"]
    steep_wide = wide("1.1", speedup={1: 1.0, 2: 1.9, 3: 2.8, 4: 3.7})  # loses 1.8
    flat_alone = run("2.1", replicas=2, agent="c", speedup={1: 1.0, 2: 1.1})  # loses 0.1
    assert [r.run_id for r in shrink_for([steep_wide, flat_alone], agents, queue)] == ["2.1"]
