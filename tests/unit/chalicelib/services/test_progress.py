"""An experiment's progress is the units its trials trained over its searcher's total (Determined's), moved
by training reports between the searcher's events; blank where no end is known. On the in-memory twin."""

from __future__ import annotations

from chalicelib.domain import searchers
from chalicelib.services import runs, trial_reports

#: Two trials at once out of four, 20 batches each: the total is 80 batches.
RANDOM = {
    "name": "progress",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
    "searcher": {
        "name": "random",
        "metric": "loss",
        "max_trials": 4,
        "max_concurrent_trials": 2,
        "max_length": {"batches": 20},
    },
}


def _running(ports, flow, trial_id, agent="agent-1"):
    spec = flow.place(trial_id, agent=agent)
    runs.started(ports, agent, spec["run_id"], 10)
    return ports.runs.get(spec["run_id"])


def test_a_single_trials_training_reports_move_its_experiment_along(ports, flow):
    experiment = flow.submit()  # single, 10 batches
    (trial_id,) = flow.trial_ids(experiment.id)
    run = _running(ports, flow, trial_id)
    assert ports.experiments.get(experiment.id).progress == 0.0
    trial_reports.report_metrics(ports, run, "training", 3, {"loss": 0.9})
    assert ports.experiments.get(experiment.id).progress == 0.3
    trial_reports.report_metrics(ports, run, "training", 2, {"loss": 0.8})  # a late report: no step back
    assert ports.experiments.get(experiment.id).progress == 0.3
    trial_reports.report_metrics(ports, run, "training", 7, {"loss": 0.5})
    assert ports.experiments.get(experiment.id).progress == 0.7


def test_core_apis_report_progress_moves_a_single_trials_experiment(ports, flow):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    run = _running(ports, flow, trial_id)
    trial_reports.report_progress(ports, run, 0.45)
    assert ports.experiments.get(experiment.id).progress == 0.45


def test_a_random_search_counts_every_trials_batches_over_the_whole_budget(ports, flow):
    experiment = flow.submit(RANDOM)
    first, second = flow.trial_ids(experiment.id)
    run = _running(ports, flow, first)
    trial_reports.report_metrics(ports, run, "training", 10, {"loss": 0.9})
    assert ports.experiments.get(experiment.id).progress == 10 / 80
    other = _running(ports, flow, second, agent="agent-2")
    trial_reports.report_metrics(ports, other, "training", 4, {"loss": 0.9})
    # The searcher knows the first trial's 10 batches only from the report, which raised the progress.
    assert ports.experiments.get(experiment.id).progress == 10 / 80
    trial_reports.report_metrics(ports, other, "training", 20, {"loss": 0.9})
    assert ports.experiments.get(experiment.id).progress == 20 / 80


def test_the_searchers_measure_knows_the_trained_shares_of_live_trials():
    spec = searchers.SearchSpec({}, {"name": "single", "metric": "loss"}, 100, 0)
    single = searchers.SingleSearcher(spec=spec)
    (create,) = single.initial_operations()
    single.on_event(searchers.TrialCreated("c", create.request_id, 7))
    assert single.progress() == 0.0 and single.progress({7: 0.25}) == 0.25
    endless = searchers.SingleSearcher(spec=searchers.SearchSpec({}, {"name": "single"}, None, 0))
    assert endless.progress() is None  # no length and no report: no end known, blank
    until_stopped = searchers.RandomSearcher(
        spec=searchers.SearchSpec(
            {}, {"name": "random", "until_stopped": True, "max_concurrent_trials": 2}, 10, 0
        )
    )
    assert until_stopped.progress() is None
