"""A trial bigger than one agent, in moto: placed on whole agents as nodes, launched as one node record
per agent, its rendezvous record filled by the nodes, ended by the first node that fails (the others
are killed at their next heartbeat) or completed when every node has exited cleanly."""

from __future__ import annotations

import pytest

from chalicelib.errors import BadRequestError, ConflictError
from chalicelib.services import runs

pytestmark = pytest.mark.aws


def test_a_trial_larger_than_an_agent_runs_on_whole_agents_as_nodes(stack):
    p = stack.ports
    experiment, specs = stack.launch_on_two_nodes()
    assert specs["agent-c"] == []  # an idle third agent takes no part
    (chief,) = specs["agent-a"]
    (worker,) = specs["agent-b"]
    run_id = f"{chief['trial_id']}.1"
    assert (chief["run_id"], worker["run_id"]) == (f"{run_id}-node0", f"{run_id}-node1")
    assert chief["slots"] == worker["slots"] == 2
    for rank, spec in enumerate((chief, worker)):
        env = spec["environment"]
        # The processes act for the run (its token, its id); the node is in the environment.
        assert env["STRATUS_RUN_ID"] == run_id
        assert (env["STRATUS_NUM_NODES"], env["STRATUS_NODE_RANK"], env["STRATUS_SLOTS"]) == (
            "2",
            str(rank),
            "4",
        )
    assert chief["environment"]["STRATUS_RUN_TOKEN"] == worker["environment"]["STRATUS_RUN_TOKEN"]
    (allocated,) = p.runs.allocated("default")
    assert [n.agent_id for n in allocated.nodes] == ["agent-a", "agent-b"]

    # Rendezvous: node 1 is in first and waits; the record is ready once the chief gives its port.
    run = p.runs.get(run_id)
    view = runs.rendezvous(p, run, 1, "10.0.0.2")
    assert (view["ready"], view["nodes"]) == (False, [{"node_rank": 1, "addr": "10.0.0.2", "port": None}])
    with pytest.raises(BadRequestError, match="node_rank 2 is outside 0..1"):
        runs.rendezvous(p, run, 2, "10.0.0.3")
    with pytest.raises(BadRequestError, match="must give the port"):
        runs.rendezvous(p, run, 0, "10.0.0.1")
    runs.rendezvous(p, run, 0, "10.0.0.1", 29400)
    view = runs.rendezvous(p, p.runs.get(run_id))  # a read
    assert view["ready"] and [(n["addr"], n["port"]) for n in view["nodes"]] == [
        ("10.0.0.1", 29400),
        ("10.0.0.2", None),
    ]

    runs.started(p, "agent-b", worker["run_id"], pid=22)
    assert p.trials.get(chief["trial_id"]).state == "RUNNING"
    runs.started(p, "agent-a", chief["run_id"], pid=11)
    # Node 0 is done first; the run waits for node 1.
    runs.exited(p, "agent-a", chief["run_id"], 0, "exited with code 0")
    assert p.runs.get(run_id).state == "RUNNING"
    runs.exited(p, "agent-b", worker["run_id"], 0, "exited with code 0")
    runs.exited(p, "agent-b", worker["run_id"], 0, "exited with code 0")  # a retried report
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "COMPLETED")
    assert p.trials.get(chief["trial_id"]).exit_reason == "all 2 nodes exited with code 0"
    assert p.runs.allocated("default") == []  # every node's slots are given back
    with pytest.raises(ConflictError, match="has ended"):
        runs.rendezvous(p, p.runs.get(run_id), 1, "10.0.0.2")


def test_the_first_node_to_fail_ends_the_run_and_the_others_are_killed(stack):
    p = stack.ports
    experiment, chief, worker = stack.start_two_nodes(max_restarts=0)
    runs.exited(p, "agent-b", worker["run_id"], 3, "rank 3 failed first with exit code 3", failed_rank=3)
    # The chief's agent is told to kill its node at its next heartbeat.
    assert runs.heartbeat(p, "agent-a", "default", 2, [chief["run_id"]])["kill"] == [chief["run_id"]]
    runs.exited(p, "agent-a", chief["run_id"], 143, "killed by signal SIGTERM")  # too late to matter
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "ERROR")
    trial = p.trials.get(chief["trial_id"])
    assert trial.exit_code == 3 and trial.failed_rank == 3
    assert trial.exit_reason == "node 1 of 2 (agent agent-b): rank 3 failed first with exit code 3"
    stack.pump_until(lambda: stack.execution_status(trial.id) == "FAILED")
    assert p.runs.allocated("default") == []
