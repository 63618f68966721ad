"""The GPU path: a trial on one CUDA device and a 2-process NCCL run. These run wherever a GPU is present
(the lent GPU machine) and skip themselves elsewhere (CI has none)."""

from __future__ import annotations

import os
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
print(f"rank {rank} sum {value.item():.0f} on {torch.cuda.get_device_name()}", flush=True)
dist.destroy_process_group()
"""


def test_a_trial_trains_on_one_cuda_device(tmp_path: Path) -> None:
    import json

    import yaml

    config = yaml.safe_load((ROOT / "examples" / "determined_trial" / "const.yaml").read_text())
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"hparams": config["hyperparameters"], "config": config, "length": 100}))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "harness" / "compat" / "determined"),
        "STRATUS_LOCAL_CONFIG": str(local),
    }
    done = subprocess.run(
        [sys.executable, "-m", "harness.exec.run_trial", "model_def:DigitsTrial"],
        cwd=ROOT / "examples" / "determined_trial",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " on cuda" in done.stdout + done.stderr  # the trainer says which device it trains on


@pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"
)
def test_two_processes_all_reduce_over_nccl(tmp_path: Path) -> None:
    script = tmp_path / "nccl_check.py"
    script.write_text(NCCL_SCRIPT)
    env = {**os.environ, "STRATUS_SLOTS": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "launchers.torch_distributed", "--", str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("sum 3") == 2
