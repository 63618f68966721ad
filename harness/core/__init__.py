"""The Core API: `init()` gives a `Context` of sub-contexts, each with a local twin for use off the
platform (Determined's `determined.core`).

    with harness.core.init() as core:
        core.train.report_training_metrics(steps_completed=100, metrics={"loss": 0.3})
        with core.checkpoint.store_path({"steps_completed": 100}) as (path, storage_id):
            torch.save(state, path / "state.pt")
        if core.preempt.should_preempt():
            return

Only the chief (rank 0) reports metrics and progress and stores checkpoints; on other ranks those
calls are no-ops, so one script serves every rank.
"""

from __future__ import annotations

from harness.core._checkpoint import CheckpointContext, LocalCheckpointContext, PlatformCheckpointContext
from harness.core._context import Context, get_cluster_info, init
from harness.core._distributed import DistributedContext
from harness.core._preempt import LocalPreemptContext, PlatformPreemptContext, PreemptContext
from harness.core._train import LocalTrainContext, PlatformTrainContext, TrainContext

__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "LocalCheckpointContext",
    "LocalPreemptContext",
    "LocalTrainContext",
    "PlatformCheckpointContext",
    "PlatformPreemptContext",
    "PlatformTrainContext",
    "PreemptContext",
    "TrainContext",
    "get_cluster_info",
    "init",
]
