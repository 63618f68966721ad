"""Lanes: the hosts of a pool whose machines exist only while a job runs (`batch`, `sagemaker`).

Such a pool offers the scheduler `max_agents` lanes (`<backend>-<pool>-<i>`, `slots_per_agent` slots
each): Stratus' priority, fair-share and preemption decide what runs on them, as on any pool, and the
cloud service only finds the machines. A lane is alive (its run not presumed lost) while it holds
nothing, while its job is starting (within the pool's starting period from the launch), and while its
job's agent heartbeats; a job that never starts its agent, or whose agent went silent, makes the
scheduler end its run (requeued when it never started), and stopping the run stops the job.
"""

from __future__ import annotations

from chalicelib.domain import keys
from chalicelib.domain.run_records import Run
from chalicelib.domain.states import RunState
from chalicelib.services.agent_store import AgentStore, Host
from chalicelib.services.clock import epoch_of
from chalicelib.services.ports import RunStore
from stratus.contract.pools import PoolSpec


def lane_ids(spec: PoolSpec) -> list[str]:
    count = spec.max_agents or (spec.provider.max_instances if spec.provider else 0)
    return [f"{spec.backend}-{spec.name}-{i}" for i in range(count)]


def alive_lanes(
    spec: PoolSpec, agents: AgentStore, runs: RunStore, now: float, timeout_s: float
) -> list[Host]:
    slots = spec.slots_per_agent or 1
    starting_s = spec.provider.max_agent_starting_period_s if spec.provider else 1200.0
    records = agents.in_pool(spec.name)
    heard = {record.agent_id: record.last_seen for record in records}
    disabled = {record.agent_id for record in records if record.disabled}  # `det agent disable LANE`
    holding = {p.agent_id: run for run in runs.allocated(spec.name) for p in run.placements}
    alive = []
    for lane in lane_ids(spec):
        run = holding.get(lane)
        if run is not None and run.state in (RunState.LAUNCHING, RunState.RUNNING) and run.launched_at:
            launched = epoch_of(run.launched_at)
            last = heard.get(lane)
            since_launch = last if last is not None and last >= launched else None
            if since_launch is None and now - launched > starting_s:
                continue  # its job never started an agent: lost
            if since_launch is not None and now - since_launch > timeout_s:
                continue  # its agent went silent: lost
        alive.append(Host(lane, slots, accepting=lane not in disabled))
    return alive


def job_nodes(run: Run) -> tuple[list[str], list[str]]:
    """A job's nodes for `run`: the ids their agents hold it by (its node records for a run on several
    lanes, the run itself on one) and their lanes, chief first."""
    lanes = [p.agent_id for p in run.placements]
    if len(lanes) == 1:
        return [run.run_id], lanes
    return [keys.node_id(run.run_id, rank) for rank in range(len(lanes))], lanes
