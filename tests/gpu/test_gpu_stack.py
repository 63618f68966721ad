"""The GPU path end to end: the local stack on a GPU machine, started as `det deploy local up` starts it
with no --slots (its agent offers one slot per GPU), runs Determined's trial API example and the NNI
AdaptDL example on the agent's GPU: each trial is handed a device (CUDA_VISIBLE_DEVICES) and trains on
it, and the AdaptDL trial joins its process group over NCCL. Skips itself without CUDA (CI has none)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from infra.local_stack import BackgroundStack  # noqa: E402  (after the skip: no CUDA, no stack)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    stack = BackgroundStack(tmp_path_factory.mktemp("gpu-stack"), slots=None)
    try:
        yield stack.state["api_url"]
    finally:
        stack.stop()


def det(api_url: str, *args: str, timeout: float = 480) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "det", *args],
        cwd=ROOT,
        env={**os.environ, "DET_MASTER": api_url},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def described(api_url: str, experiment_id: int) -> dict[str, Any]:
    shown = det(api_url, "experiment", "describe", str(experiment_id), "--json")
    assert shown.returncode == 0, shown.stderr
    detail: dict[str, Any] = json.loads(shown.stdout)
    return detail


def created_id(output: str) -> int:
    return int(
        next(line for line in output.splitlines() if line.startswith("Created experiment")).split()[-1]
    )


def test_the_agent_offers_one_slot_per_gpu(api_url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        listed = det(api_url, "agent", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        agents = json.loads(listed.stdout)
        agents = agents.get("agents", agents) if isinstance(agents, dict) else agents
        if agents or time.monotonic() > deadline:
            break
        time.sleep(1)
    print(listed.stdout)
    assert [int(a["slots"]) for a in agents] == [torch.cuda.device_count()]


def test_a_determined_trial_trains_on_the_agents_gpu(api_url: str) -> None:
    created = det(
        api_url,
        "experiment",
        "create",
        "examples/determined_trial/const.yaml",
        "examples/determined_trial",
        "-f",
    )
    print(created.stdout[-3000:], created.stderr[-2000:])
    assert created.returncode == 0
    detail = described(api_url, created_id(created.stdout))
    assert detail["experiment"]["state"] == "COMPLETED"
    trial = detail["trials"][0]
    logs = det(api_url, "trial", "logs", str(trial["id"]))
    assert " on cuda" in logs.stdout, logs.stdout[-3000:]
    print("validation:", trial.get("latest_validation"))


def test_an_nni_adaptdl_trial_trains_on_the_gpu_over_nccl(api_url: str, tmp_path: Path) -> None:
    pytest.importorskip("adaptdl.torch", reason="adaptdl (requirements-dev.txt) is not installed")
    code = tmp_path / "nni_adaptdl"
    shutil.copytree(ROOT / "examples" / "nni_adaptdl", code)
    config = (code / "config_adl.yml").read_text().replace("gpuNum: 0", "gpuNum: 1")
    (code / "config_adl.yml").write_text(config)
    created = det(
        api_url,
        "experiment",
        "create",
        str(code / "config_adl.yml"),
        str(code),
        "-f",
        "--config",
        "environment.environment_variables=[EPOCHS=4]",
    )
    print(created.stdout[-3000:], created.stderr[-2000:])
    assert created.returncode == 0
    detail = described(api_url, created_id(created.stdout))
    assert detail["experiment"]["state"] == "COMPLETED"
    trial = detail["trials"][0]
    logs = det(api_url, "trial", "logs", str(trial["id"]))
    assert "rank 0 trains on cuda (nccl)" in logs.stdout, logs.stdout[-3000:]
    assert [line for line in logs.stdout.splitlines() if "EPOCH 3 done" in line]
