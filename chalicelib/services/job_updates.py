"""`det job update` and `det job update-batch`: change a job's priority, weight, pool or place in its
pool's queue, with Determined's constraints (docs: "Job Queue Management"):

- priority (1-99, lower first) only in a pool whose scheduler ranks jobs by priority (the priority
  scheduler), weight (> 0) only in one that ranks them by weight (fair_share): its scheduling policy's
  `ranks_jobs_by`;
- ahead-of / behind-of only in a pool that ranks jobs by priority, and only next to a job of the same
  pool. A job moved next to a job of another priority takes that job's priority (as Determined's
  resource pool does), since the queue is ordered by priority first; the answer says so;
- a pool change only for experiments (every job here is one) and only to a configured pool. Its queued
  runs move to the new pool's queue; its running ones keep their slots in the old pool until they end
  (Determined restarts them in the new pool instead; here no progress is lost to a move), and every
  later run of the job is queued in the new pool;
- an unknown job is a 404, a job that has ended a 409.

A batch is checked whole before anything is written (one refused update refuses the batch), each update
seeing the ones before it. Writes are the experiment record (a conditional write on its version; a batch
that lost a race is planned again) and the job's live runs, so the next scheduling pass and `det job
list` see the change; then each pool touched gets a sweep message, so a pass runs. Repeating an update is
harmless: it writes the same values (a move is planned without the moved job, so it lands where it is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from chalicelib.domain.numbers import INT64_MAX
from chalicelib.domain.queue_moves import QueuedJob, move_ahead_of, move_behind_of
from chalicelib.domain.records import Experiment
from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling_policies import policy_for
from chalicelib.domain.states import RunState
from chalicelib.errors import BadRequestError, ConflictError, NotFoundError
from chalicelib.services.clock import epoch_of
from chalicelib.services.pools import require_pool
from chalicelib.services.ports import Ports
from stratus.contract import messages
from stratus.contract.pools import PoolSpec

#: How many times a batch is planned again after a concurrent change to one of its experiments.
PLAN_ATTEMPTS = 3
#: Requests read at a time from a job's queue in a pool it has left (`_left_behind`).
_PAGE = 100
MIN_PRIORITY, MAX_PRIORITY = 1, 99
JOB_FIELDS = ("priority", "weight", "queue_position", "resource_pool")


@dataclass(frozen=True)
class JobUpdate:
    """One change to one job (Determined's QueueControl): exactly one of the optional fields."""

    job_id: str
    priority: int | None = None
    weight: float | None = None
    resource_pool: str | None = None
    ahead_of: str | None = None
    behind_of: str | None = None

    def changes(self) -> dict[str, Any]:
        names = ("priority", "weight", "resource_pool", "ahead_of", "behind_of")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


@dataclass(frozen=True)
class UpdateResult:
    """The jobs as the updates left them, and what they did beyond what was asked (a priority taken)."""

    jobs: list[Experiment]
    notes: list[str] = field(default_factory=list)


def update_jobs(ports: Ports, updates: Sequence[JobUpdate]) -> UpdateResult:
    if not updates:
        raise BadRequestError(
            "no job updates given; name at least one, e.g. `det job update 3 --priority 10`"
        )
    for _attempt in range(PLAN_ATTEMPTS):
        plan = _Plan(ports)
        for update in updates:
            plan.apply(update)
        written = plan.write()
        if written is not None:
            _apply_to_runs(ports, plan)
            updated = dict.fromkeys(int(u.job_id) for u in updates)
            return UpdateResult(jobs=[written[key] for key in updated], notes=plan.notes)
    raise ConflictError(
        f"the jobs {', '.join(sorted({u.job_id for u in updates}))} kept changing while being updated; retry"
    )


class _Plan:
    """The batch applied to copies of the experiments it touches (nothing written until `write`)."""

    def __init__(self, ports: Ports) -> None:
        self.ports = ports
        self.read: dict[int, Experiment] = {}
        self.planned: dict[int, Experiment] = {}
        self.notes: list[str] = []

    def job(self, job_id: str) -> Experiment:
        try:
            key = int(job_id)
        except ValueError:
            key = -1
        if key not in self.planned:
            experiment = self.ports.experiments.get(key) if 0 < key <= INT64_MAX else None
            if experiment is None:
                raise NotFoundError(f"job {job_id!r} not found; `det job list` shows the job ids")
            self.read[key] = self.planned[key] = experiment
        experiment = self.planned[key]
        if experiment.state.terminal:
            raise ConflictError(
                f"job {job_id} has ended (its experiment is {experiment.state}); only a queued or running "
                "job can be updated"
            )
        return experiment

    def apply(self, update: JobUpdate) -> None:
        changes = update.changes()
        if len(changes) != 1:
            asked = ", ".join(changes) or "nothing"
            raise BadRequestError(
                f"a job update changes exactly one of priority, weight, resource_pool, ahead_of, behind_of; "
                f"the update of job {update.job_id} names {asked}: split it into one update each"
            )
        experiment = self.job(update.job_id)
        if update.resource_pool is not None:
            new_pool = require_pool(self.ports.settings, update.resource_pool)
            self.planned[experiment.id] = replace(experiment, resource_pool=new_pool.name)
            return
        pool = require_pool(self.ports.settings, experiment.job_pool)
        if update.priority is not None:
            self._set_priority(experiment, pool, update.priority)
        elif update.weight is not None:
            self._set_weight(experiment, pool, update.weight)
        elif update.ahead_of is not None:
            self._move(experiment, pool, update.ahead_of, ahead=True)
        elif update.behind_of is not None:
            self._move(experiment, pool, update.behind_of, ahead=False)

    def _set_priority(self, experiment: Experiment, pool: PoolSpec, priority: int) -> None:
        if policy_for(pool).ranks_jobs_by != "priority":
            raise BadRequestError(
                f"job {experiment.id} is in pool {pool.name!r}, whose scheduler is {pool.scheduler}: it "
                f"shares slots by weight, not priority; use --weight instead of --priority {priority}"
            )
        if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            raise BadRequestError(
                f"priority {priority} is out of range; use {MIN_PRIORITY} to {MAX_PRIORITY} (lower runs first)"
            )
        self.planned[experiment.id] = replace(experiment, priority=priority)

    def _set_weight(self, experiment: Experiment, pool: PoolSpec, weight: float) -> None:
        if policy_for(pool).ranks_jobs_by != "weight":
            raise BadRequestError(
                f"job {experiment.id} is in pool {pool.name!r}, whose scheduler is {pool.scheduler}: it "
                f"orders jobs by priority, not weight; use --priority instead of --weight {weight:g}"
            )
        if not weight > 0:
            raise BadRequestError(f"weight {weight:g} must be positive; use e.g. 1 (the default) or 2")
        self.planned[experiment.id] = replace(experiment, weight=float(weight))

    def _move(self, experiment: Experiment, pool: PoolSpec, anchor_id: str, *, ahead: bool) -> None:
        option = "--ahead-of" if ahead else "--behind-of"
        if policy_for(pool).ranks_jobs_by != "priority":
            raise BadRequestError(
                f"job {experiment.id} is in pool {pool.name!r}, whose scheduler is {pool.scheduler}: "
                f"{option} needs the priority scheduler; change the job's --weight instead"
            )
        if anchor_id == str(experiment.id):
            raise BadRequestError(f"job {experiment.id} cannot move {option} itself; name another job")
        anchor = self.job(anchor_id)
        if anchor.job_pool != experiment.job_pool:
            raise BadRequestError(
                f"job {experiment.id} is in pool {experiment.job_pool!r} and job {anchor.id} in pool "
                f"{anchor.job_pool!r}; {option} moves a job among jobs of its own pool: move it to pool "
                f"{anchor.job_pool!r} first (--resource-pool)"
            )
        priority = anchor.job_priority
        if priority != experiment.job_priority:
            self.notes.append(
                f"job {experiment.id} took the priority of job {anchor.id} ({priority}, was "
                f"{experiment.job_priority}) to move {'ahead of' if ahead else 'behind'} it"
            )
        queue = {job.id: job for job in self._pool_queue(experiment.job_pool)}
        queue.update({experiment.id: experiment, anchor.id: anchor})
        jobs = [QueuedJob(str(job.id), job.job_priority, _position(job)) for job in queue.values()]
        mover = move_ahead_of if ahead else move_behind_of
        move = mover(jobs, str(experiment.id), str(anchor.id))
        self.planned[experiment.id] = replace(
            experiment, priority=move.priority, queue_position=move.position
        )
        for job_id, position in move.respaced.items():  # no float was left between two neighbours
            respaced = self.job(job_id)
            self.planned[respaced.id] = replace(respaced, queue_position=position)

    def _pool_queue(self, pool: str) -> list[Experiment]:
        """The jobs of the pool: those with live runs there and those this batch touches."""
        live = self.ports.runs.pending(pool) + self.ports.runs.allocated(pool)
        found: dict[int, Experiment] = {}
        for experiment_id in {run.experiment_id for run in live}:
            if experiment_id in self.planned:
                found[experiment_id] = self.planned[experiment_id]
            elif (experiment := self.ports.experiments.get(experiment_id)) is not None:
                found[experiment_id] = experiment
        for key, experiment in self.planned.items():
            if experiment.job_pool == pool and not experiment.state.terminal:
                found[key] = experiment
        return list(found.values())

    def write(self) -> dict[int, Experiment] | None:
        """Write every changed experiment; None when one moved since it was read (plan again)."""
        written: dict[int, Experiment] = {}
        for key, planned in self.planned.items():
            fields = _job_fields(self.read[key], planned)
            if not fields:
                written[key] = planned
                continue
            updated = self.ports.experiments.update_versioned(key, fields, self.read[key].version)
            if updated is None:
                return None
            written[key] = updated
        return written


def _job_fields(before: Experiment, after: Experiment) -> dict[str, Any]:
    return {
        name: getattr(after, name) for name in JOB_FIELDS if getattr(after, name) != getattr(before, name)
    }


def _position(experiment: Experiment) -> float:
    """Its queue position; a record older than positions sits at its submission (start) time."""
    if experiment.queue_position is not None:
        return experiment.queue_position
    return epoch_of(experiment.start_time) if experiment.start_time else 0.0


def _apply_to_runs(ports: Ports, plan: _Plan) -> None:
    """Copy each changed job onto its live runs and ask the pools touched for a scheduling pass."""
    pools: set[str] = set()
    for key, planned in plan.planned.items():
        old_pool = plan.read[key].job_pool
        pools.update({old_pool, planned.job_pool})
        for run in _live_runs(ports, old_pool, key):
            copy_job_to_run(ports, planned, run)
        for run in _left_behind(ports, planned, old_pool):
            pools.add(run.pool)
            copy_job_to_run(ports, planned, run)
    now = ports.clock.now_iso()
    for pool in sorted(pools):
        ports.queues.to_scheduler(
            pool, messages.Sweep(pool, now).to_body(), dedup_id=f"job-update-{pool}-{now}"
        )


def refresh_live_runs(ports: Ports, experiment: Experiment) -> None:
    """Copy one job's fields onto its live runs (`det experiment set max-slots`) and ask its pool for a
    scheduling pass, so the next pass and `det job list` see the change."""
    pool = experiment.job_pool
    for run in _live_runs(ports, pool, experiment.id):
        copy_job_to_run(ports, experiment, run)
    now = ports.clock.now_iso()
    ports.queues.to_scheduler(pool, messages.Sweep(pool, now).to_body(), dedup_id=f"job-update-{pool}-{now}")


def _left_behind(ports: Ports, experiment: Experiment, read_pool: str) -> Iterable[Run]:
    """The job's runs still queued in a pool other than its own (and than `read_pool`, whose runs are
    copied anyway): an earlier update wrote the job's new pool, then lost the move of these to other
    writes (a 409 that asked for the update again). One small read of the job's queue in each pool."""
    for spec in ports.settings.pools:
        if spec.name in (experiment.job_pool, read_pool):
            continue
        after: str | None = None
        while True:
            page, after = ports.runs.job_queue_page(spec.name, str(experiment.id), after, _PAGE)
            yield from page
            if after is None:
                break


def _live_runs(ports: Ports, pool: str, experiment_id: int) -> Iterable[Run]:
    for run in ports.runs.pending(pool) + ports.runs.allocated(pool):
        if run.experiment_id == experiment_id:
            yield run


def run_job_fields(experiment: Experiment) -> dict[str, Any]:
    """What a run carries of its job: priority, weight, queue position and slot limit (0: none)."""
    return {
        "priority": experiment.job_priority,
        "weight": experiment.weight,
        "queue_position": experiment.queue_position,
        "max_slots": experiment.job_max_slots or 0,
    }


def copy_job_to_run(ports: Ports, experiment: Experiment, run: Run) -> None:
    fields: Mapping[str, Any] = {k: v for k, v in run_job_fields(experiment).items() if v is not None}
    if experiment.job_pool != run.pool and run.state is RunState.PENDING:
        moved = {**fields, "pool": experiment.job_pool, "pending_pool": experiment.job_pool}
        if ports.runs.update_job(run.run_id, moved, only_pending=True) is not None:
            return
        # Granted meanwhile: it keeps its slots in the old pool.
    ports.runs.update_job(run.run_id, fields)


def queued_as_job(ports: Ports, request: Run, experiment: Experiment | None) -> Run:
    """A new slot request with its job's current priority, weight, queue position and pool. A request
    sent to the job's old pool is queued in its new one, and that pool gets a sweep so a pass runs."""
    if experiment is None:
        return request
    queued = replace(request, **{k: v for k, v in run_job_fields(experiment).items() if v is not None})
    if experiment.job_pool != request.pool and ports.settings.pool(experiment.job_pool) is not None:
        queued = replace(queued, pool=experiment.job_pool)
        now = ports.clock.now_iso()
        body = messages.Sweep(queued.pool, now).to_body()
        ports.queues.to_scheduler(queued.pool, body, dedup_id=f"moved-{request.run_id}")
    return queued
