"""The scheduler consumer: queue slot requests, then hand out slots in each pool.

Messages arrive on a FIFO queue grouped by pool, so one pool is scheduled by one consumer at a time.
Four kinds: `request` (a run's task token asking for slots, sent by the state machine), `release`
(a run ended), `capacity` (an agent appeared or changed) and `sweep` (a timer: EventBridge every minute
in AWS, the local stack's ticker locally). All of them end with a scheduling pass, which is idempotent:
it reads the pool's state from DynamoDB and only grants what is still pending.

Every pass first ends the runs held by agents that stopped heartbeating (a crashed machine, a killed
agent): without that, their trials would wait forever for an exit nobody is left to report.
"""

from __future__ import annotations

import logging

from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling import AgentCapacity, SlotRequest, assign_fifo
from chalicelib.domain.states import ExperimentState, RunState
from chalicelib.services import job_updates, pausing, runs
from chalicelib.services.ports import Ports
from contract import messages

log = logging.getLogger(__name__)


def handle_message(ports: Ports, message: messages.SchedulerMessage) -> None:
    if isinstance(message, messages.RequestSlots):
        experiment = ports.experiments.get(message.experiment_id)
        request = Run(
            run_id=message.run_id,
            trial_id=message.trial_id,
            experiment_id=message.experiment_id,
            pool=message.pool,
            slots=message.slots,
            priority=message.priority,
            state=RunState.PENDING,
            slot_token=message.token,
            queued_at=ports.clock.now_iso(),
        )
        # The job as it is now (`det job update` may have changed it since the workflow started).
        request = job_updates.queued_as_job(ports, request, experiment)
        ports.runs.put_request(request)
        if experiment is not None and experiment.state == ExperimentState.PAUSED:
            # Its execution started just before the pause: the trial waits PAUSED, unstarted.
            pausing.pause_request_of_paused_experiment(ports, ports.runs.get(request.run_id) or request)
    schedule_pool(ports, message.pool)


def schedule_pool(ports: Ports, pool: str) -> list[tuple[str, str]]:
    """One scheduling pass; returns the (run_id, agents) pairs granted now (agents comma-separated, chief
    first, for a run on several nodes). The pool's backend is told the slots its runs hold and wait for."""
    timeout = ports.settings.agent_timeout_s
    hosts = ports.compute.hosts(pool)
    alive_ids = {host.host_id for host in hosts}
    used: dict[str, int] = {}
    for run in ports.runs.allocated(pool):
        lost = sorted({p.agent_id for p in run.placements} - alive_ids)
        if lost:
            runs.agents_lost(ports, run, lost, timeout)
            continue
        for placement in run.placements:
            used[placement.agent_id] = used.get(placement.agent_id, 0) + placement.slots
    pending = ports.runs.pending(pool)
    ports.compute.set_desired_slots(pool, sum(used.values()) + sum(r.slots for r in pending))
    if not pending:
        return []
    agents = [
        AgentCapacity(agent_id=host.host_id, slots=host.slots, used=used.get(host.host_id, 0))
        for host in hosts
    ]
    requests = [
        SlotRequest(run_id=r.run_id, slots=r.slots, priority=r.priority, queued_at=r.queued_at)
        for r in pending
    ]
    tokens = {r.run_id: r.slot_token for r in pending}
    granted = []
    for assignment in assign_fifo(requests, agents):
        if ports.runs.assign(assignment.run_id, assignment.agent_id, assignment.nodes) is None:
            continue  # assigned by an earlier delivery of this message
        grant = {"agent_id": assignment.agent_id, "num_nodes": len(assignment.agents)}
        if ports.workflows.succeed(tokens[assignment.run_id], grant):
            granted.append((assignment.run_id, ",".join(assignment.agents)))
        else:
            # The execution is gone (stopped or timed out): give the slots back.
            ports.runs.exit(assignment.run_id, -1, "its workflow ended before it was launched")
            ports.compute.stop(assignment.run_id)
    if granted:
        log.info("pool %s: granted %s", pool, granted)
    return granted
