"""Draining an agent whose machine is about to go (a spot interruption notice, a scale-in): nothing more is
placed on it, and every run it holds is preempted, so that it checkpoints and exits while there is time and
its trial goes back to the queue to resume elsewhere from that checkpoint (not a restart: the trial did
nothing wrong). Two witnesses may say so, in any order and more than once: the agent itself (its
heartbeat's `draining`, from the instance metadata) and AWS (the EventBridge warning on the events queue);
each call does only what is still to do."""

from __future__ import annotations

import logging

from chalicelib.domain.run_records import Run
from chalicelib.domain.states import RunState
from chalicelib.services import pausing
from chalicelib.services.ports import Ports
from stratus.contract import messages

log = logging.getLogger(__name__)

_LIVE = (RunState.ASSIGNED, RunState.LAUNCHING, RunState.RUNNING)


def drain_agent(ports: Ports, agent_id: str, reason: str, pool: str | None = None) -> bool:
    """Drain `agent_id` of `pool` (looked up when not given); False when no such agent is known.
    Repeated calls are harmless."""
    if pool is None:
        agent = ports.agents.get(agent_id)
        if agent is None:
            log.info("drain of unknown agent %s ignored (%s)", agent_id, reason)
            return False
        pool = agent.pool
    if ports.agents.set_draining(agent_id):
        log.warning("agent %s drains: %s", agent_id, reason)
        ports.queues.to_scheduler(
            pool, messages.CapacityChanged(pool).to_body(), dedup_id=f"drain-{agent_id}"
        )
    runs: dict[str, Run] = {}
    for held in ports.runs.for_agent(agent_id):
        run = held if isinstance(held, Run) else ports.runs.get(held.run_id)
        if run is not None and run.state in _LIVE and not run.preempt:
            runs[run.run_id] = run
    for run in runs.values():
        log.info("run %s preempted: its agent %s drains", run.run_id, agent_id)
        pausing.preempt_run(ports, run)
    return True
