"""The local stack's SageMaker: a runner that runs each training job of the `sagemaker` pools as agent
processes, one per instance (moto cannot run a training image).

moto's SageMaker is patched (`infra.local.moto_sagemaker`) so that a job stays InProgress until its work ends.
Every `interval` the runner lists the InProgress jobs of the stack (`<stack>-` names) and, for a new one,
starts the agent its container would boot into (`stratus.contract.container_boot`) once per instance, each
with a `resourceconfig.json` naming its host (`algo-1`, ...) as SageMaker writes it. When the first
instance's agent exits, the job ends with its exit code; a job stopped by the control plane has its
agents stopped (SIGTERM: they drain). Each end goes to the events queue as the `SageMaker Training Job
State Change` event the stack's EventBridge rule would put there.

A spot interruption can be played: a file `<state-dir>/compute/interrupt/<job name>` makes the runner send
the job's agents SIGTERM (they drain: their trials checkpoint, exit and go back to the queue) and end the
job Stopped with the secondary status `Interrupted` once they have exited.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.compute_events import SAGEMAKER_STATE_CHANGE
from infra.local import moto_sagemaker
from infra.local.agents import Runner
from stratus.contract.container_boot import agent_argv

log = logging.getLogger("stratus.local.sagemaker")

#: The control plane's variable of the training jobs' role (`infra.aws.compute_sagemaker.ROLE_VARIABLE`).
ROLE_VARIABLE = "STRATUS_SAGEMAKER_ROLE_ARN"


@dataclass
class _Job:
    name: str
    nodes: list[subprocess.Popen[bytes]]
    ended: bool = False
    interrupted: bool = False


class LocalSageMaker(Runner):
    """The runner of the sagemaker pools: it follows every training job of the stack (`<stack>-...`),
    whichever pool created it."""

    NAME = "local-sagemaker"

    def prepare(self) -> None:
        self._stack = self.context.stack
        self._prefix = f"{self.context.stack}-"
        self._sagemaker = self.context.client("sagemaker")
        self._configs = self.context.state_dir / "sagemaker"
        self._jobs: dict[str, _Job] = {}

    def create(self) -> None:
        """The role the control plane names in the training jobs it creates (moto checks none)."""
        os.environ[ROLE_VARIABLE] = f"arn:aws:iam::123456789012:role/{self._stack}-sagemaker"
        log.info("pools %s: SageMaker training jobs %s*", ", ".join(p.name for p in self.pools), self._prefix)

    def start(self) -> None:
        moto_sagemaker.apply()
        self._configs.mkdir(parents=True, exist_ok=True)
        self._requests.mkdir(parents=True, exist_ok=True)
        super().start()

    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [p for job in self._jobs.values() for p in job.nodes]

    def look(self) -> None:
        listed = self._sagemaker.list_training_jobs(NameContains=self._prefix, MaxResults=100)
        in_progress = {
            j["TrainingJobName"]
            for j in listed["TrainingJobSummaries"]
            if j["TrainingJobStatus"] == "InProgress"
        }
        for name in sorted(in_progress - set(self._jobs)):
            self._start(name)
        for name, job in list(self._jobs.items()):
            request = self._requests / name
            if request.exists():
                request.unlink(missing_ok=True)
                job.interrupted = True
                for process in job.nodes:
                    if process.poll() is None:
                        process.send_signal(signal.SIGTERM)  # the spot capacity goes
                log.info("training job %s: spot interruption", name)
            if name not in in_progress:  # stopped by the control plane: its agents drain
                if not job.ended:
                    job.ended = True
                    self._send_event(self._sagemaker.describe_training_job(TrainingJobName=name))
                for process in job.nodes:
                    if process.poll() is None:
                        process.send_signal(signal.SIGTERM)
                if all(p.poll() is not None for p in job.nodes):
                    del self._jobs[name]
            elif job.interrupted and all(p.poll() is not None for p in job.nodes):
                described = moto_sagemaker.interrupt(name)
                job.ended = True
                if described is not None:
                    self._send_event(described)
            elif job.nodes[0].poll() is not None and not job.interrupted:
                described = moto_sagemaker.finish(name, job.nodes[0].returncode)
                job.ended = True
                if described is not None:
                    self._send_event(described)
                log.info("training job %s: ended with code %d", name, job.nodes[0].returncode)

    def _start(self, name: str) -> None:
        described = self._sagemaker.describe_training_job(TrainingJobName=name)
        spec = described["AlgorithmSpecification"]
        # The job's container would install the compute package first (`stratus.contract.container_boot`); here
        # the agent runs from this checkout, with the job's arguments.
        line = agent_argv([*spec["ContainerEntrypoint"], *spec.get("ContainerArguments", [])])
        count = int(described["ResourceConfig"]["InstanceCount"])
        hosts = [f"algo-{i + 1}" for i in range(count)]
        agents = line[line.index("--sagemaker-agents") + 1].split(",")
        nodes = []
        for index, host in enumerate(hosts):
            config = self._configs / f"{name}-{host}.json"
            config.write_text(json.dumps({"current_host": host, "hosts": hosts}))
            env = {"STRATUS_SAGEMAKER_RESOURCE_CONFIG": str(config), **described.get("Environment", {})}
            nodes.append(
                self._launcher.start_line(agents[index], line, extra=["--address", "127.0.0.1"], env=env)
            )
            log.info("training job %s: %s is agent %s", name, host, agents[index])
        self._jobs[name] = _Job(name, nodes)

    def _send_event(self, described: dict[str, Any]) -> None:
        event_id = f"sagemaker-{described['TrainingJobName']}-{described['TrainingJobStatus']}"
        resource = described.get("TrainingJobArn", "")
        self.send_event("aws.sagemaker", SAGEMAKER_STATE_CHANGE, event_id, resource, described)
