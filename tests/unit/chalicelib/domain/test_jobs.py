"""The job queue as `det job list` shows it: runs grouped by experiment, in the scheduler's order."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.jobs import job_queue
from chalicelib.domain.queue_moves import QueuedJob, move_ahead_of
from chalicelib.domain.records import Experiment
from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling import SlotRequest, queue_order, submission_position


def _run(run_id: str, experiment_id: int, state: str, slots: int = 1, priority: int = 42) -> Run:
    return Run(
        run_id=run_id,
        trial_id=int(run_id.split("-")[0]),
        experiment_id=experiment_id,
        pool="default",
        slots=slots,
        state=state,
        priority=priority,
        queued_at=f"2026-01-01T00:00:{run_id.split('-')[0].zfill(2)}Z",
    )


def _experiment(experiment_id: int, start: str, name: str = "", owner: str = "alice") -> Experiment:
    return Experiment(id=experiment_id, state="ACTIVE", name=name, owner=owner, start_time=start)


def test_slots_acquired_are_held_runs_and_needed_are_held_plus_pending():
    runs = [
        _run("1-1", 7, "RUNNING", slots=2),
        _run("2-1", 7, "ASSIGNED", slots=2),
        _run("3-1", 7, "PENDING", slots=2),
        _run("4-1", 7, "EXITED", slots=2),
    ]
    (job,) = job_queue(runs, {7: _experiment(7, "2026-01-01T00:00:00Z", "mnist")})
    assert (job.job_id, job.type, job.name, job.user) == ("7", "EXPERIMENT", "mnist", "alice")
    assert (job.slots_acquired, job.slots_needed, job.status) == (4, 6, "SCHEDULED")


def test_a_job_holding_no_slots_is_queued():
    (job,) = job_queue([_run("1-1", 3, "PENDING", slots=4)], {})
    assert (job.slots_acquired, job.slots_needed, job.status) == (0, 4, "QUEUED")
    assert (job.name, job.user, job.submitted) == ("Experiment 3", "", "2026-01-01T00:00:01Z")


def test_jobs_are_ordered_by_priority_then_submission_then_id():
    runs = [
        _run("1-1", 1, "RUNNING", priority=42),
        _run("2-1", 2, "PENDING", priority=10),
        _run("3-1", 3, "PENDING", priority=42),
        _run("4-1", 4, "PENDING", priority=42),
    ]
    experiments = {
        1: _experiment(1, "2026-01-01T00:00:05Z"),
        2: _experiment(2, "2026-01-01T00:00:09Z"),
        3: _experiment(3, "2026-01-01T00:00:01Z"),
        4: _experiment(4, "2026-01-01T00:00:01Z"),
    }
    jobs = job_queue(runs, experiments)
    assert [(j.position, j.job_id, j.priority) for j in jobs] == [
        (1, "2", 10),
        (2, "3", 42),
        (3, "4", 42),
        (4, "1", 42),
    ]


def test_no_live_runs_no_jobs():
    assert job_queue([_run("1-1", 1, "EXITED")], {1: _experiment(1, "2026-01-01T00:00:00Z")}) == []


def test_a_job_moved_ahead_of_another_is_listed_where_the_scheduler_serves_it():
    runs = [_run(f"{i}-1", i, "PENDING") for i in (1, 2, 3)]
    experiments = {i: _experiment(i, f"2026-01-01T00:00:0{i}Z") for i in (1, 2, 3)}
    queued = [QueuedJob(str(i), 42, submission_position(f"2026-01-01T00:00:0{i}Z")) for i in (1, 2, 3)]
    move = move_ahead_of(queued, "3", "1")
    experiments[3] = replace(experiments[3], queue_position=move.position)
    assert [j.job_id for j in job_queue(runs, experiments)] == ["3", "1", "2"]


@settings(max_examples=100, deadline=None, database=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([10, 42, 60]), st.integers(0, 5), st.one_of(st.none(), st.floats(0, 2e9))),
        min_size=1,
        max_size=12,  # ids 10 and up: the scheduler compares job ids as strings, and so does the list
    )
)
def test_jobs_are_listed_in_exactly_the_order_the_scheduler_serves_them(rows):
    runs, experiments, requests = [], {}, []
    for experiment_id, (priority, second, moved) in enumerate(rows, start=1):
        start = f"2026-01-01T00:00:0{second}Z"
        experiments[experiment_id] = replace(_experiment(experiment_id, start), queue_position=moved)
        run = _run(f"{experiment_id}-1", experiment_id, "PENDING", priority=priority)
        runs.append(run)
        requests.append(
            SlotRequest(
                run_id=run.run_id,
                slots=1,
                priority=priority,
                queued_at=run.queued_at,
                job_id=str(experiment_id),
                queue_position=moved if moved is not None else submission_position(start),
            )
        )
    listed = [job.job_id for job in job_queue(runs, experiments)]
    assert listed == [r.job_id for r in queue_order(requests)]
