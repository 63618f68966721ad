"""A PyTorchTrial that is hard to resume exactly (tests/unit/harness/pytorch/test_exact_resume.py and
tests/integration/test_exact_resume_process.py run it; it is data, not a test module).

- dropout and batch norm (parameters, buffers, torch's RNG), two optimizers (Adam, SGD with Nesterov
  momentum), an LR scheduler stepped every batch and one stepped every epoch;
- training data from the loader named by the `loader` hyperparameter (one of `LOADERS`, see
  `build_training_data_loader`), shuffled, with a last partial batch, read through a dataset that draws
  noise from torch's RNG; every batch also draws augmentation noise from `random`, `numpy.random` and
  torch, and reports what it drew and which records it saw, so that any difference in data order or RNG
  state shows in the training metrics;
- validation through a plain torch DataLoader (whose iterator draws a seed from torch's RNG).

`preempt_at` (hyperparameter): the batch indices at which the trial asks to be preempted (the trainer
stops at the end of that chunk), by `preempt_with`: "latch" (`core.preempt.latch`, what the heartbeat's
answer does) or "sigterm" (a real SIGTERM to this process, what an agent's stop sends).
"""

from __future__ import annotations

import random
import signal
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, RandomSampler, TensorDataset

from stratus.harness.pytorch import DataLoader, LRScheduler, PyTorchTrial, PyTorchTrialContext

FEATURES, CLASSES = 6, 3
TRAIN_RECORDS = 60  # with batches of 8: 8 batches an epoch, the last one of 4 records
LOADERS = ("torch", "torch_generator", "torch_workers", "harness", "harness_sampler", "harness_workers")


class Jittered(Dataset[tuple[torch.Tensor, ...]]):
    """Records with noise drawn from torch's global RNG as each one is read (as torchvision's random
    transforms do)."""

    def __init__(self, records: TensorDataset) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        x, y, index = self.records[i]
        return x + 0.01 * torch.randn(FEATURES), y, index


def synthetic() -> tuple[Jittered, TensorDataset]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(TRAIN_RECORDS + 24, FEATURES, generator=g)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).long() + (x[:, 3] > 1).long()
    index = torch.arange(len(x), dtype=torch.float32)
    train = TensorDataset(x[:TRAIN_RECORDS], y[:TRAIN_RECORDS], index[:TRAIN_RECORDS])
    return Jittered(train), TensorDataset(x[TRAIN_RECORDS:], y[TRAIN_RECORDS:], index[TRAIN_RECORDS:])


class ResumeTrial(PyTorchTrial):
    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        self.train_set, self.val_set = synthetic()
        model = nn.Sequential(
            nn.Linear(FEATURES, 16),
            nn.BatchNorm1d(16),
            nn.ReLU(),
            nn.Dropout(0.3),
            nn.Linear(16, CLASSES),
        )
        self.model = context.wrap_model(model)
        body = [p for layer in list(self.model)[:2] for p in layer.parameters()]
        self.adam = context.wrap_optimizer(torch.optim.Adam(body, lr=0.01))
        self.sgd = context.wrap_optimizer(
            torch.optim.SGD(self.model[4].parameters(), lr=0.1, momentum=0.9, nesterov=True)
        )
        context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.ExponentialLR(self.adam, gamma=0.97),
            step_mode=LRScheduler.StepMode.STEP_EVERY_BATCH,
        )
        context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.sgd, step_size=1, gamma=0.8),
            step_mode=LRScheduler.StepMode.STEP_EVERY_EPOCH,
        )
        self.preempt_at = set(context.get_hparams().get("preempt_at") or [])
        self.preempt_with = str(context.get_hparams().get("preempt_with") or "latch")
        self.trained: list[int] = []  # the batch indices this process trained

    def build_training_data_loader(self) -> Any:
        kind = self.context.get_hparam("loader")
        size = self.context.get_per_slot_batch_size()
        if kind == "torch":  # the sampler's seed comes from torch's global RNG, each epoch
            return torch.utils.data.DataLoader(self.train_set, batch_size=size, shuffle=True)
        if kind == "torch_generator":  # the sampler draws from the loader's own generator
            generator = torch.Generator().manual_seed(self.context.get_trial_seed())
            return torch.utils.data.DataLoader(
                self.train_set, batch_size=size, shuffle=True, generator=generator
            )
        if kind == "torch_workers":  # two worker processes, seeded at each epoch's start
            return torch.utils.data.DataLoader(
                self.train_set, batch_size=size, shuffle=True, num_workers=2, multiprocessing_context="fork"
            )
        if kind == "harness":
            return DataLoader(self.train_set, batch_size=size, shuffle=True)
        if kind == "harness_sampler":  # a sampler of the user's, drawing from torch's global RNG
            return DataLoader(self.train_set, batch_size=size, sampler=RandomSampler(self.train_set))
        if kind == "harness_workers":
            return DataLoader(
                self.train_set, batch_size=size, shuffle=True, num_workers=2, multiprocessing_context="fork"
            )
        raise ValueError(f"loader {kind!r} is not one of {', '.join(LOADERS)}")

    def build_validation_data_loader(self) -> Any:
        return torch.utils.data.DataLoader(self.val_set, batch_size=10)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        if batch_idx in self.preempt_at:
            if self.preempt_with == "sigterm":
                signal.raise_signal(signal.SIGTERM)
            else:
                self.context.core.preempt.latch(f"asked at batch {batch_idx}")
        x, y, index = batch
        py_draw = random.random()
        np_draw = float(np.random.standard_normal())
        noise = 0.05 * torch.randn_like(x) + 0.01 * torch.from_numpy(
            np.random.standard_normal(tuple(x.shape)).astype(np.float32)
        )
        loss = F.cross_entropy(self.model(x + noise + 0.01 * py_draw), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.adam)
        self.context.step_optimizer(self.sgd)
        self.trained.append(batch_idx)
        return {
            "loss": loss,
            "records": float((index * torch.arange(1, len(index) + 1)).sum()),  # which records, in what order
            "py_draw": py_draw,
            "np_draw": np_draw,
            "torch_draw": float(torch.rand(())),
            "lr_adam": self.adam.param_groups[0]["lr"],
            "lr_sgd": self.sgd.param_groups[0]["lr"],
        }

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y, _ = batch
        logits = self.model(x)
        return {
            "val_loss": F.cross_entropy(logits, y),
            "val_accuracy": (logits.argmax(dim=1) == y).float().mean(),
        }
