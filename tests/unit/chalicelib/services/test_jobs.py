"""`det job list`'s service on the in-memory twin: live runs of a pool, grouped by experiment."""

from __future__ import annotations

from chalicelib.services import jobs, runs, scheduler


def test_the_queue_shows_scheduled_then_waiting_experiments(ports, flow):
    config = {**flow.SINGLE, "resources": {"slots_per_trial": 2}}
    first = flow.submit(config, name="first")
    second = flow.submit(config, name="second", resources={"slots_per_trial": 2, "priority": 10})
    runs.heartbeat(ports, "agent-1", "default", 2, [])
    (first_trial,) = flow.trial_ids(first.id)
    flow.request_slots(first_trial)
    (second_trial,) = flow.trial_ids(second.id)
    flow.request_slots(second_trial)
    scheduler.schedule_pool(ports, "default")

    queue = jobs.list_jobs(ports, "default")
    rows = [(j.job_id, j.name, j.priority, j.slots_acquired, j.slots_needed, j.status) for j in queue]
    # The priority-10 experiment comes first in the queue although the earlier one holds the agent.
    assert rows == [
        (str(second.id), "second", 10, 0, 2, "QUEUED"),
        (str(first.id), "first", 42, 2, 2, "SCHEDULED"),
    ]
    assert jobs.list_jobs(ports, "gpu") == []
