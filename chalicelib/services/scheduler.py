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

from chalicelib.domain.scheduling import AgentCapacity, SlotRequest, assign_fifo
from chalicelib.services import runs
from chalicelib.services.clock import now_iso
from chalicelib.services.ports import Ports
from chalicelib.settings import get_settings
from contract import messages

log = logging.getLogger(__name__)


def handle_message(ports: Ports, message: messages.SchedulerMessage) -> None:
    if isinstance(message, messages.RequestSlots):
        ports.runs.put_request(
            {
                "run_id": message.run_id,
                "trial_id": message.trial_id,
                "experiment_id": message.experiment_id,
                "pool": message.pool,
                "slots": message.slots,
                "priority": message.priority,
                "slot_token": message.token,
                "queued_at": now_iso(),
            }
        )
    schedule_pool(ports, message.pool)


def schedule_pool(ports: Ports, pool: str) -> list[tuple[str, str]]:
    """One scheduling pass; returns the (run_id, agents) pairs granted now (agents comma-separated, chief
    first, for a run on several nodes)."""
    timeout = get_settings().agent_timeout_s
    alive = ports.agents.alive(pool, timeout)
    alive_ids = {str(a["agent_id"]) for a in alive}
    used: dict[str, int] = {}
    for run in ports.runs.allocated(pool):
        nodes = run.get("nodes") or [{"agent_id": run["agent_id"], "slots": run["slots"]}]
        lost = sorted({str(n["agent_id"]) for n in nodes} - alive_ids)
        if lost:
            runs.agents_lost(ports, run, lost, timeout)
            continue
        for node in nodes:
            used[node["agent_id"]] = used.get(node["agent_id"], 0) + int(node["slots"])
    pending = ports.runs.pending(pool)
    if not pending:
        return []
    agents = [
        AgentCapacity(agent_id=a["agent_id"], slots=int(a["slots"]), used=used.get(a["agent_id"], 0))
        for a in alive
    ]
    requests = [
        SlotRequest(
            run_id=r["run_id"], slots=int(r["slots"]), priority=int(r["priority"]), queued_at=r["queued_at"]
        )
        for r in pending
    ]
    tokens = {r["run_id"]: r["slot_token"] for r in pending}
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
    if granted:
        log.info("pool %s: granted %s", pool, granted)
    return granted
