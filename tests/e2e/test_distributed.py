"""Distributed trials on the local stack (CPU workers, gloo): a 2-worker DDP training completes, and a
crash of rank 1 ends every worker at once with the trial in ERROR, naming rank 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_two_worker_ddp_training_completes(det):
    det.train_ddp(epochs=4)


def test_a_crash_of_rank_1_stops_every_worker_and_names_it(det, tmp_path: Path):
    trial = det.crash_rank_1(tmp_path)
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
    config = det.two_worker_config(
        "stubborn-rank-0", "stubborn.py", "environment: {environment_variables: [STRATUS_KILL_GRACE_S=2]}"
    )
    result, trial = det.follow_experiment(tmp_path, config, {"stubborn.py": STUBBORN_RANK_0})
    assert result.code != 0
    assert trial["state"] == "ERROR"
    assert (trial["exit"]["code"], trial["exit"]["failed_rank"]) == (4, 1)
    lines = det("trial", "logs", str(trial["id"])).out.splitlines()
    assert "[rank=0] rank 0 ignoring SIGTERM" in lines
    assert "[launcher] rank 0 still running 2 s after SIGTERM; sending SIGKILL" in lines
