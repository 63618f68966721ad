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
from chalicelib.services.ports import Ports, Record


def apply(ports: Ports, experiment: Record, trials: Sequence[Record]) -> list[str]:
    """Delete what the policy does not keep; returns the uuids deleted now."""
    config = experiment["config"]
    storage = config.get("checkpoint_storage") or {}
    latest_n = int(storage.get("save_trial_latest", 1))
    trial_best_n = int(storage.get("save_trial_best", 1))
    experiment_best_n = int(storage.get("save_experiment_best", 0))
    searcher = config.get("searcher") or {}
    metric = str(searcher.get("metric", ""))
    smaller = bool(searcher.get("smaller_is_better", True))

    keep: set[str] = set()
    scored: list[tuple[float, str]] = []
    everything: list[Record] = []
    for trial in trials:
        checkpoints = [c for c in ports.checkpoints.for_trial(int(trial["id"])) if c["state"] == "COMPLETED"]
        everything.extend(checkpoints)
        by_steps = sorted(
            checkpoints, key=lambda c: (int(c["steps_completed"]), str(c["report_time"])), reverse=True
        )
        keep.update(c["uuid"] for c in by_steps[:latest_n])
        values = _validation_values(ports, int(trial["id"]), metric)
        trial_scored = [
            (_rank(values[int(c["steps_completed"])], smaller), str(c["uuid"]))
            for c in checkpoints
            if int(c["steps_completed"]) in values
        ]
        trial_scored.sort()
        keep.update(uuid for _, uuid in trial_scored[:trial_best_n])
        scored.extend(trial_scored)
    scored.sort()
    keep.update(uuid for _, uuid in scored[:experiment_best_n])

    deleted = []
    for checkpoint in everything:
        if checkpoint["uuid"] in keep:
            continue
        prefix = keys.checkpoint_prefix(
            int(checkpoint["experiment_id"]), int(checkpoint["trial_id"]), str(checkpoint["uuid"])
        )
        ports.blobs.delete_prefix(prefix)
        ports.checkpoints.mark_deleted(str(checkpoint["uuid"]))
        deleted.append(str(checkpoint["uuid"]))
    return deleted


def _validation_values(ports: Ports, trial_id: int, metric: str) -> dict[int, float]:
    values: dict[int, float] = {}
    for row in ports.metrics.list(trial_id, "validation"):
        value: Any = (row.get("metrics") or {}).get(metric)
        if isinstance(value, int | float) and math.isfinite(float(value)):
            values[int(row["steps_completed"])] = float(value)
    return values


def _rank(value: float, smaller_is_better: bool) -> float:
    return value if smaller_is_better else -value
