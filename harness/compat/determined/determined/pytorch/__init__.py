"""Determined's `det.pytorch`, served by `harness.pytorch`."""

from typing import Any

from harness.pytorch import (
    Batch,
    DataLoader,
    Epoch,
    LRScheduler,
    PyTorchCallback,
    PyTorchTrial,
    PyTorchTrialContext,
    Reducer,
    Trainer,
    TrainUnit,
    init,
    to_device,
)

TorchData = Any

__all__ = [
    "Batch",
    "DataLoader",
    "Epoch",
    "LRScheduler",
    "PyTorchCallback",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "Reducer",
    "TorchData",
    "TrainUnit",
    "Trainer",
    "init",
    "to_device",
]
