"""The embedded local stack, started once for the end-to-end tests as a user would run it, and a `det`
runner that calls the real CLI in a subprocess against it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from det.deploy.background import BackgroundStack

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` runs this tier with ``--dist loadgroup``: the tests of a module that share a
    module-scoped fixture (a stack of the module's own) stay together on one worker, so that stack starts
    once; every other test goes to whichever worker is free (each worker has its own session stack).

    First among the hooks: xdist's own reads the groups to name the tests after them, and a group marked
    after it is ignored (it was, until this ran first: every module was spread test by test)."""
    for item in items:
        if item.path.parent == HERE and _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup``, fail at once where xdist did not group the tests (it names each grouped
    test ``...@group``): with pytest 9.2 and xdist 3.8 it silently does not (pytest-xdist#1386), and the
    module-scoped stacks then start on several workers and their tests meet others' state."""
    if not session.config.getoption("loadgroup", default=False):
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
            raise pytest.UsageError(
                f"xdist did not group {item.nodeid} (pytest {pytest.__version__}): install the pytest "
                "version requirements-dev.txt pins"
            )


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(fixture.scope == "module" for defs in info.name2fixturedefs.values() for fixture in defs)


def wait_for(condition, timeout: float, what: str, interval: float = 0.2, seen=None):  # noqa: ANN001, ANN201
    """Poll `condition` until it returns something truthy; fail with `what` after `timeout` seconds, and
    with what `seen()` describes then (the state the condition looked at), where given."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
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


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackInfo]:
    stack = BackgroundStack(tmp_path_factory.mktemp("stack"), slots=2)
    try:
        yield LocalStackInfo(
            api_url=stack.state["api_url"], moto_url=stack.state["moto_url"], state_dir=stack.log_path.parent
        )
    finally:
        stack.stop()


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


# ---- the `det` CLI; distributed trials (CPU workers, gloo), on one node or two -------------------------

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


@pytest.fixture
def det(local_stack: LocalStackInfo) -> Det:
    return Det(local_stack.api_url)


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


# ---- a Core API trial of a known number of steps that resumes exactly (pause, preemption) -----------

# A Core API trial that saves everything its next step depends on (weights, optimizer, RNG states, step),
# so a resumed run continues exactly; each step stands for a heavier batch with a short pause.
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


# ---- the helpers above, as fixtures for the test modules -------------------------------------------------


@pytest.fixture(scope="session", name="det_runner")
def _det_runner() -> type[Det]:
    """`det_runner(api_url)`: a `det` against another stack than `local_stack` (a two_agent_pool, say)."""
    return Det


@pytest.fixture(scope="session", name="two_agent_pool")
def _two_agent_pool() -> Callable[[Path], AbstractContextManager[dict[str, str]]]:
    return two_agent_pool


@pytest.fixture(scope="session", name="one_slot_agents")
def _one_slot_agents() -> Callable[..., AbstractContextManager[dict[str, str]]]:
    """`one_slot_agents(folder, agents=N)`: a stack whose pool has N agents of one slot each."""
    return two_agent_pool


@pytest.fixture(scope="session", name="agent_pid")
def _agent_pid() -> Callable[[str, str], int]:
    return agent_pid


@pytest.fixture(scope="session", name="run_record")
def _run_record() -> Callable[[str, str], dict | None]:
    return run_record


@pytest.fixture(scope="session", name="wait_for")
def _wait_for() -> Callable[..., Any]:
    return wait_for


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def probe(det: Det) -> StepsProbe:
    """A `StepsProbe` on the test's `det` (a module's own stack where it overrides `det`)."""
    return StepsProbe(det)
