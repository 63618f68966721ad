"""Determined's Core API (`det.core`), served by `stratus.harness.core`."""

from stratus.harness.compat._determined import (
    DistributedContext,
    PreemptMode,
    TensorboardMode,
    init,
    unsupported,
)
from stratus.harness.core import (
    CheckpointContext,
    Context,
    EarlyExitReason,
    PreemptContext,
    SearcherContext,
    SearcherMode,
    SearcherOperation,
    TrainContext,
    Unit,
)

__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "EarlyExitReason",
    "PreemptContext",
    "PreemptMode",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "Unit",
    "init",
]

__getattr__ = unsupported("determined.core")
