"""The local stack's AWS Batch: the `batch` pools' job queues and job definitions in moto, and a runner that
runs each job moto reports RUNNING as agent processes, one per node (moto cannot run containers).

At start, each batch pool gets an unmanaged compute environment, its job queue `<stack>-<pool>` and
multi-node queue `<stack>-<pool>-mnp`, and job definitions of those names whose command is the stack's own
(`infra.boot.batch_command`: a one-run agent per node). moto's Batch is patched (`infra.local.moto_batch`)
so that a job stays RUNNING until its work ends. Every `interval` the runner lists the RUNNING jobs of each
queue and, for a new one, starts the command of its job definition with the job's `Ref::` parameters
filled in, once per node (the node count is its `agents` parameter: moto ignores `nodeOverrides`), with
Batch's `AWS_BATCH_JOB_ID`, `AWS_BATCH_JOB_NODE_INDEX` and `AWS_BATCH_JOB_NUM_NODES`. When the main node's
agent exits, the job ends with its exit code and the `Batch Job State Change` event goes to the events
queue, as the stack's EventBridge rule would put it there; a job terminated by the control plane (moto
marks it FAILED) has its agents stopped (SIGTERM: they drain).

A reclaimed spot host can be played: a file `<state-dir>/compute/interrupt/<job id>` makes the runner send
the job's agents SIGTERM, as ECS does when the host goes (they drain: their trials checkpoint, exit and go
back to the queue), and end the job FAILED with Batch's "Host EC2 ... terminated." once they have exited.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.compute_events import BATCH_STATE_CHANGE
from infra import boot
from infra.local import moto_batch
from infra.local.agents import Runner
from stratus.contract.container_boot import agent_argv
from stratus.contract.pools import PoolSpec

log = logging.getLogger("stratus.local.batch")

MULTI_NODE = "-mnp"


@dataclass
class _Job:
    job_id: str
    pool: str
    nodes: list[subprocess.Popen[bytes]]
    reclaimed: bool = False


class LocalBatch(Runner):
    """The runner of the batch pools; their queues are their `provider.group`, named after the stack."""

    NAME = "local-batch"

    def prepare(self) -> None:
        self._batch = self.context.client("batch")
        self._iam = self.context.client("iam")
        self._jobs: dict[str, _Job] = {}

    def create(self) -> None:
        moto_batch.apply()
        role = self._iam.create_role(
            RoleName="stratus-local-batch",
            AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
        )["Role"]["Arn"]
        for pool in self.pools:
            assert pool.provider is not None
            name = pool.provider.group
            environment = self._batch.create_compute_environment(
                computeEnvironmentName=name, type="UNMANAGED", state="ENABLED", serviceRole=role
            )["computeEnvironmentArn"]
            command = boot.batch_command(self._launcher.api_url, pool.name, pool.slots_per_agent or 1)
            for queue in (name, name + MULTI_NODE):
                self._batch.create_job_queue(
                    jobQueueName=queue,
                    state="ENABLED",
                    priority=1,
                    computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment}],
                )
                self._batch.register_job_definition(
                    jobDefinitionName=queue,
                    type="container",
                    containerProperties={
                        "image": pool.provider.image or "stratus/local",
                        "command": command,
                        "resourceRequirements": [
                            {"type": "VCPU", "value": "1"},
                            {"type": "MEMORY", "value": "512"},
                        ],
                    },
                    retryStrategy={"attempts": 1},
                )
            log.info("pool %s: Batch queues %s and %s", pool.name, name, name + MULTI_NODE)

    def start(self) -> None:
        self._requests.mkdir(parents=True, exist_ok=True)
        super().start()

    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [p for job in self._jobs.values() for p in job.nodes]

    def look(self) -> None:
        running: set[str] = set()
        for pool in self.pools:
            assert pool.provider is not None
            for queue in (pool.provider.group, pool.provider.group + MULTI_NODE):
                listed = self._batch.list_jobs(jobQueue=queue, jobStatus="RUNNING")["jobSummaryList"]
                for summary in listed:
                    running.add(summary["jobId"])
                    if summary["jobId"] not in self._jobs:
                        self._start(pool, summary["jobId"])
        for job_id, job in list(self._jobs.items()):
            main = job.nodes[0]
            request = self._requests / job_id
            if request.exists():
                request.unlink(missing_ok=True)
                job.reclaimed = True
                self._signal(job, signal.SIGTERM)  # the host goes: ECS stops the containers
                log.info("Batch job %s: its host is reclaimed", job_id)
            if job_id not in running:  # terminated: its agents stop (they drain)
                self._signal(job, signal.SIGTERM)
                if all(p.poll() is not None for p in job.nodes):
                    del self._jobs[job_id]
            elif main.poll() is not None:
                self._signal(job, signal.SIGTERM)
                reclaimed = job.reclaimed and all(p.poll() is not None for p in job.nodes)
                if job.reclaimed and not reclaimed:
                    continue  # the other nodes are still draining
                described = (
                    moto_batch.reclaim(job_id) if reclaimed else moto_batch.finish(job_id, main.returncode)
                )
                if described is not None:
                    self._send_event(described)
                ended = "its host reclaimed" if reclaimed else f"code {main.returncode}"
                log.info("Batch job %s: ended (%s)", job_id, ended)

    def _start(self, pool: PoolSpec, job_id: str) -> None:
        (described,) = self._batch.describe_jobs(jobs=[job_id])["jobs"]
        parameters = described.get("parameters") or {}
        agents = [a for a in str(parameters.get("agents", "")).split(",") if a]
        runs = [r for r in str(parameters.get("runs", "")).split(",") if r]
        command = [
            parameters.get(arg[5:], arg) if arg.startswith("Ref::") else arg
            for arg in described["container"]["command"]
        ]
        nodes = []
        for index, (agent_id, run_id) in enumerate(zip(agents, runs, strict=True)):
            env = {
                "AWS_BATCH_JOB_ID": job_id,
                "AWS_BATCH_JOB_NODE_INDEX": str(index),
                "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
                "AWS_BATCH_JOB_NUM_NODES": str(len(agents)),
            }
            # Every node is on this machine: a multi-node trial rendezvouses on the loopback.
            nodes.append(
                self._launcher.start_line(
                    agent_id, agent_argv(command), extra=["--address", "127.0.0.1"], env=env
                )
            )
            log.info("Batch job %s node %d: agent %s for %s", job_id, index, agent_id, run_id)
        self._jobs[job_id] = _Job(job_id, pool.name, nodes)

    def _signal(self, job: _Job, sig: signal.Signals) -> None:
        for process in job.nodes:
            if process.poll() is None:
                process.send_signal(sig)

    def _send_event(self, described: dict[str, Any]) -> None:
        event_id = f"batch-{described['jobId']}-{described['status']}"
        self.send_event("aws.batch", BATCH_STATE_CHANGE, event_id, described.get("jobArn", ""), described)
