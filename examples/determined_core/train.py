"""Digits with Determined's Core API only (`import determined as det`): runs unchanged on Determined and
on Stratus, and off both (`python3 train.py`).

- hyperparameters from `det.get_cluster_info()` (defaults below off the platform);
- trains for each searcher operation's length (in batches: `searcher.max_length: {batches: N}`),
  reporting the training loss every 25 batches and a validation at the end of each operation, whose
  `validation_accuracy` goes back to the searcher with `op.report_completed()`;
- checkpoints after each operation and when preempted (`should_preempt()`), resumes from
  `latest_checkpoint`; batch n is drawn from (seed, n) alone, so a resumed trial continues exactly;

What a Core API script must save for a resumed trial to end exactly as an uninterrupted one (the Core
API, Determined's as ours, stores the files you write and nothing else):
- the model's state_dict (parameters and buffers, e.g. batch norm statistics), the optimizer's (Adam's
  moments, momentum) and every LR scheduler's;
- where it is: the batch count, and anything else the loop keeps (a running loss, the last validation);
- the data order: make batch n a function of (seed, n), as `Digits.batch` does, or save the sampler's
  state; a `torch.utils.data.DataLoader(shuffle=True)` without a `generator` draws each epoch's order
  from torch's global RNG;
- the RNG states of everything that draws (dropout, augmentation, noise): `random`, numpy's global RNG
  and torch's (CUDA's too on GPUs), restored last, after building the model and loading the rest;
- and checkpoint only where the loop can stop (after the metrics of a report), so that the reports of a
  resumed trial fall on the same batches.
This example draws nothing at random while training, but saves and restores the RNG states anyway, so
that adding dropout or augmentation keeps the resume exact.
- raises `det.InvalidHP` for a batch size the data cannot fill.
"""

from __future__ import annotations

import logging
import pathlib
import random
import time
from typing import Any

import determined as det
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

DEFAULT_HPARAMS: dict[str, Any] = {"learning_rate": 0.003, "hidden_size": 64, "batch_size": 32}
REPORT_EVERY = 25
SPLIT_SEED = 1234  # fixed, so every trial validates on the same 20% holdout

log = logging.getLogger("digits-core")


class Digits:
    def __init__(self, batch_size: int, seed: int) -> None:
        digits = load_digits()
        x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
        y = torch.tensor(digits.target, dtype=torch.int64)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SPLIT_SEED))
        n_val = int(len(x) * 0.2)
        self.x_val, self.y_val = x[order[:n_val]], y[order[:n_val]]
        self.x_train, self.y_train = x[order[n_val:]], y[order[n_val:]]
        self.batch_size = batch_size
        self.per_epoch = len(self.x_train) // batch_size
        if self.per_epoch == 0:
            raise det.InvalidHP(
                f"batch_size {batch_size} is larger than the {len(self.x_train)} training images"
            )
        self.seed = seed

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, within = divmod(index, self.per_epoch)
        perm = torch.randperm(
            len(self.x_train), generator=torch.Generator().manual_seed(self.seed * 1009 + epoch)
        )
        rows = perm[within * self.batch_size : (within + 1) * self.batch_size]
        return self.x_train[rows], self.y_train[rows]


def evaluate(model: nn.Module, data: Digits) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        logits = model(data.x_val)
        metrics = {
            "validation_loss": F.cross_entropy(logits, data.y_val).item(),
            "validation_accuracy": (logits.argmax(dim=1) == data.y_val).float().mean().item(),
        }
    model.train()
    return metrics


def rng_states() -> dict[str, Any]:
    states = {"random": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["random"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def save(core_context: det.core.Context, model: nn.Module, opt: torch.optim.Optimizer, batches: int) -> None:
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "batches": batches, "rng": rng_states()}
    with core_context.checkpoint.store_path({"steps_completed": batches}) as (path, storage_id):
        torch.save(state, path / "state.pt")
    log.info("checkpoint %s at batch %d", storage_id, batches)


def main(core_context: det.core.Context) -> None:
    info = det.get_cluster_info()
    hparams = dict(info.trial.hparams) if info else dict(DEFAULT_HPARAMS)
    seed = info.trial.trial_seed if info else 0
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    data = Digits(int(hparams["batch_size"]), seed)
    hidden = int(hparams["hidden_size"])
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    opt = torch.optim.Adam(model.parameters(), lr=float(hparams["learning_rate"]))

    batches = 0
    if info is not None and info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            # Our own file, holding RNG states (tuples, numpy arrays): not weights only.
            state = torch.load(pathlib.Path(path) / "state.pt", weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        batches = int(state["batches"])
        if "rng" in state:  # last, once nothing else will draw before training resumes
            restore_rng_states(state["rng"])
        log.info("resumed at batch %d", batches)

    checkpointed = batches
    losses: list[float] = []
    for op in core_context.searcher.operations():
        while batches < op.length:
            x, y = data.batch(batches)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            batches += 1
            losses.append(loss.item())
            if batches % REPORT_EVERY == 0 or batches == op.length:
                core_context.train.report_training_metrics(
                    steps_completed=batches, metrics={"loss": sum(losses) / len(losses)}
                )
                losses.clear()
                op.report_progress(batches)
                if core_context.preempt.should_preempt():
                    save(core_context, model, opt, batches)
                    return
        metrics = evaluate(model, data)
        core_context.train.report_validation_metrics(steps_completed=batches, metrics=metrics)
        op.report_completed(metrics["validation_accuracy"])
        if checkpointed != batches:
            save(core_context, model, opt, batches)
            checkpointed = batches


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    started = time.monotonic()
    with det.core.init() as core_context:
        main(core_context)
    log.info("done in %.1f s", time.monotonic() - started)
