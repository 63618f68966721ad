"""The scheduler consumer under the pool's policy, on the in-memory twin: a higher-priority request
preempts a lower-priority run through the pause path (checkpoint, exit, requeue) and gets its slot once
the victim has exited; a request that can never fit waits with its reason and blocks nobody; a request
delivered twice is queued once."""

from __future__ import annotations

from typing import Any

from chalicelib.domain import keys
from chalicelib.domain.states import RunState
from chalicelib.services import jobs, runs, scheduler, stopping, trial_reports
from chalicelib.workflow import TASK_BEAT_INTERVAL_S, TASK_HEARTBEAT_S

SINGLE: dict[str, Any] = {
    "name": "job",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def _submit(flow, priority: int, slots: int = 1) -> int:
    experiment = flow.submit(SINGLE, resources={"priority": priority, "slots_per_trial": slots})
    (trial_id,) = flow.trial_ids(experiment.id)
    return trial_id


def test_a_higher_priority_request_preempts_a_lower_priority_run_which_requeues(ports, flow):
    low = _submit(flow, priority=60)
    flow.place(low)  # the pool's only slot (agent-1, 1 slot)
    low_run = keys.run_id(low, 1)
    runs.started(ports, "agent-1", low_run, pid=11)
    high = _submit(flow, priority=10)

    high_run = flow.request_slots(high)

    victim = ports.runs.get(low_run)
    assert victim.preempt and victim.requeue and not victim.pausing
    assert trial_reports.heartbeat(ports, victim) == {"preempt": True}
    assert ports.runs.get(high_run).state == RunState.PENDING  # waits for the victim's slot
    assert runs.heartbeat(ports, "agent-1", "default", 1, [low_run])["preempt"] == [low_run]
    scheduler.schedule_pool(ports, "default")  # another pass: nothing more is preempted
    assert ports.runs.get(high_run).state == RunState.PENDING

    runs.exited(ports, "agent-1", low_run, 0, "checkpointed")  # its clean exit requeues it
    assert flow.exit_answer(low_run)["requeue"] is True
    scheduler.schedule_pool(ports, "default")
    assert ports.runs.get(high_run).state == RunState.ASSIGNED
    requeued = flow.request_slots(low, attempt=2)  # the workflow's Enqueue → RequestSlots
    assert ports.runs.get(requeued).state == RunState.PENDING
    assert ports.runs.get(requeued).priority == 60


def test_equal_priorities_never_preempt_each_other(ports, flow):
    first = _submit(flow, priority=42)
    flow.place(first)
    runs.started(ports, "agent-1", keys.run_id(first, 1), pid=11)
    second = _submit(flow, priority=42)
    second_run = flow.request_slots(second)
    assert not ports.runs.get(keys.run_id(first, 1)).preempt
    assert ports.runs.get(second_run).state == RunState.PENDING


def test_a_request_that_can_never_fit_waits_with_its_reason_and_blocks_nobody(ports, flow):
    runs.heartbeat(ports, "agent-1", "default", 2, [])
    runs.heartbeat(ports, "agent-2", "default", 2, [])
    huge = _submit(flow, priority=1, slots=6)  # first in the queue, but no 6 slots exist here
    small = _submit(flow, priority=42)

    huge_run = flow.request_slots(huge)
    small_run = flow.request_slots(small)

    assert ports.runs.get(small_run).state == RunState.ASSIGNED
    waiting = ports.runs.get(huge_run)
    assert waiting.state == RunState.PENDING and "can never fit" in (waiting.wait_reason or "")
    (job,) = [j for j in jobs.list_jobs(ports, "default") if j.slots_acquired == 0]
    assert job.reason == waiting.wait_reason


def test_a_slot_request_delivered_twice_is_queued_and_granted_once(ports, flow):
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    trial_id = _submit(flow, priority=42)
    run_id = flow.request_slots(trial_id)
    flow.request_slots(trial_id)  # SQS delivers at least once
    assert ports.runs.get(run_id).state == RunState.ASSIGNED
    assert [r.run_id for r in ports.runs.allocated("default")] == [run_id]
    assert ports.runs.pending("default") == []


def test_a_slot_request_of_a_trial_killed_meanwhile_leaves_the_queue_at_once(ports, flow):
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    busy = _submit(flow, priority=42)
    flow.place(busy)  # the only slot is taken, so a request would wait
    trial_id = _submit(flow, priority=42)
    stopping.kill_trial(ports, trial_id)  # before its execution's slot request reached the scheduler

    run_id = flow.request_slots(trial_id)

    assert ports.runs.get(run_id).state == RunState.EXITED
    assert ports.workflows.answers[f"slots-{run_id}"] == {"agent_id": "", "num_nodes": 0}
    flow.launch(run_id)
    assert flow.exit_answer(run_id)["canceled"] is True  # the workflow's Cancel, not a wait for slots


def test_the_passes_keep_launch_waits_alive_and_end_runs_whose_workflow_gave_up(ports, flow):
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    busy = _submit(flow, priority=42)
    flow.place(busy)
    busy_run = keys.run_id(busy, 1)
    runs.started(ports, "agent-1", busy_run, pid=11)
    waiting = flow.request_slots(_submit(flow, priority=42))  # no slot: it waits

    ports.clock.advance(TASK_BEAT_INTERVAL_S + 1)
    runs.heartbeat(ports, "agent-1", "default", 1, [busy_run])  # the agent is alive
    scheduler.schedule_pool(ports, "default")
    # Only the launch wait has a heartbeat: a queued request's wait for slots has none, so a pass never
    # touches every queued request.
    assert ports.workflows.beats == {f"launch-{busy_run}": 1}
    scheduler.schedule_pool(ports, "default")  # not due again yet
    assert sum(ports.workflows.beats.values()) == 1

    # Both workflows stop waiting (their waits timed out: a lost message, a consumer that was down).
    ports.workflows.end(f"slots-{waiting}")
    ports.workflows.end(f"launch-{busy_run}")
    ports.clock.advance(TASK_BEAT_INTERVAL_S + 1)
    runs.heartbeat(ports, "agent-1", "default", 1, [busy_run])
    scheduler.schedule_pool(ports, "default")
    assert ports.runs.get(busy_run).state == RunState.EXITED  # its processes are killed at the next beat
    # Its slot came free; the waiting request's grant finds its workflow gone, and the run ends.
    assert ports.runs.get(waiting).state == RunState.EXITED
    assert runs.heartbeat(ports, "agent-1", "default", 1, [busy_run])["kill"] == [busy_run]


def test_an_assigned_run_whose_launch_never_came_gives_its_slots_back(ports, flow):
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    run_id = flow.request_slots(_submit(flow, priority=42))
    assert ports.runs.get(run_id).state == RunState.ASSIGNED  # its launch message is lost
    ports.clock.advance(TASK_HEARTBEAT_S + 1)
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    scheduler.schedule_pool(ports, "default")
    assert ports.runs.get(run_id).state == RunState.EXITED
    assert ports.runs.allocated("default") == []
