"""A compute backend in memory that records what the control plane asked of it, for tests of anything
that is not the local agent's pull (an EC2, Batch or SageMaker backend is driven the same way)."""

from __future__ import annotations

from typing import Any

from chalicelib.domain.run_records import Run
from chalicelib.services.agent_store import Host
from chalicelib.services.ports import Demand, RunStore


class RecordingCompute:
    """Hosts are added by hand (`add_host`); launches, stops and desired sizes are recorded. A launch
    still records the run and its token in the run store, as every backend must (its exit answers it)."""

    def __init__(self, runs: RunStore) -> None:
        self._runs = runs
        self.pools: dict[str, dict[str, Host]] = {}
        self.demands: dict[str, list[Demand]] = {}
        self.sweeps: list[str] = []
        self.launched: list[str] = []
        self.stopped: list[str] = []
        self.nudged: list[str] = []

    def add_host(self, pool: str, host_id: str, slots: int) -> None:
        self.pools.setdefault(pool, {})[host_id] = Host(host_id, slots)

    def remove_host(self, pool: str, host_id: str) -> None:
        """The host is gone (an interrupted instance, a failed job): its runs are lost at the next pass."""
        self.pools.get(pool, {}).pop(host_id, None)

    def hosts(self, pool: str) -> list[Host]:
        return sorted(self.pools.get(pool, {}).values(), key=lambda host: host.host_id)

    def set_demand(self, pool: str, demand: Demand) -> str | None:
        self.demands.setdefault(pool, []).append(demand)
        return None

    def sweep(self, pool: str) -> None:
        self.sweeps.append(pool)

    def launch(self, run_id: str, launch_token: str) -> Run | None:
        record = self._runs.launch(run_id, launch_token)
        if record is not None:
            self.launched.append(run_id)
        return record

    def stop(self, run_id: str) -> None:
        self.stopped.append(run_id)

    def nudge(self, run_id: str) -> None:
        self.nudged.append(run_id)


class MemoryBells:
    """Doorbells that record their rings; agents get no URL (they heartbeat on their interval)."""

    def __init__(self) -> None:
        self.rung: list[str] = []
        self.forgotten: list[str] = []

    def ring(self, agent_id: str) -> None:
        self.rung.append(agent_id)

    def url(self, agent_id: str) -> dict[str, Any] | None:
        return None

    def forget(self, agent_id: str) -> None:
        self.forgotten.append(agent_id)
