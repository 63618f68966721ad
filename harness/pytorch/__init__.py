"""`PyTorchTrial` and its `Trainer` (Determined's `determined.pytorch`), on top of `stratus.harness.core`.

Two ways in:

- a trial class named by the config's legacy `entrypoint: model_def:MyTrial`, run by
  `python -m stratus.harness.exec.run_trial model_def:MyTrial`;
- a script: `with stratus.harness.pytorch.init() as context: Trainer(MyTrial(context), context).fit()`.

torch is imported inside the functions that need it, so importing this package costs nothing.
"""

from __future__ import annotations

from stratus.harness.pytorch._checkpoint import STATE_FILE
from stratus.harness.pytorch._context import PyTorchTrialContext
from stratus.harness.pytorch._data import DataLoader, to_device
from stratus.harness.pytorch._init import init, seed_everything
from stratus.harness.pytorch._lr_scheduler import LRScheduler
from stratus.harness.pytorch._trainer import Trainer
from stratus.harness.pytorch._trial import PyTorchCallback, PyTorchTrial, Reducer
from stratus.harness.pytorch._units import Batch, Epoch, Records, TrainUnit

__all__ = [
    "STATE_FILE",
    "Batch",
    "DataLoader",
    "Epoch",
    "LRScheduler",
    "PyTorchCallback",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "Records",
    "Reducer",
    "TrainUnit",
    "Trainer",
    "init",
    "seed_everything",
    "to_device",
]
