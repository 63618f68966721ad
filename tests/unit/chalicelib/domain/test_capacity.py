"""How many instances a scaling pool needs and which may go (`chalicelib.domain.capacity`)."""

from __future__ import annotations

import pytest

from chalicelib.domain.capacity import Instance, Periods, instances_needed, scale_out_target, to_terminate

PERIODS = Periods(idle_s=600, starting_s=1200, agent_timeout_s=30)


def test_blocked_requests_are_packed_first_fit_decreasing_onto_new_instances() -> None:
    assert instances_needed(4, []) == 0
    assert instances_needed(4, [1, 1, 1, 1]) == 1
    assert instances_needed(4, [3, 2, 2, 1]) == 2  # 3+1, 2+2
    assert instances_needed(4, [8]) == 2  # a bigger request takes whole instances
    assert instances_needed(4, [6, 1]) == 3  # 6 -> 2 whole instances, 1 -> a shared one
    assert instances_needed(1, [1, 1, 1]) == 3
    with pytest.raises(ValueError, match="slots_per_agent 0"):
        instances_needed(0, [1])


def test_the_target_stays_within_the_pools_bounds() -> None:
    assert scale_out_target(alive=0, blocked=[1, 1], slots_per_agent=1, min_instances=0, max_instances=5) == 2
    assert scale_out_target(alive=4, blocked=[1, 1], slots_per_agent=1, min_instances=0, max_instances=5) == 5
    assert scale_out_target(alive=0, blocked=[], slots_per_agent=1, min_instances=1, max_instances=5) == 1


def test_idle_instances_go_longest_idle_first_never_below_the_minimum() -> None:
    now = 10_000.0
    instances = [
        Instance("i-busy", 0, first_seen=10, last_seen=now, busy_at=now - 5_000, holds_runs=True),
        Instance("i-old", 0, first_seen=10, last_seen=now, busy_at=now - 3_000),
        Instance("i-older", 0, first_seen=10, last_seen=now, busy_at=now - 4_000),
        Instance("i-fresh", 0, first_seen=10, last_seen=now, busy_at=now - 100),
    ]
    gone = to_terminate(instances, now=now, periods=PERIODS, min_instances=2, queue_waiting=False)
    assert gone == [("i-older", "idle for 4000 s"), ("i-old", "idle for 3000 s")]
    assert to_terminate(instances, now=now, periods=PERIODS, min_instances=3, queue_waiting=False) == [
        ("i-older", "idle for 4000 s")
    ]
    assert to_terminate(instances, now=now, periods=PERIODS, min_instances=0, queue_waiting=True) == []


def test_instances_whose_agent_never_joined_or_went_silent_are_replaced() -> None:
    now = 10_000.0
    instances = [
        Instance("i-starting", now - 60),  # still within the starting period
        Instance("i-never", now - 1_300),
        Instance("i-silent", 0, first_seen=10, last_seen=now - 31, busy_at=now - 40, holds_runs=True),
        Instance("i-draining", 0, first_seen=10, last_seen=now, busy_at=10, draining=True),
    ]
    gone = to_terminate(instances, now=now, periods=PERIODS, min_instances=0, queue_waiting=True)
    assert [instance for instance, _ in gone] == ["i-never", "i-silent"]
    assert "did not join within 1200 s" in gone[0][1] and "silent for 31 s" in gone[1][1]
