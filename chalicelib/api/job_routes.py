"""User-facing routes of the job queue and the cluster (IAM-authorized in AWS): update a job's priority,
weight, pool or place in the queue (`chalicelib.services.job_updates`), one or a batch, and list the
resource pools, agents and slots (`chalicelib.services.cluster`), and mint an agent's credential."""

from __future__ import annotations

from chalice.app import Blueprint

from chalicelib.api import queue_models as qm
from chalicelib.api.auth import MAX_AGENT_ID, UserPrincipal
from chalicelib.api.routing import route
from chalicelib.domain.records import Experiment
from chalicelib.errors import BadRequestError
from chalicelib.services import cluster, job_updates, tokens
from chalicelib.settings import get_settings
from chalicelib.wiring import ports
from stratus.contract.pools import traits

bp = Blueprint(__name__)


@route(bp, "/jobs/{job_id}", "PATCH", request=qm.JobChange, response=qm.JobUpdateResponse, auth="iam")
def update_job(user: UserPrincipal, body: qm.JobChange, job_id: str) -> qm.JobUpdateResponse:
    """Change one job's priority, weight, resource pool, or move it ahead of or behind another job."""
    update = job_updates.JobUpdate(job_id=job_id, **body.model_dump())
    return _answer(job_updates.update_jobs(ports(), [update]))


@route(bp, "/job-queue", "POST", request=qm.JobBatchRequest, response=qm.JobUpdateResponse, auth="iam")
def update_jobs(user: UserPrincipal, body: qm.JobBatchRequest) -> qm.JobUpdateResponse:
    """Apply several job updates in order, all checked before any is written (`det job update-batch`)."""
    updates = [job_updates.JobUpdate(**item.model_dump()) for item in body.updates]
    return _answer(job_updates.update_jobs(ports(), updates))


@route(bp, "/resource-pools", "GET", response=qm.ResourcePoolList, auth="iam")
def list_resource_pools(user: UserPrincipal) -> qm.ResourcePoolList:
    """The configured resource pools with their scheduler, agents, slots and queued jobs."""
    return qm.ResourcePoolList(
        resource_pools=[
            qm.ResourcePool(
                name=pool.spec.name,
                description=pool.spec.description,
                type="aws" if traits(pool.spec.backend).cloud else "static",
                scheduler_type=pool.spec.scheduler,
                preemption=pool.spec.preemption and pool.spec.scheduler == "priority",
                default_priority=pool.spec.default_priority,
                num_agents=pool.agents,
                max_agents=pool.spec.max_agents,
                slots_per_agent=pool.spec.slots_per_agent,
                slots_available=pool.slots_total,
                slots_used=pool.slots_used,
                queued_jobs=pool.queued_jobs,
                scheduled_jobs=pool.scheduled_jobs,
            )
            for pool in cluster.list_pools(ports())
        ]
    )


@route(bp, "/agents/{agent_id}/credential", "POST", response=qm.AgentCredential, auth="iam")
def mint_agent_credential(user: UserPrincipal, agent_id: str) -> qm.AgentCredential:
    """A credential for agent `agent_id`, for an agent started by hand on another machine: it acts as
    that agent and no other. IAM-authorized in AWS (grant it to operators only); open on the local
    stack, like every user route."""
    if not 0 < len(agent_id) <= MAX_AGENT_ID or not agent_id.isprintable() or "/" in agent_id:
        raise BadRequestError(f"agent id {agent_id!r} must be 1 to {MAX_AGENT_ID} printable characters")
    credential = tokens.agent_credential(get_settings().agent_token, agent_id)
    return qm.AgentCredential(agent_id=agent_id, credential=credential)


@route(bp, "/agents", "GET", response=qm.AgentList, auth="iam")
def list_agents(user: UserPrincipal) -> qm.AgentList:
    """Every agent that heartbeated, with its pool, slots, runs and last heartbeat."""
    return qm.AgentList(agents=[_agent(agent) for agent in cluster.list_agents(ports())])


@route(bp, "/agents/{agent_id}/enable", "POST", response=qm.AgentChange, auth="iam")
def enable_agent(user: UserPrincipal, agent_id: str) -> qm.AgentChange:
    """Put a disabled agent back into placement (`det agent enable`); a repeat is a no-op. In AWS grant
    this route to operators only."""
    return _change(cluster.set_enabled(ports(), agent_id, enabled=True))


@route(bp, "/agents/{agent_id}/disable", "POST", request=qm.AgentDisable, response=qm.AgentChange, auth="iam")
def disable_agent(user: UserPrincipal, body: qm.AgentDisable, agent_id: str) -> qm.AgentChange:
    """Take an agent out of placement (`det agent disable [--drain]`): its runs checkpoint and move to
    other agents, or with `drain` finish there; a repeat is a no-op. In AWS grant this route to operators
    only."""
    return _change(cluster.set_enabled(ports(), agent_id, enabled=False, drain=body.drain))


def _agent(agent: cluster.AgentStatus) -> qm.Agent:
    return qm.Agent(
        id=agent.agent_id,
        resource_pool=agent.pool,
        slots=agent.slots,
        slots_used=agent.slots_used,
        containers=agent.runs,
        last_heartbeat=agent.last_heartbeat,
        alive=agent.alive,
        draining=agent.draining,
        enabled=agent.enabled,
        version=agent.version,
    )


def _change(change: cluster.AgentChange) -> qm.AgentChange:
    return qm.AgentChange(agent=_agent(change.agent), moved=change.moved, remaining=change.remaining)


@route(bp, "/slots", "GET", response=qm.SlotList, auth="iam")
def list_slots(user: UserPrincipal) -> qm.SlotList:
    """Every slot of every agent, with the run and trial that hold it."""
    return qm.SlotList(
        slots=[
            qm.Slot(
                agent_id=slot.agent_id,
                resource_pool=slot.pool,
                slot_id=slot.slot_id,
                enabled=slot.alive,
                run_id=slot.run_id,
                trial_id=slot.trial_id,
                experiment_id=slot.experiment_id,
            )
            for slot in cluster.list_slots(ports())
        ]
    )


def _answer(result: job_updates.UpdateResult) -> qm.JobUpdateResponse:
    return qm.JobUpdateResponse(jobs=[_queued(job) for job in result.jobs], notes=result.notes)


def _queued(experiment: Experiment) -> qm.QueuedJob:
    return qm.QueuedJob(
        id=str(experiment.id),
        name=experiment.name or f"Experiment {experiment.id}",
        state=str(experiment.state),
        resource_pool=experiment.job_pool,
        priority=experiment.job_priority,
        weight=experiment.weight,
        queue_position=experiment.queue_position,
    )
