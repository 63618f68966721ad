"""Scheduling passes and lost agents, on the in-memory twin (its clock decides who is alive)."""

from __future__ import annotations

import pytest

from chalicelib.services import runs, scheduler
from stratus.contract import messages
from stratus.contract.errors import InvalidMessageError


def test_a_request_waits_for_an_agent_then_is_granted(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    run = ports.runs.get(run_id)
    assert (run.state, run.pool, run.queued_at) == ("PENDING", "default", ports.clock.now_iso())
    assert [r.run_id for r in ports.runs.pending("default")] == [run_id]
    assert scheduler.schedule_pool(ports, "default") == []
    runs.heartbeat(ports, "late-agent", "default", 2, [])
    assert scheduler.schedule_pool(ports, "default") == [(run_id, "late-agent")]
    assert ports.workflows.answers[f"slots-{run_id}"] == {"agent_id": "late-agent", "num_nodes": 1}
    assert [r.agent_id for r in ports.runs.allocated("default")] == ["late-agent"]
    assert ports.runs.pending("default") == []
    assert scheduler.schedule_pool(ports, "default") == []  # a redelivered message grants nothing more


def test_a_redelivered_request_is_queued_once(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    flow.request_slots(trial_id)
    flow.request_slots(trial_id)
    assert len(ports.runs.pending("default")) == 1


def test_slots_are_not_granted_beyond_an_agents_capacity(ports, flow):
    config = {**flow.SINGLE, "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 1}}}
    config["hyperparameters"] = {"x": {"type": "categorical", "vals": [1, 2]}}
    first, second = flow.trial_ids(flow.submit(config).id)
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    granted = flow.request_slots(first)
    waiting = flow.request_slots(second)
    assert [r.run_id for r in ports.runs.allocated("default")] == [granted]
    assert [r.run_id for r in ports.runs.pending("default")] == [waiting]
    ports.runs.exit(granted, 0, "done")
    assert (
        scheduler.handle_message(
            ports, messages.parse_scheduler({"type": "release", "run_id": granted, "pool": "default"})
        )
        is None
    )
    assert [r.run_id for r in ports.runs.allocated("default")] == [waiting]


def test_slots_granted_to_a_workflow_that_ended_are_given_back(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    ports.workflows.end(f"slots-{trial_id}.1")
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    run_id = flow.request_slots(trial_id)
    run = ports.runs.get(run_id)
    assert run.state == "EXITED" and run.reason == "its workflow ended before it was launched"
    assert ports.runs.allocated("default") == []


def test_an_unknown_message_type_is_refused(ports):
    with pytest.raises(InvalidMessageError, match="unknown message type 'resize'"):
        scheduler.handle_message(ports, messages.parse_scheduler({"type": "resize", "pool": "default"}))
    assert ports.runs.items == {}


def test_the_run_of_a_lost_agent_ends_once_and_its_workflow_is_told(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id, agent="doomed")
    runs.started(ports, "doomed", spec["run_id"], 10)
    runs.heartbeat(ports, "healthy", "default", 1, [])
    scheduler.handle_message(ports, messages.parse_scheduler({"type": "sweep", "pool": "default"}))
    assert ports.runs.get(spec["run_id"]).state == "RUNNING"  # both alive: nothing to do

    ports.clock.advance(ports.settings.agent_timeout_s + 1)
    runs.heartbeat(ports, "healthy", "default", 1, [])
    scheduler.handle_message(ports, messages.parse_scheduler({"type": "sweep", "pool": "default"}))
    scheduler.handle_message(
        ports, messages.parse_scheduler({"type": "sweep", "pool": "default"})
    )  # a redelivered sweep
    ended = ports.runs.get(spec["run_id"])
    assert ended.state == "EXITED" and ended.exit_code == runs.AGENT_LOST_EXIT_CODE
    assert ended.reason.startswith("lost agent doomed: no heartbeat for 30 s")
    answer = flow.exit_answer(spec["run_id"])
    assert answer["exit_code"] == runs.AGENT_LOST_EXIT_CODE and answer["paused"] is False
    assert ports.trials.get(trial_id).exit_reason.startswith("lost agent doomed")
    assert [a.host_id for a in ports.agents.alive("default", ports.settings.agent_timeout_s)] == ["healthy"]
