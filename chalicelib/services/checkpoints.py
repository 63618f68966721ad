"""Checkpoints as users read them: an experiment's (`det experiment list-checkpoints ID [--best N]`),
one by uuid (`det checkpoint describe`), and the presigned GET URLs of its files (`det checkpoint
download`: the CLI holds no AWS credentials, so S3 is reached through URLs the API signs).

"Best" is Determined's: ranked by the searcher metric (`searcher.metric`, `smaller_is_better`) of the
validation reported at the checkpoint's `steps_completed`; only checkpoints with such a validation, and
whose files still exist, are ranked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint, Experiment
from chalicelib.errors import BadRequestError, ConflictError, NotFoundError
from chalicelib.services import experiments
from chalicelib.services.ports import Ports

METADATA_FILE = "metadata.json"


@dataclass(frozen=True)
class ValidatedCheckpoint:
    """A checkpoint with the validation metrics reported at its steps, and its searcher metric's value."""

    checkpoint: Checkpoint
    validation: dict[str, Any] | None
    searcher_value: float | None


def for_experiment(
    ports: Ports, experiment_id: int, best: int | None = None
) -> tuple[Experiment, list[ValidatedCheckpoint]]:
    """The experiment and its checkpoints: all of them by report time, or its `best` ones, best first."""
    experiment = experiments.get(ports, experiment_id)
    config = experiment.parsed_config.searcher
    found: list[ValidatedCheckpoint] = []
    for trial in ports.trials.for_experiment(experiment_id):
        validations = {r.steps_completed: r.metrics for r in ports.metrics.list(trial.id, "validation")}
        for checkpoint in ports.checkpoints.for_trial(trial.id):
            validation = validations.get(checkpoint.steps_completed)
            found.append(ValidatedCheckpoint(checkpoint, validation, _value(validation, config.metric)))
    if best is None:
        return experiment, sorted(found, key=lambda c: (c.checkpoint.report_time, c.checkpoint.uuid))
    ranked = [c for c in found if c.searcher_value is not None and c.checkpoint.state == "COMPLETED"]
    sign = 1.0 if config.smaller_is_better else -1.0
    ranked.sort(key=lambda c: (sign * (c.searcher_value or 0.0), c.checkpoint.report_time))
    return experiment, ranked[:best]


def _value(validation: dict[str, Any] | None, metric: str) -> float | None:
    value = (validation or {}).get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def get(ports: Ports, uuid: str) -> Checkpoint:
    if not keys.is_uuid(uuid):
        raise BadRequestError(
            f"{uuid!r} is not a checkpoint uuid; `det experiment list-checkpoints ID` shows them"
        )
    checkpoint = ports.checkpoints.get(uuid)
    if checkpoint is None:
        raise NotFoundError(
            f"checkpoint {uuid} not found; `det experiment list-checkpoints ID` shows the uuids"
        )
    return checkpoint


def download_urls(ports: Ports, uuid: str) -> tuple[Checkpoint, dict[str, str]]:
    """A checkpoint and a presigned GET URL for each of its files (by path relative to the checkpoint)."""
    checkpoint = get(ports, uuid)
    if checkpoint.state != "COMPLETED":
        raise ConflictError(
            f"checkpoint {uuid} is {checkpoint.state}: its files were removed, by `det checkpoint delete` "
            "or the experiment's checkpoint_storage policy (save_experiment_best, save_trial_best, "
            "save_trial_latest); keep more with those settings, or download another checkpoint"
        )
    experiment_id, trial_id = checkpoint.experiment_id, checkpoint.trial_id
    files = sorted(set(checkpoint.resources) | {METADATA_FILE})
    urls = {
        path: ports.blobs.presign_get(keys.checkpoint_object_key(experiment_id, trial_id, uuid, path))
        for path in files
    }
    return checkpoint, urls
