"""Digits with NNI's trial API only (`import nni`): the same script runs under NNI, on Stratus, and
alone (`python3 trial.py`, NNI's standalone mode: the defaults below).

Each epoch reports the validation accuracy with `nni.report_intermediate_result`; the last one is the
final result (`nni.report_final_result`), which the TPE tuner maximizes.
"""

from __future__ import annotations

import time

import nni
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

PARAMS = {"learning_rate": 0.003, "dropout": 0.1, "hidden_size": 64, "batch_size": 32, "activation": "relu"}
EPOCHS = 8
SPLIT_SEED = 1234


def load() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = int(len(x) * 0.2)
    return x[order[n_val:]], y[order[n_val:]], x[order[:n_val]], y[order[:n_val]]


def main() -> None:
    params = dict(PARAMS)
    params.update(nni.get_next_parameter() or {})
    print(f"trial {nni.get_trial_id()} of experiment {nni.get_experiment_id()}: {params}", flush=True)
    torch.manual_seed(nni.get_sequence_id())
    torch.set_num_threads(1)
    x_train, y_train, x_val, y_val = load()
    hidden, batch_size = int(params["hidden_size"]), int(params["batch_size"])
    activation = nn.ReLU() if params["activation"] == "relu" else nn.Tanh()
    model = nn.Sequential(
        nn.Linear(64, hidden), activation, nn.Dropout(float(params["dropout"])), nn.Linear(hidden, 10)
    )
    opt = torch.optim.Adam(model.parameters(), lr=float(params["learning_rate"]))
    accuracy = 0.0
    for _ in range(EPOCHS):
        model.train()
        perm = torch.randperm(len(x_train))
        for start in range(0, len(perm) - batch_size + 1, batch_size):
            rows = perm[start : start + batch_size]
            opt.zero_grad()
            F.cross_entropy(model(x_train[rows]), y_train[rows]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_val).argmax(dim=1) == y_val).float().mean().item()
        nni.report_intermediate_result(accuracy)
    nni.report_final_result(accuracy)


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"done in {time.monotonic() - started:.1f} s", flush=True)
