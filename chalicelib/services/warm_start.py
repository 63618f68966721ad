"""Determined's warm start: `searcher.source_checkpoint_uuid` or `searcher.source_trial_id` makes every
trial of an experiment start its model and optimizer from one checkpoint of another trial, while counting
its own batches from 0 (the harness sees a checkpoint another trial wrote: `harness/pytorch/_trainer.py`).

- `source_trial_id` means that trial's latest checkpoint when the experiment is created: of its
  COMPLETED checkpoints, the one with the most steps (Determined's `LatestCheckpointForTrial`), resolved
  once, at creation, as Determined does, and kept on the experiment (`Experiment.warm_start_checkpoint`).
- `check_source` runs at `det experiment create`: a checkpoint that does not exist (or is not complete:
  a checkpoint has a record only once its files are all stored), whose files were deleted, or whose
  experiment is being deleted, and a trial that does not exist or has no checkpoint, are refused (404 or
  400) naming the value and what to do.
- `claim` marks the source as used by the new experiment (`Checkpoint.used_by`) before its record exists,
  then checks the source again: a deletion that raced the create either sees the claim and refuses, or
  deleted first and the create is refused. While an experiment that starts from a checkpoint has not
  ended, `det checkpoint delete` of it and `det experiment delete` of the experiment holding it are
  refused (409), and its own experiment's retention policy keeps it (`sources_in_use`). Each check
  reads only the checkpoints concerned and the experiments that claimed them.
- `may_restore` lets a trial read its source checkpoint, which belongs to another experiment.
"""

from __future__ import annotations

from collections.abc import Iterable

from chalicelib import config as cfg
from chalicelib.domain.records import Checkpoint, Experiment
from chalicelib.domain.states import ExperimentState
from chalicelib.errors import BadRequestError, ConflictError, NotFoundError
from chalicelib.services.ports import Ports


def check_source(ports: Ports, config: cfg.ExperimentConfig) -> str | None:
    """The checkpoint the config's trials start from, checked (None without a warm start); refuse one
    that cannot be restored."""
    searcher = config.searcher
    if searcher.source_checkpoint_uuid is not None:
        return _check_checkpoint(ports, searcher.source_checkpoint_uuid).uuid
    if searcher.source_trial_id is not None:
        return _check_trial(ports, searcher.source_trial_id).uuid
    return None


def claim(ports: Ports, uuid: str, experiment_id: int, config: cfg.ExperimentConfig) -> None:
    """Mark checkpoint `uuid` as the source of experiment `experiment_id` (not created yet), then check it
    once more: its deletion, racing this create, either saw the mark or came first."""
    if ports.checkpoints.add_user(uuid, experiment_id) is None or check_source(ports, config) != uuid:
        raise ConflictError(
            f"checkpoint {uuid}, the warm-start source, was deleted or replaced while experiment "
            f"{experiment_id} was created; create it again to start from what is there now"
        )


def _check_checkpoint(ports: Ports, uuid: str) -> Checkpoint:
    where = f"searcher.source_checkpoint_uuid {uuid}"
    checkpoint = ports.checkpoints.get(uuid)
    if checkpoint is None:
        raise NotFoundError(
            f"{where}: no such checkpoint (a checkpoint is listed once all its files are stored); "
            "`det experiment list-checkpoints ID` shows an experiment's checkpoints"
        )
    if checkpoint.state != "COMPLETED":
        raise BadRequestError(
            f"{where}: the checkpoint is {checkpoint.state}, its files were removed; warm-start from "
            f"another one (`det experiment list-checkpoints {checkpoint.experiment_id}`)"
        )
    _check_experiment_kept(ports, checkpoint, where)
    return checkpoint


def _check_trial(ports: Ports, trial_id: int) -> Checkpoint:
    where = f"searcher.source_trial_id {trial_id}"
    trial = ports.trials.get(trial_id)
    if trial is None:
        raise NotFoundError(
            f"{where}: no such trial; `det experiment list-trials ID` shows an experiment's trial ids"
        )
    checkpoint = latest_checkpoint(ports, trial_id)
    if checkpoint is None:
        raise BadRequestError(
            f"{where}: trial {trial_id} has no checkpoint to start from (none stored, or their files were "
            "removed); wait until it stores one, or set searcher.source_checkpoint_uuid instead"
        )
    _check_experiment_kept(ports, checkpoint, where)
    return checkpoint


def _check_experiment_kept(ports: Ports, checkpoint: Checkpoint, where: str) -> None:
    experiment = ports.experiments.get(checkpoint.experiment_id)
    if experiment is None or experiment.state == ExperimentState.DELETING:
        raise BadRequestError(
            f"{where}: experiment {checkpoint.experiment_id}, which holds checkpoint {checkpoint.uuid}, "
            "is being deleted with its checkpoints; warm-start from a checkpoint of another experiment"
        )


def latest_checkpoint(ports: Ports, trial_id: int) -> Checkpoint | None:
    """The trial's COMPLETED checkpoint with the most steps, or None."""
    found = [c for c in ports.checkpoints.for_trial(trial_id) if c.state == "COMPLETED"]
    return max(found, key=lambda c: (c.steps_completed, c.report_time), default=None)


def may_restore(ports: Ports, trial_id: int, uuid: str) -> bool:
    """Whether trial `trial_id` may read checkpoint `uuid` of another experiment: its warm-start source."""
    trial = ports.trials.get(trial_id)
    return trial is not None and trial.warm_start_checkpoint == uuid


def running_users(ports: Ports, checkpoint: Checkpoint) -> list[Experiment]:
    """The experiments that start from `checkpoint` and have not ended (nor are being deleted)."""
    users = (ports.experiments.get(experiment_id) for experiment_id in checkpoint.used_by)
    return [
        user
        for user in users
        if user is not None and not user.state.terminal and user.state != ExperimentState.DELETING
    ]


def sources_in_use(ports: Ports, checkpoints: Iterable[Checkpoint]) -> set[str]:
    """Those of `checkpoints` that an experiment still running starts from: what a retention policy keeps."""
    return {c.uuid for c in checkpoints if c.used_by and running_users(ports, c)}


def refuse_deleting_checkpoints(ports: Ports, checkpoints: Iterable[Checkpoint]) -> None:
    """`det checkpoint delete`: raise ConflictError when one of `checkpoints` is the source of an
    experiment that has not ended (its next trial, or a restart, restores it)."""
    for checkpoint in checkpoints:
        if checkpoint.state == "COMPLETED" and (users := running_users(ports, checkpoint)):
            raise ConflictError(
                f"checkpoint {checkpoint.uuid} cannot be deleted: {_uses(users[0])}; delete it "
                f"{_after(users[0])}"
            )


def refuse_deleting_experiment(ports: Ports, experiment_id: int) -> None:
    """`det experiment delete`: raise ConflictError when a checkpoint of the experiment is the source of
    another experiment that has not ended."""
    for trial in ports.trials.for_experiment(experiment_id):
        for checkpoint in ports.checkpoints.for_trial(trial.id):
            if checkpoint.used_by and (users := running_users(ports, checkpoint)):
                raise ConflictError(
                    f"experiment {experiment_id} cannot be deleted: it holds checkpoint {checkpoint.uuid}, "
                    f"and {_uses(users[0])}; delete experiment {experiment_id} {_after(users[0])}"
                )


def _uses(user: Experiment) -> str:
    searcher = user.parsed_config.searcher
    field = "source_checkpoint_uuid" if searcher.source_checkpoint_uuid is not None else "source_trial_id"
    return f"experiment {user.id} ({user.state}) starts its trials from it (searcher.{field})"


def _after(user: Experiment) -> str:
    return f"once experiment {user.id} has ended (`det experiment wait {user.id}`, or cancel it first)"
