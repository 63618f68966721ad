"""The stack columns of bench/launcher_teardown.py: the same workload as an experiment on the embedded local
stack, submitted with the real `det` CLI, and crash → the run's exit recorded by the control plane.

Three recorded wall-clock times per run, all from this machine's clock: the crashing worker's `time.time()`
just before `os._exit(3)` (written to a file the benchmark names), the agent's log line `run R ended: …`
(written once the launcher has exited, its process group is killed and its output is read to the end),
and the run record's `exited_at` in DynamoDB (set by the API's exit handler, after the agent flushed the
run's logs and posted the exit). Waiting for the experiment to end polls the API; the measurement does not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3

from det._client import ApiClient
from det.deploy.background import BackgroundStack
from infra.shape import StackNames
from stratus.launchers._info import free_port

SLOTS = 8
WAIT_S = 300.0
POLL_S = 0.5
TERMINAL = frozenset({"COMPLETED", "ERROR", "CANCELED"})


def iso_epoch(value: str) -> float:
    """An ISO-8601 time of the control plane (UTC, `Z`) as seconds since the epoch."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def entrypoint(kind: str, n: int, out: Path, mode: str) -> list[str]:
    """`stratus`: stratus.launchers.torch_distributed; `torchrun` and `torchrun-banner`: bare torchrun."""
    if kind == "stratus":
        return ["python3", "-m", "stratus.launchers.torch_distributed", "--", "workload.py", str(out), mode]
    return [
        "python3", "-m", "torch.distributed.run", "--nproc_per_node", str(n), "--master_port", str(free_port()),
        "workload.py", str(out), mode,
    ]  # fmt: skip


class StackBench:
    """One local stack (one agent with SLOTS slots) for every run; runs go one at a time."""

    def __init__(self, workdir: Path, workload: Path) -> None:
        self.workdir = workdir
        self.workload = workload
        state_dir = workdir / "stack"
        os.environ.pop("OMP_NUM_THREADS", None)  # the agent's environment, hence the trials', lacks it
        self.stack = BackgroundStack(state_dir, slots=SLOTS)
        self.api_url = str(self.stack.state["api_url"])
        self.agent_log = state_dir / "local-0.log"
        self.runs = boto3.resource(
            "dynamodb",
            endpoint_url=self.stack.state["moto_url"],
            region_name="us-east-1",
            aws_access_key_id="stratus-local",
            aws_secret_access_key="stratus-local",
        ).Table(StackNames(stack="stratus").table("runs"))

    def __enter__(self) -> StackBench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.stop()

    def one_run(self, kind: str, n: int, mode: str) -> dict[str, Any]:
        run_dir = Path(tempfile.mkdtemp(dir=self.workdir, prefix=f"{kind}-{n}-{mode}-"))
        context, out = run_dir / "context", run_dir / "out"
        context.mkdir()
        out.mkdir()
        shutil.copy(self.workload, context / "workload.py")
        config = {
            "name": f"teardown-{kind}-{n}-{mode}",
            "entrypoint": entrypoint(kind, n, out, mode),
            "searcher": {"name": "single", "metric": "loss", "max_length": 1},
            "resources": {"slots_per_trial": n},
            "max_restarts": 0,
        }
        if kind != "torchrun-banner":
            # Both launchers set it to 1 for N > 1 workers anyway; set, it keeps torchrun from printing its
            # OMP_NUM_THREADS banner, which starts with an empty line. The API refused a log batch holding
            # an empty line until commit ee748f3 (HTTP 500; CloudWatch takes no empty message), and the
            # agent retried it for its log flush timeout (30 s) before it reported the exit:
            # `torchrun-banner` keeps that case measured.
            config["environment"] = {"environment_variables": ["OMP_NUM_THREADS=1"]}
        (run_dir / "config.yaml").write_text(json.dumps(config, indent=2))  # JSON is YAML
        created = subprocess.run(
            [sys.executable, "-m", "det", "experiment", "create", str(run_dir / "config.yaml"), str(context)],
            env={**os.environ, "DET_MASTER": self.api_url},
            capture_output=True,
            text=True,
            timeout=120,
        )
        found = re.search(r"^Created experiment (\d+)$", created.stdout, re.MULTILINE)
        if created.returncode != 0 or found is None:
            raise RuntimeError(f"det experiment create failed: {created.stdout}{created.stderr}")
        experiment_id = int(found.group(1))
        with ApiClient(self.api_url) as api:
            deadline = time.monotonic() + WAIT_S
            while (answer := api.get_experiment(experiment_id))["experiment"]["state"] not in TERMINAL:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"experiment {experiment_id} ({kind} N={n} {mode}) not over in {WAIT_S:g} s"
                    )
                time.sleep(POLL_S)
            (trial,) = answer["trials"]
            crash_file = out / "crash"
            if not crash_file.exists():
                logs = api.trial_logs(int(trial["id"]), tail=40)
                raise RuntimeError(f"{kind} N={n} {mode}: no crash recorded; trial logs: {logs!r:.3000}")
        run_id = f"{trial['id']}.1"
        run = self.runs.get_item(Key={"run_id": run_id}, ConsistentRead=True)["Item"]
        crash = float(crash_file.read_text().split()[1])
        agent_log = self.agent_log.read_text()
        lost = re.search(rf"run {re.escape(run_id)}: (\d+) log lines not shipped", agent_log)
        return {
            "agent_s": agent_saw_exit(agent_log, run_id) - crash,
            "recorded_s": iso_epoch(str(run["exited_at"])) - crash,
            "recorded": f"{int(run['exit_code'])}: {run['reason']}",
            "lost_lines": int(lost.group(1)) if lost else 0,
        }


def agent_saw_exit(agent_log: str, run_id: str) -> float:
    """The time of the agent's `run R ended` line (its logging clock: local time, milliseconds)."""
    line = re.search(
        rf"^(\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}}) INFO harness\.agent: run {re.escape(run_id)} ended: ",
        agent_log,
        re.MULTILINE,
    )
    if line is None:
        raise RuntimeError(f"no `run {run_id} ended` line in the agent's log")
    return datetime.strptime(line.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
