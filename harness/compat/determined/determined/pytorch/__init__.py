"""Determined's `det.pytorch`, served by `stratus.harness.pytorch`."""

from typing import Any

from stratus.harness.compat._determined import unsupported
from stratus.harness.pytorch import (
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
