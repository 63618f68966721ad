"""The scheduler consumer: queue slot requests, then hand out slots in each pool.

Messages arrive on a FIFO queue grouped by pool, so one pool is scheduled by one consumer at a time.
Four kinds: `request` (a run's task token asking for slots, sent by the state machine), `release`
(a run ended), `capacity` (an agent appeared or changed) and `sweep` (a timer: EventBridge every minute
in AWS, the local stack's ticker locally). All of them end with a scheduling pass, which is idempotent:
it reads the pool's state from DynamoDB and only grants what is still pending.

Every pass first ends the runs held by agents that stopped heartbeating (a crashed machine, a killed
agent): without that, their trials would wait forever for an exit nobody is left to report.

The pass itself is the pool's scheduling policy (`scheduling_policies.policy_for`: priority with
preemption on or off, or fair share): it grants what fits, names the running runs to preempt (they are
told to stop through the pause path: checkpoint, exit, requeue) and says why every request it read waits;
that reason is kept on the request for `det job list`. Elastic trials (`elastic_scheduling`) are sized when
queued, and each pass may shrink them for the requests it could not place (then plans again, with their
slots freeing) or grow them into idle slots when nothing waits. It reads the runs holding slots (bounded by the
pool's slots), the pool's queue summary (one item) and the head of the queue only as far as a request
could still be placed (`queue_reading`): its reads grow with what changes, not with the queue.
Each pass then puts what it saw of the pool (queue, slots, instances, preemptions, silent runs, the
oldest wait) as CloudWatch metrics, from what it read anyway (`telemetry.pool_pass`).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from chalicelib.domain.queue_head import QueueSummary
from chalicelib.domain.records import Trial
from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling import AgentCapacity, Assignment, Holding
from chalicelib.domain.scheduling_policies import policy_for
from chalicelib.domain.states import ExperimentState, RunState, TrialState
from chalicelib.domain.telemetry import PoolPass
from chalicelib.services import (
    elastic_scheduling,
    job_updates,
    pausing,
    prices,
    runs,
    searcher_watch,
    telemetry,
)
from chalicelib.services.agent_store import Host
from chalicelib.services.clock import epoch_of, iso_utc
from chalicelib.services.ports import Demand, Ports
from chalicelib.services.queue_reading import plan_head, queue_position
from chalicelib.workflow import TASK_BEAT_INTERVAL_S, TASK_HEARTBEAT_S
from stratus.contract import messages
from stratus.contract.pools import PoolSpec

log = logging.getLogger(__name__)

#: At most this many wait reasons are written in one pass (see `_note_reasons`).
REASON_WRITES = 100


def handle_message(ports: Ports, message: messages.SchedulerMessage) -> None:
    if isinstance(message, messages.Sweep) and message.pool == messages.EVERY_POOL:
        at = message.at or ports.clock.now_iso()  # the same timer tick, delivered twice: one sweep each
        for spec in ports.settings.pools:
            body = messages.Sweep(spec.name, at).to_body()
            ports.queues.to_scheduler(spec.name, body, dedup_id=f"sweep-{spec.name}-{at}")
        prices.refresh_if_due(ports)  # once a day: the stack's price table (it never raises for AWS)
        searcher_watch.sweep(ports)  # no experiment hangs silently
        return
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
        trial = ports.trials.get(message.trial_id)
        request = elastic_scheduling.queued_elastic(ports, request, experiment, trial)
        ports.runs.put_request(request)
        queued = ports.runs.get(request.run_id) or request
        if experiment is not None and experiment.state == ExperimentState.PAUSED:
            # Its execution started just before the pause: the trial waits PAUSED, unstarted.
            pausing.pause_request_of_paused_experiment(ports, queued)
        elif _canceled(trial):
            # Canceled or killed after its execution asked for slots: it never starts, and its
            # workflow goes on at once (to Cancel) instead of waiting in the queue for slots.
            pausing.drop_request_of_canceled_trial(ports, queued)
    elif isinstance(message, messages.Sweep):
        ports.runs.prune_queue_summary(message.pool)
        ports.compute.sweep(message.pool)
    released = message.run_id if isinstance(message, messages.ReleaseSlots) else None
    schedule_pool(ports, message.pool, released=released)


def schedule_pool(ports: Ports, pool: str, *, released: str | None = None) -> list[tuple[str, str]]:
    """One scheduling pass; returns the (run_id, agents) pairs granted now (agents comma-separated, chief
    first, for a run on several nodes). The pool's backend is told the slots its runs hold and wait for.
    ``released``: the run whose release asked for this pass."""
    timeout = ports.settings.agent_timeout_s
    hosts = ports.compute.hosts(pool)
    alive_ids = {host.host_id for host in hosts}
    now = ports.clock.now()
    used: dict[str, int] = {}
    holding: list[Run] = []
    silent = 0
    for run in ports.runs.allocated(pool):
        lost = sorted({p.agent_id for p in run.placements} - alive_ids)
        if lost:
            silent += runs.agents_lost(ports, run, lost, timeout)
            continue
        if not _still_awaited(ports, run, now):
            continue
        holding.append(run)
        for placement in run.placements:
            used[placement.agent_id] = used.get(placement.agent_id, 0) + placement.slots
    summary = ports.runs.queue_summary(pool)
    seen = _pool_pass(pool, summary, hosts, used, silent)
    agents = [
        AgentCapacity(agent_id=host.host_id, slots=host.slots, used=used.get(host.host_id, 0))
        for host in hosts
        if host.accepting
    ]
    flight = elastic_scheduling.in_flight(ports, holding, released)
    change = flight.change
    if summary.requests <= 0:
        telemetry.pool_pass(ports, seen)
        elastic_scheduling.rescale(ports, holding, agents, [], now, change=change)
        return []
    spec = ports.settings.pool(pool) or PoolSpec(name=pool)
    policy = policy_for(spec)
    planned = elastic_scheduling.reserve(agents, change)
    head = plan_head(ports, pool, policy, summary, [_holding(r) for r in holding], planned)
    plan = head.plan
    placed = {a.run_id for a in plan.assignments}
    skip = placed | plan.reserved | head.held_back.keys()  # held back by its job's limit: grows nothing
    waiting = [r for r in head.read if r.run_id not in skip]
    if waiting or summary.requests <= len(head.read):
        # The agents unreserved: the allocator counts the promises itself (`change`).
        after = _after_grants(agents, plan.assignments, {r.run_id: r for r in head.read})
        stopped = elastic_scheduling.rescale(ports, holding, after, waiting, now, change=change)
        shrunk = {run.run_id: for_run for run, for_run in stopped}
        if shrunk and waiting:  # plan again: the shrunk runs' slots are freeing for the waiting requests
            holding = [replace(r, preempt=True) if r.run_id in shrunk else r for r in holding]
            head = plan_head(ports, pool, policy, summary, [_holding(r) for r in holding], planned)
            plan = head.plan
            flight.shrinking_for.update({f: r for r, f in shrunk.items() if f is not None})
    flight.note_waits(plan.blocked, plan.reserved)
    pending = head.read
    held = _tell_demand(ports, pool, summary, pending, plan.blocked)
    if held:  # the backend cannot grow the pool for them: say so where they wait
        plan.blocked.update({run_id: f"{why}; {held}" for run_id, why in plan.blocked.items()})
    by_id = {r.run_id: r for r in [*pending, *holding]}
    for victim in plan.preempt:
        log.info("pool %s: preempting run %s for %s", pool, victim, plan.preempted_for.get(victim))
        pausing.preempt_run(ports, by_id[victim])
    _note_reasons(ports, head.read, {**plan.blocked, **head.held_back})
    oldest = min((epoch_of(r.queued_at) for r in head.read if r.queued_at), default=now)
    telemetry.pool_pass(ports, replace(seen, preempted=len(plan.preempt), oldest_wait_s=now - oldest))
    granted = []
    for assignment in plan.assignments:
        if ports.runs.assign(assignment.run_id, assignment.agent_id, assignment.nodes) is None:
            continue  # assigned by an earlier delivery of this message
        grant = {"agent_id": assignment.agent_id, "num_nodes": len(assignment.agents)}
        if ports.workflows.succeed(by_id[assignment.run_id].slot_token, grant):
            granted.append((assignment.run_id, ",".join(assignment.agents)))
            elastic_scheduling.note_granted(ports, by_id[assignment.run_id])
        else:
            # The execution is gone (stopped or timed out): give the slots back.
            ports.runs.exit(assignment.run_id, -1, "its workflow ended before it was launched")
            ports.compute.stop(assignment.run_id)
    if granted:
        log.info("pool %s: granted %s", pool, granted)
    return granted


def _after_grants(
    agents: list[AgentCapacity], assignments: list[Assignment], requests: dict[str, Run]
) -> list[AgentCapacity]:
    """The agents as the pass's grants leave them."""
    used = {a.agent_id: a.used for a in agents}
    for assignment in assignments:
        slots = requests[assignment.run_id].slots if assignment.run_id in requests else 0
        for agent in assignment.agents:
            used[agent] = used.get(agent, 0) + slots // len(assignment.agents)
    return [replace(a, used=used[a.agent_id]) for a in agents]


def _tell_demand(
    ports: Ports, pool: str, summary: QueueSummary, read: list[Run], blocked: dict[str, str]
) -> str | None:
    """Tell the backend what this pass could not place: the blocked requests it read, and the slots of
    those it did not read (a backend that scales grows the pool for them); why it cannot grow enough."""
    sizes = tuple(run.slots for run in read if run.run_id in blocked)
    unread = max(0, summary.slots - sum(run.slots for run in read))
    if sizes or unread:
        return ports.compute.set_demand(pool, Demand(blocked=sizes, unread_slots=unread))
    return None


def _pool_pass(
    pool: str, summary: QueueSummary, hosts: list[Host], used: dict[str, int], silent: int
) -> PoolPass:
    accepting = [host for host in hosts if host.accepting]
    return PoolPass(
        pool=pool,
        queued=max(0, summary.requests),
        pending_slots=max(0, summary.slots),
        capacity=sum(host.slots for host in accepting),
        used=sum(used.get(host.host_id, 0) for host in accepting),
        hosts=len(hosts),
        silent=silent,
    )


def _note_reasons(ports: Ports, read: list[Run], blocked: dict[str, str]) -> None:
    """Keep why each request waits on it, for `det job list`: only where it changed, and for at most
    `REASON_WRITES` requests a pass, nearest the head first (a freed slot changes the reason of every
    request read, and a pass may read thousands)."""
    written = 0
    for run in read:
        reason = blocked.get(run.run_id)
        if reason is not None and run.wait_reason != reason:
            ports.runs.note_wait_reason(run.run_id, reason)
            written += 1
            if written >= REASON_WRITES:
                return


def _still_awaited(ports: Ports, run: Run, now: float) -> bool:
    """Keep the run's workflow wait alive (a task heartbeat every `TASK_BEAT_INTERVAL_S`: its slot
    request while it waits, its launch while it runs); False once the workflow waits for it no more (the
    wait timed out: a lost message, a consumer that was down), after ending the run so its slots and
    processes do not outlive it. A run assigned whose launch never came is ended the same way."""
    if run.state == RunState.PENDING:
        return True  # its slot request waits without a heartbeat (see `workflow`)
    if run.state == RunState.ASSIGNED:
        stale = run.assigned_at is not None and now - epoch_of(run.assigned_at) > TASK_HEARTBEAT_S
        if stale and ports.runs.exit(run.run_id, -1, "its launch never came") is not None:
            if run.slot_token:
                # Its grant's answer may be what was lost (the pass that assigned it failed before it):
                # the workflow goes on to its launch, which finds the run ended. A no-op once answered.
                ports.workflows.succeed(run.slot_token, runs.NO_GRANT)
            ports.compute.stop(run.run_id)
            return False
        return not stale
    token = run.launch_token
    last = run.beat_at or run.launched_at
    if not token or (last and now - epoch_of(last) < TASK_BEAT_INTERVAL_S):
        return True
    if ports.workflows.heartbeat(token):
        ports.runs.note_task_beat(run.run_id, iso_utc(now))
        return True
    reason = "its workflow stopped waiting for it (no task heartbeat in time); the trial was restarted"
    runs.end_run(ports, run, -1, reason)
    log.warning("run %s: %s", run.run_id, reason)
    return False


def _canceled(trial: Trial | None) -> bool:
    return trial is not None and trial.state in (
        TrialState.STOPPING_CANCELED,
        TrialState.STOPPING_KILLED,
        TrialState.CANCELED,
    )


def _holding(run: Run) -> Holding:
    placements: dict[str, int] = {}
    for placement in run.placements:
        placements[placement.agent_id] = placements.get(placement.agent_id, 0) + placement.slots
    return Holding(
        run_id=run.run_id,
        job_id=str(run.experiment_id),
        slots=run.slots,
        priority=run.priority,
        placements=placements,
        weight=run.weight,
        queue_position=queue_position(run),
        started_at=run.assigned_at or "",
        stopping=run.preempt or run.pausing,
    )
