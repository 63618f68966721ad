"""What the cluster is made of, as `det resource-pool list`, `det agent list` and `det slot list` show
it: the configured pools with their agents, slots and queues; the agents that ever heartbeated, with
their last heartbeat; and each agent's slots with the trial that holds it. And `det agent enable |
disable`: a disabled agent gets nothing new; its runs checkpoint and move to other agents, or, with
`--drain`, finish where they are (Determined kills them instead: their progress since the last checkpoint
is lost)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from chalicelib.domain.run_records import Run
from chalicelib.errors import NotFoundError
from chalicelib.services import jobs, pausing
from chalicelib.services.agent_store import AgentRecord
from chalicelib.services.clock import iso_utc
from chalicelib.services.ports import Ports
from stratus.contract import messages
from stratus.contract.pools import PoolSpec


@dataclass(frozen=True)
class PoolStatus:
    spec: PoolSpec
    agents: int
    slots_total: int
    slots_used: int
    queued_jobs: int
    scheduled_jobs: int


@dataclass(frozen=True)
class AgentStatus:
    agent_id: str
    pool: str
    slots: int
    slots_used: int
    runs: int  # Determined's "Containers": the runs it holds
    last_heartbeat: str
    alive: bool
    draining: bool = False
    enabled: bool = True
    #: The version its compute package named ("" if none: an agent from before versions were sent).
    version: str = ""


@dataclass(frozen=True)
class AgentChange:
    """What `set_enabled` did: the agent after, the runs told to checkpoint and move off it, and the runs
    left on it (draining: they finish there)."""

    agent: AgentStatus
    moved: list[str]
    remaining: list[str]


@dataclass(frozen=True)
class SlotStatus:
    agent_id: str
    pool: str
    slot_id: int
    alive: bool
    run_id: str | None = None
    trial_id: int | None = None
    experiment_id: int | None = None


def list_pools(ports: Ports) -> list[PoolStatus]:
    statuses = []
    for spec in ports.settings.pools:
        hosts = ports.compute.hosts(spec.name)
        queue = jobs.list_jobs(ports, spec.name)
        statuses.append(
            PoolStatus(
                spec=spec,
                agents=len(hosts),
                slots_total=sum(host.slots for host in hosts),
                slots_used=sum(run.slots for run in ports.runs.allocated(spec.name)),
                queued_jobs=sum(1 for job in queue if job.status == "QUEUED"),
                scheduled_jobs=sum(1 for job in queue if job.status == "SCHEDULED"),
            )
        )
    return statuses


def list_agents(ports: Ports) -> list[AgentStatus]:
    agents = ports.agents.every()
    holders = _holders(ports, agents)
    return [_status(ports, agent, holders.get(agent.agent_id, [])) for agent in agents]


def set_enabled(ports: Ports, agent_id: str, *, enabled: bool, drain: bool = False) -> AgentChange:
    """Enable or disable an agent (idempotent: a repeat changes nothing more). Disabling takes it out of
    placement at once; without ``drain`` each run on it is told to checkpoint and go back to the queue
    (the preemption path: it resumes on another agent from that checkpoint), with ``drain`` they finish
    there. The pool's scheduler runs either way (capacity changed)."""
    record = ports.agents.set_disabled(agent_id, not enabled)
    if record is None:
        raise NotFoundError(f"agent {agent_id!r} never heartbeated; `det agent list` shows the agents")
    held = _holders(ports, [record]).get(agent_id, [])
    moved = []
    if not enabled and not drain:
        for run, _ in held:
            if not (run.preempt or run.pausing):
                pausing.preempt_run(ports, run)
                moved.append(run.run_id)
    state = "enabled" if enabled else "disabled"
    ports.queues.to_scheduler(
        record.pool,
        messages.CapacityChanged(record.pool).to_body(),
        dedup_id=f"capacity-{agent_id}-{state}-{ports.clock.now_iso()}",
    )
    remaining = [run.run_id for run, _ in held if run.run_id not in moved]
    return AgentChange(_status(ports, record, held), moved, remaining)


def _status(ports: Ports, agent: AgentRecord, held: list[tuple[Run, int]]) -> AgentStatus:
    horizon = ports.clock.now() - ports.settings.agent_timeout_s
    return AgentStatus(
        agent_id=agent.agent_id,
        pool=agent.pool,
        slots=agent.slots,
        slots_used=sum(slots for _, slots in held),
        runs=len(held),
        last_heartbeat=iso_utc(agent.last_seen),
        alive=agent.last_seen >= horizon,
        # its machine is about to go, or an operator disabled it with runs still on it
        draining=agent.draining or (agent.disabled and bool(held)),
        enabled=not agent.disabled,
        version=agent.version,
    )


def list_slots(ports: Ports) -> list[SlotStatus]:
    """Every slot of every agent, in agent then slot order; a run's slots on an agent are numbered in
    the order the runs were assigned (the control plane does not know which device a process uses)."""
    agents = ports.agents.every()
    holders = _holders(ports, agents)
    horizon = ports.clock.now() - ports.settings.agent_timeout_s
    slots: list[SlotStatus] = []
    for agent in agents:
        alive = agent.last_seen >= horizon
        taken = [run for run, count in holders.get(agent.agent_id, []) for _ in range(count)]
        for slot_id in range(agent.slots):
            run = taken[slot_id] if slot_id < len(taken) else None
            slots.append(
                SlotStatus(
                    agent_id=agent.agent_id,
                    pool=agent.pool,
                    slot_id=slot_id,
                    alive=alive,
                    run_id=run.run_id if run else None,
                    trial_id=run.trial_id if run else None,
                    experiment_id=run.experiment_id if run else None,
                )
            )
    return slots


def _holders(ports: Ports, agents: Iterable[AgentRecord]) -> dict[str, list[tuple[Run, int]]]:
    """Per agent, the runs holding slots on it (assigned, launching or running) and how many."""
    held: dict[str, list[tuple[Run, int]]] = {}
    for pool in sorted({agent.pool for agent in agents}):
        runs = sorted(ports.runs.allocated(pool), key=lambda run: (run.assigned_at or "", run.run_id))
        for run in runs:
            for placement in run.placements:
                held.setdefault(placement.agent_id, []).append((run, placement.slots))
    return held
