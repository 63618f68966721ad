"""Distributed trials on the local stack (CPU workers, gloo): a 2-worker DDP training completes, and a
crash of rank 1 ends every worker at once with the trial in ERROR, naming rank 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_experiments import _created_id, _describe

pytestmark = pytest.mark.e2e

CRASH_RANK_1 = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, 1000):
    value = torch.tensor([1.0])
    dist.all_reduce(value)  # rank 0 blocks here for good once rank 1 is gone
    print(f"step {step} sum {value.item():.0f}", flush=True)
    if rank == 1 and step == 3:
        print("rank 1 crashing on purpose", flush=True)
        os._exit(3)
"""


def train_ddp(det, epochs: int) -> dict:  # noqa: ANN001
    """The PyTorchTrial example on 2 workers; checks it completed and each rank's lines; the trial."""
    result = det(
        "experiment",
        "create",
        "examples/determined_trial/const.yaml",
        "examples/determined_trial",
        "--config",
        "resources.slots_per_trial=2",
        "--config",
        f"searcher.max_length.epochs={epochs}",
        "-f",
        timeout=300,
    )
    assert result.code == 0, result.out + result.err
    (trial,) = _describe(det, _created_id(result.out))["trials"]
    assert trial["state"] == "COMPLETED" and trial["best_validation"] > 0.8
    logs = det("trial", "logs", str(trial["id"]), "--rank", "1")
    assert logs.code == 0 and logs.out.strip()
    assert all(line.startswith("[rank=1] ") for line in logs.out.splitlines())
    assert not any(line.startswith("[rank=1] [rank=1]") for line in logs.out.splitlines())
    return trial


def crash_rank_1(det, tmp_path: Path) -> dict:  # noqa: ANN001
    """Rank 1 of 2 exits 3 mid-training; checks the trial ended in ERROR naming rank 1; the trial."""
    (tmp_path / "crash.py").write_text(CRASH_RANK_1)
    (tmp_path / "crash.yaml").write_text(
        "name: crash-rank-1\n"
        "entrypoint: python3 -m launchers.torch_distributed -- crash.py\n"
        "searcher: {name: single, metric: loss, max_length: 10}\n"
        "resources: {slots_per_trial: 2}\n"
        "max_restarts: 0\n"
    )
    result = det("experiment", "create", str(tmp_path / "crash.yaml"), str(tmp_path), "-f", timeout=240)
    assert result.code != 0
    (trial,) = _describe(det, _created_id(result.out))["trials"]
    assert trial["state"] == "ERROR"
    assert (trial["exit"]["code"], trial["exit"]["failed_rank"]) == (3, 1)
    logs = det("trial", "logs", str(trial["id"])).out
    assert "[launcher] rank 1 exited with code 3" in logs
    assert "rank 1 crashing on purpose" in logs
    shown = det("trial", "describe", str(trial["id"]))
    assert f"Failed first: rank 1 (its lines: det trial logs {trial['id']} --rank 1)" in shown.out
    return trial


def test_two_worker_ddp_training_completes(det):
    train_ddp(det, epochs=4)


def test_a_crash_of_rank_1_stops_every_worker_and_names_it(det, tmp_path: Path):
    trial = crash_rank_1(det, tmp_path)
    assert trial["exit"]["reason"] == "rank 1 failed first with exit code 3"
    shown = det("trial", "describe", str(trial["id"]), "--json")
    assert json.loads(shown.out)["trial"]["exit"]["reason"].startswith("rank 1")


STUBBORN_RANK_0 = """
import os, signal, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    signal.signal(signal.SIGTERM, lambda *_: print("rank 0 ignoring SIGTERM", flush=True))
value = torch.tensor([1.0])
dist.all_reduce(value)
print("joined", flush=True)
if rank == 1:
    os._exit(4)
while True:  # a hung collective without failure detection: nothing but SIGKILL ends it
    time.sleep(1)
"""


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace(det, tmp_path: Path):
    (tmp_path / "stubborn.py").write_text(STUBBORN_RANK_0)
    (tmp_path / "stubborn.yaml").write_text(
        "name: stubborn-rank-0\n"
        "entrypoint: python3 -m launchers.torch_distributed -- stubborn.py\n"
        "searcher: {name: single, metric: loss, max_length: 10}\n"
        "resources: {slots_per_trial: 2}\n"
        "environment: {environment_variables: [STRATUS_KILL_GRACE_S=2]}\n"
        "max_restarts: 0\n"
    )
    result = det("experiment", "create", str(tmp_path / "stubborn.yaml"), str(tmp_path), "-f", timeout=240)
    assert result.code != 0
    (trial,) = _describe(det, _created_id(result.out))["trials"]
    assert trial["state"] == "ERROR"
    assert (trial["exit"]["code"], trial["exit"]["failed_rank"]) == (4, 1)
    lines = det("trial", "logs", str(trial["id"])).out.splitlines()
    assert "[rank=0] rank 0 ignoring SIGTERM" in lines
    assert "[launcher] rank 0 still running 2 s after SIGTERM; sending SIGKILL" in lines
