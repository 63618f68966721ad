"""Digits with AdaptDL and NNI's trial API, written as for NNI's AdaptDL training service (`adl`) on
Kubernetes (after NNI's examples/trials/cifar10_pytorch/main_adl.py): the same script runs there and on
Stratus, where `stratus.launchers.adaptdl` starts its replicas with AdaptDL's environment.

Environment variables (all optional):

    EPOCHS          epochs to train (default 12)
    STEP_SLEEP      seconds to sleep after every training step (default 0); stretches the run, so that
                    a test can see the trial rescaled in the middle of its training

Every replica prints one line per finished epoch, exactly

    EPOCH {epoch} done restart={num_restarts} replicas={num_replicas} rank={replica_rank}

Rank 0 alone reports to NNI (as main_adl.py does): the validation accuracy of each epoch as an
intermediate result, and the last one as the final result, which the TPE tuner maximizes.

The trial's environment needs `adaptdl==0.2.11 requests "semver<3" "setuptools<81"` (README.md).
TensorBoard is optional: with `torch.utils.tensorboard` importable, rank 0 writes AdaptDL's and its own
scalars under ADAPTDL_TENSORBOARD_LOGDIR.
"""

from __future__ import annotations

import os
import time
from typing import Any

import adaptdl
import adaptdl.env
import adaptdl.torch
import nni
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

EPOCHS = int(os.environ.get("EPOCHS", "12"))
STEP_SLEEP = float(os.environ.get("STEP_SLEEP", "0"))
PARAMS = {"lr": 0.1, "hidden_size": 64}  # the defaults in NNI's standalone mode
SPLIT_SEED = 1234
VALID_FRACTION = 0.2


def datasets() -> tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    """Digits (bundled with scikit-learn, nothing to download), split 80/20 the same way on every
    replica and every restart."""
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_valid = int(len(x) * VALID_FRACTION)
    valid, train = order[:n_valid], order[n_valid:]
    return (
        torch.utils.data.TensorDataset(x[train], y[train]),
        torch.utils.data.TensorDataset(x[valid], y[valid]),
    )


def summary_writer() -> Any:
    """A TensorBoard writer on rank 0 when tensorboard is installed, else None."""
    if adaptdl.env.replica_rank() != 0:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    root = os.environ.get("ADAPTDL_TENSORBOARD_LOGDIR", "/adaptdl/tensorboard")
    return SummaryWriter(os.path.join(root, os.environ.get("NNI_TRIAL_JOB_ID", "digits-adaptdl")))


def main() -> None:
    params = dict(PARAMS)
    params.update(nni.get_next_parameter() or {})
    rank = adaptdl.env.replica_rank()
    print(
        f"rank {rank} of {adaptdl.env.num_replicas()}, restart {adaptdl.env.num_restarts()}: {params}",
        flush=True,
    )
    torch.set_num_threads(1)
    adaptdl.torch.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"rank {rank} trains on {device} ({torch.distributed.get_backend()})", flush=True)

    train_set, valid_set = datasets()
    train_loader = adaptdl.torch.AdaptiveDataLoader(train_set, batch_size=32, shuffle=True, drop_last=True)
    # gradient_accumulation=True as in NNI's main_adl.py. AdaptDL's default (False) works too: adaptdl
    # 0.2.11's goodput model then uses np.int, gone from numpy >= 1.24, which the launcher gives AdaptDL.
    train_loader.autoscale_batch_size(256, (16, 128), gradient_accumulation=True)
    valid_loader = adaptdl.torch.AdaptiveDataLoader(valid_set, batch_size=100, shuffle=False)

    torch.manual_seed(0)  # the same initial weights on every replica
    hidden = int(params["hidden_size"])
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=float(params["lr"]), momentum=0.9)
    model = adaptdl.torch.AdaptiveDataParallel(model, optimizer)
    writer = summary_writer()

    # Accumulators sum over every replica, and are checkpointed with the rest (restart-safe).
    train_stats, valid_stats = adaptdl.torch.Accumulator(), adaptdl.torch.Accumulator()
    accuracy = 0.0
    for epoch in adaptdl.torch.remaining_epochs_until(EPOCHS):
        model.train()
        batch_size = local_bsz = accumulation = None
        for inputs, targets in train_loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
            train_stats["loss_sum"] += loss.item() * targets.size(0)
            train_stats["total"] += targets.size(0)
            batch_size, local_bsz = train_loader.current_batch_size, train_loader.current_local_bsz
            accumulation = train_loader.accumulation_steps
            if STEP_SLEEP > 0:
                time.sleep(STEP_SLEEP)

        model.eval()
        with torch.no_grad():
            for inputs, targets in valid_loader:
                inputs, targets = inputs.to(device), targets.to(device)
                valid_stats["correct"] += (model(inputs).argmax(dim=1) == targets).sum().item()
                valid_stats["total"] += targets.size(0)

        with train_stats.synchronized(), valid_stats.synchronized():  # sums over every replica
            train_loss = train_stats["loss_sum"] / max(train_stats["total"], 1)
            accuracy = valid_stats["correct"] / max(valid_stats["total"], 1)
            train_stats.clear()
            valid_stats.clear()
        if rank == 0:
            print(
                f"epoch {epoch}: train loss {train_loss:.4f}, valid accuracy {accuracy:.4f}, "
                f"batch size {batch_size} (local {local_bsz}, accumulation steps {accumulation})",
                flush=True,
            )
            nni.report_intermediate_result(accuracy)
            if writer is not None:
                train_loader.to_tensorboard(writer, epoch, tag_prefix="AdaptDL/Data/")
                model.to_tensorboard(writer, epoch, tag_prefix="AdaptDL/Model/")
                writer.add_scalar("Loss/Train", train_loss, epoch)
                writer.add_scalar("Accuracy/Valid", accuracy, epoch)
        print(
            f"EPOCH {epoch} done restart={adaptdl.env.num_restarts()} "
            f"replicas={adaptdl.env.num_replicas()} rank={adaptdl.env.replica_rank()}",
            flush=True,
        )

    if writer is not None:
        writer.close()
    if rank == 0:
        nni.report_final_result(accuracy)


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"done in {time.monotonic() - started:.1f} s", flush=True)
