"""A Determined Core API script written as a careful user would for an exact resume
(tests/unit/harness/pytorch/test_exact_resume.py and tests/integration/test_exact_resume_process.py run it;
data, not a test module).

The Core API saves nothing by itself: the script's checkpoint must hold everything the rest of the run
depends on. Here that is the model (dropout, batch norm buffers), the optimizer (Adam's moments), the LR
scheduler (stepped every batch), the batch count, and the states of every RNG the training draws from:
`random`, numpy's global RNG and torch's. The data order is a function of (seed, epoch) alone (each
epoch's loader gets its own seeded generator), so a resumed trial restarts its epoch's loader and skips
the batches it already trained, without reading them.

`main(core_context, preempt_at=...)` (or `PREEMPT_AT=4,28` run as a script): the batches at which the
script sends itself SIGTERM, as an agent's stop would; it checkpoints and stops at its next report.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import random
import signal
from collections.abc import Iterator
from typing import Any

import determined as det
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BATCH_SIZE = 8
RECORDS = 60  # 8 batches an epoch (drop_last)
REPORT_EVERY = 3
VALIDATE_EVERY = 8


def datasets() -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(RECORDS + 20, 5, generator=g)
    y = (x[:, 0] * x[:, 1] + x[:, 2] > 0).long()
    return TensorDataset(x[:RECORDS], y[:RECORDS]), TensorDataset(x[RECORDS:], y[RECORDS:])


def batches(data: TensorDataset, seed: int, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Training batches from batch number `start` on: epoch e's order comes from (seed, e) alone."""
    per_epoch = RECORDS // BATCH_SIZE
    for epoch in itertools.count(start // per_epoch):
        loader = DataLoader(
            data,
            batch_size=BATCH_SIZE,
            shuffle=True,
            drop_last=True,
            generator=torch.Generator().manual_seed(seed * 1_000 + epoch),
        )
        skip = start - epoch * per_epoch if epoch == start // per_epoch else 0
        # islice skips the first batches of the epoch without using the global RNGs.
        yield from itertools.islice(loader, skip, None)


def rng_states() -> dict[str, Any]:
    return {"random": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["random"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


def main(core_context: det.core.Context, preempt_at: frozenset[int] = frozenset()) -> list[int]:
    """Train as the searcher says; the batch indices this run trained."""
    info = det.get_cluster_info()
    seed = info.trial.trial_seed if info else 0
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    train_set, val_set = datasets()
    model = nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.98)

    steps = 0
    if info is not None and info.latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
            state = torch.load(pathlib.Path(path) / "state.pt", weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        steps = int(state["steps"])
        restore_rng_states(state["rng"])  # last: nothing above may draw after it

    def checkpoint() -> None:
        state = {
            "model": model.state_dict(),
            "opt": opt.state_dict(),
            "sched": sched.state_dict(),
            "steps": steps,
            "rng": rng_states(),
        }
        with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            torch.save(state, path / "state.pt")

    trained: list[int] = []
    data = batches(train_set, seed, steps)
    losses: list[float] = []
    for op in core_context.searcher.operations():
        while steps < op.length:
            if steps in preempt_at:
                signal.raise_signal(signal.SIGTERM)  # what an agent's stop sends
            x, y = next(data)
            x = x + 0.05 * torch.randn_like(x) + float(np.random.normal(0, 0.01)) + random.gauss(0, 0.01)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            trained.append(steps)
            steps += 1
            losses.append(loss.item())
            if steps % REPORT_EVERY == 0 or steps % VALIDATE_EVERY == 0 or steps == op.length:
                core_context.train.report_training_metrics(
                    steps_completed=steps,
                    metrics={"loss": sum(losses) / len(losses), "lr": sched.get_last_lr()[0]},
                )
                losses.clear()
                if steps % VALIDATE_EVERY == 0:
                    validate(core_context, model, val_set, steps)
                if core_context.preempt.should_preempt():
                    checkpoint()
                    return trained
        metrics = validate(core_context, model, val_set, steps)
        op.report_completed(metrics["val_loss"])
    checkpoint()
    return trained


def validate(
    core_context: det.core.Context, model: nn.Module, data: TensorDataset, steps: int
) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        x, y = data.tensors
        logits = model(x)
        metrics = {
            "val_loss": F.cross_entropy(logits, y).item(),
            "val_accuracy": (logits.argmax(1) == y).float().mean().item(),
        }
    model.train()
    core_context.train.report_validation_metrics(steps_completed=steps, metrics=metrics)
    return metrics


if __name__ == "__main__":
    at = os.environ.get("PREEMPT_AT", "")
    with det.core.init() as core_context:
        main(core_context, frozenset(int(s) for s in at.split(",") if s))
