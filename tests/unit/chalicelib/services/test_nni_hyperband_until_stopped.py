"""An NNI Hyperband experiment without maxTrialNumber (`until_stopped`) on the in-memory twin: when one
iteration's brackets have all their trials, the next iteration's come, trialConcurrency at a time,
and its maxExperimentDuration ends it as it ends an endless random search (`services/searching.py`)."""

from __future__ import annotations

from typing import Any

from chalicelib.config import translate_nni

NNI_HYPERBAND: dict[str, Any] = {
    "searchSpace": {"lr": {"_type": "loguniform", "_value": [0.001, 0.1]}},
    "trialCommand": "python3 train.py",
    "trialConcurrency": 2,
    "maxExperimentDuration": "10m",
    "tuner": {"name": "Hyperband", "classArgs": {"optimize_mode": "maximize", "R": 3, "eta": 3}},
}
ONE_ITERATION = 5  # R = 3, eta = 3: bracket s = 1 starts 3 configurations, bracket s = 0 starts 2


def running(flow: Any, experiment_id: int) -> list[int]:
    trials = (flow.ports.trials.get(t) for t in flow.trial_ids(experiment_id))
    return [t.id for t in trials if t is not None and not t.state.terminal]


def test_the_iterations_repeat_until_the_time_limit_ends_the_experiment(ports, flow):
    experiment = flow.submit(translate_nni(NNI_HYPERBAND).config)
    assert len(running(flow, experiment.id)) == 2
    for _ in range(2 * ONE_ITERATION):  # each exits before a result: the worst at its rung
        flow.end_trial(running(flow, experiment.id)[0], "COMPLETED")
        assert len(running(flow, experiment.id)) == 2  # trialConcurrency kept
    assert len(flow.trial_ids(experiment.id)) == 2 * ONE_ITERATION + 2  # a third iteration has begun
    assert ports.experiments.get(experiment.id).state == "ACTIVE"

    ports.clock.advance(600)
    first, second = running(flow, experiment.id)
    flow.end_trial(first, "COMPLETED")
    assert len(flow.trial_ids(experiment.id)) == 2 * ONE_ITERATION + 2  # no new trial after the limit
    assert ports.experiments.get(experiment.id).state == "STOPPING_COMPLETED"
    flow.end_trial(second, "COMPLETED")
    assert ports.experiments.get(experiment.id).state == "COMPLETED"
