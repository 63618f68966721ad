"""The GPU path end to end: the local stack on a GPU machine, started as `det deploy local up` starts it
with no --slots (its agent offers one slot per GPU), runs Determined's trial API example and the NNI
AdaptDL example on the agent's GPU: each trial is handed a device (CUDA_VISIBLE_DEVICES) and trains on
it, and the AdaptDL trial joins its process group over NCCL. Skips itself without CUDA (CI has none)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from det.deploy.background import BackgroundStack  # noqa: E402  (after the skip: no CUDA, no stack)

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


def test_the_agent_offers_one_slot_per_gpu(api_url: str, det) -> None:
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


def test_a_determined_trial_trains_on_the_agents_gpu(api_url: str, completed_trial) -> None:
    trial = completed_trial(
        api_url, "examples/determined_trial/const.yaml", "examples/determined_trial", says=" on cuda"
    )
    print("validation:", trial.get("latest_validation"))


def test_an_nni_adaptdl_trial_trains_on_the_gpu_over_nccl(
    api_url: str, tmp_path: Path, det, completed_trial
) -> None:
    pytest.importorskip("adaptdl.torch", reason="adaptdl (requirements-dev.txt) is not installed")
    code = tmp_path / "nni_adaptdl"
    shutil.copytree(ROOT / "examples" / "nni_adaptdl", code)
    config = (code / "config_adl.yml").read_text().replace("gpuNum: 0", "gpuNum: 1")
    (code / "config_adl.yml").write_text(config)
    trial = completed_trial(
        api_url,
        str(code / "config_adl.yml"),
        str(code),
        "--config",
        "environment.environment_variables=[EPOCHS=4]",
        says="rank 0 trains on cuda (nccl)",
    )
    logs = det(api_url, "trial", "logs", str(trial["id"]))
    assert [line for line in logs.stdout.splitlines() if "EPOCH 3 done" in line]
