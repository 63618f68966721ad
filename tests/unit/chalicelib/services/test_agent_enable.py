"""`det agent disable | enable` on the in-memory twin: a disabled agent gets nothing new; its run is told to
checkpoint and go back to the queue (it resumes elsewhere), or with drain finishes there; enabling puts
the agent back; a repeat changes nothing more; an unknown agent is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.domain import keys
from chalicelib.domain.states import RunState
from chalicelib.errors import NotFoundError
from chalicelib.services import cluster, runs, scheduler

SINGLE: dict[str, Any] = {
    "name": "job",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def _running(flow, ports) -> tuple[int, str]:
    (trial_id,) = flow.trial_ids(flow.submit(SINGLE).id)
    flow.place(trial_id)  # agent-1, 1 slot
    run_id = keys.run_id(trial_id, 1)
    runs.started(ports, "agent-1", run_id, pid=11)
    return trial_id, run_id


def test_a_disabled_agents_run_checkpoints_and_requeues_and_nothing_new_lands_on_it(ports, flow):
    trial_id, run_id = _running(flow, ports)
    ports.queues.take_scheduler()

    change = cluster.set_enabled(ports, "agent-1", enabled=False)

    assert change.moved == [run_id] and change.remaining == []
    assert not change.agent.enabled and change.agent.draining  # its run has not left yet
    run = ports.runs.get(run_id)
    assert run.preempt and run.requeue and not run.pausing  # the preemption path, not a kill
    assert runs.heartbeat(ports, "agent-1", "default", 1, [run_id])["preempt"] == [run_id]
    assert [m.pool for m in ports.queues.take_scheduler()] == ["default"]  # a pass runs
    assert [h.accepting for h in ports.agents.alive("default", 60)] == [False]

    runs.exited(ports, "agent-1", run_id, 0, "checkpointed")  # its clean exit requeues it
    assert flow.exit_answer(run_id)["requeue"] is True
    again = flow.request_slots(trial_id, attempt=2)
    scheduler.schedule_pool(ports, "default")
    assert ports.runs.get(again).state == RunState.PENDING  # not on the disabled agent

    assert cluster.set_enabled(ports, "agent-1", enabled=False).moved == []  # a repeat: nothing more
    back = cluster.set_enabled(ports, "agent-1", enabled=True)
    assert back.agent.enabled and not back.agent.draining
    scheduler.schedule_pool(ports, "default")
    assert ports.runs.get(again).state == RunState.ASSIGNED
    assert ports.runs.get(again).agent_id == "agent-1"


def test_a_drained_agent_keeps_its_runs_until_they_end(ports, flow):
    _, run_id = _running(flow, ports)
    change = cluster.set_enabled(ports, "agent-1", enabled=False, drain=True)
    assert change.moved == [] and change.remaining == [run_id]
    assert not ports.runs.get(run_id).preempt
    (listed,) = cluster.list_agents(ports)
    assert (listed.enabled, listed.draining, listed.runs) == (False, True, 1)
    runs.exited(ports, "agent-1", run_id, 0, "done")
    (listed,) = cluster.list_agents(ports)
    assert (listed.enabled, listed.draining, listed.runs) == (False, False, 0)


def test_a_heartbeat_leaves_an_agent_disabled_and_an_unknown_agent_is_refused(ports, flow):
    runs.heartbeat(ports, "agent-1", "default", 2, [])
    cluster.set_enabled(ports, "agent-1", enabled=False)
    runs.heartbeat(ports, "agent-1", "default", 2, [])
    assert ports.agents.get("agent-1").disabled
    with pytest.raises(NotFoundError, match="agent 'gpu-9' never heartbeated; `det agent list`"):
        cluster.set_enabled(ports, "gpu-9", enabled=False)
