"""What the end-to-end tests drive the local stack with: `det` as a user runs it (`Det`), a stack's records
read from its moto, agents started beside a stack, and a probe trial that counts its steps. The fixtures in
`tests/e2e/conftest.py` hand them to the tests."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import boto3

from det.deploy.background import BackgroundStack

#: The checkout.
ROOT = Path(__file__).resolve().parents[2]


#: The longest gap between two polls of `wait_for` (unless a test asks for a longer first one).
MAX_POLL_INTERVAL_S = 1.0


def wait_for(condition, timeout: float, what: str, interval: float = 0.2, seen=None):  # noqa: ANN001, ANN201
    """Poll `condition` until it returns something truthy; fail with `what` after `timeout` seconds, and
    with what `seen()` describes then (the state the condition looked at), where given.

    The first gap is `interval`; each next one is half as long again, up to `MAX_POLL_INTERVAL_S`: a
    condition met soon is seen soon, and a long wait does not spend the machine on polls (each one a
    request to the stack and its moto, and a read of the state there: five a second took a fifth of a
    core per waiting test, on the 2 cores the stacks and trials of three workers share)."""
    deadline = time.monotonic() + timeout
    longest = max(interval, MAX_POLL_INTERVAL_S)
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(min(interval, max(deadline - time.monotonic(), 0.0)))
        interval = min(interval * 1.5, longest)
    detail = f"; last seen: {seen()}" if seen is not None else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{detail}")


@dataclass
class LocalStackInfo:
    api_url: str
    moto_url: str
    state_dir: Path

    def s3(self):  # noqa: ANN201
        return boto3.client(
            "s3",
            endpoint_url=self.moto_url,
            region_name="us-east-1",
            aws_access_key_id="stratus-local",
            aws_secret_access_key="stratus-local",
        )

    @property
    def bucket(self) -> str:
        return "stratus-123456789012-us-east-1"


@dataclass
class DetResult:
    code: int
    out: str
    err: str


def run_record(moto_url: str, run_id: str) -> dict | None:
    """A run's record in the stack's DynamoDB (``stratus-runs``), attribute values unwrapped one level."""
    dynamo = boto3.client(
        "dynamodb",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="stratus-local",
        aws_secret_access_key="stratus-local",
    )
    item = dynamo.get_item(TableName="stratus-runs", Key={"run_id": {"S": run_id}}).get("Item")
    return {name: next(iter(value.values())) for name, value in item.items()} if item else None


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


class Det:
    """The real `det` CLI run in a subprocess against the stack at ``api_url`` (`det(*args)`), and what
    the tests read from its answers.

    `det.read(*args)` runs the same CLI in this process (`det.cli.main` with a `Runtime` whose streams are
    captured): for the reads a test polls. A subprocess per poll costs an interpreter start and the CLI's
    imports, 0.4 s of CPU, and the polls of two workers took most of a 2-core machine from the stacks
    and trials they waited on."""

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url

    def read(self, *args: str) -> DetResult:
        from det import cli
        from det._runtime import Runtime

        out, err = io.StringIO(), io.StringIO()
        runtime = Runtime(environ={**os.environ, "DET_MASTER": self.api_url}, out=out, err=err)
        code = cli.main(list(args), runtime=runtime)
        return DetResult(code, out.getvalue(), err.getvalue())

    def __call__(self, *args: str, cwd: Path | None = None, timeout: float = 240) -> DetResult:
        env = {**os.environ, "DET_MASTER": self.api_url}
        done = subprocess.run(
            [sys.executable, "-m", "det", *args],
            cwd=cwd or ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return DetResult(done.returncode, done.stdout, done.stderr)

    @staticmethod
    def created_experiment_id(output: str) -> int:
        line = next(line for line in output.splitlines() if line.startswith("Created experiment"))
        return int(line.split()[-1])

    def follow_experiment(
        self, folder: Path, config: str, scripts: dict[str, str] | None = None, *, timeout: float = 240
    ) -> tuple[DetResult, dict]:
        """Writes ``scripts`` and ``config`` (as ``config.yaml``) into ``folder``, then `det experiment create
        config.yaml folder -f` follows the experiment to its end; its result, and the experiment's one
        trial as `det experiment describe --json` shows it."""
        for name, text in (scripts or {}).items():
            (folder / name).write_text(text)
        (folder / "config.yaml").write_text(config)
        result = self("experiment", "create", str(folder / "config.yaml"), str(folder), "-f", timeout=timeout)
        (trial,) = self.describe_experiment(self.created_experiment_id(result.out))["trials"]
        return result, trial

    @staticmethod
    def two_worker_config(name: str, script: str, *extra_lines: str) -> str:
        """The config of a single-trial experiment running ``script`` on 2 workers of the torch_distributed
        launcher, with no restart."""
        lines = [
            f"name: {name}",
            f"entrypoint: python3 -m stratus.launchers.torch_distributed -- {script}",
            "searcher: {name: single, metric: loss, max_length: 10}",
            "resources: {slots_per_trial: 2}",
            "max_restarts: 0",
            *extra_lines,
        ]
        return "\n".join(lines) + "\n"

    def describe_experiment(self, experiment_id: int) -> dict:
        result = self.read("experiment", "describe", str(experiment_id), "--json")
        assert result.code == 0, result.err
        return json.loads(result.out)

    def train_ddp(self, epochs: int) -> dict:
        """The PyTorchTrial example on 2 workers; checks it completed and each rank's lines; the trial."""
        result = self(
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
        (trial,) = self.describe_experiment(self.created_experiment_id(result.out))["trials"]
        assert trial["state"] == "COMPLETED" and trial["best_validation"] > 0.8
        logs = self("trial", "logs", str(trial["id"]), "--rank", "1")
        assert logs.code == 0 and logs.out.strip()
        assert all(line.startswith("[rank=1] ") for line in logs.out.splitlines())
        assert not any(line.startswith("[rank=1] [rank=1]") for line in logs.out.splitlines())
        return trial

    def crash_rank_1(self, tmp_path: Path) -> dict:
        """Rank 1 of 2 exits 3 mid-training; checks the trial ended in ERROR naming rank 1; the trial."""
        config = self.two_worker_config("crash-rank-1", "crash.py")
        result, trial = self.follow_experiment(tmp_path, config, {"crash.py": CRASH_RANK_1})
        assert result.code != 0
        assert trial["state"] == "ERROR"
        assert (trial["exit"]["code"], trial["exit"]["failed_rank"]) == (3, 1)
        logs = self("trial", "logs", str(trial["id"])).out
        assert "[launcher] rank 1 exited with code 3" in logs
        assert "rank 1 crashing on purpose" in logs
        shown = self("trial", "describe", str(trial["id"]))
        assert f"Failed first: rank 1 (its lines: det trial logs {trial['id']} --rank 1)" in shown.out
        return trial


@contextmanager
def two_agent_pool(folder: Path, agents: int = 2) -> Iterator[dict[str, str]]:
    """A second local stack whose pool has ``agents`` agents of one slot each (nodes on this machine):
    its state (``api_url``, ``moto_url``, ...) and ``state_dir``."""
    stack = BackgroundStack(folder, slots=1, agents=agents)
    try:
        yield {**stack.state, "state_dir": str(stack.log_path.parent)}
    finally:
        stack.stop()


def agent_pid(api_url: str, agent_id: str) -> int:
    """The pid of a local stack's agent process (to stop it as a scale-in would, or kill it)."""
    pattern = f"stratus.harness.agent --api {api_url} --agent-id {agent_id} "
    pids = subprocess.run(
        ["pgrep", "-f", pattern], capture_output=True, text=True, check=False
    ).stdout.split()
    assert len(pids) == 1, f"agent {agent_id}: {pids}"
    return int(pids[0])


STEPS_SCRIPT = """
import pathlib, random, sys, time
import determined as det
import numpy as np
import torch

STEPS = int(sys.argv[1])

def save(core, model, opt, step):
    with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "torch": torch.get_rng_state(), "random": random.getstate(),
                    "numpy": np.random.get_state()}, pathlib.Path(path) / "state.pt")

with det.core.init() as core:
    info = det.get_cluster_info()
    torch.manual_seed(7); random.seed(7); np.random.seed(7)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = 0
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            state = torch.load(pathlib.Path(path) / "state.pt", weights_only=False)
        model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); step = state["step"]
        torch.set_rng_state(state["torch"]); random.setstate(state["random"])
        np.random.set_state(state["numpy"])
        print("resumed at step", step, flush=True)
    while step < STEPS:
        x = torch.randn(8, 4)
        scale = 1.0 + random.random() + float(np.random.rand())
        loss = ((model(x) - scale * x.sum(dim=1, keepdim=True)) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        step += 1
        core.train.report_training_metrics(steps_completed=step, metrics={"loss": loss.item()})
        time.sleep(0.15)
        if core.preempt.should_preempt():
            save(core, model, opt, step)
            print("preempted at step", step, flush=True)
            sys.exit(0)
    save(core, model, opt, step)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    core.train.report_validation_metrics(
        steps_completed=step, metrics={"loss": loss.item(), **{f"w{i}": w for i, w in enumerate(weights)}}
    )
"""


class StepsProbe:
    """Experiments of one trial running ``STEPS_SCRIPT`` for ``steps`` steps, through a ``Det``, and what
    the tests read back: the trial, its metrics, the steps it reported."""

    steps = 100

    def __init__(self, det: Det) -> None:
        self.det = det

    def submit(self, folder: Path, name: str, *extra_lines: str) -> int:
        (folder / "steps.py").write_text(STEPS_SCRIPT)
        lines = [
            f"name: {name}",
            f"entrypoint: python3 steps.py {self.steps}",
            "searcher: {name: single, metric: loss, max_length: 1}",
            "max_restarts: 0",
            *extra_lines,
        ]
        (folder / f"{name}.yaml").write_text("\n".join(lines) + "\n")
        created = self.det("experiment", "create", str(folder / f"{name}.yaml"), str(folder))
        assert created.code == 0, created.out + created.err
        return int(self.det.created_experiment_id(created.out))

    def trial(self, experiment_id: int) -> dict:
        (trial,) = self.det.describe_experiment(experiment_id)["trials"]
        return trial

    def metrics(self, trial_id: int) -> dict[str, list[tuple[int, dict]]]:
        shown = self.det.read("trial", "describe", str(trial_id), "--metrics", "--json")
        assert shown.code == 0, shown.err
        metrics = json.loads(shown.out)["metrics"]
        return {
            group: [(m["steps_completed"], m["metrics"]) for m in metrics[group]]
            for group in ("training", "validation")
        }

    def reported_steps(self, trial_id: int) -> int:
        return max((steps for steps, _ in self.metrics(trial_id)["training"]), default=0)

    def state(self, experiment_id: int) -> str:
        return str(self.det.describe_experiment(experiment_id)["experiment"]["state"])
