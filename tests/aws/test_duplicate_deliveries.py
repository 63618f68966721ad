"""Every queue message delivered twice (SQS delivers at least once), through the real state machine in
moto: slot requests, launches, releases and trial events are each carried out once: no trial created
twice, no run granted twice, no searcher event counted twice, and pause / activate still land once."""

from __future__ import annotations

import pytest

from chalicelib.services import pausing, runs

pytestmark = pytest.mark.aws

RANDOM = {
    "name": "twice",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
    "searcher": {
        "name": "random",
        "metric": "loss",
        "max_trials": 3,
        "max_concurrent_trials": 1,
        "max_length": {"batches": 10},
    },
}


def _run_to_exit(stack, agent: str = "agent-1") -> dict:
    p = stack.ports
    runs.heartbeat(p, agent, "default", 1, [])
    stack.pump_until(lambda: any(r.state == "LAUNCHING" for r in p.runs.for_agent(agent)), deliveries=2)
    (spec,) = runs.heartbeat(p, agent, "default", 1, [])["launch"]
    runs.started(p, agent, spec["run_id"], pid=100)
    runs.exited(p, agent, spec["run_id"], 0, "exited with code 0")
    return spec


def test_a_search_whose_every_message_is_delivered_twice_runs_each_trial_once(stack):
    p = stack.ports
    experiment = stack.submit_experiment(RANDOM)
    specs = []

    def completed() -> int:
        return sum(t.state == "COMPLETED" for t in p.trials.for_experiment(experiment.id))

    for done in range(1, 4):
        specs.append(_run_to_exit(stack))
        stack.pump_until(lambda done=done: completed() == done, deliveries=2)
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "COMPLETED", deliveries=2)
    trials = p.trials.for_experiment(experiment.id)
    assert len(trials) == 3 and {t.state for t in trials} == {"COMPLETED"}
    assert all(t.attempts == 1 and t.restarts == 0 for t in trials)
    assert sorted(s["run_id"] for s in specs) == sorted(f"{t.id}.1" for t in trials)
    assert p.runs.allocated("default") == [] and p.runs.pending("default") == []


def test_pause_and_activate_with_every_message_delivered_twice_resume_the_trial_once(stack):
    p = stack.ports
    experiment = stack.submit_experiment()
    runs.heartbeat(p, "agent-1", "default", 1, [])
    stack.pump_until(lambda: any(r.state == "LAUNCHING" for r in p.runs.for_agent("agent-1")), deliveries=2)
    (spec,) = runs.heartbeat(p, "agent-1", "default", 1, [])["launch"]
    runs.started(p, "agent-1", spec["run_id"], pid=100)

    pausing.pause_experiment(p, experiment.id)
    runs.exited(p, "agent-1", spec["run_id"], 0, "checkpointed")
    stack.pump_until(lambda: p.trials.get(spec["trial_id"]).state == "PAUSED", deliveries=2)
    pausing.activate_experiment(p, experiment.id)
    pausing.activate_experiment(p, experiment.id)  # a retried request
    stack.pump_until(lambda: any(r.state == "LAUNCHING" for r in p.runs.for_agent("agent-1")), deliveries=2)
    (resumed,) = runs.heartbeat(p, "agent-1", "default", 1, [])["launch"]
    assert resumed["run_id"] == f"{spec['trial_id']}.2"
    runs.started(p, "agent-1", resumed["run_id"], pid=101)
    runs.exited(p, "agent-1", resumed["run_id"], 0, "done")
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "COMPLETED", deliveries=2)
    trial = p.trials.get(spec["trial_id"])
    assert (trial.attempts, trial.generation, trial.restarts) == (2, 1, 0)
