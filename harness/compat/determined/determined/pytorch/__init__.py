"""Determined's `det.pytorch`, served by `harness.pytorch`."""

from typing import Any

from harness.compat._determined import unsupported
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

__getattr__ = unsupported(
    "determined.pytorch",
    {"deepspeed": "run DeepSpeed through python3 -m determined.launch.deepspeed with a Core API script"},
)
