"""The local backend: agents on machines that are already there. An agent heartbeats with its pool and
slots, and each heartbeat hands it the runs launched on it since the last one (`services.runs.heartbeat`)
and names the runs it should no longer run, which it kills. So launching a run is recording it for its
agents' next heartbeat, stopping one needs nothing more than the EXITED record, and the pool's size is
whatever the agents offer. Each of these rings the agents' doorbells (`chalicelib.aws.bells`), so they
heartbeat at once instead of at their next beat."""

from __future__ import annotations

from chalicelib.domain.run_records import Node, Run
from chalicelib.services.agent_store import AgentStore, Host
from chalicelib.services.ports import Bells, Demand, RunStore


class LocalAgents:
    def __init__(self, runs: RunStore, agents: AgentStore, agent_timeout_s: float, bells: Bells) -> None:
        self._runs = runs
        self._agents = agents
        self._timeout_s = agent_timeout_s
        self._bells = bells

    def hosts(self, pool: str) -> list[Host]:
        """The agents that heartbeated within the timeout."""
        return self._agents.alive(pool, self._timeout_s)

    def set_demand(self, pool: str, demand: Demand) -> str | None:
        """Nothing to scale: the pool is the agents that were started."""
        return None

    def sweep(self, pool: str) -> None:
        """Nothing to let go: agents stop when they are stopped."""

    def launch(self, run_id: str, launch_token: str) -> Run | None:
        """Record the run (one node record per agent for a run on several) for the next heartbeats."""
        run = self._runs.launch(run_id, launch_token)
        if run is not None:
            self._ring_holders(run)  # the record it returns names its agents: no second read
        return run

    def stop(self, run_id: str) -> None:
        """The agent kills a run it holds at its next heartbeat once it is EXITED: ring it."""
        self._ring(run_id)

    def nudge(self, run_id: str) -> None:
        """The agent passes a stop request on at its next heartbeat: ring it."""
        self._ring(run_id)

    def _ring(self, run_id: str) -> None:
        held = self._runs.held(run_id)
        if held is not None:
            self._ring_holders(held)

    def _ring_holders(self, held: Run | Node) -> None:
        agents = {held.agent_id} if isinstance(held, Node) else {p.agent_id for p in held.placements}
        for agent_id in sorted(agents):
            self._bells.ring(agent_id)
