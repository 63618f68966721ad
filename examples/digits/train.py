"""Digits: a small MLP on scikit-learn's bundled 8x8 handwritten digits, written against Stratus's
Core API (`harness`). The same script runs on the platform and on a laptop (`python3 train.py`).

- hyperparameters come from the trial (defaults off the platform): learning_rate, hidden_size, batch_size;
- it trains as far as the searcher says (`core.searcher.operations()`: the whole `max_length` for
  `single`, one rung after another for `adaptive_asha`; 600 batches when no length is set);
- training loss every 50 batches, validation (accuracy, loss on a fixed 20% holdout) every 200 batches
  and at the end, a checkpoint at every validation;
- it resumes from the trial's latest checkpoint, continuing the batch count, and stops cleanly when the
  platform asks it to (checkpointing first);
- everything is seeded from the trial seed: the batch order depends only on (seed, batch number), so a
  resumed trial sees the same batches it would have seen without the interruption.
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

from stratus import harness
from stratus.harness.core import LocalSearcherContext

DEFAULT_HPARAMS: dict[str, Any] = {"learning_rate": 0.003, "hidden_size": 64, "batch_size": 32}
DEFAULT_MAX_BATCHES = 600
REPORT_EVERY = 50
VALIDATE_EVERY = 200
HOLDOUT_FRACTION = 0.2
SPLIT_SEED = 1234  # fixed, so every trial validates on the same holdout

log = logging.getLogger("digits")


class Data:
    def __init__(self, batch_size: int, seed: int) -> None:
        digits = load_digits()
        x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
        y = torch.tensor(digits.target, dtype=torch.int64)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SPLIT_SEED))
        n_val = int(len(x) * HOLDOUT_FRACTION)
        self.x_val, self.y_val = x[order[:n_val]], y[order[:n_val]]
        self.x_train, self.y_train = x[order[n_val:]], y[order[n_val:]]
        self.batch_size = batch_size
        self.batches_per_epoch = len(self.x_train) // batch_size
        self._seed = seed
        self._epoch = -1
        self._perm = torch.empty(0, dtype=torch.int64)

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch number `index` (from 0): a function of the seed and the index only."""
        epoch, within = divmod(index, self.batches_per_epoch)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self._seed * 100_003 + epoch)
            self._perm = torch.randperm(len(self.x_train), generator=generator)
            self._epoch = epoch
        rows = self._perm[within * self.batch_size : (within + 1) * self.batch_size]
        return self.x_train[rows], self.y_train[rows]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # a model this small only loses time to thread hand-offs


def evaluate(model: nn.Module, data: Data) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        logits = model(data.x_val)
        loss = F.cross_entropy(logits, data.y_val).item()
        accuracy = (logits.argmax(dim=1) == data.y_val).float().mean().item()
    model.train()
    return {"validation_accuracy": accuracy, "validation_loss": loss}


def save(core: harness.Context, model: nn.Module, optimizer: torch.optim.Optimizer, batches: int) -> str:
    with core.checkpoint.store_path({"steps_completed": batches}) as (path, storage_id):
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "batches_trained": batches}
        torch.save(state, path / "state.pt")
    log.info("checkpoint %s at batch %d", storage_id or "(not the chief)", batches)
    return storage_id


def load(core: harness.Context, storage_id: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    with core.checkpoint.restore_path(storage_id) as path:
        state = torch.load(Path(path) / "state.pt", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    batches = int(state["batches_trained"])
    log.info("resumed from checkpoint %s at batch %d", storage_id, batches)
    return batches


def train(core: harness.Context) -> dict[str, float]:
    info = harness.get_cluster_info()
    hparams = {**DEFAULT_HPARAMS, **(info.trial.hparams if info else {})}
    seed = info.trial.trial_seed if info else 0
    seed_everything(seed)
    data = Data(int(hparams["batch_size"]), seed)
    hidden = int(hparams["hidden_size"])
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=float(hparams["learning_rate"]))

    batches = 0
    if info is not None and info.latest_checkpoint:
        batches = load(core, info.latest_checkpoint, model, optimizer)
    checkpointed_at = batches
    validation: dict[str, float] = {}
    loss_sum, loss_count = 0.0, 0

    if isinstance(core.searcher, LocalSearcherContext):
        core.searcher.use_length(DEFAULT_MAX_BATCHES)  # by hand: the full run, unless a length was configured

    # The searcher says how far to train: one operation for `single`, a rung at a time for ASHA.
    for op in core.searcher.operations():
        target = op.length if op.length is not None else DEFAULT_MAX_BATCHES
        log.info("training to %d batches with %s (seed %d)", target, hparams, seed)
        while batches < target:
            x, y = data.batch(batches)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            batches += 1
            loss_sum, loss_count = loss_sum + loss.item(), loss_count + 1

            if batches % REPORT_EVERY == 0:
                core.train.report_training_metrics(
                    steps_completed=batches, metrics={"loss": loss_sum / loss_count}
                )
                core.train.report_progress(min(1.0, batches / target))
                loss_sum, loss_count = 0.0, 0
            if batches % VALIDATE_EVERY == 0 or batches == target:
                validation = evaluate(model, data)
                core.train.report_validation_metrics(steps_completed=batches, metrics=validation)
                log.info(
                    "batch %d: validation_accuracy %.4f, validation_loss %.4f",
                    batches,
                    validation["validation_accuracy"],
                    validation["validation_loss"],
                )
                save(core, model, optimizer, batches)
                checkpointed_at = batches
            if batches % REPORT_EVERY == 0 and batches < target and core.preempt.should_preempt():
                if checkpointed_at != batches:
                    save(core, model, optimizer, batches)
                log.info("preempted at batch %d; exiting to be resumed later", batches)
                return validation
        if not validation:  # resumed exactly at the target: validate once so the searcher has a result
            validation = evaluate(model, data)
            core.train.report_validation_metrics(steps_completed=batches, metrics=validation)
        op.report_completed(validation["validation_accuracy"])
    return validation


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    started = time.monotonic()
    with harness.init() as core:
        validation = train(core)
    log.info("done in %.1f s: %s", time.monotonic() - started, validation)


if __name__ == "__main__":
    main()
