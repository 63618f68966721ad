"""Determined's Core API (`det.core`), served by `harness.core`."""

from harness.compat._determined import DistributedContext, PreemptMode, TensorboardMode, init, unsupported
from harness.core import (
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
