"""Checkpoint retention when an experiment ends, with Determined's three knobs:
`save_experiment_best`, `save_trial_best` and `save_trial_latest`. A checkpoint outside all three is
deleted from S3 and marked DELETED; deleting what is already gone is not an error, so running this
twice (a redelivered event) does no harm.

"Best" ranks a checkpoint by the searcher metric validated at the checkpoint's `steps_completed`; a
checkpoint without such a validation is never "best" (but may still be among the latest).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint, Experiment, Trial
from chalicelib.services import warm_start
from chalicelib.services.ports import Ports


def apply(ports: Ports, experiment: Experiment, trials: Sequence[Trial]) -> list[str]:
    """Delete what the policy does not keep; returns the uuids deleted now."""
    config = experiment.parsed_config
    storage = config.checkpoint_storage
    metric, smaller = config.searcher.metric, config.searcher.smaller_is_better

    keep: set[str] = set()
    scored: list[tuple[float, str]] = []
    everything: list[Checkpoint] = []
    for trial in trials:
        checkpoints = [c for c in ports.checkpoints.for_trial(trial.id) if c.state == "COMPLETED"]
        everything.extend(checkpoints)
        by_steps = sorted(checkpoints, key=lambda c: (c.steps_completed, c.report_time), reverse=True)
        keep.update(c.uuid for c in by_steps[: storage.save_trial_latest])
        values = _validation_values(ports, trial.id, metric)
        trial_scored = [
            (_rank(values[c.steps_completed], smaller), c.uuid)
            for c in checkpoints
            if c.steps_completed in values
        ]
        trial_scored.sort()
        keep.update(uuid for _, uuid in trial_scored[: storage.save_trial_best])
        scored.extend(trial_scored)
    scored.sort()
    keep.update(uuid for _, uuid in scored[: storage.save_experiment_best])
    keep.update(warm_start.sources_in_use(ports, everything))  # experiments still running start from them

    deleted = []
    for checkpoint in everything:
        if checkpoint.uuid in keep:
            continue
        ports.blobs.delete_prefix(
            keys.checkpoint_prefix(checkpoint.experiment_id, checkpoint.trial_id, checkpoint.uuid)
        )
        ports.checkpoints.mark_deleted(checkpoint.uuid)
        deleted.append(checkpoint.uuid)
    return deleted


def _validation_values(ports: Ports, trial_id: int, metric: str) -> dict[int, float]:
    values: dict[int, float] = {}
    for report in ports.metrics.list(trial_id, "validation"):
        value: Any = report.metrics.get(metric)
        if isinstance(value, int | float) and math.isfinite(float(value)):
            values[report.steps_completed] = float(value)
    return values


def _rank(value: float, smaller_is_better: bool) -> float:
    return value if smaller_is_better else -value
