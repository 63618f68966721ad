"""PBT on the in-memory twin: a round ends once its members paused, and the trials that replace the
worst start from the best one's checkpoint (their launch spec's latest checkpoint)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from chalicelib.domain.states import TrialState
from chalicelib.services import experiments, searching
from stratus.contract import messages
from stratus.contract.env import HPARAMS, LATEST_CHECKPOINT

PBT: dict[str, Any] = {
    "name": "pbt",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"lr": {"type": "double", "minval": 0.01, "maxval": 1.0}},
    "searcher": {
        "name": "pbt",
        "metric": "loss",
        "population_size": 2,
        "num_rounds": 2,
        "length_per_round": {"batches": 10},
        "replace_function": {"truncate_fraction": 0.5},
        "explore_function": {"resample_probability": 0.0, "perturb_factor": 0.2},
    },
}


def _report(ports, experiment_id: int, trial_id: int, length: int, loss: float) -> None:
    ports.trials.record_searcher_length(trial_id, length)
    searching.handle_event(
        ports,
        messages.ValidationReported(
            event_id=f"validation-{trial_id}-{length}",
            experiment_id=experiment_id,
            trial_id=trial_id,
            length=length,
            metric=loss,
        ),
    )


def _pause(ports, experiment_id: int, trial_id: int, steps: int) -> str:
    """The trial checkpointed (its pause checkpoint) and exited paused; the pause's event delivered."""
    checkpoint = str(uuid.uuid4())
    ports.trials.set_latest_checkpoint(trial_id, checkpoint, steps)
    ports.trials.transition(trial_id, TrialState.PAUSED)
    paused = messages.TrialPaused(f"paused-{trial_id}.1", trial_id, experiment_id, "PAUSED")
    searching.handle_event(ports, paused)
    return checkpoint


def test_the_worst_trial_is_replaced_by_one_starting_from_the_best_ones_checkpoint(ports, flow):
    experiment = flow.submit(PBT)
    best, worst = flow.trial_ids(experiment.id)
    _report(ports, experiment.id, best, 10, 0.1)
    _report(ports, experiment.id, worst, 10, 0.9)
    assert ports.trials.get(best).searcher_action == "pause"
    best_checkpoint = _pause(ports, experiment.id, best, 10)
    assert len(flow.trial_ids(experiment.id)) == 2  # the round waits for every member's pause
    _pause(ports, experiment.id, worst, 10)

    trial_ids = flow.trial_ids(experiment.id)
    assert len(trial_ids) == 3
    child = ports.trials.get(trial_ids[-1])
    assert child.warm_start_trial_id == best
    assert child.latest_checkpoint == child.warm_start_checkpoint == best_checkpoint
    assert child.target_length == 10  # its own batches count from 0
    # The best goes on a round (resumed in a new execution); the worst is done.
    assert ports.trials.get(best).searcher_action == "train"
    assert ports.trials.get(best).target_length == 20
    assert ports.trials.get(best).generation == 1
    assert ports.trials.get(worst).state == TrialState.COMPLETED

    spec = flow.place(child.id)
    assert spec["environment"][LATEST_CHECKPOINT] == best_checkpoint
    parent_lr = ports.trials.get(best).hparams["lr"]
    child_lr = json.loads(spec["environment"][HPARAMS])["lr"]
    explored = (pytest.approx(parent_lr * 1.2), pytest.approx(parent_lr * 0.8), 0.01, 1.0)
    assert any(child_lr == value for value in explored)

    # The child's own checkpoints replace the warm start as its latest.
    own = str(uuid.uuid4())
    ports.trials.set_latest_checkpoint(child.id, own, 10)
    assert ports.trials.get(child.id).latest_checkpoint == own


def test_a_redelivered_pause_creates_no_second_child(ports, flow):
    experiment = flow.submit(PBT)
    best, worst = flow.trial_ids(experiment.id)
    _report(ports, experiment.id, best, 10, 0.1)
    _report(ports, experiment.id, worst, 10, 0.9)
    _pause(ports, experiment.id, best, 10)
    _pause(ports, experiment.id, worst, 10)
    again = messages.TrialPaused(f"paused-{worst}.1", worst, experiment.id, "PAUSED")
    searching.handle_event(ports, again)
    assert len(flow.trial_ids(experiment.id)) == 3


def test_a_round_in_epochs_is_converted_to_batches_when_it_can_be():
    config = {
        **PBT,
        "records_per_epoch": 6000,
        "hyperparameters": {**PBT["hyperparameters"], "global_batch_size": 64},
        "searcher": {**PBT["searcher"], "length_per_round": {"epochs": 1}},
    }
    parsed = experiments.validate(config).config
    assert searching.search_spec(parsed).max_length == 6000 // 64
    unconverted = {**config, "records_per_epoch": 0}  # the trial measures its epochs itself
    assert searching.search_spec(experiments.validate(unconverted).config).max_length == 1
