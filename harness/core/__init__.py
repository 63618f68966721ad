"""The Core API: `init()` gives a `Context` of sub-contexts, each with a local twin for use off the
platform (Determined's `determined.core`).

    with stratus.harness.core.init() as core:
        core.train.report_training_metrics(steps_completed=100, metrics={"loss": 0.3})
        with core.checkpoint.store_path({"steps_completed": 100}) as (path, storage_id):
            torch.save(state, path / "state.pt")
        if core.preempt.should_preempt():
            return
        for op in core.searcher.operations():     # how long to train, from the searcher
            ...
            op.report_completed(validation_accuracy)

Only the chief (rank 0) reports metrics and progress and stores checkpoints; on other ranks those
calls are no-ops, so one script serves every rank.
"""

from __future__ import annotations

from stratus.harness.core._checkpoint import (
    CheckpointContext,
    LocalCheckpointContext,
    PlatformCheckpointContext,
)
from stratus.harness.core._context import Context, get_cluster_info, init
from stratus.harness.core._distributed import DistributedContext
from stratus.harness.core._events import LocalEvents, read_events
from stratus.harness.core._preempt import LocalPreemptContext, PlatformPreemptContext, PreemptContext
from stratus.harness.core._searcher import (
    PlatformSearcherContext,
    SearcherContext,
    SearcherMode,
    SearcherOperation,
    Unit,
)
from stratus.harness.core._searcher_local import DEFAULT_LOCAL_LENGTH, LocalSearcherContext
from stratus.harness.core._train import EarlyExitReason, LocalTrainContext, PlatformTrainContext, TrainContext

__all__ = [
    "DEFAULT_LOCAL_LENGTH",
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "EarlyExitReason",
    "LocalCheckpointContext",
    "LocalEvents",
    "LocalPreemptContext",
    "LocalSearcherContext",
    "LocalTrainContext",
    "PlatformCheckpointContext",
    "PlatformPreemptContext",
    "PlatformSearcherContext",
    "PlatformTrainContext",
    "PreemptContext",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TrainContext",
    "Unit",
    "get_cluster_info",
    "init",
    "read_events",
]
