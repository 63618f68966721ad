"""The control plane's ports in memory: a twin of every adapter in `chalicelib/aws/`, with the same
semantics (conditional transitions from `chalicelib.domain.states`, idempotent puts, version checks),
shipped with the package so that anything built on the ports runs without AWS, moto or threads.

    ports = memory_ports()                     # a fresh, empty stack; its clock stands still
    experiments.create(ports, config, None)
    ports.clock.advance(60)                    # time moves when told to
    ports.workflows.executions, ports.queues.events   # what the services started and sent

Runs execute on the local backend (`chalicelib.compute.local`: agents pull their launches by heartbeat)
unless `memory_ports(compute=RecordingCompute)` asks for the twin that records what it is told.

Every store keeps its records in `items` for a test to read; nothing here imports boto3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chalicelib.compute.cloud import JobCredentials
from chalicelib.compute.local import LocalAgents
from chalicelib.compute.pool_compute import BackendParts, CloudClients, QuotaApi
from chalicelib.compute.router import ComputeRouter
from chalicelib.memory._checkpoints import MemoryCheckpoints, MemoryIds, MemoryMetrics
from chalicelib.memory._clock import EPOCH_2026, MemoryClock, memory_settings
from chalicelib.memory._cloud import MemoryAutoScaling, MemoryBatch, MemorySageMaker
from chalicelib.memory._compute import MemoryBells, RecordingCompute
from chalicelib.memory._messaging import MemoryQueues, MemoryWorkflows, SchedulerMessage
from chalicelib.memory._metrics import MemoryTelemetry
from chalicelib.memory._prices import MemoryPrices
from chalicelib.memory._runs import MemoryAgents, MemoryRuns
from chalicelib.memory._storage import MemoryBlobs, MemoryLogs
from chalicelib.memory._tables import MemoryExperiments, MemoryTrials
from chalicelib.services.ports import ComputeBackend, Ports
from chalicelib.settings import Settings

__all__ = [
    "EPOCH_2026",
    "MemoryAgents",
    "MemoryAutoScaling",
    "MemoryBatch",
    "MemorySageMaker",
    "MemoryBlobs",
    "MemoryCheckpoints",
    "MemoryClock",
    "MemoryExperiments",
    "MemoryIds",
    "MemoryLogs",
    "MemoryMetrics",
    "MemoryPorts",
    "MemoryPrices",
    "MemoryQueues",
    "MemoryRuns",
    "MemoryTrials",
    "MemoryWorkflows",
    "RecordingCompute",
    "SchedulerMessage",
    "memory_ports",
    "memory_settings",
    "MemoryBells",
    "MemoryTelemetry",
]


@dataclass(frozen=True)
class MemoryPorts(Ports):
    """`Ports` whose members are known to be the twins, so a test reads their records with types."""

    experiments: MemoryExperiments
    trials: MemoryTrials
    runs: MemoryRuns
    agents: MemoryAgents
    checkpoints: MemoryCheckpoints
    metrics: MemoryMetrics
    ids: MemoryIds
    blobs: MemoryBlobs
    workflows: MemoryWorkflows
    queues: MemoryQueues
    logs: MemoryLogs
    settings: Settings
    clock: MemoryClock
    compute: ComputeBackend
    bells: MemoryBells
    telemetry: MemoryTelemetry
    #: AWS's prices and the stack's stored price table.
    prices: MemoryPrices
    #: The Auto Scaling groups of the stack's ec2 pools (`add_group` one per ec2 pool of the settings).
    autoscaling: MemoryAutoScaling
    #: The Batch jobs submitted for the stack's batch pools.
    batch: MemoryBatch
    #: The SageMaker training jobs created for the stack's sagemaker pools.
    sagemaker: MemorySageMaker


def memory_ports(
    settings: Settings | None = None,
    clock: MemoryClock | None = None,
    compute: Callable[[MemoryRuns], ComputeBackend] | None = None,
    quotas: QuotaApi | None = None,
) -> MemoryPorts:
    """A fresh stack in memory (`memory_settings()`, a clock at 2026-01-01 and the local agents' backend
    unless given; `compute` builds a backend over the run store; `quotas` answers the EC2 backend's quota
    questions, which go unanswered without it)."""
    settings = settings or memory_settings()
    clock = clock or MemoryClock()
    runs, agents, bells, experiments = (
        MemoryRuns(clock),
        MemoryAgents(clock),
        MemoryBells(),
        MemoryExperiments(),
    )
    autoscaling, batch, sagemaker = MemoryAutoScaling(clock), MemoryBatch(), MemorySageMaker()
    blobs = MemoryBlobs(settings.bucket)
    credentials = JobCredentials(blobs, settings.agent_token)  # written to the twin's bucket
    timeout = settings.agent_timeout_s
    backend = (
        compute(runs)
        if compute
        else ComputeRouter(
            LocalAgents(runs, agents, timeout, bells),
            runs,
            settings,
            BackendParts(
                agents,
                runs,
                clock,
                timeout,
                settings.stack,
                settings.api_url,
                experiments,
                credentials,
                CloudClients(lambda: autoscaling, lambda: batch, lambda: sagemaker, lambda: quotas),
            ),
        )
    )
    return MemoryPorts(
        experiments=experiments,
        trials=MemoryTrials(),
        runs=runs,
        agents=agents,
        checkpoints=MemoryCheckpoints(),
        metrics=MemoryMetrics(clock),
        ids=MemoryIds(),
        blobs=blobs,
        workflows=MemoryWorkflows(settings.state_machine_arn),
        queues=MemoryQueues(),
        logs=MemoryLogs(),
        settings=settings,
        clock=clock,
        compute=backend,
        bells=bells,
        telemetry=MemoryTelemetry(),
        prices=MemoryPrices(),
        autoscaling=autoscaling,
        batch=batch,
        sagemaker=sagemaker,
    )
