"""The cloud backends' agents on a GPU (issue 13: "run a trial with CUDA there through the agent"): the local
stack with its default pool on the `ec2`, `batch` or `sagemaker` backend against moto, each instance or job
an agent process started as its user data or container boot starts it, on this machine. The agent finds
the GPU itself (nvidia-smi), hands it to the trial, and Determined's trial API example trains on CUDA.
Skips itself without CUDA (CI has none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from infra.local_stack import BackgroundStack  # noqa: E402  (after the skip: no CUDA, no stack)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def det(api_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "det", *args],
        cwd=ROOT,
        env={**os.environ, "DET_MASTER": api_url},
        capture_output=True,
        text=True,
        timeout=480,
    )


@pytest.mark.parametrize("backend", ["ec2", "batch", "sagemaker"])
def test_a_trial_trains_on_cuda_through_the_backends_agent(backend: str, tmp_path: Path) -> None:
    stack = BackgroundStack(tmp_path / "stack", slots=1, pools=[f"default:backend={backend}:max=1"])
    try:
        api_url = stack.state["api_url"]
        created = det(
            api_url,
            "experiment",
            "create",
            "examples/determined_trial/const.yaml",
            "examples/determined_trial",
            "-f",
        )
        print(created.stdout[-2000:], created.stderr[-2000:])
        assert created.returncode == 0
        experiment_id = next(
            line for line in created.stdout.splitlines() if line.startswith("Created experiment")
        ).split()[-1]
        shown = det(api_url, "experiment", "describe", experiment_id, "--json")
        detail = json.loads(shown.stdout)
        assert detail["experiment"]["state"] == "COMPLETED"
        trial = detail["trials"][0]
        logs = det(api_url, "trial", "logs", str(trial["id"]))
        assert " on cuda" in logs.stdout, logs.stdout[-3000:]
        print(backend, "validation:", trial.get("latest_validation"))
    finally:
        stack.stop()
