"""A trial bigger than one agent runs on whole agents as nodes; on the in-memory twin."""

from __future__ import annotations

import pytest

from chalicelib.errors import BadRequestError, ConflictError
from chalicelib.services import pausing, runs, scheduler
from stratus.contract import messages

AGENTS = ("agent-a", "agent-b", "agent-c")


def _on_two_nodes(ports, flow, **config):
    """Three 2-slot agents, a 4-slot trial: two of them become its nodes."""
    (trial_id,) = flow.trial_ids(flow.submit(resources={"slots_per_trial": 4}, **config).id)
    for agent in AGENTS:
        runs.heartbeat(ports, agent, "default", 2, [])
    run_id = flow.request_slots(trial_id)
    assert ports.workflows.answers[f"slots-{run_id}"] == {"agent_id": "agent-a", "num_nodes": 2}
    flow.launch(run_id)
    specs = {agent: runs.heartbeat(ports, agent, "default", 2, [])["launch"] for agent in AGENTS}
    return trial_id, run_id, specs


def test_each_node_is_launched_on_its_agent_with_the_runs_identity(ports, flow):
    trial_id, run_id, specs = _on_two_nodes(ports, flow)
    assert specs["agent-c"] == []
    (chief,), (worker,) = specs["agent-a"], specs["agent-b"]
    assert (chief["run_id"], worker["run_id"]) == (f"{run_id}-node0", f"{run_id}-node1")
    assert chief["slots"] == worker["slots"] == 2
    for rank, spec in enumerate((chief, worker)):
        env = spec["environment"]
        assert env["STRATUS_RUN_ID"] == run_id and env["STRATUS_SLOTS"] == "4"
        assert (env["STRATUS_NUM_NODES"], env["STRATUS_NODE_RANK"]) == ("2", str(rank))
    assert chief["environment"]["STRATUS_RUN_TOKEN"] == worker["environment"]["STRATUS_RUN_TOKEN"]
    (allocated,) = ports.runs.allocated("default")
    assert [n.agent_id for n in allocated.nodes] == ["agent-a", "agent-b"]


def test_the_rendezvous_is_ready_once_every_node_is_in(ports, flow):
    _, run_id, _ = _on_two_nodes(ports, flow)
    run = ports.runs.get(run_id)
    view = runs.rendezvous(ports, run, 1, "10.0.0.2")
    assert (view["ready"], view["nodes"]) == (False, [{"node_rank": 1, "addr": "10.0.0.2", "port": None}])
    with pytest.raises(BadRequestError, match="node_rank 2 is outside 0..1"):
        runs.rendezvous(ports, run, 2, "10.0.0.3")
    with pytest.raises(BadRequestError, match="must give the port"):
        runs.rendezvous(ports, run, 0, "10.0.0.1")
    runs.rendezvous(ports, run, 0, "10.0.0.1", 29400)
    view = runs.rendezvous(ports, ports.runs.get(run_id))
    assert view["ready"] and view["num_nodes"] == 2
    assert [(n["addr"], n["port"]) for n in view["nodes"]] == [("10.0.0.1", 29400), ("10.0.0.2", None)]


def test_a_one_node_run_has_no_rendezvous(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id)
    with pytest.raises(BadRequestError, match="runs on one node and has no rendezvous"):
        runs.rendezvous(ports, ports.runs.get(spec["run_id"]), 0, "10.0.0.1", 1)


def test_the_run_completes_when_every_node_exited_cleanly(ports, flow):
    trial_id, run_id, specs = _on_two_nodes(ports, flow)
    (chief,), (worker,) = specs["agent-a"], specs["agent-b"]
    runs.started(ports, "agent-b", worker["run_id"], 22)
    assert ports.runs.get(run_id).state == "RUNNING" and ports.trials.get(trial_id).state == "RUNNING"
    runs.started(ports, "agent-a", chief["run_id"], 11)
    runs.exited(ports, "agent-a", chief["run_id"], 0, "exited with code 0")
    assert ports.runs.get(run_id).state == "RUNNING"  # node 1 is still at work
    runs.exited(ports, "agent-b", worker["run_id"], 0, "exited with code 0")
    runs.exited(ports, "agent-b", worker["run_id"], 0, "exited with code 0")  # a retried report
    assert flow.exit_answer(run_id) == {
        "exit_code": 0,
        "reason": "all 2 nodes exited with code 0",
        "paused": False,
    }
    assert ports.runs.allocated("default") == []
    with pytest.raises(ConflictError, match="has ended"):
        runs.rendezvous(ports, ports.runs.get(run_id), 1, "10.0.0.2")


def test_the_first_node_to_fail_ends_the_run_and_the_others_are_killed(ports, flow):
    trial_id, run_id, specs = _on_two_nodes(ports, flow, max_restarts=0)
    (chief,), (worker,) = specs["agent-a"], specs["agent-b"]
    runs.started(ports, "agent-a", chief["run_id"], 11)
    runs.started(ports, "agent-b", worker["run_id"], 22)
    runs.exited(ports, "agent-b", worker["run_id"], 3, "rank 3 failed first with exit code 3", failed_rank=3)
    assert runs.heartbeat(ports, "agent-a", "default", 2, [chief["run_id"]])["kill"] == [chief["run_id"]]
    runs.exited(ports, "agent-a", chief["run_id"], 143, "killed by signal SIGTERM")  # too late to matter
    reason = "node 1 of 2 (agent agent-b): rank 3 failed first with exit code 3"
    assert flow.exit_answer(run_id) == {"exit_code": 3, "reason": reason, "paused": False}
    trial = ports.trials.get(trial_id)
    assert (trial.exit_code, trial.failed_rank, trial.exit_reason) == (3, 3, reason)
    assert ports.runs.allocated("default") == []


def test_losing_one_node_ends_the_run_and_every_node(ports, flow):
    trial_id, run_id, specs = _on_two_nodes(ports, flow)
    (chief,), (worker,) = specs["agent-a"], specs["agent-b"]
    runs.started(ports, "agent-a", chief["run_id"], 11)
    ports.clock.advance(ports.settings.agent_timeout_s + 1)
    runs.heartbeat(ports, "agent-a", "default", 2, [chief["run_id"]])
    scheduler.handle_message(ports, messages.parse_scheduler({"type": "sweep", "pool": "default"}))
    assert flow.exit_answer(run_id)["exit_code"] == runs.AGENT_LOST_EXIT_CODE
    assert {ports.runs.held(n["run_id"]).state for n in (chief, worker)} == {"EXITED"}
    assert runs.heartbeat(ports, "agent-a", "default", 2, [chief["run_id"]])["kill"] == [chief["run_id"]]
    assert ports.trials.get(trial_id).exit_reason.startswith("lost agent agent-b")


def test_a_run_told_to_stop_is_passed_on_by_the_agent_of_every_node(ports, flow):
    """A pause or a preemption (an elastic shrink too) is marked on the run: each node's agent is told at
    its heartbeat, so every node's launcher stops its processes (an AdaptDL replica saves on SIGTERM)."""
    _, run_id, specs = _on_two_nodes(ports, flow)
    (chief,), (worker,) = specs["agent-a"], specs["agent-b"]
    runs.started(ports, "agent-a", chief["run_id"], 11)
    runs.started(ports, "agent-b", worker["run_id"], 22)
    assert runs.heartbeat(ports, "agent-b", "default", 2, [worker["run_id"]])["preempt"] == []
    rings = len(ports.bells.rung)
    pausing.preempt_run(ports, ports.runs.get(run_id))
    assert sorted(ports.bells.rung[rings:]) == ["agent-a", "agent-b"]
    assert runs.heartbeat(ports, "agent-a", "default", 2, [chief["run_id"]])["preempt"] == [chief["run_id"]]
    assert runs.heartbeat(ports, "agent-b", "default", 2, [worker["run_id"]])["preempt"] == [worker["run_id"]]
    assert runs.heartbeat(ports, "agent-c", "default", 2, [])["preempt"] == []
