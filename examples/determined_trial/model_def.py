"""Digits with Determined's trial API: a `PyTorchTrial` subclass, run unchanged by Stratus.

On Stratus (`entrypoint: model_def:DigitsTrial`) the harness builds the trial from the config and trains
it: the searcher's `max_length` in epochs is converted with `records_per_epoch` and `global_batch_size`,
it validates every `min_validation_period`, checkpoints at the end (and when preempted), and resumes
exactly from its latest checkpoint. `python3 model_def.py` trains it off the platform with the defaults
below, through Determined's `det.pytorch.init()` + `Trainer.fit(max_length=...)`.
"""

from __future__ import annotations

import logging
from typing import Any

import determined as det
import torch
import torch.nn.functional as F
from determined import pytorch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

SPLIT_SEED = 1234  # fixed, so every trial validates on the same 20% holdout
LOCAL_HPARAMS: dict[str, Any] = {
    "global_batch_size": 32,
    "learning_rate": 0.003,
    "hidden_size": 64,
    "dropout": 0.1,
}


def digits_datasets() -> tuple[TensorDataset, TensorDataset]:
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = int(len(x) * 0.2)
    val, train = order[:n_val], order[n_val:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val])


class DigitsTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        torch.set_num_threads(1)  # a model this small only loses time to thread hand-offs
        self.context = context
        hidden = int(context.get_hparam("hidden_size"))
        model = nn.Sequential(
            nn.Linear(64, hidden),
            nn.ReLU(),
            nn.Dropout(float(context.get_hparam("dropout"))),
            nn.Linear(hidden, 10),
        )
        self.model = context.wrap_model(model)
        self.optimizer = context.wrap_optimizer(
            torch.optim.Adam(self.model.parameters(), lr=float(context.get_hparam("learning_rate")))
        )
        self.scheduler = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=4, gamma=0.5),
            step_mode=pytorch.LRScheduler.StepMode.STEP_EVERY_EPOCH,
        )
        self.train_set, self.val_set = digits_datasets()

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            self.train_set, batch_size=self.context.get_per_slot_batch_size(), shuffle=True, drop_last=True
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.val_set, batch_size=len(self.val_set))

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss, "lr": self.scheduler.get_last_lr()[0]}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        return {
            "validation_loss": F.cross_entropy(logits, y),
            "validation_accuracy": (logits.argmax(dim=1) == y).float().mean(),
        }


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    config = {
        "searcher": {"metric": "validation_accuracy"},
        "records_per_epoch": 1438,
        "min_validation_period": {"epochs": 2},
    }
    with pytorch.init(hparams=LOCAL_HPARAMS, exp_conf=config) as train_context:
        trial = DigitsTrial(train_context)
        pytorch.Trainer(trial, train_context).fit(max_length=pytorch.Epoch(10))
