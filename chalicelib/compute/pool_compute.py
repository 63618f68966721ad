"""What a cloud backend does for its pools, behind `ComputeRouter`, and what each is made from.

A cloud backend (`ec2`, `batch`, `sagemaker`: every backend whose `traits(...).cloud` is true) is one
object per stack, made on first use from `BackendParts` by its module's `for_pools`, and found through
`chalicelib.compute.backends.BACKENDS`. Runs are launched, stopped and nudged through the agents in every
pool (an agent on a laptop, an EC2 instance or in a job pulls its runs the same way); a backend adds what
its machines need: its pool's hosts where they are not simply its agents, growing the pool for the
demand, the periodic sweep, a job per run and ending it. `PoolComputeDefaults` gives a backend the
methods it has nothing to do in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from chalicelib.compute.cloud import AutoScalingApi, BatchApi, JobCredentials, TrainingApi
from chalicelib.domain.run_records import Run
from chalicelib.services.agent_store import AgentStore, Host
from chalicelib.services.ports import Clock, Demand, ExperimentStore, RunStore
from stratus.contract.pools import PoolSpec


class QuotaApi(Protocol):
    def vcpus(self, instance_type: str) -> int | None:
        """The type's vCPUs, or None when EC2 does not say."""
        ...

    def quota(self, code: str) -> float | None:
        """The account's value of an EC2 quota (vCPUs), or None when it cannot be read."""
        ...


class PoolCompute(Protocol):
    def hosts(self, spec: PoolSpec) -> list[Host] | None:
        """The pool's live hosts; None where they are the agents that heartbeat (`LocalAgents`)."""
        ...

    def set_demand(self, spec: PoolSpec, demand: Demand) -> str | None:
        """Grow the pool for what a pass could not place; why it will not grow enough, where known."""
        ...

    def sweep(self, spec: PoolSpec) -> None:
        """The pool's periodic look: let idle and broken machines go."""
        ...

    def submit(self, spec: PoolSpec, run: Run) -> None:
        """A launched run's own machine (a job), where the backend starts one per run."""
        ...

    def terminate(self, run: Run, reason: str) -> None:
        """End what `submit` started for a run the control plane ended."""
        ...


class PoolComputeDefaults:
    """The methods a backend has nothing to do in (an EC2 group has no job per run; a job has no group)."""

    def hosts(self, spec: PoolSpec) -> list[Host] | None:
        return None

    def set_demand(self, spec: PoolSpec, demand: Demand) -> str | None:
        return None

    def sweep(self, spec: PoolSpec) -> None:
        return None

    def submit(self, spec: PoolSpec, run: Run) -> None:
        return None

    def terminate(self, run: Run, reason: str) -> None:
        return None


@dataclass(frozen=True)
class CloudClients:
    """The AWS services the backends call, each made on first use: the adapters in `chalicelib.aws`, or
    their twins in `chalicelib.memory`. A backend that needs another service adds its client here."""

    autoscaling: Callable[[], AutoScalingApi]
    batch: Callable[[], BatchApi]
    sagemaker: Callable[[], TrainingApi]
    quotas: Callable[[], QuotaApi | None]


@dataclass(frozen=True)
class BackendParts:
    """What any backend is made from (each takes what it needs)."""

    agents: AgentStore
    runs: RunStore
    clock: Clock
    agent_timeout_s: float
    stack: str
    api_url: str
    experiments: ExperimentStore
    credentials: JobCredentials
    clients: CloudClients
