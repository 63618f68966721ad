"""An NNI experiment without maxTrialNumber (`until_stopped`) on the in-memory twin: it keeps
trialConcurrency trials going, and its maxExperimentDuration (`data.nni.max_experiment_duration_s`)
ends it: the first trial event after the limit creates no trial, stops the running ones, and the
experiment completes once they have exited."""

from __future__ import annotations

from typing import Any

from chalicelib.config import translate_nni

NNI_QUICKSTART_SHAPE: dict[str, Any] = {
    "searchSpace": {"lr": {"_type": "loguniform", "_value": [0.001, 0.1]}},
    "trialCommand": "python3 train.py",
    "trialConcurrency": 2,
    "maxExperimentDuration": "10m",
    "tuner": {"name": "Random", "classArgs": {"optimize_mode": "maximize"}},
}


def submit_nni(flow: Any, **changes: Any) -> Any:
    return flow.submit(translate_nni({**NNI_QUICKSTART_SHAPE, **changes}).config)


def test_until_stopped_replaces_every_exited_trial_within_the_time_limit(ports, flow):
    experiment = submit_nni(flow)
    first, second = flow.trial_ids(experiment.id)

    ports.clock.advance(60)
    flow.end_trial(first, "COMPLETED")
    flow.end_trial(second, "ERROR")

    assert len(flow.trial_ids(experiment.id)) == 4  # two exited, two new ones: trialConcurrency kept
    assert ports.experiments.get(experiment.id).state == "ACTIVE"


def test_the_time_limit_stops_new_trials_and_ends_the_experiment(ports, flow):
    experiment = submit_nni(flow)
    first, second = flow.trial_ids(experiment.id)

    ports.clock.advance(600)
    flow.end_trial(first, "COMPLETED")

    assert flow.trial_ids(experiment.id) == [first, second]  # no new trial after the limit
    assert ports.experiments.get(experiment.id).state == "STOPPING_COMPLETED"
    assert ports.trials.get(second).searcher_action == "stop"
    flow.end_trial(second, "COMPLETED")
    assert ports.experiments.get(experiment.id).state == "COMPLETED"


def test_without_a_time_limit_the_experiment_runs_until_stopped(ports, flow):
    experiment = submit_nni(flow, maxExperimentDuration=None)
    first, _ = flow.trial_ids(experiment.id)

    ports.clock.advance(10 * 86400)
    flow.end_trial(first, "COMPLETED")

    assert len(flow.trial_ids(experiment.id)) == 3
    assert ports.experiments.get(experiment.id).state == "ACTIVE"
