"""`det job update --ahead-of/--behind-of` as queue positions: any sequence of moves keeps a strict total
order, with the moved job right next to its target."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.queue_moves import QueuedJob, move_ahead_of, move_behind_of, position_between
from chalicelib.errors import BadRequestError


def ordered(jobs: dict[str, QueuedJob]) -> list[str]:
    return [j.job_id for j in sorted(jobs.values(), key=lambda j: (j.priority, j.position, j.job_id))]


def apply(jobs: dict[str, QueuedJob], job_id: str, target: str, ahead: bool) -> None:
    move = (move_ahead_of if ahead else move_behind_of)(list(jobs.values()), job_id, target)
    jobs[job_id] = QueuedJob(job_id, move.priority, move.position)
    for other, position in move.respaced.items():
        jobs[other] = QueuedJob(other, jobs[other].priority, position)


def test_ahead_of_takes_the_midpoint_before_the_target():
    jobs = {
        j.job_id: j for j in [QueuedJob("1", 42, 100.0), QueuedJob("2", 42, 200.0), QueuedJob("3", 42, 300.0)]
    }
    move = move_ahead_of(list(jobs.values()), "3", "2")
    assert (move.priority, move.position, move.respaced) == (42, 150.0, {})
    assert move_ahead_of(list(jobs.values()), "3", "1").position == 99.0
    assert move_behind_of(list(jobs.values()), "1", "3").position == 301.0


def test_moving_next_to_a_job_of_another_priority_takes_its_priority():
    jobs = [QueuedJob("urgent", 10, 500.0), QueuedJob("mine", 42, 100.0)]
    move = move_ahead_of(jobs, "mine", "urgent")
    assert (move.priority, move.position) == (10, 499.0)


def test_moves_name_jobs_of_the_queue_and_not_the_job_itself():
    jobs = [QueuedJob("1", 42, 1.0), QueuedJob("2", 42, 2.0)]
    with pytest.raises(BadRequestError, match="relative to itself"):
        move_ahead_of(jobs, "1", "1")
    with pytest.raises(BadRequestError, match="job 9 is not in this pool's queue"):
        move_behind_of(jobs, "1", "9")


def test_positions_that_run_out_of_floats_are_respaced():
    assert position_between(1.0, 1.0 + 2**-52) is None
    jobs = {
        j.job_id: j
        for j in [QueuedJob("a", 42, 1.0), QueuedJob("b", 42, 1.0 + 2**-52), QueuedJob("c", 42, 5.0)]
    }
    apply(jobs, "c", "b", ahead=True)
    assert ordered(jobs) == ["a", "c", "b"]
    assert len({j.position for j in jobs.values()}) == 3


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.lists(st.sampled_from([10, 42, 42, 42, 60]), min_size=2, max_size=6),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.booleans()), max_size=80),
)
def test_any_sequence_of_moves_keeps_a_strict_total_order_with_the_job_next_to_its_target(priorities, moves):
    jobs = {str(i): QueuedJob(str(i), p, 1_700_000_000.0 + i) for i, p in enumerate(priorities)}
    model = ordered(jobs)
    for a, b, ahead in moves:
        job, target = str(a % len(jobs)), str(b % len(jobs))
        if job == target:
            continue
        apply(jobs, job, target, ahead)
        model.remove(job)
        model.insert(model.index(target) + (0 if ahead else 1), job)
        assert ordered(jobs) == model
        assert jobs[job].priority == jobs[target].priority
        keys = [(j.priority, j.position) for j in jobs.values()]
        assert len(set(keys)) == len(keys)  # no ties left to the job id


def test_a_job_already_next_to_its_target_stays_put():
    jobs = [QueuedJob("1", 42, 100.0), QueuedJob("2", 42, 200.0)]
    assert move_ahead_of(jobs, "1", "2").position == 100.0
    assert move_behind_of(jobs, "2", "1").position == 200.0
