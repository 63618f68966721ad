"""The local stack's cloud backends, one runner per backend: what `LocalClouds` starts for a backend's
pools, found here instead of by comparing its name. A backend's nature (does the stack name a group after
its pools) is a trait (`stratus.contract.pools.traits`); what it does in the stack's moto is its runner.

A runner is made from the stack's context (`StackContext`) and its pools (`RunnerFactory`; a runner class is its own factory) and does what
`CloudRunner` says; a new backend is a module and a line here, plus a line in the template's registry
(`infra.aws.backends`) and its traits (`stratus.contract.pools`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from infra.local.agents import StackContext
from infra.local.batch import LocalBatch
from infra.local.compute import LocalCompute
from infra.local.sagemaker import LocalSageMaker
from stratus.contract.pools import Backend, PoolSpec


class CloudRunner(Protocol):
    """A backend played in the stack's moto: its resources, then a thread that turns what moto reports
    (instances, jobs) into agent processes."""

    def create(self) -> None:
        """Its resources in moto (groups, queues) and its settings, before the control plane's first pass."""

    def start(self) -> None:
        """Start following moto: agents come and go with the instances and jobs it reports."""

    def stop(self) -> None:
        """Stop following moto and end the agent processes it started."""


class RunnerFactory(Protocol):
    """How a backend's runner is made: from the stack's context and the backend's pools (each with its
    `provider.group` where the backend is grouped). A runner class is its own factory."""

    def __call__(self, context: StackContext, pools: Sequence[PoolSpec]) -> CloudRunner: ...


#: Every cloud backend's runner, in the order they are created and started.
RUNNERS: dict[Backend, RunnerFactory] = {
    "ec2": LocalCompute,
    "batch": LocalBatch,
    "sagemaker": LocalSageMaker,
}
