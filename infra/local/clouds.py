"""The local stack's cloud backends, one object for the stack to start and stop: a runner
(`infra.local.backends.RUNNERS`) for each backend the stack's cloud pools use, made with that backend's
pools only: the `ec2` pools' Auto Scaling groups and their instances' agents (`infra.local.compute`), the
`batch` pools' job queues and their jobs' agents (`infra.local.batch`), the `sagemaker` pools' training
jobs' agents (`infra.local.sagemaker`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from infra.local.agents import StackContext
from infra.local.backends import RUNNERS, CloudRunner, RunnerFactory
from stratus.contract.pools import Backend, PoolSpec, traits


class NoRunnerError(LookupError):
    """A cloud pool whose backend has no runner in `RUNNERS` (a line is missing there)."""


class LocalClouds:
    def __init__(
        self,
        context: StackContext,
        pools: Sequence[PoolSpec],
        *,
        runners: Mapping[Backend, RunnerFactory] = RUNNERS,
    ) -> None:
        """`runners`: the runner of each backend (`RUNNERS`; a test's own in unit tests)."""
        cloud = [pool for pool in pools if traits(pool.backend).cloud]
        missing = sorted({pool.backend for pool in cloud} - set(runners))
        if missing:
            raise NoRunnerError(
                f"backend {missing[0]!r} has no runner in the local stack; add one to "
                "infra.local.backends.RUNNERS"
            )
        self._runners: list[CloudRunner] = [
            make(context, mine)
            for backend, make in runners.items()
            if (mine := [pool for pool in cloud if pool.backend == backend])
        ]

    def create(self) -> None:
        """The backends' resources in moto (groups, queues), before the control plane's first pass."""
        for runner in self._runners:
            runner.create()

    def start(self) -> None:
        """The runners: agents come and go with the instances and jobs moto reports."""
        for runner in self._runners:
            runner.start()

    def stop(self) -> None:
        for runner in self._runners:
            runner.stop()
