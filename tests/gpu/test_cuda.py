"""The GPU path: a trial on one CUDA device and an NCCL all-reduce through our launcher (2 processes on 2
GPUs). These run wherever a GPU is present (the lent GPU machine) and skip themselves elsewhere (CI has
none)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

NCCL_SCRIPT = """
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
value = torch.tensor([rank + 1.0], device="cuda")
dist.all_reduce(value)
print(f"rank {rank} sum {value.item():.0f} on {torch.cuda.get_device_name()} (NCCL {torch.cuda.nccl.version()})", flush=True)
dist.destroy_process_group()
"""


def test_the_trainers_loader_pins_batches_and_to_device_copies_them_to_the_gpu() -> None:
    """Determined's DataLoader left at its defaults pins its batches where CUDA is available, so that the
    trainer's non-blocking copy to the GPU overlaps the GPU's work (harness/pytorch/_data.py)."""
    from stratus.harness.pytorch import DataLoader, to_device

    data = torch.utils.data.TensorDataset(torch.arange(64.0).reshape(16, 4), torch.arange(16))
    x, y = next(iter(DataLoader(data, batch_size=8).get_data_loader()))
    assert x.is_pinned() and y.is_pinned()
    unpinned, _ = next(iter(DataLoader(data, batch_size=8, pin_memory=False).get_data_loader()))
    assert not unpinned.is_pinned()
    moved = to_device({"batch": (x, y)}, torch.device("cuda", 0))
    assert moved["batch"][0].device.type == "cuda" and torch.equal(moved["batch"][0].cpu(), x)
    assert torch.equal(moved["batch"][1].cpu(), y)


def test_a_trial_trains_on_one_cuda_device(tmp_path: Path) -> None:
    import json

    import yaml

    code = tmp_path / "determined_trial"  # a copy: local mode writes its checkpoints into the folder
    shutil.copytree(ROOT / "examples" / "determined_trial", code)
    config = yaml.safe_load((code / "const.yaml").read_text())
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"hparams": config["hyperparameters"], "config": config, "length": 100}))
    env = {
        **os.environ,
        # the determined shim first; the repo (and what PYTHONPATH held) for machines without `pip install -e`
        "PYTHONPATH": os.pathsep.join(
            [
                str(ROOT / "harness" / "compat" / "determined"),
                *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
                str(ROOT),
            ]
        ),
        "STRATUS_LOCAL_CONFIG": str(local),
    }
    done = subprocess.run(
        [sys.executable, "-m", "stratus.harness.exec.run_trial", "model_def:DigitsTrial"],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " on cuda" in done.stdout + done.stderr  # the trainer says which device it trains on


def test_processes_all_reduce_over_nccl_through_the_launcher(tmp_path: Path) -> None:
    """One process per GPU, two at most: NCCL refuses two ranks on one device ("Duplicate GPU detected"), so
    a one-GPU machine runs a group of one, which still goes through NCCL's init and all-reduce."""
    processes = min(2, torch.cuda.device_count())
    script = tmp_path / "nccl_check.py"
    script.write_text(NCCL_SCRIPT)
    env = {**os.environ, "STRATUS_SLOTS": str(processes)}
    done = subprocess.run(
        [sys.executable, "-m", "stratus.launchers.torch_distributed", "--", str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    total = processes * (processes + 1) // 2
    assert done.stdout.count(f"sum {total} ") == processes, done.stdout
