"""Cancel and kill through the real state machine in moto: a canceled or killed trial's exit ends it
CANCELED (the workflow's Cancel), and its experiment ends CANCELED; a warm-started trial's fields are
stored in DynamoDB."""

from __future__ import annotations

import pytest

from chalicelib.domain.records import Trial
from chalicelib.services import runs, stopping, trial_reports

pytestmark = pytest.mark.aws

RANDOM = {
    "name": "stoppable",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
    "searcher": {"name": "random", "metric": "loss", "max_trials": 4, "max_length": {"batches": 10}},
}


def test_a_killed_experiment_ends_canceled_and_its_running_trial_with_it(stack):
    p = stack.ports
    experiment = stack.submit_experiment(RANDOM)
    spec = stack.launch_on_agent()
    runs.started(p, "agent-1", spec["run_id"], pid=123)

    killed = stopping.kill_experiment(p, experiment.id)
    assert killed.state == "CANCELED"  # its run ended here: nothing is left to wait for
    assert runs.heartbeat(p, "agent-1", "default", 1, [spec["run_id"]])["kill"] == [spec["run_id"]]
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "CANCELED")
    assert {t.state for t in p.trials.for_experiment(experiment.id)} == {"CANCELED"}
    stack.pump_until(lambda: stack.execution_status(spec["trial_id"]) == "SUCCEEDED")
    assert p.runs.allocated("default") == []  # slots given back


def test_a_canceled_experiments_running_trial_stops_at_its_checkpoint(stack):
    p = stack.ports
    experiment = stack.submit_experiment(RANDOM)
    spec = stack.launch_on_agent()
    runs.started(p, "agent-1", spec["run_id"], pid=123)

    stopping.cancel_experiment(p, experiment.id)
    run = p.runs.get(spec["run_id"])
    assert trial_reports.heartbeat(p, run) == {"preempt": True}
    runs.exited(p, "agent-1", spec["run_id"], 0, "exited with code 0")  # after its checkpoint
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "CANCELED")
    assert p.trials.get(spec["trial_id"]).state == "CANCELED"
    assert len(p.trials.for_experiment(experiment.id)) == 4  # created at the start; none since


def test_a_warm_started_trial_keeps_its_parent_and_checkpoint(ports):
    ports.trials.create(
        Trial(
            id=77,
            experiment_id=7,
            state="QUEUED",
            warm_start_trial_id=76,
            warm_start_checkpoint="c" * 8,
            latest_checkpoint="c" * 8,
        )
    )
    trial = ports.trials.get(77)
    assert (trial.warm_start_trial_id, trial.warm_start_checkpoint) == (76, "c" * 8)
    ports.trials.set_latest_checkpoint(77, "own", 10)  # its first own checkpoint replaces it
    assert ports.trials.get(77).latest_checkpoint == "own"
