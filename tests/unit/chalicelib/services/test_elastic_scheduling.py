"""Elastic trials in the scheduler on the in-memory twin (`chalicelib.services.elastic_scheduling`): sized
when queued, grown into idle slots once old enough, shrunk for a waiting request instead of it waiting, a
rescale through the pause path, and each run's replicas with the reason kept on the trial."""

from __future__ import annotations

from typing import Any

from chalicelib.domain import keys
from chalicelib.domain.states import RunState
from chalicelib.memory import memory_ports, memory_settings
from chalicelib.services import runs, scheduler
from stratus.contract import messages
from stratus.contract.pools import PoolSpec

INTERVAL = 60


def elastic_config(flow, **section: Any) -> dict[str, Any]:
    return {
        **flow.SINGLE,
        "name": "elastic",
        "entrypoint": "python3 -m stratus.launchers.adaptdl -- python3 train.py",
        "elastic": {"min_replicas": 1, "min_rescale_interval_s": INTERVAL, **section},
    }


def running_elastic(ports, flow, slots: int = 2, **section: Any) -> tuple[int, str]:
    """An elastic trial running on a `slots`-slot agent: its id and its run's."""
    (trial_id,) = flow.trial_ids(flow.submit(elastic_config(flow, **section)).id)
    spec = flow.place(trial_id, slots=slots)
    runs.started(ports, "agent-1", spec["run_id"], pid=4242)
    return trial_id, spec["run_id"]


def later(ports, seconds: float, slots: int, held: list[str]) -> None:
    """Time passes; the agent (`slots` slots, holding `held`) still heartbeats."""
    ports.clock.advance(seconds)
    runs.heartbeat(ports, "agent-1", "default", slots, held)


def requeue(ports, flow, trial_id: int, run_id: str) -> str:
    """The stopped run exits cleanly, the workflow requeues the trial: its next run's id."""
    ports.runs.exit(run_id, 0, "stopped for a rescale")
    scheduler.handle_message(ports, messages.ReleaseSlots(run_id=run_id, pool="default"))
    _, attempt = keys.parse_run_id(run_id)
    return flow.request_slots(trial_id, attempt + 1)


def test_an_elastic_trial_starts_at_min_replicas_and_grows_into_idle_slots_once_old_enough(ports, flow):
    trial_id, run_id = running_elastic(ports, flow)
    assert ports.runs.get(run_id).slots == 1

    scheduler.schedule_pool(ports, "default")
    assert not ports.runs.get(run_id).preempt  # too soon: younger than min_rescale_interval_s

    later(ports, INTERVAL, 2, [run_id])
    scheduler.schedule_pool(ports, "default")

    stopped = ports.runs.get(run_id)
    assert (stopped.preempt, stopped.requeue, stopped.pausing) == (True, True, False)
    trial = ports.trials.get(trial_id)
    assert trial.elastic_target == 2
    reason = "grow: 1 slot idle and nothing queued; speedup 1.00 -> 2.00"
    assert trial.elastic_rescale["reason"] == reason
    assert (trial.elastic_rescale["run"], trial.elastic_rescale["from"]) == (run_id, 1)

    second = requeue(ports, flow, trial_id, run_id)

    grown = ports.runs.get(second)
    assert (grown.slots, grown.state) == (2, RunState.ASSIGNED)
    history = ports.trials.get(trial_id).elastic_runs
    assert {r: (e["replicas"], e["reason"]) for r, e in history.items()} == {
        run_id: (1, "start"),
        second: (2, reason),
    }


def test_a_waiting_request_shrinks_an_elastic_trial_instead_of_waiting(ports, flow):
    trial_id, run_id = running_elastic(ports, flow)
    later(ports, INTERVAL, 2, [run_id])
    scheduler.schedule_pool(ports, "default")
    grown = requeue(ports, flow, trial_id, run_id)
    flow.launch(grown)
    runs.heartbeat(ports, "agent-1", "default", 2, [grown])
    runs.started(ports, "agent-1", grown, pid=4243)
    later(ports, INTERVAL, 2, [grown])

    (other,) = flow.trial_ids(flow.submit().id)  # a fixed trial of 1 slot, same priority
    waiting = flow.request_slots(other)

    shrunk = ports.runs.get(grown)
    assert shrunk.preempt and shrunk.requeue
    trial = ports.trials.get(trial_id)
    assert trial.elastic_target == 1
    assert trial.elastic_rescale["reason"] == (
        f"shrink: run {waiting} (priority 42) waits for 1 slot; speedup 2.00 -> 1.00"
    )
    # Planned again with the shrunk run's slots freeing: reserved for the waiting request.
    assert ports.runs.get(waiting).wait_reason.startswith("waits for the runs stopping on agent-1")

    third = requeue(ports, flow, trial_id, grown)

    assert ports.runs.get(waiting).state == RunState.ASSIGNED
    assert (ports.runs.get(third).slots, ports.runs.get(third).state) == (1, RunState.ASSIGNED)
    replicas = [e["replicas"] for _, e in sorted(ports.trials.get(trial_id).elastic_runs.items())]
    assert replicas == [1, 2, 1]


def test_without_preemption_the_request_says_it_waits_for_the_shrink_and_is_not_made_room_for_twice(
    flow_on,
):
    ports = memory_ports(settings=memory_settings(pools=(PoolSpec("default", preemption=False),)))
    flow = flow_on(ports)
    first, first_run = running_elastic(ports, flow, slots=4, max_replicas=2)
    (second,) = flow.trial_ids(flow.submit(elastic_config(flow, max_replicas=2)).id)
    second_run = flow.request_slots(second)
    flow.launch(second_run)
    runs.started(ports, "agent-1", second_run, pid=4244)
    later(ports, INTERVAL, 4, [first_run, second_run])
    scheduler.schedule_pool(ports, "default")  # both grow to 2: the agent is full
    first_run = requeue(ports, flow, first, first_run)
    second_run = requeue(ports, flow, second, second_run)
    for run_id, pid in ((first_run, 1), (second_run, 2)):
        flow.launch(run_id)
        runs.started(ports, "agent-1", run_id, pid=pid)
    later(ports, INTERVAL, 4, [first_run, second_run])

    (fixed,) = flow.trial_ids(flow.submit().id)
    waiting = flow.request_slots(fixed)
    scheduler.schedule_pool(ports, "default")  # a second pass while the shrink is in flight

    told = [r for r in (first_run, second_run) if ports.runs.get(r).preempt]
    assert len(told) == 1  # one shrink is enough for one slot
    assert ports.runs.get(waiting).wait_reason == (
        f"waits for elastic run {told[0]} to checkpoint and restart with fewer replicas; the slots it "
        "gives up are for it"
    )


def test_no_growth_in_the_pass_of_a_release_for_a_rescale(ports, flow):
    """Between a rescaled run's release and its new request the slots it gave back look idle: another
    elastic trial must not take them."""
    first, first_run = running_elastic(ports, flow, slots=4, max_replicas=2)
    (second,) = flow.trial_ids(flow.submit(elastic_config(flow, max_replicas=3)).id)
    second_run = flow.request_slots(second)
    flow.launch(second_run)
    runs.heartbeat(ports, "agent-1", "default", 4, [first_run, second_run])
    runs.started(ports, "agent-1", second_run, pid=4244)
    grow = {"run": first_run, "from": 1, "to": 2, "reason": "grow", "agents": {"agent-1": 2}}
    ports.trials.record_rescale(first, 2, grow)  # as a rescale of the first leaves it
    ports.runs.tell_to_stop(first_run, pause=False)
    later(ports, INTERVAL, 4, [first_run, second_run])

    ports.runs.exit(first_run, 0, "stopped for a rescale")
    scheduler.handle_message(ports, messages.ReleaseSlots(run_id=first_run, pool="default"))

    assert not ports.runs.get(second_run).preempt
    requeued = flow.request_slots(first, 2)  # its new request takes the slots promised to it
    assert (ports.runs.get(requeued).slots, ports.runs.get(requeued).state) == (2, RunState.ASSIGNED)
    assert ports.trials.get(second).elastic_target == 2  # into the one slot left, not the promised ones


def test_slots_per_replica_size_the_request_and_a_target_beyond_the_pool_is_clamped(ports, flow):
    trial_id, run_id = running_elastic(ports, flow, slots=4, slots_per_replica=2, max_replicas=2)
    assert ports.runs.get(run_id).slots == 2
    ports.trials.record_rescale(trial_id, 5, {"run": run_id, "reason": "by hand"})

    second = requeue(ports, flow, trial_id, run_id)

    assert ports.runs.get(second).slots == 4  # max_replicas 2 x 2 slots
    assert ports.runs.get(second).elastic["reason"] == "by hand"


def test_a_fixed_trial_is_never_rescaled(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id, slots=2)
    runs.started(ports, "agent-1", spec["run_id"], pid=4242)
    later(ports, 3600, 2, [spec["run_id"]])

    scheduler.schedule_pool(ports, "default")

    assert not ports.runs.get(spec["run_id"]).preempt
    assert ports.trials.get(trial_id).elastic_target is None


def test_a_grow_must_pay_for_the_restart_the_trial_s_last_rescale_took(ports, flow):
    trial_id, run_id = running_elastic(ports, flow, slots=2)
    later(ports, INTERVAL, 2, [run_id])
    scheduler.schedule_pool(ports, "default")  # its own start took no time: 1 -> 2
    second = requeue(ports, flow, trial_id, run_id)
    flow.launch(second)
    later(ports, 200, 2, [second])  # its restart took 200 s
    runs.started(ports, "agent-1", second, pid=4243)
    later(ports, INTERVAL, 4, [second])  # the agent now offers 4 slots: 2 idle

    scheduler.schedule_pool(ports, "default")
    assert not ports.runs.get(second).preempt  # 4 x (60 s - 200 s) of progress is no gain on 2 x 60 s

    later(ports, 3600, 4, [second])
    scheduler.schedule_pool(ports, "default")
    assert ports.runs.get(second).preempt  # an hour at 2 replicas: the next hour at 4 pays for 200 s
    assert ports.trials.get(trial_id).elastic_target == 4


def test_an_elastic_trial_grows_no_further_than_its_experiments_max_slots(ports, flow):
    """`resources.max_slots` holds under elastic growth too: 2 idle slots, a limit of 2, one replica run."""
    trial_id, run_id = running_elastic(ports, flow, slots=4, max_replicas=4)
    assert ports.runs.get(run_id).slots == 1
    experiment_id = ports.trials.get(trial_id).experiment_id
    from chalicelib.services.experiment_edits import ExperimentEdit, edit

    edit(ports, experiment_id, ExperimentEdit(max_slots=2))
    later(ports, INTERVAL, 4, [run_id])
    scheduler.schedule_pool(ports, "default")
    assert ports.trials.get(trial_id).elastic_target == 2  # 4 slots free, but the job may hold 2

    second = requeue(ports, flow, trial_id, run_id)
    later(ports, INTERVAL, 4, [second])
    runs.started(ports, "agent-1", second, pid=4243)
    later(ports, INTERVAL, 4, [second])
    scheduler.schedule_pool(ports, "default")
    assert not ports.runs.get(second).preempt  # at its job's limit: no further growth
