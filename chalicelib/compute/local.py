"""The local backend: agents on machines that are already there. An agent heartbeats with its pool and
slots, and each heartbeat hands it the runs launched on it since the last one (`services.runs.heartbeat`)
and names the runs it should no longer run, which it kills. So launching a run is recording it for its
agents' next heartbeat, stopping one needs nothing more than the EXITED record, and the pool's size is
whatever the agents offer."""

from __future__ import annotations

from chalicelib.domain.run_records import Run
from chalicelib.services.ports import AgentStore, Host, RunStore


class LocalAgents:
    def __init__(self, runs: RunStore, agents: AgentStore, agent_timeout_s: float) -> None:
        self._runs = runs
        self._agents = agents
        self._timeout_s = agent_timeout_s

    def hosts(self, pool: str) -> list[Host]:
        """The agents that heartbeated within the timeout."""
        return self._agents.alive(pool, self._timeout_s)

    def set_desired_slots(self, pool: str, slots: int) -> None:
        """Nothing to scale: the pool is the agents that were started."""

    def launch(self, run_id: str, launch_token: str) -> Run | None:
        """Record the run (one node record per agent for a run on several) for the next heartbeats."""
        return self._runs.launch(run_id, launch_token)

    def stop(self, run_id: str) -> None:
        """Nothing to send: the agent kills a run it holds at its next heartbeat once it is EXITED."""
