"""Stratus's in-trial library: report metrics, store and restore checkpoints, and notice preemption.

    from stratus import harness

    with harness.init() as core:
        info = harness.get_cluster_info()          # None off the platform
        hparams = info.trial.hparams if info else {"learning_rate": 1e-3}
        ...
        core.train.report_validation_metrics(steps_completed=n, metrics={"validation_accuracy": acc})

See `stratus.harness.core` for the sub-contexts (`core.searcher.operations()` says how long to train) and
`stratus.harness.pytorch` for `PyTorchTrial` and its `Trainer`. Raise `harness.InvalidHP` when the
hyperparameters cannot work: leaving the `with` block with it tells the searcher and exits with code 0.
Errors raised are `harness.HarnessError` and its subclasses.
"""

from __future__ import annotations

from stratus.harness._info import ClusterInfo, TrialInfo
from stratus.harness.core import (
    CheckpointContext,
    Context,
    DistributedContext,
    PreemptContext,
    SearcherContext,
    SearcherOperation,
    TrainContext,
    get_cluster_info,
    init,
)
from stratus.harness.errors import (
    ApiCallError,
    CheckpointError,
    HarnessError,
    InvalidHP,
    SearcherError,
    TrialDefinitionError,
    UnsafeArchiveError,
)

__all__ = [
    "ApiCallError",
    "CheckpointContext",
    "CheckpointError",
    "ClusterInfo",
    "Context",
    "DistributedContext",
    "HarnessError",
    "InvalidHP",
    "PreemptContext",
    "SearcherContext",
    "SearcherError",
    "SearcherOperation",
    "TrainContext",
    "TrialDefinitionError",
    "TrialInfo",
    "UnsafeArchiveError",
    "get_cluster_info",
    "init",
]
