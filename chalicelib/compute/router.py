"""The compute backend port as the control plane sees it, dispatching by the pool's backend:

- `local` and `ec2`: runs are launched, stopped and nudged through the agents (`LocalAgents`: an agent on a
  laptop and one on an EC2 instance pull their runs the same way); an `ec2` pool's size is its Auto
  Scaling group's (`chalicelib.compute.ec2`).
- `batch` and `sagemaker`: the pool's hosts are lanes, and a launched run is also submitted as a Batch job
  or a SageMaker training job, whose agent pulls it the same way; stopping the run stops the job
  (`chalicelib.compute.batch`, `chalicelib.compute.sagemaker`).

The cloud clients are made only when a pool needs them."""

from __future__ import annotations

from collections.abc import Callable

from chalicelib.compute.batch import BatchJobs
from chalicelib.compute.ec2 import Ec2Scaler
from chalicelib.compute.local import LocalAgents
from chalicelib.compute.sagemaker import TrainingJobs
from chalicelib.domain.run_records import Run
from chalicelib.services.agent_store import Host
from chalicelib.services.ports import Demand, RunStore
from chalicelib.settings import Settings
from stratus.contract.pools import PoolSpec


class ComputeRouter:
    def __init__(
        self,
        agents: LocalAgents,
        runs: RunStore,
        settings: Settings,
        *,
        ec2: Callable[[], Ec2Scaler],
        batch: Callable[[], BatchJobs],
        sagemaker: Callable[[], TrainingJobs],
    ) -> None:
        self._agents = agents
        self._runs = runs
        self._settings = settings
        self._makers: dict[str, Callable[[], BatchJobs | TrainingJobs]] = {
            "batch": batch,
            "sagemaker": sagemaker,
        }
        self._made: dict[str, BatchJobs | TrainingJobs] = {}
        self._make_ec2 = ec2
        self._ec2: Ec2Scaler | None = None

    def hosts(self, pool: str) -> list[Host]:
        spec = self._settings.pool(pool)
        if spec is not None and spec.backend in self._makers:
            return self._jobs(spec.backend).hosts(spec)
        return self._agents.hosts(pool)

    def set_demand(self, pool: str, demand: Demand) -> str | None:
        spec = self._spec(pool, "ec2")
        return self._scaler().set_demand(spec, demand) if spec is not None else None

    def sweep(self, pool: str) -> None:
        spec = self._spec(pool, "ec2")
        if spec is not None:
            self._scaler().sweep(spec)

    def launch(self, run_id: str, launch_token: str) -> Run | None:
        run = self._agents.launch(run_id, launch_token)
        spec = self._settings.pool(run.pool) if run is not None else None
        if run is not None and spec is not None and spec.backend in self._makers:
            self._jobs(spec.backend).submit(spec, run)
        return run

    def stop(self, run_id: str) -> None:
        self._agents.stop(run_id)
        if any(spec.backend in self._makers for spec in self._settings.pools):
            run = self._runs.get(run_id)  # None for a node id: the run's own stop stops the job
            spec = self._settings.pool(run.pool) if run is not None else None
            if run is not None and spec is not None and spec.backend in self._makers:
                self._jobs(spec.backend).terminate(run, "Stratus stopped the run")

    def nudge(self, run_id: str) -> None:
        self._agents.nudge(run_id)

    def _spec(self, pool: str, backend: str) -> PoolSpec | None:
        spec = self._settings.pool(pool)
        return spec if spec is not None and spec.backend == backend else None

    def _scaler(self) -> Ec2Scaler:
        if self._ec2 is None:
            self._ec2 = self._make_ec2()
        return self._ec2

    def _jobs(self, backend: str) -> BatchJobs | TrainingJobs:
        if backend not in self._made:
            self._made[backend] = self._makers[backend]()
        return self._made[backend]
