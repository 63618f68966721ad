"""The cloud backends' agents on a GPU (issue 13: "run a trial with CUDA there through the agent"): the local
stack with its default pool on the `ec2`, `batch` or `sagemaker` backend against moto, each instance or job
an agent process started as its user data or container boot starts it, on this machine. The agent finds
the GPU itself (nvidia-smi), hands it to the trial, and Determined's trial API example trains on CUDA.
Skips itself without CUDA (CI has none)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from det.deploy.background import BackgroundStack  # noqa: E402  (after the skip: no CUDA, no stack)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("backend", ["ec2", "batch", "sagemaker"])
def test_a_trial_trains_on_cuda_through_the_backends_agent(
    backend: str, tmp_path: Path, completed_trial
) -> None:
    stack = BackgroundStack(tmp_path / "stack", slots=1, pools=[f"default:backend={backend}:max=1"])
    try:
        trial = completed_trial(
            stack.state["api_url"],
            "examples/determined_trial/const.yaml",
            "examples/determined_trial",
            says=" on cuda",
        )
        print(backend, "validation:", trial.get("latest_validation"))
    finally:
        stack.stop()
