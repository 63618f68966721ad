"""Searcher events turned into trials and experiment ends, on the in-memory twin."""

from __future__ import annotations

import dataclasses

import pytest

from chalicelib.domain.searchers import ContinueTrial
from chalicelib.memory import MemoryExperiments
from chalicelib.services import experiment_ending, search_specs, searching
from stratus.contract import messages

RANDOM = {
    "name": "random",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "random", "metric": "loss", "max_trials": 2, "max_length": {"batches": 20}},
    "hyperparameters": {"x": {"type": "int", "minval": 1, "maxval": 9}},
}


def test_the_experiment_completes_when_its_trial_does(ports, flow):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    ports.clock.advance(60)
    flow.end_trial(trial_id, "COMPLETED")
    ended = ports.experiments.get(experiment.id)
    assert ended.state == "COMPLETED" and ended.end_time == "2026-01-01T00:01:00.000Z"
    assert ended.progress == 1
    again = messages.TrialExited(
        event_id="again", trial_id=trial_id, experiment_id=experiment.id, state="COMPLETED"
    )
    searching.handle_event(ports, again)  # a redelivered event for an ended experiment does nothing
    assert ports.experiments.get(experiment.id).version == ended.version


def test_the_experiment_errors_when_no_trial_completed(ports, flow):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    flow.end_trial(trial_id, "ERROR")
    assert ports.experiments.get(experiment.id).state == "ERROR"


def test_trials_are_created_once_per_searcher_request(ports, flow):
    experiment = flow.submit(RANDOM)
    first, second = flow.trial_ids(experiment.id)
    assert ports.experiments.get(experiment.id).num_trials == 2
    trial = ports.trials.get(first)
    assert trial.request_id and trial.attempts == 0 and trial.generation == 0
    assert 1 <= trial.hparams["x"] <= 9
    # Starting the searcher again (a redelivered activation) creates nothing.
    searching.start(ports, ports.experiments.get(experiment.id))
    assert flow.trial_ids(experiment.id) == [first, second]
    assert sorted(ports.workflows.executions) == [f"trial-{first}-0", f"trial-{second}-0"]


def test_a_validation_event_answers_the_trials_pending_result(ports, flow):
    experiment = flow.submit(RANDOM)
    first, _ = flow.trial_ids(experiment.id)
    ports.trials.items[first]["searcher_pending"] = True  # its result awaits an answer
    event = {
        "type": "validation",
        "event_id": f"validation-{first}-20",
        "experiment_id": experiment.id,
        "trial_id": first,
        "length": 20,
        "metric": 0.5,
    }
    searching.handle_event(ports, messages.parse_event(event))
    assert ports.trials.get(first).searcher_pending is False
    version = ports.experiments.get(experiment.id).searcher_version
    ports.trials.items[first]["searcher_pending"] = True  # as if the trial had reported again
    searching.handle_event(
        ports, messages.parse_event(event)
    )  # a redelivered event: the searcher has seen it, and its answer was carried out
    assert ports.experiments.get(experiment.id).searcher_version == version
    assert ports.trials.get(first).searcher_pending is True


def test_an_invalid_hp_trial_is_replaced(ports, flow):
    config = {**RANDOM, "searcher": {**RANDOM["searcher"], "max_trials": 1, "max_concurrent_trials": 1}}
    experiment = flow.submit(config)
    (first,) = flow.trial_ids(experiment.id)
    ports.trials.mark_invalid_hp(first, "invalid hyperparameters: x too large")
    flow.end_trial(first, "COMPLETED")
    first_again, replacement = flow.trial_ids(experiment.id)
    assert first_again == first and ports.trials.get(replacement).state == "QUEUED"
    flow.end_trial(replacement, "COMPLETED")
    assert ports.experiments.get(experiment.id).state == "COMPLETED"


def test_a_paused_trial_the_searcher_promoted_meanwhile_resumes_in_a_new_execution(ports, flow):
    experiment = flow.submit(RANDOM)
    first, _ = flow.trial_ids(experiment.id)
    _pause(ports, first)
    paused = messages.TrialPaused(
        event_id="paused-1", trial_id=first, experiment_id=experiment.id, state="PAUSED"
    )
    searching.handle_event(ports, paused)
    assert ports.trials.get(first).generation == 1
    assert flow.execution(first, generation=1)["trial_id"] == first
    ports.trials.transition(first, "QUEUED")  # the new execution's Enqueue
    searching.handle_event(ports, paused)  # redelivered: the trial is no longer paused
    assert ports.trials.get(first).generation == 1
    assert f"trial-{first}-2" not in ports.workflows.executions


def _first_trial_paused(ports, flow):
    """A random-searcher experiment whose first trial ran and paused; the pause's event (not sent)."""
    experiment = flow.submit(RANDOM)
    first, _ = flow.trial_ids(experiment.id)
    flow.request_slots(first)  # the execution's Enqueue: the trial's attempts move on
    _pause(ports, first)
    event_id = f"paused-{ports.trials.get(first).attempts}"
    return experiment, first, messages.TrialPaused(event_id, first, experiment.id, "PAUSED")


def test_a_pause_event_redelivered_while_the_trial_is_still_paused_resumes_it_once(ports, flow):
    _, first, paused = _first_trial_paused(ports, flow)
    searching.handle_event(ports, paused)
    searching.handle_event(ports, paused)  # redelivered before the new execution's Enqueue
    assert ports.trials.get(first).generation == 1
    assert f"trial-{first}-2" not in ports.workflows.executions


def test_a_promotion_racing_the_pause_event_starts_one_execution(ports, flow):
    experiment, first, paused = _first_trial_paused(ports, flow)
    searching._continue_trial(ports, experiment, ContinueTrial(trial_id=first, length=200))  # promoted
    searching.handle_event(ports, paused)
    assert ports.trials.get(first).generation == 1
    assert f"trial-{first}-2" not in ports.workflows.executions


def test_a_trial_paused_again_after_its_resume_resumes_again(ports, flow):
    _, first, paused = _first_trial_paused(ports, flow)
    searching.handle_event(ports, paused)
    flow.request_slots(first)  # the new execution's Enqueue
    _pause(ports, first)
    searching.handle_event(ports, dataclasses.replace(paused, event_id="paused-2"))
    assert ports.trials.get(first).generation == 2
    assert f"trial-{first}-2" in ports.workflows.executions


def test_a_paused_trial_the_searcher_stopped_meanwhile_is_completed(ports, flow):
    experiment = flow.submit(RANDOM)
    first, _ = flow.trial_ids(experiment.id)
    _pause(ports, first)
    ports.trials.set_searcher_action(first, "stop")
    searching.handle_event(
        ports, messages.TrialPaused(event_id="p", trial_id=first, experiment_id=experiment.id, state="PAUSED")
    )
    assert ports.trials.get(first).state == "COMPLETED"
    (closed,) = ports.queues.take_events()
    assert closed == {
        "type": "trial_exited",
        "event_id": f"closed-{first}",
        "trial_id": first,
        "experiment_id": experiment.id,
        "state": "COMPLETED",
    }


def test_a_shutdown_with_a_trial_still_running_waits_in_stopping(ports, flow):
    experiment = flow.submit(RANDOM)
    first, second = flow.trial_ids(experiment.id)
    for trial_id in (first, second):
        assert ports.trials.transition(trial_id, "PULLING") and ports.trials.transition(trial_id, "RUNNING")
    flow.end_trial(first, "COMPLETED")
    assert ports.experiments.get(experiment.id).state == "ACTIVE"
    # The searcher shuts down once both trials exited; with one exit left, emulate a trial still at work
    # by ending the second trial's searcher work and sending a Shutdown through its exit's event.
    experiment_ending.on_searcher_shutdown(
        ports,
        ports.experiments.get(experiment.id),
        search_specs.search_spec(experiment.parsed_config),
        failure=False,
    )
    assert ports.experiments.get(experiment.id).state == "STOPPING_COMPLETED"
    assert ports.trials.get(second).searcher_action == "stop"
    assert ports.trials.get(second).early_stopped is True
    flow.end_trial(second, "COMPLETED")
    assert ports.experiments.get(experiment.id).state == "COMPLETED"


def _pause(ports, trial_id):
    for state in ("PULLING", "RUNNING", "PAUSED"):
        assert ports.trials.transition(trial_id, state)


class _RacedExperiments(MemoryExperiments):
    """Another consumer saves the searcher `races` times, each between this consumer's read and its
    write."""

    def __init__(self, items, races=1):
        super().__init__()
        self.items = items
        self.races = races

    def save_searcher(self, experiment_id, snapshot, expected_version):
        if self.races > 0:
            self.races -= 1
            stored = self.items[experiment_id]
            super().save_searcher(experiment_id, stored["searcher"], stored["searcher_version"])
        return super().save_searcher(experiment_id, snapshot, expected_version)


def test_a_consumer_that_loses_the_race_for_the_searcher_answers_from_the_winners_state(ports, flow):
    experiment = flow.submit(RANDOM)
    first, _ = flow.trial_ids(experiment.id)
    ports.trials.items[first]["searcher_pending"] = True
    raced = dataclasses.replace(ports, experiments=_RacedExperiments(ports.experiments.items))
    event = messages.ValidationReported(
        event_id=f"validation-{first}-20", experiment_id=experiment.id, trial_id=first, length=20, metric=0.5
    )
    searching.handle_event(raced, event)
    assert ports.trials.get(first).searcher_pending is False
    snapshot = ports.experiments.get(experiment.id).searcher
    assert snapshot["seen_events"].count(event.event_id) == 1
    assert snapshot["outbox"]["pending"] == []


def test_a_consumer_that_keeps_losing_changes_nothing_and_the_event_comes_again(ports, flow):
    experiment = flow.submit(RANDOM)
    first, _ = flow.trial_ids(experiment.id)
    ports.trials.items[first]["searcher_pending"] = True
    raced = dataclasses.replace(
        ports, experiments=_RacedExperiments(ports.experiments.items, races=searching.DRIVE_ATTEMPTS)
    )
    event = messages.ValidationReported(
        event_id=f"validation-{first}-20", experiment_id=experiment.id, trial_id=first, length=20, metric=0.5
    )
    with pytest.raises(searching.StaleSearcherError, match=f"searcher of experiment {experiment.id} changed"):
        searching.handle_event(raced, event)
    assert ports.trials.get(first).searcher_pending is True  # not answered: nothing was carried out
    assert event.event_id not in ports.experiments.get(experiment.id).searcher["seen_events"]
    searching.handle_event(raced, event)  # delivered again
    assert ports.trials.get(first).searcher_pending is False


HYPERBAND = {
    "name": "hyperband",
    "entrypoint": "python3 train.py",
    # R = 9, eta = 3, cut at 4 configurations: one bracket of rungs 4 -> 1 -> 1 at lengths 1, 3, 9
    "searcher": {"name": "hyperband", "metric": "loss", "max_trials": 4, "max_length": {"batches": 9}},
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
}


def _validate(ports, experiment_id, trial_id, length, metric):
    """What `trial_reports.report_searcher_result` does for a run: record the length, send the event."""
    ports.trials.record_searcher_length(trial_id, length)
    event = messages.ValidationReported(
        event_id=f"validation-{trial_id}-{length}",
        experiment_id=experiment_id,
        trial_id=trial_id,
        length=length,
        metric=metric,
    )
    searching.handle_event(ports, event)


def test_hyperband_pauses_a_rung_then_continues_the_best_from_its_checkpoint_and_closes_the_rest(ports, flow):
    experiment = flow.submit(HYPERBAND)
    trial_ids = flow.trial_ids(experiment.id)
    assert len(trial_ids) == 4 and {ports.trials.get(t).target_length for t in trial_ids} == {1}
    metrics = dict(zip(trial_ids, [0.4, 0.1, 0.3, 0.2], strict=True))
    for trial_id in trial_ids[:3]:
        _validate(ports, experiment.id, trial_id, 1, metrics[trial_id])
        assert ports.trials.get(trial_id).searcher_action == "pause"  # waits for the whole rung
        _pause(ports, trial_id)
        searching.handle_event(
            ports, messages.TrialPaused(f"paused-{trial_id}", trial_id, experiment.id, "PAUSED")
        )
        assert ports.trials.get(trial_id).state == "PAUSED"
    _validate(ports, experiment.id, trial_ids[3], 1, metrics[trial_ids[3]])  # the rung decides
    best = trial_ids[1]
    assert ports.trials.get(best).target_length == 3 and ports.trials.get(best).generation == 1
    assert flow.execution(best, generation=1)["trial_id"] == best  # resumed from its checkpoint
    ports.trials.transition(best, "QUEUED")  # the new execution's Enqueue
    for state in ("PULLING", "RUNNING"):
        assert ports.trials.transition(best, state)
    assert [ports.trials.get(t).state for t in (trial_ids[0], trial_ids[2])] == ["COMPLETED"] * 2
    assert ports.trials.get(trial_ids[3]).searcher_action == "stop"  # still running: told to stop
    assert flow.deliver_events() == 2  # the closed trials' exits reach the searcher
    flow.end_trial(trial_ids[3], "COMPLETED")
    _validate(ports, experiment.id, best, 3, 0.05)  # rung 1 holds one trial: it goes on at once
    assert (ports.trials.get(best).searcher_action, ports.trials.get(best).target_length) == ("train", 9)
    _validate(ports, experiment.id, best, 9, 0.01)
    assert ports.trials.get(best).searcher_action == "stop"
    flow.end_trial(best, "COMPLETED")
    ended = ports.experiments.get(experiment.id)
    assert ended.state == "COMPLETED" and ended.progress == 1
    assert ports.trials.get(best).early_stopped is False
    assert ports.trials.get(trial_ids[0]).early_stopped is True
