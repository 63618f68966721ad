"""An agent that stops heartbeating (a crashed machine, a killed agent) must not leave its trials waiting
forever: the next scheduling pass (a `sweep` from the timer, or any other message) ends its runs, and the
workflow restarts the trial on an agent that is alive."""

from __future__ import annotations

import time

import pytest

from chalicelib.services import runs, scheduler
from stratus.contract import messages

pytestmark = pytest.mark.aws


def _silence(stack, agent_id: str) -> None:
    """Make ``agent_id`` look as if its last heartbeat was an hour ago."""
    stack.client("dynamodb").update_item(
        TableName=stack.names.table("agents"),
        Key={"agent_id": {"S": agent_id}},
        UpdateExpression="SET last_seen = :t",
        ExpressionAttributeValues={":t": {"N": str(time.time() - 3600)}},
    )


def _sweep(stack) -> None:
    scheduler.handle_message(stack.ports, messages.Sweep("default"))


def test_the_run_of_a_lost_agent_ends_and_the_trial_restarts_on_a_live_one(stack):
    p = stack.ports
    experiment = stack.submit_experiment(max_restarts=1)
    first = stack.launch_on_agent(agent="doomed")
    runs.started(p, "doomed", first["run_id"], pid=10)
    runs.heartbeat(p, "healthy", "default", 1, [])
    _sweep(stack)
    assert p.runs.get(first["run_id"]).state == "RUNNING"  # both agents alive: nothing to do

    _silence(stack, "doomed")
    _sweep(stack)
    _sweep(stack)  # a second pass (a redelivered sweep) changes nothing more
    ended = p.runs.get(first["run_id"])
    assert ended.state == "EXITED" and ended.exit_code == runs.AGENT_LOST_EXIT_CODE
    assert ended.reason.startswith("lost agent doomed: no heartbeat for 30 s")
    stack.pump_until(lambda: any(r.state == "LAUNCHING" for r in p.runs.for_agent("healthy")))
    (second,) = runs.heartbeat(p, "healthy", "default", 1, [])["launch"]
    assert second["run_id"] == f"{first['trial_id']}.2"
    runs.exited(p, "healthy", second["run_id"], 0, "exited with code 0")
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "COMPLETED")
    assert p.trials.get(first["trial_id"]).attempts == 2


def test_losing_one_node_ends_a_multi_node_run_and_the_other_node_is_killed(stack):
    p = stack.ports
    experiment, chief, worker = stack.start_two_nodes(max_restarts=0)
    _silence(stack, "agent-b")
    _sweep(stack)
    # agent-a is told to kill its node: the run it belonged to is over.
    assert runs.heartbeat(p, "agent-a", "default", 2, [chief["run_id"]])["kill"] == [chief["run_id"]]
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "ERROR")
    trial = p.trials.get(chief["trial_id"])
    assert trial.exit_reason.startswith("lost agent agent-b")
    assert p.runs.allocated("default") == []


def test_a_disabled_agent_is_not_accepting_and_its_run_moves_on_dynamodb(stack):
    """`det agent disable` on the real tables: the flag survives heartbeats, the host stops accepting, its
    run is told to checkpoint and requeue; enabling takes it back; an unknown agent is not created."""
    from chalicelib.errors import NotFoundError
    from chalicelib.services import cluster

    p = stack.ports
    stack.submit_experiment()
    first = stack.launch_on_agent(agent="gpu-1")
    runs.started(p, "gpu-1", first["run_id"], pid=10)
    change = cluster.set_enabled(p, "gpu-1", enabled=False)
    assert change.moved == [first["run_id"]] and not change.agent.enabled
    runs.heartbeat(p, "gpu-1", "default", 1, [first["run_id"]])
    assert p.agents.get("gpu-1").disabled
    assert [h.accepting for h in p.agents.alive("default", 60)] == [False]
    run = p.runs.get(first["run_id"])
    assert run.preempt and run.requeue
    assert cluster.set_enabled(p, "gpu-1", enabled=True).agent.enabled
    assert [h.accepting for h in p.agents.alive("default", 60)] == [True]
    with pytest.raises(NotFoundError):
        cluster.set_enabled(p, "nobody", enabled=False)
    assert p.agents.get("nobody") is None
