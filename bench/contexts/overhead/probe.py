"""The harness-overhead probe: the same model trained three ways in a trial on the platform, each timing
its own batches (bench/harness_overhead.py reads the `BENCH` line). Two models:

- `mlp` (on CPU): an MLP on scikit-learn's digits, batch 32, one thread;
- `conv` (on a GPU): a conv net of realistic shape (3→128→128→256→256→512 channels, BatchNorm, batch
  128) on 32×32 synthetic images held in a CPU dataset, so every batch is read, collated and copied to
  the GPU as a user's images would be. The plain loop is written the way a careful user writes one:
  `pin_memory=True` and `.to(device, non_blocking=True)`; the trainer gets Determined's `DataLoader` with
  its defaults.

The modes:

- `plain`: a plain PyTorch loop over a DataLoader; the harness is initialised and never called;
- `core`: the same loop through the Core API, the way Determined's Core API tutorials write it: a
  training metric and the operation's progress every `report_every` batches, `should_preempt()` after
  every batch, the searcher's operation completed at the end;
- `trainer`: the same model and data as a `PyTorchTrial`, trained by the harness's `Trainer` (which
  reports every `scheduling_unit` batches and asks `should_preempt()` there); hyperparameter
  `pin_memory` false passes `pin_memory=False` to its `DataLoader` (what the default saves on a GPU),
  `blocking_copy` true copies batches to the GPU as the trainer did before (`copy_and_wait`).

Each mode times the batches from the start of batch `WARMUP` to the start of its last batch: whole
training steps with whatever the harness does between them, first-batch set-up left out. It prints three
figures per batch: wall-clock seconds, CPU seconds of the training thread, and CPU seconds of the whole
trial process (the harness's background threads included). On a shared VM the wall clock also carries
the host's noise; the CPU figures carry only the work done. On a GPU the first and last timed batches
wait for the GPU to finish (`torch.cuda.synchronize()`), so the wall clock spans the GPU's work too.
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
CONV_BATCH_SIZE = 128
IMAGES = 8192  # 96 MiB of synthetic 32×32 images


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


def dataset(kind: str = "mlp") -> TensorDataset:
    if kind == "conv":
        generator = torch.Generator().manual_seed(0)
        images = torch.randn(IMAGES, 3, 32, 32, generator=generator)
        return TimedDigits(images, torch.randint(0, 10, (IMAGES,), generator=generator))
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    return TimedDigits(x, torch.tensor(digits.target, dtype=torch.int64))


def _block(inputs: int, outputs: int) -> list[nn.Module]:
    return [nn.Conv2d(inputs, outputs, 3, padding=1, bias=False), nn.BatchNorm2d(outputs), nn.ReLU()]


def model(kind: str = "mlp") -> nn.Module:
    torch.manual_seed(0)
    if kind == "conv":
        return nn.Sequential(
            *_block(3, 128),
            *_block(128, 128),
            nn.MaxPool2d(2),
            *_block(128, 256),
            *_block(256, 256),
            nn.MaxPool2d(2),
            *_block(256, 512),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(512, 10),
        )
    return nn.Sequential(nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))


def batch_size(kind: str) -> int:
    return CONV_BATCH_SIZE if kind == "conv" else BATCH_SIZE


def batches(loader: DataLoader, count: int):  # noqa: ANN201
    while True:
        for batch in loader:
            if count == 0:
                return
            count -= 1
            yield batch


def clocks(index: int = -1, count: int = 0) -> tuple[float, float, float, float]:
    """The clocks at the start of batch `index`; at the first and last timed batches on a GPU, once the GPU
    has finished what was queued (in between, nothing waits for it that the loop would not)."""
    if index in (WARMUP, count - 1) and torch.cuda.is_available():
        torch.cuda.synchronize()
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


def loop(mode: str, count: int, every: int, kind: str) -> None:
    torch.set_num_threads(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = model(kind).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(
        dataset(kind),
        batch_size=batch_size(kind),
        shuffle=True,
        drop_last=True,
        collate_fn=collate,
        pin_memory=device.type == "cuda",
    )
    with harness.init() as core:
        starts: list[tuple[float, ...]] = []
        ends: list[float] = []
        for op in core.searcher.operations():
            for index, (x, y) in enumerate(batches(loader, count)):
                if device.type == "cuda":
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                if index >= WARMUP:
                    starts.append(clocks(index, count))
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


def copy_and_wait() -> None:
    """The trainer's copies to the GPU as they were before issue 32: `.to(device)`, which waits until the
    GPU has finished everything queued before it (for a side-by-side figure; a probe may patch what it
    likes in its own process)."""
    from stratus.harness.pytorch import _data

    walk = _data._moved

    def moved(data: Any, device: Any, tensor: Any) -> Any:
        if isinstance(data, tensor):
            return data if data.device == device else data.to(device)
        return walk(data, device, tensor)  # containers: walked as before, each tensor back through here

    _data._moved = moved


class ProbeTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        torch.set_num_threads(1)
        self.context = context
        self.kind = str(context.get_hparams().get("model", "mlp"))
        if context.get_hparams().get("blocking_copy"):
            copy_and_wait()
        self.model = context.wrap_model(model(self.kind))
        self.optimizer = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        self.count = int(context.get_hparam("batches"))
        self.starts: list[tuple[float, ...]] = []
        self.ends: list[float] = []

    def build_training_data_loader(self) -> pytorch.DataLoader:
        pinned = {} if self.context.get_hparams().get("pin_memory", True) else {"pin_memory": False}
        return pytorch.DataLoader(
            dataset(self.kind),
            batch_size=batch_size(self.kind),
            shuffle=True,
            drop_last=True,
            collate_fn=collate,
            **pinned,
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(dataset(self.kind), batch_size=1024)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        if batch_idx >= WARMUP:
            self.starts.append(clocks(batch_idx, self.count))
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
    loop(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "mlp")
