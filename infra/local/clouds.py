"""The local stack's cloud backends, one object for the stack to start and stop: the `ec2` pools' Auto
Scaling groups and their instances' agents (`infra.local.compute`), the `batch` pools' job queues and
their jobs' agents (`infra.local.batch`), the `sagemaker` pools' training jobs' agents
(`infra.local.sagemaker`). Each exists only when a pool of its backend does."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infra.local.agents import AgentLauncher
from infra.local.batch import LocalBatch
from infra.local.compute import LocalCompute
from infra.local.sagemaker import LocalSageMaker
from stratus.contract.pools import PoolSpec


class LocalClouds:
    def __init__(
        self,
        *,
        stack: str,
        pools: Sequence[PoolSpec],
        session: Any,
        moto_url: str,
        launcher: AgentLauncher,
        events_queue_url: str,
        state_dir: Path,
    ) -> None:
        backends = {pool.backend for pool in pools}
        common: dict[str, Any] = {
            "session": session,
            "moto_url": moto_url,
            "launcher": launcher,
            "events_queue_url": events_queue_url,
        }
        self._ec2 = (
            LocalCompute(stack=stack, pools=pools, state_dir=state_dir, **common)
            if "ec2" in backends
            else None
        )
        self._batch = LocalBatch(pools=pools, state_dir=state_dir, **common) if "batch" in backends else None
        self._sagemaker = (
            LocalSageMaker(stack=stack, state_dir=state_dir, **common) if "sagemaker" in backends else None
        )
        if self._sagemaker is not None:  # the role its training jobs name (moto checks none)
            os.environ["STRATUS_SAGEMAKER_ROLE_ARN"] = f"arn:aws:iam::123456789012:role/{stack}-sagemaker"

    def create(self) -> None:
        """The backends' resources in moto (groups, queues), before the control plane's first pass."""
        if self._ec2 is not None:
            self._ec2.create_groups()
        if self._batch is not None:
            self._batch.create()

    def start(self) -> None:
        """The runners: agents come and go with the instances and jobs moto reports."""
        for runner in (self._ec2, self._batch, self._sagemaker):
            if runner is not None:
                runner.start()

    def stop(self) -> None:
        for runner in (self._ec2, self._batch, self._sagemaker):
            if runner is not None:
                runner.stop()
