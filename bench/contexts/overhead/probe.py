"""The harness-overhead probe: the same MLP on scikit-learn's digits, trained three ways in a trial on the
platform, each timing its own batches (bench/harness_overhead.py reads the `BENCH` line):

- `plain`: a plain PyTorch loop over a DataLoader; the harness is initialised and never called;
- `core`: the same loop through the Core API, the way Determined's Core API tutorials write it: a
  training metric and the operation's progress every `report_every` batches, `should_preempt()` after
  every batch, the searcher's operation completed at the end;
- `trainer`: the same model and data as a `PyTorchTrial`, trained by the harness's `Trainer` (which
  reports every `scheduling_unit` batches and asks `should_preempt()` there).

Each mode times the batches from the start of batch `WARMUP` to the start of its last batch: whole
training steps with whatever the harness does between them, first-batch set-up left out. It prints three
figures per batch: wall-clock seconds, CPU seconds of the training thread, and CPU seconds of the whole
trial process (the harness's background threads included). On a shared VM the wall clock also carries
the host's noise; the CPU figures carry only the work done.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate

from stratus import harness
from stratus.harness import pytorch

WARMUP = 20
BATCH_SIZE = 32
HIDDEN = 128


#: Seconds spent fetching batches so far (reading the samples and collating them), by `TimedDigits`.
FETCHED = [0.0]


class TimedDigits(TensorDataset):
    """The digits, timing how long the loader spends reading samples and collating them (the loader's
    own share of the time outside the step, which is not the harness's)."""

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, ...]]:
        start = time.perf_counter()
        samples = [self[i] for i in indices]
        FETCHED[0] += time.perf_counter() - start
        return samples


def collate(samples: list[tuple[torch.Tensor, ...]]) -> Any:
    start = time.perf_counter()
    batch = default_collate(samples)
    FETCHED[0] += time.perf_counter() - start
    return batch


def dataset() -> TensorDataset:
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    return TimedDigits(x, torch.tensor(digits.target, dtype=torch.int64))


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))


def batches(loader: DataLoader, count: int):  # noqa: ANN201
    while True:
        for batch in loader:
            if count == 0:
                return
            count -= 1
            yield batch


def clocks() -> tuple[float, float, float, float]:
    return time.perf_counter(), time.thread_time(), time.process_time(), FETCHED[0]


def report(mode: str, starts: list[tuple[float, ...]], ends: list[float], count: int) -> None:
    """Per batch: wall clock, training thread CPU, trial process CPU, time fetching the batch, and the
    wall-clock time outside the training step (from the end of `optimizer.step()` to the start of the next
    batch: the fetch, the loop, and the harness's calls or bookkeeping). Outside minus fetch is measured
    inside one process on small quantities, so the host's drift between trials hardly moves it."""
    batches = count - 1 - WARMUP
    per_batch = [(last - first) / batches for first, last in zip(starts[0], starts[-1], strict=True)]
    in_steps = sum(end - start[0] for start, end in zip(starts[:-1], ends, strict=False))
    per_batch.append(per_batch[0] - in_steps / batches)
    print(f"BENCH {mode} " + " ".join(f"{value:.9f}" for value in per_batch), flush=True)


def loop(mode: str, count: int, every: int) -> None:
    torch.set_num_threads(1)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(dataset(), batch_size=BATCH_SIZE, shuffle=True, drop_last=True, collate_fn=collate)
    with harness.init() as core:
        starts: list[tuple[float, ...]] = []
        ends: list[float] = []
        for op in core.searcher.operations():
            for index, (x, y) in enumerate(batches(loader, count)):
                if index >= WARMUP:
                    starts.append(clocks())
                optimizer.zero_grad()
                loss = F.cross_entropy(net(x), y)
                loss.backward()
                optimizer.step()
                if index >= WARMUP:
                    ends.append(time.perf_counter())
                if mode == "core":
                    if (index + 1) % every == 0:
                        core.train.report_training_metrics(
                            steps_completed=index + 1, metrics={"loss": loss.item()}
                        )
                        op.report_progress(index + 1)
                    if core.preempt.should_preempt():
                        return
            report(mode, starts, ends, count)
            op.report_completed(loss.item())


class ProbeTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        torch.set_num_threads(1)
        self.context = context
        self.model = context.wrap_model(model())
        self.optimizer = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        self.count = int(context.get_hparam("batches"))
        self.starts: list[tuple[float, ...]] = []
        self.ends: list[float] = []

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            dataset(), batch_size=BATCH_SIZE, shuffle=True, drop_last=True, collate_fn=collate
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(dataset(), batch_size=len(dataset()))

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        if batch_idx >= WARMUP:
            self.starts.append(clocks())
        if batch_idx == self.count - 1:
            report("trainer", self.starts, self.ends, self.count)
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        if batch_idx >= WARMUP:
            self.ends.append(time.perf_counter())
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"loss": F.cross_entropy(self.model(x), y)}


if __name__ == "__main__":
    loop(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
