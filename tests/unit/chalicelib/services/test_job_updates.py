"""`det job update` / `update-batch` on the in-memory twin: each of Determined's constraints refused with
its message, a batch checked whole before any write, repeats harmless, and the change seen by the next
scheduling pass, `det job list` and requests made later."""

from __future__ import annotations

import dataclasses

import pytest

from chalicelib.domain.states import ExperimentState, RunState
from chalicelib.errors import BadRequestError, ConflictError, NotFoundError
from chalicelib.memory import MemoryExperiments, MemoryPorts, memory_ports, memory_settings
from chalicelib.services import jobs, runs, scheduler
from chalicelib.services.job_updates import JobUpdate, update_jobs
from stratus.contract import messages
from stratus.contract.pools import PoolSpec

POOLS = (
    PoolSpec("default"),
    PoolSpec("compute", preemption=False),
    PoolSpec("shared", scheduler="fair_share"),
)


@pytest.fixture
def ports() -> MemoryPorts:
    return memory_ports(settings=memory_settings(pools=POOLS))


def _queued(flow, pool: str = "default") -> tuple[int, str]:
    """An experiment with one trial whose run waits for slots in `pool`: (job id, run id)."""
    experiment = flow.submit(flow.SINGLE, resources={"resource_pool": pool})
    flow.ports.clock.advance(1)  # submissions one second apart: FIFO positions differ
    (trial_id,) = flow.trial_ids(experiment.id)
    return experiment.id, flow.request_slots(trial_id)


def _order(ports, pool: str = "default") -> list[str]:
    return [job.job_id for job in jobs.list_jobs(ports, pool)]


def _refused(ports, error: type[Exception], *updates: JobUpdate) -> str:
    with pytest.raises(error) as raised:
        update_jobs(ports, list(updates))
    return str(raised.value)


def test_a_raised_priority_is_seen_by_the_job_list_the_runs_and_the_next_pass(ports, flow):
    first, first_run = _queued(flow)
    second, second_run = _queued(flow)
    assert _order(ports) == [str(first), str(second)]
    ports.queues.take_scheduler()

    result = update_jobs(ports, [JobUpdate(str(second), priority=10)])

    assert [(j.id, j.priority, j.job_priority) for j in result.jobs] == [(second, 10, 10)]
    assert ports.experiments.get(second).priority == 10
    assert ports.runs.get(second_run).priority == 10 and ports.runs.get(first_run).priority == 42
    assert _order(ports) == [str(second), str(first)]
    (sweep,) = ports.queues.take_scheduler()
    assert (sweep.pool, sweep.body["type"]) == ("default", "sweep")
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    assert scheduler.schedule_pool(ports, "default") == [(second_run, "agent-1")]


def test_a_run_requested_after_the_update_carries_the_jobs_priority_and_position(ports, flow):
    config = {**flow.SINGLE, "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 1}}}
    config["hyperparameters"] = {"x": {"type": "categorical", "vals": [1, 2]}}
    experiment = flow.submit(config)
    first, second = flow.trial_ids(experiment.id)
    flow.request_slots(first)
    update_jobs(ports, [JobUpdate(str(experiment.id), priority=7)])
    later = ports.runs.get(flow.request_slots(second))
    assert later.priority == 7
    # Its workflow started before the update, with the old priority: the scheduler reads the job's.
    assert flow.execution(second)["priority"] == 42
    assert later.queue_position == ports.experiments.get(experiment.id).queue_position


def test_priority_only_in_a_priority_pool_and_between_1_and_99(ports, flow):
    shared, _ = _queued(flow, "shared")
    job, _ = _queued(flow)
    message = _refused(ports, BadRequestError, JobUpdate(str(shared), priority=5))
    assert "pool 'shared', whose scheduler is fair_share" in message and "use --weight" in message
    for value in (0, 100):
        message = _refused(ports, BadRequestError, JobUpdate(str(job), priority=value))
        assert f"priority {value} is out of range; use 1 to 99" in message


def test_weight_only_in_a_fair_share_pool(ports, flow):
    shared, shared_run = _queued(flow, "shared")
    job, _ = _queued(flow)
    message = _refused(ports, BadRequestError, JobUpdate(str(job), weight=2))
    assert "whose scheduler is priority" in message and "use --priority instead of --weight 2" in message
    assert "must be positive" in _refused(ports, BadRequestError, JobUpdate(str(shared), weight=-1))
    update_jobs(ports, [JobUpdate(str(shared), weight=2.5)])
    assert ports.experiments.get(shared).weight == 2.5 and ports.runs.get(shared_run).weight == 2.5


def test_ahead_of_and_behind_of_keep_a_total_order(ports, flow):
    a, _ = _queued(flow)
    b, _ = _queued(flow)
    c, c_run = _queued(flow)
    update_jobs(ports, [JobUpdate(str(c), ahead_of=str(a))])
    assert _order(ports) == [str(c), str(a), str(b)]
    update_jobs(ports, [JobUpdate(str(c), ahead_of=str(b))])
    assert _order(ports) == [str(a), str(c), str(b)]
    position = ports.runs.get(c_run).queue_position
    assert ports.experiments.get(a).queue_position < position < ports.experiments.get(b).queue_position
    update_jobs(ports, [JobUpdate(str(a), behind_of=str(b))])
    assert _order(ports) == [str(c), str(b), str(a)]


def test_a_job_moved_next_to_one_of_another_priority_takes_its_priority(ports, flow):
    a, _ = _queued(flow)
    b, b_run = _queued(flow)
    update_jobs(ports, [JobUpdate(str(a), priority=5)])
    result = update_jobs(ports, [JobUpdate(str(b), ahead_of=str(a))])
    assert result.notes == [f"job {b} took the priority of job {a} (5, was 42) to move ahead of it"]
    assert ports.runs.get(b_run).priority == 5
    assert _order(ports) == [str(b), str(a)]


def test_moves_only_within_one_priority_pool_and_never_next_to_itself(ports, flow):
    job, _ = _queued(flow)
    other_pool, _ = _queued(flow, "compute")
    shared, shared_two = _queued(flow, "shared")[0], _queued(flow, "shared")[0]
    message = _refused(ports, BadRequestError, JobUpdate(str(job), ahead_of=str(other_pool)))
    assert f"job {job} is in pool 'default' and job {other_pool} in pool 'compute'" in message
    assert "move it to pool 'compute' first (--resource-pool)" in message
    message = _refused(ports, BadRequestError, JobUpdate(str(shared), behind_of=str(shared_two)))
    assert "--behind-of needs the priority scheduler" in message
    assert "cannot move --ahead-of itself" in _refused(
        ports, BadRequestError, JobUpdate(str(job), ahead_of=str(job))
    )


def test_unknown_and_ended_jobs_are_refused(ports, flow):
    job, _ = _queued(flow)
    for unknown in ("999", "abc"):
        message = _refused(ports, NotFoundError, JobUpdate(unknown, priority=3))
        assert message == f"job {unknown!r} not found; `det job list` shows the job ids"
    assert "not found" in _refused(ports, NotFoundError, JobUpdate(str(job), ahead_of="999"))
    ports.experiments.transition(job, ExperimentState.STOPPING_CANCELED)
    ports.experiments.transition(job, ExperimentState.CANCELED)
    message = _refused(ports, ConflictError, JobUpdate(str(job), priority=3))
    assert message.startswith(f"job {job} has ended (its experiment is CANCELED)")


def test_an_update_changes_exactly_one_thing(ports, flow):
    job, _ = _queued(flow)
    message = _refused(ports, BadRequestError, JobUpdate(str(job), priority=3, weight=2))
    assert "names priority, weight: split it into one update each" in message
    assert "no job updates given" in _refused(ports, BadRequestError)


def test_a_pool_change_moves_queued_runs_and_lets_running_ones_keep_their_slots(ports, flow):
    config = {**flow.SINGLE, "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 1}}}
    config["hyperparameters"] = {"x": {"type": "categorical", "vals": [1, 2, 3]}}
    experiment = flow.submit(config)
    first, second, third = flow.trial_ids(experiment.id)
    flow.place(first)  # runs on agent-1 (1 slot) in the default pool
    waiting = flow.request_slots(second)
    ports.queues.take_scheduler()

    update_jobs(ports, [JobUpdate(str(experiment.id), resource_pool="compute")])

    assert ports.experiments.get(experiment.id).job_pool == "compute"
    assert [r.run_id for r in ports.runs.pending("compute")] == [waiting]
    assert ports.runs.pending("default") == []
    assert [r.trial_id for r in ports.runs.allocated("default")] == [first]
    assert sorted(m.pool for m in ports.queues.take_scheduler()) == ["compute", "default"]
    # The third trial's workflow started before the move and asks the old pool: queued in the new one.
    assert ports.runs.get(flow.request_slots(third)).pool == "compute"


def test_a_request_sent_to_the_old_pool_is_queued_in_the_new_one(ports, flow):
    config = {**flow.SINGLE, "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 1}}}
    config["hyperparameters"] = {"x": {"type": "categorical", "vals": [1, 2]}}
    experiment = flow.submit(config)
    first, second = flow.trial_ids(experiment.id)
    flow.request_slots(first)
    update_jobs(ports, [JobUpdate(str(experiment.id), resource_pool="compute")])
    ports.queues.take_scheduler()
    stale = messages.RequestSlots("slots-x", "x.1", second, experiment.id, "default", 1, 42)
    scheduler.handle_message(ports, stale)
    assert ports.runs.get("x.1").pool == "compute"
    assert [m.pool for m in ports.queues.take_scheduler()] == ["compute"]


def test_a_pool_change_needs_a_configured_pool(ports, flow):
    job, _ = _queued(flow)
    message = _refused(ports, BadRequestError, JobUpdate(str(job), resource_pool="a100"))
    assert message == (
        "resource pool 'a100' is not configured; use one of default, compute, shared "
        "(`det resource-pool list` shows them)"
    )


def test_a_batch_is_checked_whole_before_anything_is_written(ports, flow):
    a, a_run = _queued(flow)
    b, _ = _queued(flow)
    before = ports.experiments.get(a)
    ports.queues.take_scheduler()
    batch = [JobUpdate(str(a), priority=1), JobUpdate(str(b), weight=3)]
    assert "use --priority instead of --weight 3" in _refused(ports, BadRequestError, *batch)
    assert ports.experiments.get(a) == before and ports.runs.get(a_run).priority == 42
    assert ports.queues.take_scheduler() == []  # no pass asked for either


def test_a_batch_sees_its_earlier_updates(ports, flow):
    a, a_run = _queued(flow)
    shared, _ = _queued(flow, "shared")
    # The second update is valid only once the first moved job `a` to the fair-share pool.
    update_jobs(ports, [JobUpdate(str(a), resource_pool="shared"), JobUpdate(str(a), weight=4)])
    moved = ports.runs.get(a_run)
    assert (moved.pool, moved.weight, moved.state) == ("shared", 4, RunState.PENDING)
    assert sorted(_order(ports, "shared")) == sorted([str(a), str(shared)])


def test_repeating_an_update_is_harmless(ports, flow):
    a, _ = _queued(flow)
    b, _ = _queued(flow)
    c, _ = _queued(flow)
    update_jobs(ports, [JobUpdate(str(c), ahead_of=str(b))])
    position = ports.experiments.get(c).queue_position
    version = ports.experiments.get(c).version
    update_jobs(ports, [JobUpdate(str(c), ahead_of=str(b))])
    assert ports.experiments.get(c).queue_position == position
    assert ports.experiments.get(c).version == version  # nothing to write
    update_jobs(ports, [JobUpdate(str(a), priority=3)] * 2)
    assert ports.experiments.get(a).priority == 3
    assert _order(ports) == [str(a), str(c), str(b)]


def test_a_new_trial_of_a_moved_job_starts_its_workflow_in_the_new_pool(ports, flow):
    config = {**flow.SINGLE, "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 1}}}
    config["hyperparameters"] = {"x": {"type": "categorical", "vals": [1, 2]}}
    config["searcher"]["max_concurrent_trials"] = 1
    experiment = flow.submit(config)
    (first,) = flow.trial_ids(experiment.id)
    update_jobs(ports, [JobUpdate(str(experiment.id), resource_pool="compute")])
    update_jobs(ports, [JobUpdate(str(experiment.id), priority=9)])
    flow.end_trial(first, "COMPLETED")
    second = [t for t in flow.trial_ids(experiment.id) if t != first][0]
    assert (flow.execution(second)["pool"], flow.execution(second)["priority"]) == ("compute", 9)


class _RacingExperiments(MemoryExperiments):
    """Another writer (a pause, the searcher) moves the experiment between an update's read and its
    conditional write, `races` times."""

    def __init__(self, races: int) -> None:
        super().__init__()
        self.races = races

    def update_versioned(self, experiment_id, fields, expected_version):
        if self.races:
            self.races -= 1
            self.items[experiment_id]["version"] += 1
        return super().update_versioned(experiment_id, fields, expected_version)


@pytest.mark.parametrize("races", [1, 2])
def test_an_update_that_lost_a_race_is_planned_again(flow, races):
    ports = dataclasses.replace(flow.ports, experiments=_RacingExperiments(races))
    raced = type(flow)(ports)  # the same driver, over the racing store
    job, run_id = _queued(raced)
    update_jobs(ports, [JobUpdate(str(job), priority=12)])
    assert ports.experiments.get(job).priority == 12 and ports.runs.get(run_id).priority == 12
    assert ports.experiments.get(job).version == races + 1


def test_an_update_that_keeps_losing_races_asks_for_a_retry(flow):
    ports = dataclasses.replace(flow.ports, experiments=_RacingExperiments(races=10))
    job, run_id = _queued(type(flow)(ports))
    assert _refused(ports, ConflictError, JobUpdate(str(job), priority=12)) == (
        f"the jobs {job} kept changing while being updated; retry"
    )
    assert ports.runs.get(run_id).priority == 42
