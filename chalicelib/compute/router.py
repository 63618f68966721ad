"""The compute backend port as the control plane sees it: the agents in every pool, and the pool's cloud
backend beside them where it has one.

Runs are launched, stopped and nudged through the agents (`LocalAgents`: an agent on a laptop, on an EC2
instance, in a Batch or SageMaker job pulls its runs the same way). A pool whose backend is a cloud one
(`stratus.contract.pools.traits(...).cloud`) also has its backend's `PoolCompute`, found through the
registry (`chalicelib.compute.backends.BACKENDS`) and made on first use: an `ec2` pool's size is its Auto
Scaling group's, a `batch` or `sagemaker` pool's hosts are lanes and a launched run is also submitted as
a job, which stopping the run ends. No backend is named here."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from chalicelib.compute.backends import BACKENDS
from chalicelib.compute.local import LocalAgents
from chalicelib.compute.pool_compute import BackendParts, PoolCompute
from chalicelib.domain.run_records import Run
from chalicelib.services.agent_store import Host
from chalicelib.services.ports import Demand, RunStore
from chalicelib.settings import Settings
from stratus.contract.pools import Backend, PoolSpec, traits


class ComputeRouter:
    def __init__(
        self,
        agents: LocalAgents,
        runs: RunStore,
        settings: Settings,
        parts: BackendParts,
        *,
        backends: Mapping[Backend, Callable[[BackendParts], PoolCompute]] = BACKENDS,
    ) -> None:
        self._agents = agents
        self._runs = runs
        self._settings = settings
        self._parts = parts
        self._backends = backends
        self._made: dict[str, PoolCompute] = {}
        #: Whether a stopped run may have a job of its own to end (then `stop` reads the run).
        self._jobs = any(traits(spec.backend).job_per_run for spec in settings.pools)

    def hosts(self, pool: str) -> list[Host]:
        cloud = self._cloud(pool)
        found = cloud[1].hosts(cloud[0]) if cloud is not None else None
        return found if found is not None else self._agents.hosts(pool)

    def set_demand(self, pool: str, demand: Demand) -> str | None:
        cloud = self._cloud(pool)
        return (
            cloud[1].set_demand(cloud[0], demand)
            if cloud is not None
            else self._agents.set_demand(pool, demand)
        )

    def sweep(self, pool: str) -> None:
        cloud = self._cloud(pool)
        if cloud is not None:
            cloud[1].sweep(cloud[0])

    def launch(self, run_id: str, launch_token: str) -> Run | None:
        run = self._agents.launch(run_id, launch_token)
        cloud = self._cloud(run.pool) if run is not None else None
        if run is not None and cloud is not None:
            cloud[1].submit(cloud[0], run)
        return run

    def stop(self, run_id: str) -> None:
        self._agents.stop(run_id)
        if self._jobs:
            run = self._runs.get(run_id)  # None for a node id: the run's own stop ends its job
            cloud = self._cloud(run.pool) if run is not None else None
            if run is not None and cloud is not None:
                cloud[1].terminate(run, "Stratus stopped the run")

    def nudge(self, run_id: str) -> None:
        self._agents.nudge(run_id)

    def _cloud(self, pool: str) -> tuple[PoolSpec, PoolCompute] | None:
        """The pool's spec and its cloud backend, made on first use; None for a pool of agents alone."""
        spec = self._settings.pool(pool)
        if spec is None or spec.backend not in self._backends:
            return None
        if spec.backend not in self._made:
            self._made[spec.backend] = self._backends[spec.backend](self._parts)
        return spec, self._made[spec.backend]
