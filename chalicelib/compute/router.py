"""The compute backend port as the control plane sees it: runs are launched, stopped and nudged through
the agents (`LocalAgents`: an agent on a laptop and one on an EC2 instance pull their runs the same way),
while the pool's size is each backend's own business: nothing to do for a `local` pool, the Auto Scaling
group of an `ec2` pool (`chalicelib.compute.ec2`). The cloud clients are made only when a pool needs them."""

from __future__ import annotations

from collections.abc import Callable

from chalicelib.compute.ec2 import Ec2Scaler
from chalicelib.compute.local import LocalAgents
from chalicelib.domain.run_records import Run
from chalicelib.services.ports import Demand, Host
from chalicelib.settings import Settings


class ComputeRouter:
    def __init__(self, agents: LocalAgents, settings: Settings, ec2: Callable[[], Ec2Scaler]) -> None:
        self._agents = agents
        self._settings = settings
        self._make_ec2 = ec2
        self._ec2: Ec2Scaler | None = None

    def hosts(self, pool: str) -> list[Host]:
        return self._agents.hosts(pool)

    def set_demand(self, pool: str, demand: Demand) -> None:
        spec = self._settings.pool(pool)
        if spec is not None and spec.backend == "ec2":
            self._scaler().set_demand(spec, demand)

    def sweep(self, pool: str) -> None:
        spec = self._settings.pool(pool)
        if spec is not None and spec.backend == "ec2":
            self._scaler().sweep(spec)

    def launch(self, run_id: str, launch_token: str) -> Run | None:
        return self._agents.launch(run_id, launch_token)

    def stop(self, run_id: str) -> None:
        self._agents.stop(run_id)

    def nudge(self, run_id: str) -> None:
        self._agents.nudge(run_id)

    def _scaler(self) -> Ec2Scaler:
        if self._ec2 is None:
            self._ec2 = self._make_ec2()
        return self._ec2
